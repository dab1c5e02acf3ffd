#!/usr/bin/env bash
# Usage: docker/run-demo.sh [cluster | postgres]
# make docker-demo: runs the five-node example (compose.yaml) end to end and
# prints
#   numbers=N duplicates=D lost_updates=L
# exiting non-zero on any duplicate or lost update. With `cluster` (make
# docker-demo-cluster): the same on five members that are Redis Clusters
# (compose-cluster.yaml), with shard failovers; it also fails when the chaos
# did not run to its end or the workers never set the failed-over member's
# votes aside. With `postgres` (make docker-demo-postgres): five nodes, a
# PostgreSQL and ledger workers whose balance writes are fenced, the chaos
# pausing the lock's holder past its validity; verify counts from the
# database and also fails when no stale write was refused (FENCE=off: when
# no update was lost). Starts dockerd if it is installed but not running; builds
# local base images when no registry is reachable. Everything it starts is
# removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
variant=${1:-nodes}
case "$variant" in
    nodes) file=docker/compose.yaml; default_project=redquorum-demo
        services="redis1 redis2 redis3 redis4 redis5 worker1 worker2 worker3 chaos"
        doing="chaos kills and pauses nodes" ;;
    cluster) file=docker/compose-cluster.yaml; default_project=redquorum-demo-cluster
        services="worker1 worker2 worker3 chaos"
        doing="chaos kills and pauses members and fails shards over" ;;
    postgres) file=docker/compose-postgres.yaml; default_project=redquorum-demo-postgres
        services="redis1 redis2 redis3 redis4 redis5 postgres worker1 worker2 worker3 chaos"
        doing="chaos pauses the lock's holder past its validity (fence ${FENCE:-on})" ;;
    *) echo "usage: docker/run-demo.sh [cluster | postgres]" >&2; exit 2 ;;
esac
docker/ensure-docker.sh
PROJECT=${COMPOSE_PROJECT_NAME:-$default_project}
export COMPOSE_PROJECT_NAME=$PROJECT

if docker compose version >/dev/null 2>&1; then
    compose() { docker compose -p "$PROJECT" -f "$file" "$@"; }
elif command -v docker-compose >/dev/null 2>&1; then
    compose() { docker-compose -p "$PROJECT" -f "$file" "$@"; }
else
    echo "docker compose (or docker-compose) is needed" >&2; exit 1
fi

# A docker engine: use the running one, or start dockerd if installed.
if ! docker info >/dev/null 2>&1; then
    if command -v dockerd >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        echo "starting dockerd ..." >&2
        (dockerd >/tmp/redquorum-dockerd.log 2>&1 &)
        for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
    fi
    docker info >/dev/null 2>&1 || { echo "no docker engine available" >&2; exit 1; }
fi

# Images: the public ones if present or pullable, else local stand-ins.
if [ -z "${REDIS_IMAGE:-}" ]; then
    if docker image inspect redis:7 >/dev/null 2>&1 \
        || timeout 60 docker pull -q redis:7 >/dev/null 2>&1; then
        : # registry works: the compose defaults apply
    else
        echo "no container registry reachable: building local base images" >&2
        eval "export $(docker/build-local-images.sh "$variant" | tail -n1)"
    fi
fi

echo "building the worker (cargo build --release) ..." >&2
rm -rf docker/dist
mkdir -p docker/dist
release="${CARGO_TARGET_DIR:-target}/release"
if [ "$variant" = postgres ]; then
    cargo build --release -p redquorum-demo -p redquorum-cli --features redquorum-demo/postgres \
        --bin ledger --bin redquorum
    cp "$release/ledger" "$release/redquorum" docker/dist/
else
    cargo build --release -p redquorum-demo -p redquorum-cli --bin worker --bin redquorum
    cp "$release/worker" "$release/redquorum" docker/dist/
fi

cleanup() { compose down -v --remove-orphans >/dev/null 2>&1 || true; }
trap cleanup EXIT
cleanup

compose build -q >/dev/null
# shellcheck disable=SC2086 # a list of service names
compose up -d $services
echo "running: 3 workers x ${ITERATIONS:-1000} iterations while $doing ..." >&2
workers=$(compose ps -q worker1 worker2 worker3)
# Bounded wait for the workers to finish.
if ! timeout 600 docker wait $workers >/dev/null; then
    echo "workers did not finish within 600 s" >&2
    compose logs --tail 50 >&2
    exit 1
fi
[ "$variant" = cluster ] && compose logs --no-color clusters | sed 's/^[^|]*| //'
compose logs --no-color chaos | sed 's/^[^|]*| //'
if [ "$variant" != nodes ]; then
    chaos_status=$(docker wait "$(compose ps -q chaos)")
    if [ "$chaos_status" != 0 ]; then
        echo "the chaos service failed (exit $chaos_status): not every fault happened" >&2
        exit 1
    fi
fi
worker_logs=$(compose logs --no-color worker1 worker2 worker3 | sed 's/^[^|]*| //')
grep 'done:' <<<"$worker_logs"
# Why a call failed, if one did (a reported failure is allowed while two
# of five nodes are out; its cause is what to look at).
grep -E ': (lock|serial|release|write): ' <<<"$worker_logs" | head -n 20 || true
status=0
compose run --rm --no-deps verify || status=$?
exit $status
