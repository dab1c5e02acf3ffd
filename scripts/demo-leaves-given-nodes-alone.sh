#!/usr/bin/env bash
# Checks that `make demo` never touches the nodes in REDQUORUM_NODES: starts
# one node standing for "your real node", runs `make demo` with
# REDQUORUM_NODES pointing at it, then asserts that the node holds no key and
# served no command besides the checks' own PING, DBSIZE and INFO.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v redis-cli >/dev/null || { echo "redis-cli not found (Debian: redis-tools)" >&2; exit 1; }
scripts/with-nodes.sh 1 bash -c '
    set -euo pipefail
    given="$REDQUORUM_NODES"
    port="${given##*:}"
    REDQUORUM_NODES="$given" make -s demo >/dev/null
    keys=$(redis-cli -p "$port" DBSIZE)
    served=$(redis-cli -p "$port" INFO commandstats | grep "^cmdstat_" | cut -d: -f1 \
        | grep -vx -e cmdstat_ping -e cmdstat_info -e cmdstat_dbsize || true)
    if [ "$keys" != 0 ] || [ -n "$served" ]; then
        echo "make demo touched $given: $keys keys; commands: $served" >&2
        exit 1
    fi
    echo "make demo left $given alone (0 keys, no command served)"
'
