#!/usr/bin/env bash
# scripts/fleetbench.sh — run capstan-fleetsim against a fresh control plane
# started from this checkout, and keep what it measured.
#
#   scripts/fleetbench.sh OUT_DIR [--database-url postgres://…] [-- FLEETSIM_FLAGS…]
#
# Builds capstan and capstan-fleetsim, creates a fresh data directory (and,
# with --database-url, uses that empty PostgreSQL database), creates an
# administrator, starts `capstan serve` on a free loopback port with pprof on
# another, runs the simulator with --pid and the flags given, and writes into
# OUT_DIR: report.json (the simulator's --json report), fleetsim.log (its
# progress), serve.log, jobs.txt (the store's jobs by state and error when
# the run ended: a job lost to a restart shows as failed agent_lost, or still
# queued or running), and heap.pprof and goroutine.txt taken from the
# control plane just before the run ends (when --profile-at is given).
#
# Extra options before --:
#   --profile-at SECONDS   take the heap and goroutine profiles this long
#                          after the simulator starts
#   --serve-flag FLAG      pass FLAG to capstan serve (repeatable)
#   --storm                kill -9 the control plane at --kill-after (a
#                          fleetsim flag) and restart it with the same command
#
# Only ever listens on and talks to 127.0.0.1.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd -P)"

die() { printf 'fleetbench: ERROR: %s\n' "$*" >&2; exit 2; }
[ $# -ge 1 ] || die "usage: $0 OUT_DIR [--database-url URL] [--profile-at S] [--serve-flag F]… [--storm] [-- FLEETSIM_FLAGS…]"
OUT="$1"; shift
DB_URL=""; PROFILE_AT=""; STORM=0; SERVE_FLAGS=()
while [ $# -gt 0 ]; do
	case "$1" in
	--database-url) DB_URL="$2"; shift 2 ;;
	--profile-at) PROFILE_AT="$2"; shift 2 ;;
	--serve-flag) SERVE_FLAGS+=("$2"); shift 2 ;;
	--storm) STORM=1; shift ;;
	--) shift; break ;;
	*) die "unknown option $1" ;;
	esac
done

mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd -P)"
BIN="$OUT/bin"
DATA="$OUT/data"
rm -rf "$DATA"
mkdir -p "$BIN"
(cd "$REPO_ROOT" && go build -trimpath -o "$BIN/capstan" ./cmd/capstan && go build -trimpath -o "$BIN/capstan-fleetsim" ./cmd/capstan-fleetsim)

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT="$(free_port)"
PPROF_PORT="$(free_port)"
export CAPSTAN_DATA_DIR="$DATA"
if [ -n "$DB_URL" ]; then export CAPSTAN_DATABASE_URL="$DB_URL"; fi

PASSWORD="fleetbench-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
"$BIN/capstan" migrate >/dev/null
USER_JSON="$(printf '%s\n' "$PASSWORD" | "$BIN/capstan" user create --email bench@example.com --admin --password-stdin --json)"
TOTP="$(printf '%s' "$USER_JSON" | python3 -c 'import json,sys; print(json.load(sys.stdin)["totp_secret"])')"

# Each agent holds two connections: raise the open-file limit (as root the
# hard limit too) for the control plane and the simulator.
ulimit -Hn 1048576 2>/dev/null || true
ulimit -n "$(ulimit -Hn)"
SERVE="exec $BIN/capstan serve --listen 127.0.0.1:$PORT --debug-pprof-listen 127.0.0.1:$PPROF_PORT --log-level warn"
for f in "${SERVE_FLAGS[@]}"; do SERVE="$SERVE $f"; done
SERVE="$SERVE >>$OUT/serve.log 2>&1"
: >"$OUT/serve.log"
sh -c "$SERVE" &
CP_PID=$!
# shellcheck disable=SC2317 # cleanup runs from the EXIT trap
cleanup() {
	kill "$CP_PID" 2>/dev/null || true
	if [ -n "${NEW_PID:-}" ]; then kill "$NEW_PID" 2>/dev/null || true; fi
}
trap cleanup EXIT
for _ in $(seq 1 300); do
	if curl -fsS "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1; then break; fi
	kill -0 "$CP_PID" 2>/dev/null || die "capstan serve exited; see $OUT/serve.log"
	sleep 0.1
done
curl -fsS "http://127.0.0.1:$PORT/healthz" >/dev/null || die "capstan serve did not answer /healthz"

if [ -n "$PROFILE_AT" ]; then
	(
		sleep "$PROFILE_AT"
		curl -fsS "http://127.0.0.1:$PPROF_PORT/debug/pprof/heap" -o "$OUT/heap.pprof" || true
		curl -fsS "http://127.0.0.1:$PPROF_PORT/debug/pprof/goroutine?debug=1" -o "$OUT/goroutine.txt" || true
		grep -E '^(Vm|Rss|Threads)' "/proc/$CP_PID/status" >"$OUT/status.txt" 2>/dev/null || true
	) &
fi

EXTRA=()
if [ "$STORM" = 1 ]; then EXTRA+=(--restart-cmd "$SERVE"); fi
uptime >"$OUT/uptime-before.txt"
set +e
CAPSTAN_FLEETSIM_PASSWORD="$PASSWORD" CAPSTAN_FLEETSIM_TOTP_SECRET="$TOTP" \
	"$BIN/capstan-fleetsim" --url "http://127.0.0.1:$PORT" --email bench@example.com --pid "$CP_PID" --json \
	"${EXTRA[@]}" "$@" >"$OUT/report.json" 2>"$OUT/fleetsim.log"
RC=$?
set -e
uptime >"$OUT/uptime-after.txt"
JOBS_SQL="SELECT status, COALESCE(error, ''), COUNT(*) FROM jobs GROUP BY status, COALESCE(error, '') ORDER BY 1, 2"
if [ -n "$DB_URL" ]; then
	psql "$DB_URL" -At -F ' ' -c "$JOBS_SQL" >"$OUT/jobs.txt" 2>&1 || true
elif command -v sqlite3 >/dev/null; then
	sqlite3 -readonly -separator ' ' "$DATA/capstan.db" "$JOBS_SQL" >"$OUT/jobs.txt" 2>&1 || true
else
	echo "sqlite3 not installed: jobs not counted" >"$OUT/jobs.txt"
fi
NEW_PID="$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print((r.get("restart") or {}).get("new_pid",""))' "$OUT/report.json" 2>/dev/null || true)"
tail -n 40 "$OUT/fleetsim.log"
printf 'jobs in the store by state:\n'
cat "$OUT/jobs.txt"
exit "$RC"
