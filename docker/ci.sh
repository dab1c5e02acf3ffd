#!/usr/bin/env bash
# CI: runs the five-node docker example (make docker-demo), installing what
# it needs first (docker/ensure-docker.sh), and fails when it fails. Prints
# "docker example: SKIPPED (reason)" and succeeds only where installing is
# impossible: not root, or no apt-get, with the tools missing.
set -euo pipefail
cd "$(dirname "$0")/.."
skip() { echo "docker example: SKIPPED ($1)"; exit 0; }
if ! docker/ensure-docker.sh; then
    [ "$(id -u)" = 0 ] || skip "docker tools missing and not root to install them"
    command -v apt-get >/dev/null 2>&1 || skip "docker tools missing and no apt-get to install them"
    echo "docker example: installing its tools failed" >&2
    exit 1
fi
echo "docker example: running make docker-demo"
start=$(date +%s)
make docker-demo
echo "docker example: passed in $(( $(date +%s) - start )) s"
