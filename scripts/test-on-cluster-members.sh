#!/usr/bin/env bash
# The behaviour tests of every primitive again, with every member a Redis
# Cluster (one shard each: `REDQUORUM_TEST_MEMBERS=clusters`, see
# tests/support/mod.rs), reached through the `cluster` feature. Leaves out
# the tests of tests/nodes-only.txt (each with why there) and the binaries
# that start no members of their own kind: cluster.rs (clusters of several
# shards, run in the usual pass), layout.rs and readme.rs. Built as make
# check builds (the workspace, with scripts/test-features): nothing is
# built again after it.
set -euo pipefail
cd "$(dirname "$0")/.."
listed=()
while read -r binary test; do
    case "$binary" in ''|'#'*) continue ;; esac
    listed+=("$binary $test")
done < tests/nodes-only.txt
export REDQUORUM_TEST_MEMBERS=clusters
features=$(cat scripts/test-features)
if cargo nextest --version >/dev/null 2>&1; then
    leave_out="binary(cluster) | binary(layout) | binary(readme) | test(model)"
    # Built with the features of make check, whose own tests run there.
    leave_out="$leave_out | binary(fenced_postgres) | binary(metrics)"
    for entry in "${listed[@]}"; do
        leave_out="$leave_out | (binary(${entry% *}) & test(=${entry#* }))"
    done
    exec cargo nextest run --workspace --features "$features" --lib --bins --tests \
        -E "package(redquorum) & kind(test) & not ($leave_out)" \
        --status-level fail --final-status-level slow
fi
# Without nextest: one test binary at a time, the listed tests skipped by
# their exact names.
for file in tests/*.rs; do
    binary=$(basename "$file" .rs)
    case "$binary" in cluster|layout|readme) continue ;; esac
    skips=()
    for entry in "${listed[@]}"; do
        [ "${entry% *}" = "$binary" ] && skips+=(--skip "${entry#* }")
    done
    cargo test -q --workspace --features "$features" --test "$binary" -- --exact "${skips[@]}"
done
