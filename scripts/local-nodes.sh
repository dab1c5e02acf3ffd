# Sourced by with-nodes.sh and with-clusters.sh: local redis-server nodes
# (AOF, appendfsync always) on free loopback ports in a temp dir, all killed
# and the dir removed on exit, also on Ctrl-C or failure.
# Needs: $bin (the redis-server binary). Sets: $dir, $pids; start_node sets
# $port.

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
pong() { [ "$(printf 'PING\r\n' | { exec 3<>"/dev/tcp/127.0.0.1/$1" && cat >&3 && head -c 5 <&3; } 2>/dev/null)" = "+PONG" ]; }

# start_node NAME [REDIS-SERVER ARGS...]: starts a node in $dir/NAME with
# the extra arguments, sets $port once it answers PING. Not in a subshell:
# its pid must reach $pids for cleanup.
start_node() {
    local name="$1"; shift
    for _try in $(seq 1 20); do
        port=$(( 20000 + RANDOM % 30000 ))
        # A cluster node also listens on port + 10000.
        port_free "$port" && port_free $(( port + 10000 )) || continue
        mkdir -p "$dir/$name"
        "$bin" --port "$port" --bind 127.0.0.1 --save "" --appendonly yes \
            --appendfsync always --dir "$dir/$name" --logfile "$dir/$name/redis.log" \
            --daemonize no --protected-mode no "$@" >/dev/null 2>&1 &
        local pid=$!
        for _w in $(seq 1 200); do
            if pong "$port"; then pids+=("$pid"); return 0; fi
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.02
        done
        kill -9 "$pid" 2>/dev/null || true
    done
    echo "could not start redis node $name; log:" >&2
    cat "$dir/$name/redis.log" >&2 || true
    exit 1
}
