#!/usr/bin/env bash
# Usage: scripts/with-nodes.sh N COMMAND [ARGS...]
# Starts N local redis-server nodes (AOF, appendfsync always) on free loopback
# ports in a temp dir, declares them new (`redquorum init`: they were just
# started empty, so clients need not wait out the restart quarantine), runs
# COMMAND with REDQUORUM_NODES set to their URLs, and stops the nodes on exit,
# also on Ctrl-C or failure.
# Always its own nodes: a REDQUORUM_NODES in the environment (your real
# nodes, say) is replaced for COMMAND, never used.
set -euo pipefail
n="$1"; shift
if [ -n "${REDQUORUM_NODES:-}" ]; then
    echo "REDQUORUM_NODES is set; not using it: starting $n local nodes instead" >&2
fi
unset REDQUORUM_NODES
"$(dirname "$0")/ensure-redis.sh"
bin="${REDQUORUM_REDIS_SERVER:-redis-server}"
. "$(dirname "$0")/local-nodes.sh"
urls=()
for i in $(seq 1 "$n"); do
    start_node "node$i"
    urls+=("redis://127.0.0.1:$port")
done
REDQUORUM_NODES="$(IFS=,; echo "${urls[*]}")"
export REDQUORUM_NODES
echo "started $n redis nodes: $REDQUORUM_NODES" >&2
# $REDQUORUM_CLI: a built `redquorum` (make demo builds it once, with the
# demo); otherwise cargo builds the CLI (in debug) and runs it.
if [ -n "${REDQUORUM_CLI:-}" ]; then
    "$REDQUORUM_CLI" init >&2
else
    (cd "$(dirname "$0")/.." && cargo run -q -p redquorum-cli -- init) >&2
fi
"$@"
