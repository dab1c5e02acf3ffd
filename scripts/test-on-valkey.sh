#!/usr/bin/env bash
# The library's behaviour tests again, with every node a Valkey server (the
# pinned valkey-server of scripts/ensure-valkey.sh), Redis Clusters made of
# Valkey nodes included (tests/cluster.rs: `redis-cli --cluster create`
# makes them). Leaves out layout.rs and readme.rs (no nodes) and valkey.rs
# (it mixes both servers itself, in the usual pass and the cluster-member
# pass). The CLI's tests run on Redis only: the CLI reaches the nodes
# through the library, and its own Valkey difference (the server `status`
# names) is tested there. Built as make check builds (the workspace, with
# scripts/test-features): nothing is built again after it.
set -euo pipefail
cd "$(dirname "$0")/.."
server=$(scripts/ensure-valkey.sh)
"$server" --version
export REDQUORUM_REDIS_SERVER="$server"
features=$(cat scripts/test-features)
if cargo nextest --version >/dev/null 2>&1; then
    exec cargo nextest run --workspace --features "$features" --lib --bins --tests \
        -E 'package(redquorum) & kind(test) & not (binary(layout) | binary(readme) | binary(valkey) | binary(fenced_postgres) | binary(metrics) | test(model))' \
        --status-level fail --final-status-level slow
fi
for file in tests/*.rs; do
    binary=$(basename "$file" .rs)
    case "$binary" in layout|readme|valkey) continue ;; esac
    cargo test -q --workspace --features "$features" --test "$binary"
done
