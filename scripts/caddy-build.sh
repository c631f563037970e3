#!/usr/bin/env bash
# scripts/caddy-build.sh — build the Caddy that Capstan's servers and tests
# run, from Caddy's Go module at the version pinned here, with Caddy's
# standard modules and nothing else.
#
#   scripts/caddy-build.sh OUT [GOARCH]   # writes the linux/GOARCH binary to OUT
#   scripts/caddy-build.sh --version      # prints the pinned version
#
# Why not Debian's caddy (2.6.2 in Debian 12): from Caddy 2.8 on, the agent
# keeps each application's upstream in a file that Caddy reads at every
# request ({file.*}), so that a release loads no new configuration. Every
# load drops some connections being set up in that instant: Caddy 2.6
# reads its certificates back from storage after each load and fails the
# TLS handshakes that arrive meanwhile, and a Caddy built with a recent Go
# closes unanswered the connections its previous server accepted last.
#
# Needs Go and the Go module proxy (or a module cache that has the
# modules). GOARCH defaults to the host's.
set -euo pipefail

CADDY_VERSION=v2.11.9

die() { printf 'caddy-build: ERROR: %s\n' "$*" >&2; exit 1; }

[[ ${1:-} == --version ]] && { printf '%s\n' "$CADDY_VERSION"; exit 0; }
[[ $# -ge 1 && $# -le 2 && -n $1 ]] || die "usage: $0 OUT [GOARCH] | --version"
out=$1
arch=${2:-$(go env GOARCH)}
command -v go >/dev/null 2>&1 || die "go is needed to build Caddy"

src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
cat >"$src/main.go" <<'EOF'
// Caddy with its standard modules, as Caddy's own releases are built.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"
)

func main() { caddycmd.Main() }
EOF
(
	cd "$src"
	export GOFLAGS=-mod=mod GOWORK=off CGO_ENABLED=0 GOOS=linux GOARCH=$arch
	go mod init capstan.local/caddy >/dev/null 2>&1
	# Caddy's own go.mod decides every dependency's version.
	go get "github.com/caddyserver/caddy/v2@$CADDY_VERSION" >get.log 2>&1 || { cat get.log >&2; exit 1; }
	go build -trimpath -ldflags '-s -w' -o caddy .
) || die "building Caddy $CADDY_VERSION for linux/$arch failed"
mkdir -p "$(dirname "$out")"
mv -f "$src/caddy" "$out.tmp.$$"
mv -f "$out.tmp.$$" "$out"
