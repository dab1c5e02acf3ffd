#!/usr/bin/env bash
# CI: runs the docker examples (make docker-demo, make docker-demo-cluster,
# make docker-demo-postgres, and that again with FENCE=off, whose verify
# passes only when an update was lost), installing what they need first
# (docker/ensure-docker.sh), and fails when one fails. Prints
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
for run in "make docker-demo" "make docker-demo-cluster" "make docker-demo-postgres" \
    "env FENCE=off make docker-demo-postgres"; do
    echo "docker example: running $run"
    start=$(date +%s)
    # shellcheck disable=SC2086 # a command and its words
    $run
    echo "docker example: $run passed in $(( $(date +%s) - start )) s"
done
