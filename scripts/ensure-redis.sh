#!/usr/bin/env bash
# Makes sure a redis-server binary is available (tests start their own nodes).
# Uses $REDQUORUM_REDIS_SERVER if set, else redis-server on PATH, else installs
# Debian's package when running as root with apt-get.
set -euo pipefail
bin="${REDQUORUM_REDIS_SERVER:-redis-server}"
if command -v "$bin" >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "redis-server not found: installing Debian's redis-server package" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends redis-server >/dev/null
    # The package may start a system instance on 6379; tests never use it.
    command -v redis-server >/dev/null && exit 0
fi
cat >&2 <<'MSG'
redis-server is required (tests and the demo start their own local nodes).
Install it, e.g.:
  Debian/Ubuntu:  sudo apt-get install redis-server
  macOS:          brew install redis
or point REDQUORUM_REDIS_SERVER at a redis-server binary.
MSG
exit 1
