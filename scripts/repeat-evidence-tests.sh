#!/usr/bin/env bash
# Runs the tests of evidence read while connected, and of the command that
# never outlives its lock, RUNS times over (default 20), and says how many
# runs passed: keys evicted or flushed while connected (lock, read lease,
# permit), a process swapped in behind an address, an uptime that jumps
# with the wall clock, a client whose own clock stalls, the wrapper alone
# stopped, a fenced read whose lease ended while its token was read.
# Meant for a busy machine (run it beside builds): each run is one
# nextest invocation, so a failure shows which scenario and which run.
# Bounded: RUNS runs, each test with its own timeouts.
#
#   scripts/repeat-evidence-tests.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-20}"
case "$runs" in '' | *[!0-9]*) echo "RUNS must be a whole number, got '$runs'" >&2; exit 2 ;; esac
filter='binary(connected) | binary(sight) | binary(stalled_clock) | binary(stopped)
    | (binary(rwlock) & test(fenced_read))'
cargo nextest run --workspace --all-features --tests -E "$filter" --no-run
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
passed=0
for run in $(seq "$runs"); do
    start=$SECONDS
    if cargo nextest run --workspace --all-features --tests -E "$filter" \
        --status-level fail --final-status-level none >"$log" 2>&1; then
        passed=$((passed + 1))
        echo "run $run: passed ($((SECONDS - start)) s)"
    else
        echo "run $run: FAILED ($((SECONDS - start)) s):"
        grep -E "FAIL|panicked|holder|overlap" "$log" | head -20 || true
    fi
done
echo "$passed of $runs runs passed"
[ "$passed" = "$runs" ]
