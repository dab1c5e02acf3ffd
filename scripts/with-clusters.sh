#!/usr/bin/env bash
# Usage: scripts/with-clusters.sh N S COMMAND [ARGS...]
# Starts N local Redis Clusters of S shards each (masters only; AOF,
# appendfsync always, cluster-require-full-coverage no), made with
# `redis-cli --cluster create` on free loopback ports in a temp dir, plus one
# plain node for the demo's own data (DEMO_STORE); declares every shard new
# (`redquorum init`), runs COMMAND with REDQUORUM_NODES set to one
# redis+cluster:// URL per cluster, and stops every node on exit, also on
# Ctrl-C or failure. Never uses a REDQUORUM_NODES from the environment.
set -euo pipefail
n="$1"; s="$2"; shift 2
if [ -n "${REDQUORUM_NODES:-}" ]; then
    echo "REDQUORUM_NODES is set; not using it: starting $n local clusters instead" >&2
fi
unset REDQUORUM_NODES
"$(dirname "$0")/ensure-redis.sh"
bin="${REDQUORUM_REDIS_SERVER:-redis-server}"
cli="${REDQUORUM_REDIS_CLI:-redis-cli}"
. "$(dirname "$0")/local-nodes.sh"

urls=()
for c in $(seq 1 "$n"); do
    addrs=()
    for k in $(seq 1 "$s"); do
        start_node "c$c-s$k" --cluster-enabled yes \
            --cluster-config-file "$dir/c$c-s$k/nodes.conf" \
            --cluster-node-timeout 2000 --cluster-require-full-coverage no
        addrs+=("127.0.0.1:$port")
    done
    "$cli" --cluster create "${addrs[@]}" --cluster-yes >"$dir/c$c-create.log" 2>&1 || {
        cat "$dir/c$c-create.log" >&2; exit 1; }
    for _w in $(seq 1 500); do
        "$cli" -p "${addrs[0]##*:}" cluster info 2>/dev/null | grep -q 'cluster_state:ok' && break
        sleep 0.02
    done
    urls+=("redis+cluster://${addrs[0]}")
done
start_node store
store=$port
REDQUORUM_NODES="$(IFS=,; echo "${urls[*]}")"
DEMO_STORE="redis://127.0.0.1:$store"
export REDQUORUM_NODES DEMO_STORE
echo "started $n redis clusters of $s shards: $REDQUORUM_NODES" >&2
# $REDQUORUM_CLI: a built `redquorum` (make demo builds it once, with the
# demo); otherwise cargo builds the CLI (in debug) and runs it.
if [ -n "${REDQUORUM_CLI:-}" ]; then
    "$REDQUORUM_CLI" init >&2
else
    (cd "$(dirname "$0")/.." && cargo run -q -p redquorum-cli -- init) >&2
fi
"$@"
