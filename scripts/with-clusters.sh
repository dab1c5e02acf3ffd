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
dir="$(mktemp -d -t redquorum-clusters.XXXXXX)"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
pong() { [ "$(printf 'PING\r\n' | { exec 3<>"/dev/tcp/127.0.0.1/$1" && cat >&3 && head -c 5 <&3; } 2>/dev/null)" = "+PONG" ]; }

# Starts one node with extra arguments; prints its port.
start_node() {
    local name="$1"; shift
    for _try in $(seq 1 20); do
        local port=$(( 20000 + RANDOM % 30000 ))
        # A cluster node also listens on port + 10000.
        port_free "$port" && port_free $(( port + 10000 )) || continue
        mkdir -p "$dir/$name"
        "$bin" --port "$port" --bind 127.0.0.1 --save "" --appendonly yes \
            --appendfsync always --dir "$dir/$name" --logfile "$dir/$name/redis.log" \
            --daemonize no --protected-mode no "$@" >/dev/null 2>&1 &
        local pid=$!
        for _w in $(seq 1 200); do
            if pong "$port"; then pids+=("$pid"); echo "$port"; return 0; fi
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.02
        done
        kill -9 "$pid" 2>/dev/null || true
    done
    echo "could not start redis node $name; log:" >&2
    cat "$dir/$name/redis.log" >&2 || true
    return 1
}

urls=()
for c in $(seq 1 "$n"); do
    addrs=()
    for k in $(seq 1 "$s"); do
        port=$(start_node "c$c-s$k" --cluster-enabled yes \
            --cluster-config-file "$dir/c$c-s$k/nodes.conf" \
            --cluster-node-timeout 2000 --cluster-require-full-coverage no)
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
store=$(start_node store)
REDQUORUM_NODES="$(IFS=,; echo "${urls[*]}")"
DEMO_STORE="redis://127.0.0.1:$store"
export REDQUORUM_NODES DEMO_STORE
echo "started $n redis clusters of $s shards: $REDQUORUM_NODES" >&2
(cd "$(dirname "$0")/.." && cargo run -q -p redquorum-cli -- init) >&2
"$@"
