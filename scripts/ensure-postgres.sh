#!/usr/bin/env bash
# Makes sure PostgreSQL's server binaries (initdb, postgres, pg_isready, psql)
# are available: the fenced-writes tests start a server of their own on a
# free loopback port (tests/support/postgres.rs). Uses $REDQUORUM_PG_BIN if
# set, else Debian's /usr/lib/postgresql/<version>/bin, else PATH, else
# installs Debian's package when running as root with apt-get.
set -euo pipefail
found() {
    if [ -n "${REDQUORUM_PG_BIN:-}" ]; then
        [ -x "$REDQUORUM_PG_BIN/initdb" ] && return 0
        return 1
    fi
    ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && return 0
    command -v initdb >/dev/null 2>&1
}
found && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "PostgreSQL not found: installing Debian's postgresql package" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends postgresql >/dev/null
    # The package may start a system cluster on 5432; tests never use it.
    found && exit 0
fi
cat >&2 <<'MSG'
PostgreSQL's server binaries are required by the fenced-writes tests (they
start a server of their own on a free loopback port).
Install them, e.g.:
  Debian/Ubuntu:  sudo apt-get install postgresql
  macOS:          brew install postgresql
or point REDQUORUM_PG_BIN at the folder holding initdb and postgres.
MSG
exit 1
