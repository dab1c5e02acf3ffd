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
dir="$(mktemp -d -t redquorum-nodes.XXXXXX)"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
urls=()
for i in $(seq 1 "$n"); do
    started=""
    for _try in $(seq 1 20); do
        port=$(( 20000 + RANDOM % 30000 ))
        port_free "$port" || continue
        mkdir -p "$dir/node$i"
        "$bin" --port "$port" --bind 127.0.0.1 --save "" --appendonly yes \
            --appendfsync always --dir "$dir/node$i" --logfile "$dir/node$i/redis.log" \
            --daemonize no --protected-mode no >/dev/null 2>&1 &
        pid=$!
        for _w in $(seq 1 200); do
            if [ "$(printf 'PING\r\n' | { exec 3<>"/dev/tcp/127.0.0.1/$port" && cat >&3 && head -c 5 <&3; } 2>/dev/null)" = "+PONG" ]; then
                started=1; break
            fi
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.02
        done
        if [ -n "$started" ]; then pids+=("$pid"); break; fi
        kill -9 "$pid" 2>/dev/null || true
    done
    if [ -z "$started" ]; then
        echo "could not start redis node $i; log:" >&2
        cat "$dir/node$i/redis.log" >&2 || true
        exit 1
    fi
    urls+=("redis://127.0.0.1:$port")
done
REDQUORUM_NODES="$(IFS=,; echo "${urls[*]}")"
export REDQUORUM_NODES
echo "started $n redis nodes: $REDQUORUM_NODES" >&2
(cd "$(dirname "$0")/.." && cargo run -q -p redquorum-cli -- init) >&2
"$@"
