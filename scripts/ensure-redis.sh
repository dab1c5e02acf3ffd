#!/usr/bin/env bash
# Makes sure a redis-server binary is available (tests start their own nodes),
# and redis-cli (tests make Redis Clusters with `redis-cli --cluster create`).
# Uses $REDQUORUM_REDIS_SERVER / $REDQUORUM_REDIS_CLI if set, else the ones on
# PATH, else installs Debian's package when running as root with apt-get.
set -euo pipefail
bin="${REDQUORUM_REDIS_SERVER:-redis-server}"
cli="${REDQUORUM_REDIS_CLI:-redis-cli}"
if command -v "$bin" >/dev/null 2>&1 && command -v "$cli" >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "redis-server not found: installing Debian's redis-server package" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends redis-server >/dev/null
    # The package may start a system instance on 6379; tests never use it.
    command -v redis-server >/dev/null && command -v redis-cli >/dev/null && exit 0
fi
cat >&2 <<'MSG'
redis-server and redis-cli are required (tests and the demo start their own
local nodes; redis-cli makes test clusters).
Install it, e.g.:
  Debian/Ubuntu:  sudo apt-get install redis-server
  macOS:          brew install redis
or point REDQUORUM_REDIS_SERVER (and REDQUORUM_REDIS_CLI) at the binaries.
MSG
exit 1
