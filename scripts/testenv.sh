#!/usr/bin/env bash
# scripts/testenv.sh — bring up / tear down the integration-test environment
# for Capstan: a throwaway PostgreSQL, a Docker engine and a caddy binary
# (the version servers get, built by scripts/caddy-build.sh and kept under
# STATE_DIR/caddy/<version>/); the MariaDB and Redis servers that tests
# start themselves are installed.
#
#   scripts/testenv.sh up   [STATE_DIR]   # idempotent; fast when already up
#   scripts/testenv.sh down [STATE_DIR]   # always succeeds
#
# STATE_DIR defaults to <repo>/.testenv. `up` writes STATE_DIR/env, a file of
# `export NAME=value` lines (valid for both `. env` in sh and `include` in make):
#   CAPSTAN_TEST_POSTGRES_URL, CAPSTAN_TEST_DOCKER_HOST, CAPSTAN_TEST_CADDY,
#   CAPSTAN_TEST_CHROMIUM
#
# Must run as root (installs packages, runs postgres as the postgres user,
# may start dockerd). Only ever listens on / talks to 127.0.0.1 and unix sockets.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd -P)"

DOCKER_SOCK=/var/run/docker.sock
PG_USER=postgres

log() { printf 'testenv: %s\n' "$*" >&2; }
die() { printf 'testenv: ERROR: %s\n' "$*" >&2; exit 1; }

usage() {
	cat >&2 <<EOF
usage: $0 up|down [STATE_DIR]
  STATE_DIR defaults to $REPO_ROOT/.testenv
EOF
	exit 2
}

# ---------------------------------------------------------------------------
# helpers

# newest installed PostgreSQL server bin dir, or empty
pg_bindir() {
	local f best=""
	for f in /usr/lib/postgresql/*/bin/postgres; do
		[[ -x $f ]] || continue
		best="$(printf '%s\n%s\n' "$best" "${f%/postgres}" | sed '/^$/d' | sort -V | tail -n1)"
	done
	printf '%s' "$best"
}

# true if the command exists, ignoring a bare `docker` client etc.
have() { command -v "$1" >/dev/null 2>&1; }

as_pg() { runuser -u "$PG_USER" -- "$@"; }

docker_ping() {
	[[ -S $DOCKER_SOCK ]] || return 1
	if have curl; then
		[[ "$(curl -fsS --max-time 3 --unix-socket "$DOCKER_SOCK" http://localhost/_ping 2>/dev/null)" == OK ]]
	else
		timeout 5 docker -H "unix://$DOCKER_SOCK" version >/dev/null 2>&1
	fi
}

# is TCP port $1 on 127.0.0.1 free? (nothing listening, nothing answering)
port_free() {
	local p=$1
	if ss -Htln "sport = :$p" 2>/dev/null | grep -q .; then
		return 1
	fi
	# a connect that succeeds means someone is there
	if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
		return 1
	fi
	return 0
}

pick_port() {
	local p i
	for ((i = 0; i < 200; i++)); do
		p=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
		if port_free "$p"; then
			printf '%s' "$p"
			return 0
		fi
	done
	die "could not find a free TCP port on 127.0.0.1"
}

# is pid $1 alive and is its command name $2?
pid_is() {
	local pid=$1 name=$2 comm
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	comm="$(cat "/proc/$pid/comm" 2>/dev/null)" || return 1
	[[ $comm == "$name" ]]
}

# Resolve STATE_DIR and the PostgreSQL directory (PG_DIR). PG_DIR must be
# traversable by the postgres user and short enough for a unix socket path
# (sun_path is 108 bytes; the socket is $PG_DIR/run/.s.PGSQL.NNNNN).
resolve_dirs() {
	local arg=${1:-$REPO_ROOT/.testenv}
	mkdir -p "$arg"
	STATE_DIR="$(cd "$arg" && pwd -P)"
	ENV_FILE="$STATE_DIR/env"
	DOCKERD_PID_FILE="$STATE_DIR/dockerd.pid"
	DOCKERD_LOG="$STATE_DIR/dockerd.log"
	PG_DIR_FILE="$STATE_DIR/pgdir"

	if [[ -s $PG_DIR_FILE ]]; then
		PG_DIR="$(cat "$PG_DIR_FILE")"
		return 0
	fi
	PG_DIR="$STATE_DIR/pg"
	if [[ ${#PG_DIR} -gt 80 ]] || ! as_pg test -x "$STATE_DIR" 2>/dev/null; then
		local h
		h="$(printf '%s' "$STATE_DIR" | sha256sum | cut -c1-12)"
		PG_DIR="/tmp/capstan-testenv-$h/pg"
	fi
}

# Serialise concurrent up/down on one STATE_DIR. fd 9 must be closed in any
# daemon we spawn (postgres, dockerd), or it would hold the lock forever.
take_lock() {
	exec 9>"$STATE_DIR/lock"
	flock -w 300 9 || die "timed out waiting for $STATE_DIR/lock"
}

# ---------------------------------------------------------------------------
# up: packages

ensure_packages() {
	local pkgs=()
	[[ -n "$(pg_bindir)" ]] || pkgs+=(postgresql)
	have psql || pkgs+=(postgresql-client)
	have mariadb || pkgs+=(mariadb-client)
	have redis-cli || pkgs+=(redis-tools)
	have dockerd || pkgs+=(docker.io)
	have shellcheck || pkgs+=(shellcheck)
	have systemd-nspawn || pkgs+=(systemd-container)
	have debootstrap || pkgs+=(debootstrap)
	have mariadb-install-db || pkgs+=(mariadb-server)
	have redis-server || pkgs+=(redis-server)
	have git || pkgs+=(git)
	# The backup benchmark's shell pipeline encrypts with age.
	have age || pkgs+=(age)
	# The partition test puts an agent in a network namespace of its own.
	have ip || pkgs+=(iproute2)
	# The web console's build and browser tests: Node.js and npm (when the
	# machine has none of its own) and Debian's Chromium, which
	# playwright-core drives headless.
	have node || pkgs+=(nodejs)
	have npm || pkgs+=(npm)
	have chromium || pkgs+=(chromium)
	[[ ${#pkgs[@]} -eq 0 ]] && return 0

	log "installing: ${pkgs[*]}"
	local apt_opts=(-o DPkg::Lock::Timeout=600 -q)
	export NEEDRESTART_SUSPEND=1 DEBIAN_FRONTEND=noninteractive
	apt-get "${apt_opts[@]}" update >&2
	apt-get "${apt_opts[@]}" install -y --no-install-recommends "${pkgs[@]}" >&2
	hash -r

	[[ -n "$(pg_bindir)" ]] || die "postgresql installed but no /usr/lib/postgresql/*/bin/postgres"
	have dockerd || die "docker.io installed but dockerd not found"
	have shellcheck || die "shellcheck installed but not found"
	have systemd-nspawn || die "systemd-container installed but systemd-nspawn not found"
	have debootstrap || die "debootstrap installed but not found"
	have mariadb || die "mariadb-client installed but mariadb not found"
	have redis-cli || die "redis-tools installed but redis-cli not found"
	have mariadb-install-db || die "mariadb-server installed but mariadb-install-db not found"
	have redis-server || die "redis-server installed but not found"
	have node || die "nodejs installed but node not found"
	have chromium || die "chromium installed but not found"
	have ip || die "iproute2 installed but ip not found"
}

# ---------------------------------------------------------------------------
# up: postgres

pg_running() {
	# ours, alive, and answering on the recorded port
	local port=$1
	[[ -f $PG_DATA/postmaster.pid ]] || return 1
	[[ "$(sed -n 4p "$PG_DATA/postmaster.pid" 2>/dev/null)" == "$port" ]] || return 1
	"$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$port" -t 2 >/dev/null 2>&1
}

ensure_postgres() {
	PG_BIN="$(pg_bindir)"
	PG_DATA="$PG_DIR/data"
	local run="$PG_DIR/run" port_file="$PG_DIR/port" port=""

	[[ -s $port_file ]] && port="$(cat "$port_file")"
	if [[ -n $port ]] && pg_running "$port"; then
		PG_PORT=$port
		PG_STATUS="reused (pid $(head -n1 "$PG_DATA/postmaster.pid"))"
		return 0
	fi

	mkdir -p "$PG_DIR"
	# every ancestor of PG_DIR must be traversable by postgres
	chown "$PG_USER:" "$PG_DIR"
	chmod 0700 "$PG_DIR"
	as_pg test -x "$PG_DIR" || die "$PG_DIR is not reachable by the $PG_USER user"
	printf '%s\n' "$PG_DIR" >"$PG_DIR_FILE"

	# half-initialised data dir from an interrupted run: start over
	if [[ -d $PG_DATA && ! -f $PG_DATA/PG_VERSION ]]; then
		rm -rf "$PG_DATA"
	fi
	if [[ ! -d $PG_DATA ]]; then
		log "postgres: initdb $PG_DATA"
		as_pg "$PG_BIN/initdb" -D "$PG_DATA" -U "$PG_USER" -A trust -E UTF8 \
			--locale=C.UTF-8 --no-sync >"$PG_DIR/initdb.log" 2>&1 ||
			{ tail -n 30 "$PG_DIR/initdb.log" >&2; die "initdb failed"; }
		as_pg mkdir -p "$run"
		as_pg tee -a "$PG_DATA/postgresql.conf" >/dev/null <<EOF

# --- capstan scripts/testenv.sh ---
listen_addresses = '127.0.0.1'
unix_socket_directories = '$run'
fsync = off
full_page_writes = off
synchronous_commit = off
max_connections = 300
EOF
		as_pg tee "$PG_DATA/pg_hba.conf" >/dev/null <<'EOF'
# capstan scripts/testenv.sh: throwaway test cluster, trust everything local
local   all all              trust
host    all all 127.0.0.1/32 trust
local   replication all              trust
host    replication all 127.0.0.1/32 trust
EOF
	fi
	[[ -d $run ]] || as_pg mkdir -p "$run"

	# stop a leftover instance of ours that is not answering properly
	if as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" status >/dev/null 2>&1; then
		log "postgres: stopping unresponsive previous instance"
		as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -m immediate -w stop >/dev/null 2>&1 || true
	fi

	# start on a free port; retry if we lose a race for it
	local try
	for try in 1 2 3 4 5; do
		port="$(pick_port)"
		if as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$PG_DIR/postgres.log" -w -t 60 \
			-o "-p $port" start >/dev/null 2>&1 9>&-; then
			printf '%s\n' "$port" >"$port_file"
			PG_PORT=$port
			PG_STATUS="started (pid $(head -n1 "$PG_DATA/postmaster.pid"))"
			return 0
		fi
		log "postgres: start on port $port failed (attempt $try)"
		as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -m immediate -w stop >/dev/null 2>&1 || true
	done
	tail -n 30 "$PG_DIR/postgres.log" >&2 || true
	die "could not start postgres (log: $PG_DIR/postgres.log)"
}

# ---------------------------------------------------------------------------
# up: docker

ensure_docker() {
	if docker_ping; then
		if [[ -f $DOCKERD_PID_FILE ]] && pid_is "$(cat "$DOCKERD_PID_FILE")" dockerd; then
			DOCKER_STATUS="reused (started by testenv, pid $(cat "$DOCKERD_PID_FILE"))"
		else
			DOCKER_STATUS="reused (existing engine)"
		fi
		return 0
	fi

	local pid=""
	if [[ -f $DOCKERD_PID_FILE ]] && pid_is "$(cat "$DOCKERD_PID_FILE")" dockerd; then
		pid="$(cat "$DOCKERD_PID_FILE")"
		log "docker: dockerd (pid $pid) started earlier is not answering yet; waiting"
	elif pgrep -x dockerd >/dev/null 2>&1; then
		# someone else's dockerd is around; give it a chance rather than
		# fighting over $DOCKER_SOCK
		log "docker: a dockerd we did not start is running but not answering; waiting"
	else
		rm -f "$DOCKERD_PID_FILE"
		log "docker: starting dockerd (log: $DOCKERD_LOG)"
		# subshell execs into setsid which execs into dockerd: $! is dockerd's pid
		(cd / && exec setsid dockerd) >"$DOCKERD_LOG" 2>&1 </dev/null 9>&- &
		pid=$!
		printf '%s\n' "$pid" >"$DOCKERD_PID_FILE"
	fi

	local i
	for ((i = 0; i < 120; i++)); do
		if docker_ping; then
			DOCKER_STATUS="started (pid ${pid:-?}, $((i / 2))s)"
			return 0
		fi
		if [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null; then
			break
		fi
		sleep 0.5
	done
	log "docker: dockerd did not answer on $DOCKER_SOCK; last log lines:"
	tail -n 40 "$DOCKERD_LOG" >&2 2>/dev/null || true
	die "dockerd failed to start"
}

# ---------------------------------------------------------------------------
# up: kernel settings

# The agent installer sets net.ipv4.tcp_migrate_req=1 on servers, so that
# connections queued on a listener Caddy closes at a reload go to its
# successor instead of being reset; the tests' Caddy runs on this machine,
# which is set up the same way.
ensure_sysctl() {
	local f=/proc/sys/net/ipv4/tcp_migrate_req
	[[ -e $f ]] || { log "kernel: no $f (Linux before 5.14); reloads may reset queued connections"; return 0; }
	[[ "$(cat "$f")" == 1 ]] && return 0
	sysctl -q -w net.ipv4.tcp_migrate_req=1 || die "could not set net.ipv4.tcp_migrate_req=1"
	log "kernel: net.ipv4.tcp_migrate_req=1"
}

# ---------------------------------------------------------------------------
# up: caddy

# The tests run the Caddy that servers run (see scripts/caddy-build.sh for
# why not Debian's), built once per version from Caddy's Go module. On a
# new machine the build starts first, in the background, and runs while
# the packages install and PostgreSQL and Docker start; ensure_caddy waits
# for it.
caddy_bin_for() {
	local arg=${1:-$REPO_ROOT/.testenv}
	mkdir -p "$arg"
	printf '%s/caddy/%s/caddy' "$(cd "$arg" && pwd -P)" "$("$SCRIPT_DIR/caddy-build.sh" --version)"
}

start_caddy_build() {
	local bin
	bin="$(caddy_bin_for "${1:-}")"
	[[ -x $bin ]] && return 0
	log "caddy: building $("$SCRIPT_DIR/caddy-build.sh" --version) from its Go module, in the background (once per version)"
	mkdir -p "$(dirname "$bin")"
	CADDY_BUILD_LOG="$(dirname "$bin")/build.log"
	CADDY_BUILD_START=$SECONDS
	"$SCRIPT_DIR/caddy-build.sh" "$bin" >"$CADDY_BUILD_LOG" 2>&1 9>&- &
	CADDY_BUILD_PID=$!
}

ensure_caddy() {
	CADDY_BIN="$(caddy_bin_for "$STATE_DIR")"
	if [[ -n ${CADDY_BUILD_PID:-} ]]; then
		wait "$CADDY_BUILD_PID" || { cat "$CADDY_BUILD_LOG" >&2; die "could not build Caddy"; }
		CADDY_STATUS="built in $((SECONDS - CADDY_BUILD_START))s"
		return 0
	fi
	if [[ -x $CADDY_BIN ]]; then
		CADDY_STATUS="reused"
		return 0
	fi
	log "caddy: building $("$SCRIPT_DIR/caddy-build.sh" --version) from its Go module (once per version)"
	local start=$SECONDS
	"$SCRIPT_DIR/caddy-build.sh" "$CADDY_BIN" 9>&- || die "could not build Caddy"
	CADDY_STATUS="built in $((SECONDS - start))s"
}

# ---------------------------------------------------------------------------
# commands

cmd_up() {
	[[ $(id -u) -eq 0 ]] || die "must run as root"
	start_caddy_build "${1:-}"
	ensure_packages
	resolve_dirs "${1:-}"

	take_lock

	ensure_postgres
	ensure_docker
	ensure_sysctl
	ensure_caddy

	local caddy_ver
	caddy_ver="$("$CADDY_BIN" version 2>&1)" || die "caddy version failed: $caddy_ver"

	local url="postgres://postgres@127.0.0.1:$PG_PORT/postgres?sslmode=disable"
	local tmp="$ENV_FILE.tmp.$$"
	cat >"$tmp" <<EOF
export CAPSTAN_TEST_POSTGRES_URL=$url
export CAPSTAN_TEST_DOCKER_HOST=unix://$DOCKER_SOCK
export CAPSTAN_TEST_CADDY=$CADDY_BIN
export CAPSTAN_TEST_CHROMIUM=$(command -v chromium)
EOF
	mv -f "$tmp" "$ENV_FILE"

	log "postgres: $PG_STATUS, $("$PG_BIN/postgres" --version | awk '{print $3}') at $url (data $PG_DATA)"
	log "docker:   $DOCKER_STATUS, unix://$DOCKER_SOCK"
	log "caddy:    $CADDY_STATUS, $CADDY_BIN ${caddy_ver%% *}"
	log "env:      $ENV_FILE"
}

cmd_down() {
	[[ $(id -u) -eq 0 ]] || die "must run as root"
	resolve_dirs "${1:-}"

	take_lock

	# postgres
	local bin
	bin="$(pg_bindir)"
	if [[ -d $PG_DIR/data ]]; then
		if [[ -n $bin ]] && as_pg "$bin/pg_ctl" -D "$PG_DIR/data" status >/dev/null 2>&1; then
			as_pg "$bin/pg_ctl" -D "$PG_DIR/data" -m fast -w -t 60 stop >/dev/null 2>&1 ||
				as_pg "$bin/pg_ctl" -D "$PG_DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
			log "postgres: stopped"
		else
			log "postgres: not running"
		fi
	else
		log "postgres: no data dir"
	fi
	rm -rf "$PG_DIR"
	# drop the /tmp parent too if we used the fallback location
	case $PG_DIR in
	/tmp/capstan-testenv-*/pg) rmdir "${PG_DIR%/pg}" 2>/dev/null || true ;;
	esac
	rm -f "$PG_DIR_FILE"

	# dockerd, only if we started it
	if [[ -f $DOCKERD_PID_FILE ]]; then
		local pid i
		pid="$(cat "$DOCKERD_PID_FILE")"
		if pid_is "$pid" dockerd; then
			kill -TERM "$pid" 2>/dev/null || true
			for ((i = 0; i < 60; i++)); do
				pid_is "$pid" dockerd || break
				sleep 0.5
			done
			if pid_is "$pid" dockerd; then
				kill -KILL "$pid" 2>/dev/null || true
			fi
			log "docker: stopped dockerd (pid $pid)"
		else
			log "docker: dockerd (pid $pid) not running"
		fi
		rm -f "$DOCKERD_PID_FILE"
	else
		log "docker: not started by testenv, left alone"
	fi

	rm -f "$ENV_FILE"
}

case ${1:-} in
up) shift; cmd_up "$@" ;;
down) shift; cmd_down "$@" ;;
*) usage ;;
esac
