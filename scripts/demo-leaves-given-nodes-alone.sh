#!/usr/bin/env bash
# Checks that `make demo` never touches the nodes in REDQUORUM_NODES: starts
# one node standing for "your real node" (with-nodes.sh declares it new, which
# writes our marker there: that is counted before the demo runs), runs `make
# demo` with REDQUORUM_NODES pointing at it, then asserts that the node holds
# no key it did not hold before and served no command since besides the
# checks' own PING, DBSIZE, INFO and CONFIG RESETSTAT.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v redis-cli >/dev/null || { echo "redis-cli not found (Debian: redis-tools)" >&2; exit 1; }
scripts/with-nodes.sh 1 bash -c '
    set -euo pipefail
    given="$REDQUORUM_NODES"
    port="${given##*:}"
    before=$(redis-cli -p "$port" DBSIZE)
    redis-cli -p "$port" CONFIG RESETSTAT >/dev/null
    REDQUORUM_NODES="$given" make -s demo >/dev/null
    keys=$(redis-cli -p "$port" DBSIZE)
    served=$(redis-cli -p "$port" INFO commandstats | grep "^cmdstat_" | cut -d: -f1 \
        | grep -vx -e cmdstat_ping -e cmdstat_info -e cmdstat_dbsize \
            -e "cmdstat_config|resetstat" || true)
    if [ "$keys" != "$before" ] || [ -n "$served" ]; then
        echo "make demo touched $given: $before keys before, $keys after; commands: $served" >&2
        exit 1
    fi
    echo "make demo left $given alone ($keys keys as before, no command served)"
'
