#!/usr/bin/env bash
# `make test`'s check of the metrics example: on three local nodes of its
# own, for two seconds, on a free port, it must print a scrape holding the
# headline series in the Prometheus text format.
set -euo pipefail
cd "$(dirname "$0")/.."
out="$(METRICS_SECONDS=2 METRICS_ADDR=127.0.0.1:0 \
    scripts/with-nodes.sh 3 cargo run -q --features metrics --example metrics)"
for series in redquorum_lock_acquire_duration_seconds redquorum_lock_wait_duration_seconds \
    redquorum_node_request_duration_seconds redquorum_counter_allocation_duration_seconds \
    redquorum_election_leader 'outcome="acquired"'; do
    if ! grep -q -- "$series" <<<"$out"; then
        printf '%s\n' "$out" >&2
        echo "the metrics example's scrape has no $series (above)" >&2
        exit 1
    fi
done
echo "the metrics example's scrape has the headline series ($(grep -c '^redquorum_' <<<"$out") lines)"
