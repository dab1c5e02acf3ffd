#!/usr/bin/env bash
# CI: runs the five-node docker example when a docker engine is available or
# can be started here (dockerd installed, running as root); otherwise prints
# one "docker example: SKIPPED (reason)" line and succeeds.
set -euo pipefail
cd "$(dirname "$0")/.."
skip() { echo "docker example: SKIPPED ($1)"; exit 0; }
command -v docker >/dev/null 2>&1 || skip "no docker client installed"
if ! docker info >/dev/null 2>&1; then
    command -v dockerd >/dev/null 2>&1 || skip "no docker engine running and dockerd is not installed"
    [ "$(id -u)" = 0 ] || skip "no docker engine running and not root to start dockerd"
fi
if ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null 2>&1; then
    skip "neither 'docker compose' nor docker-compose is installed"
fi
echo "docker example: running make docker-demo"
make docker-demo
