#!/usr/bin/env bash
# test-go.sh: every Go package's tests, with ./e2e split in shards.
#
# ./e2e takes most of the time, and its tests mostly wait on real
# processes (agents, engines, browsers), so it runs as E2E_SHARDS go test
# processes (default 2) beside the other packages. Each shard gets a share
# of the tests balanced by their durations in scripts/e2e-durations.tsv
# (a test not listed there counts as the median; one that runs in
# parallel counts for its share of the parallel slots or the cores);
# within a shard, tests
# run as go test runs them, E2E_PARALLEL (default 4) of the parallel ones
# at a time. Every process's output is printed when it ends, and the
# script fails when any of them failed.
#
#   scripts/test-go.sh                 run everything
#   scripts/test-go.sh --shards        print each shard's tests, run nothing
#   scripts/test-go.sh --record        run everything (./e2e verbosely), then
#                                      write the durations it measured
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

GO=${GO:-go}
SHARDS=${E2E_SHARDS:-2}
PARALLEL=${E2E_PARALLEL:-4}
TIMEOUT=${TEST_TIMEOUT:-45m}
DURATIONS=scripts/e2e-durations.tsv

# durations reads go test -v output on stdin and prints each top-level
# test's name and seconds, longest first.
durations() {
	sed -n 's/^--- [A-Z]*: \(Test[^ ]*\) (\([0-9.]*\)s)$/\1\t\2/p' | sort -t "$(printf '\t')" -k2,2 -rn
}

# shards prints one line per shard: the -run pattern of its tests. The
# longest test goes to the shard with the least work so far, and so on.
shards() {
	local tests
	tests=$("$GO" test -list '^Test' ./e2e | grep '^Test') || {
		echo "test-go: listing the e2e tests failed" >&2
		return 1
	}
	local median
	median=$(cut -f2 "$DURATIONS" | sort -n | awk '{ a[NR] = $1 } END { print NR ? a[int((NR + 1) / 2)] : 1 }')
	# The tests that call t.Parallel() first thing overlap with each other:
	# each weighs its duration over the slots they share, PARALLEL or the
	# machine's cores if fewer (their waits overlap, their work does not).
	# The others run one at a time and weigh their whole duration.
	local slots
	slots=$(nproc 2>/dev/null || echo 1)
	[ "$slots" -gt "$PARALLEL" ] && slots=$PARALLEL
	local parallel
	parallel=$(awk '/^func Test[A-Za-z0-9_]*\(t \*testing.T\) \{/ { name = $2; sub(/\(.*/, "", name); n = 0; next }
		name != "" && n < 3 { n++; if ($0 ~ /t\.Parallel\(\)/) { print name; name = "" } else if (n == 3) name = "" }' e2e/*_test.go)
	awk -v n="$SHARDS" -v median="$median" -v slots="$slots" -F '\t' '
		FILENAME == ARGV[1] { known[$1] = $2; next }
		FILENAME == ARGV[2] { par[$1] = 1; next }
		{ names[++m] = $1 }
		END {
			for (i = 1; i <= m; i++) {
				w[i] = (names[i] in known) ? known[names[i]] : median
				if (names[i] in par) w[i] /= slots
			}
			# Longest first (a selection sort: a few hundred tests).
			for (i = 1; i <= m; i++) order[i] = i
			for (i = 1; i <= m; i++)
				for (j = i + 1; j <= m; j++)
					if (w[order[j]] > w[order[i]]) { t = order[i]; order[i] = order[j]; order[j] = t }
			for (s = 1; s <= n; s++) load[s] = 0
			for (i = 1; i <= m; i++) {
				best = 1
				for (s = 2; s <= n; s++) if (load[s] < load[best]) best = s
				load[best] += w[order[i]]
				run[best] = run[best] (run[best] == "" ? "" : "|") names[order[i]]
			}
			for (s = 1; s <= n; s++) printf "%d\t%.0f\t^(%s)$\n", s, load[s], run[s]
		}' "$DURATIONS" <(printf '%s\n' "$parallel") <(printf '%s\n' "$tests")
}

record=
case "${1:-}" in
--record)
	record=-v
	;;
--shards)
	shards
	exit
	;;
esac

plan=$(shards) || exit 1
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

pids=()
names=()
start() { # name, command…
	local name=$1
	shift
	"$@" >"$logs/$name" 2>&1 &
	pids+=($!)
	names+=("$name")
}

mapfile -t packages < <("$GO" list ./... | grep -v '/e2e$')
start packages "$GO" test -count=1 -timeout "$TIMEOUT" -parallel 4 "${packages[@]}"
while IFS=$'\t' read -r shard seconds pattern; do
	echo "test-go: e2e shard $shard of $SHARDS: about ${seconds}s of tests"
	start "e2e-$shard" "$GO" test -count=1 -timeout "$TIMEOUT" -parallel "$PARALLEL" $record -run "$pattern" ./e2e
done <<<"$plan"

failed=0
for i in "${!pids[@]}"; do
	if wait "${pids[$i]}"; then
		status=ok
	else
		status=FAILED
		failed=1
	fi
	echo "=== test-go: ${names[$i]}: $status"
	cat "$logs/${names[$i]}"
done
if [ -n "$record" ]; then
	cat "$logs"/e2e-* | durations >"$DURATIONS"
	echo "test-go: wrote the durations of $(wc -l <"$DURATIONS") tests to $DURATIONS"
fi
exit "$failed"
