#!/usr/bin/env bash
# The library's behaviour tests again, with every node a Valkey server (the
# pinned valkey-server of scripts/ensure-valkey.sh), Redis Clusters made of
# Valkey nodes included (tests/cluster.rs: `redis-cli --cluster create`
# makes them). Leaves out layout.rs and readme.rs (no nodes) and valkey.rs
# (it mixes both servers itself, in the usual pass and the cluster-member
# pass). The CLI's tests run on Redis only: the CLI reaches the nodes
# through the library, and its own Valkey difference (the server `status`
# names) is tested there.
set -euo pipefail
cd "$(dirname "$0")/.."
server=$(scripts/ensure-valkey.sh)
"$server" --version
export REDQUORUM_REDIS_SERVER="$server"
if cargo nextest --version >/dev/null 2>&1; then
    exec cargo nextest run -p redquorum --features cluster --tests \
        -E 'kind(test) & not (binary(layout) | binary(readme) | binary(valkey) | test(model))' \
        --status-level fail --final-status-level slow
fi
for file in tests/*.rs; do
    binary=$(basename "$file" .rs)
    case "$binary" in layout|readme|valkey) continue ;; esac
    cargo test -q -p redquorum --features cluster --test "$binary"
done
