#!/usr/bin/env bash
# scripts/fleetbench.sh — run capstan-fleetsim against a fresh control plane
# started from this checkout, and keep what it measured.
#
#   scripts/fleetbench.sh OUT_DIR [--database-url postgres://…] [--replicas N]
#       [--kill-replica SECONDS] [-- FLEETSIM_FLAGS…]
#
# Builds capstan and capstan-fleetsim, creates a fresh data directory (and,
# with --database-url, uses that empty PostgreSQL database), creates an
# administrator, starts `capstan serve` on a free loopback port with pprof on
# another, runs the simulator with --pid and the flags given, and writes into
# OUT_DIR: report.json (the simulator's --json report), summary.txt (its
# main figures), fleetsim.log (its progress), serve.log, jobs.txt (the store's jobs by state and error when
# the run ended: a job lost to a restart shows as failed agent_lost, or still
# queued or running), and heap.pprof and goroutine.txt taken from the
# control plane just before the run ends (when --profile-at is given).
#
# With --replicas N (N > 1, PostgreSQL only), N `capstan serve` replicas run
# on the one database with one secret key (a fresh CAPSTAN_SECRET_KEY unless
# one is set), each with its own port, pprof port and data directory
# (data-I); the simulator gets every URL and process id and spreads its
# agents over them (agent i on replica i mod N, for the whole run), and the
# report has the calls, dispatch, CPU and RSS of each replica and of all of
# them (control_planes, control_plane). Each replica's log is serve-I.log,
# its profiles heap-I.pprof and goroutine-I.txt.
#
# Extra options before --:
#   --database-url URL     run on this empty PostgreSQL database instead of
#                          SQLite
#   --replicas N           start N replicas on the database (default 1)
#   --kill-replica SECONDS kill -9 the last replica this long into the run
#                          and start it again with the same command, as a
#                          supervisor would; its agents back off and retry
#                          it (an agent has one address: behind a load
#                          balancer it would move to another replica). The
#                          report's restart part says how long until every
#                          agent was back, and jobs.txt whether any job was
#                          lost
#   --profile-at SECONDS   take the heap and goroutine profiles this long
#                          after the simulator starts
#   --serve-flag FLAG      pass FLAG to capstan serve (repeatable)
#   --storm                kill -9 the control plane at --kill-after (a
#                          fleetsim flag) and restart it with the same command
#
# For example, two replicas with 300 agents each, one killed after 90 s:
#
#   scripts/fleetbench.sh /tmp/bench --database-url postgres://…/bench \
#       --replicas 2 --kill-replica 90 -- --agents 600 --ramp 30s --duration 2m
#
# Only ever listens on and talks to 127.0.0.1.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd -P)"

die() { printf 'fleetbench: ERROR: %s\n' "$*" >&2; exit 2; }
[ $# -ge 1 ] || die "usage: $0 OUT_DIR [--database-url URL] [--profile-at S] [--serve-flag F]… [--storm] [-- FLEETSIM_FLAGS…]"
OUT="$1"; shift
DB_URL=""; PROFILE_AT=""; STORM=0; SERVE_FLAGS=(); REPLICAS=1; KILL_REPLICA=""
while [ $# -gt 0 ]; do
	case "$1" in
	--database-url) DB_URL="$2"; shift 2 ;;
	--replicas) REPLICAS="$2"; shift 2 ;;
	--kill-replica) KILL_REPLICA="$2"; shift 2 ;;
	--profile-at) PROFILE_AT="$2"; shift 2 ;;
	--serve-flag) SERVE_FLAGS+=("$2"); shift 2 ;;
	--storm) STORM=1; shift ;;
	--) shift; break ;;
	*) die "unknown option $1" ;;
	esac
done
case "$REPLICAS" in '' | *[!0-9]* | 0*) die "--replicas must be a positive whole number" ;; esac
if [ "$REPLICAS" -gt 1 ] && [ -z "$DB_URL" ]; then
	die "--replicas $REPLICAS needs --database-url: replicas share one PostgreSQL database"
fi
if [ -n "$KILL_REPLICA" ]; then
	case "$KILL_REPLICA" in *[!0-9.]* | .* | *.*.*) die "--kill-replica takes a number of seconds" ;; esac
	[ "$STORM" = 0 ] || die "--storm and --kill-replica do not go together"
fi

mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd -P)"
BIN="$OUT/bin"
mkdir -p "$BIN"
(cd "$REPO_ROOT" && go build -trimpath -o "$BIN/capstan" ./cmd/capstan && go build -trimpath -o "$BIN/capstan-fleetsim" ./cmd/capstan-fleetsim)

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# Replica I's data directory, log and profiles: data, serve.log… with one.
suffix() { if [ "$REPLICAS" -gt 1 ]; then printf -- '-%s' "$1"; fi; }
PORTS=(); PPROF_PORTS=(); DATAS=(); LOGS=()
for i in $(seq 0 $((REPLICAS - 1))); do
	PORTS+=("$(free_port)")
	PPROF_PORTS+=("$(free_port)")
	DATAS+=("$OUT/data$(suffix "$i")")
	LOGS+=("$OUT/serve$(suffix "$i").log")
	rm -rf "${DATAS[$i]}"
	mkdir -p "${DATAS[$i]}"
done
DATA="${DATAS[0]}"
export CAPSTAN_DATA_DIR="$DATA"
if [ -n "$DB_URL" ]; then export CAPSTAN_DATABASE_URL="$DB_URL"; fi
# Replicas must seal and open secrets with the same key.
if [ "$REPLICAS" -gt 1 ] && [ -z "${CAPSTAN_SECRET_KEY:-}" ]; then
	CAPSTAN_SECRET_KEY="$(head -c 32 /dev/urandom | base64 -w0)"
	export CAPSTAN_SECRET_KEY
fi

PASSWORD="fleetbench-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
"$BIN/capstan" migrate >/dev/null
USER_JSON="$(printf '%s\n' "$PASSWORD" | "$BIN/capstan" user create --email bench@example.com --admin --password-stdin --json)"
TOTP="$(printf '%s' "$USER_JSON" | python3 -c 'import json,sys; print(json.load(sys.stdin)["totp_secret"])')"

# Each agent holds two connections: raise the open-file limit (as root the
# hard limit too) for the control plane and the simulator.
ulimit -Hn 1048576 2>/dev/null || true
ulimit -n "$(ulimit -Hn)"
SERVES=(); CP_PIDS=(); URLS=()
# shellcheck disable=SC2317 # cleanup runs from the EXIT trap
cleanup() {
	local all=("${CP_PIDS[@]}")
	if [ -n "${NEW_PID:-}" ]; then all+=("$NEW_PID"); fi
	for p in "${all[@]}"; do kill "$p" 2>/dev/null || true; done
	# Wait (up to 30 s) until they have stopped, so that the database may
	# be dropped once this script returns.
	for _ in $(seq 1 300); do
		local alive=0
		for p in "${all[@]}"; do if kill -0 "$p" 2>/dev/null; then alive=1; fi; done
		[ "$alive" = 1 ] || break
		sleep 0.1
	done
}
trap cleanup EXIT
for i in $(seq 0 $((REPLICAS - 1))); do
	SERVE="exec $BIN/capstan serve --data-dir ${DATAS[$i]} --listen 127.0.0.1:${PORTS[$i]} --debug-pprof-listen 127.0.0.1:${PPROF_PORTS[$i]} --log-level warn"
	for f in "${SERVE_FLAGS[@]}"; do SERVE="$SERVE $f"; done
	SERVE="$SERVE >>${LOGS[$i]} 2>&1"
	SERVES+=("$SERVE")
	: >"${LOGS[$i]}"
	sh -c "$SERVE" &
	CP_PIDS+=("$!")
	URLS+=("http://127.0.0.1:${PORTS[$i]}")
done
for i in $(seq 0 $((REPLICAS - 1))); do
	for _ in $(seq 1 300); do
		if curl -fsS "${URLS[$i]}/healthz" >/dev/null 2>&1; then break; fi
		kill -0 "${CP_PIDS[$i]}" 2>/dev/null || die "capstan serve exited; see ${LOGS[$i]}"
		sleep 0.1
	done
	curl -fsS "${URLS[$i]}/healthz" >/dev/null || die "capstan serve did not answer /healthz; see ${LOGS[$i]}"
done

if [ -n "$PROFILE_AT" ]; then
	(
		sleep "$PROFILE_AT"
		for i in $(seq 0 $((REPLICAS - 1))); do
			sfx="$(suffix "$i")"
			curl -fsS "http://127.0.0.1:${PPROF_PORTS[$i]}/debug/pprof/heap" -o "$OUT/heap$sfx.pprof" || true
			curl -fsS "http://127.0.0.1:${PPROF_PORTS[$i]}/debug/pprof/goroutine?debug=1" -o "$OUT/goroutine$sfx.txt" || true
			grep -E '^(Vm|Rss|Threads)' "/proc/${CP_PIDS[$i]}/status" >"$OUT/status$sfx.txt" 2>/dev/null || true
		done
	) &
fi

EXTRA=()
LAST=$((REPLICAS - 1))
if [ "$STORM" = 1 ]; then EXTRA+=(--restart-cmd "${SERVES[0]}"); fi
if [ -n "$KILL_REPLICA" ]; then
	EXTRA+=(--kill-after "${KILL_REPLICA}s" --kill-index "$LAST" --restart-cmd "${SERVES[$LAST]}")
fi
uptime >"$OUT/uptime-before.txt"
set +e
CAPSTAN_FLEETSIM_PASSWORD="$PASSWORD" CAPSTAN_FLEETSIM_TOTP_SECRET="$TOTP" \
	"$BIN/capstan-fleetsim" --url "$(IFS=,; echo "${URLS[*]}")" --email bench@example.com --pid "$(IFS=,; echo "${CP_PIDS[*]}")" --json \
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
# The figures of the run, in total and per replica.
python3 - "$OUT/report.json" >"$OUT/summary.txt" 2>&1 <<'PY' || true
import json, sys
r = json.load(open(sys.argv[1]))
def calls(c, d, indent):
    for k, v in c.items():
        print(f"{indent}{k:<12} n={v['count']:<7} err={v['errors']:<4} p50={v['p50_ms']:7.1f}ms p99={v['p99_ms']:7.1f}ms")
    print(f"{indent}{'dispatch':<12} n={d['count']:<7}          p50={d['p50_ms']:7.1f}ms p99={d['p99_ms']:7.1f}ms")
def proc(p):
    return (f"cpu avg {p['cpu_avg_percent']:.0f}% of one core ({p['cpu_avg_machine_percent']:.0f}% of the machine), "
            f"rss end {p['rss_end_mb']:.0f} MB, max {p['rss_max_mb']:.0f} MB")
j = r["jobs"]
print(f"{r['enrolled']} of {r['agents']} agents, {r['errors']} errors; jobs {j['queued']} queued, {j['claimed']} claimed, "
      f"{j['completed']} completed, {j['outstanding']} outstanding")
print("steady state, all control planes:")
calls(r["steady_calls"], r["steady_dispatch"], "  ")
if r.get("control_plane"):
    print("  control plane" + ("s together: " if r.get("control_planes") else ": ") + proc(r["control_plane"]))
for i, c in enumerate(r.get("control_planes") or []):
    print(f"control plane {i} ({c['url']}, {c['agents']} agents, {c['errors']} errors), steady state:")
    calls(c["steady_calls"], c["steady_dispatch"], "  ")
    if c.get("process"):
        print("  " + proc(c["process"]))
rs = r.get("restart")
if rs:
    back = f"every agent back {rs['all_back_after_s']:.1f} s after the restart" if rs["all_back"] else f"{rs['agents_down_at_end']} agents still cut off at the end"
    print(f"restart of {rs.get('url') or 'the control plane'}: killed at {rs['killed_at_s']:.1f} s, {rs['agents_down_max']} agents cut off at most, "
          f"{back}; {rs['errors_total']} failed calls (peak {rs['errors_peak_per_s']}/s)")
PY
cat "$OUT/summary.txt"
printf 'jobs in the store by state:\n'
cat "$OUT/jobs.txt"
exit "$RC"
