#!/usr/bin/env bash
# Builds local stand-ins for the public images the example uses, for machines
# that cannot reach a container registry: a Debian bookworm root file system
# made with debootstrap (from this machine's apt mirror), with redis-server,
# imported as a base image; a docker-CLI image for the chaos service; and,
# with the argument `postgres` (the PostgreSQL example), the same base with
# Debian's postgresql instead.
# Prints the environment overrides to use them.
set -euo pipefail
cd "$(dirname "$0")"
BASE=redquorum-local/debian:bookworm
CLI=redquorum-local/docker-cli:latest
PG=redquorum-local/postgres:bookworm

mirror() {
    # The Debian mirror this machine's apt already uses (never hard-coded).
    local m=""
    if compgen -G "/etc/apt/sources.list.d/*.sources" >/dev/null; then
        m=$(awk '/^URIs:/ {print $2}' /etc/apt/sources.list.d/*.sources | grep -v -- '-security' | grep -i debian | head -n1 || true)
    fi
    if [ -z "$m" ] && [ -f /etc/apt/sources.list ]; then
        m=$(awk '$1=="deb" && $3 ~ /^bookworm$/ {print $2; exit}' /etc/apt/sources.list || true)
    fi
    [ -n "$m" ] || { echo "no Debian mirror found in the apt configuration" >&2; exit 1; }
    echo "$m"
}

if ! docker image inspect "$BASE" >/dev/null 2>&1; then
    command -v debootstrap >/dev/null || { echo "debootstrap is needed (apt-get install debootstrap)" >&2; exit 1; }
    root=$(mktemp -d -t redquorum-rootfs.XXXXXX)
    trap 'rm -rf "$root"' EXIT
    echo "debootstrap bookworm (minbase + redis-server) from $(mirror) ..." >&2
    debootstrap --variant=minbase --include=redis-server,procps bookworm "$root" "$(mirror)" >/dev/null
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    tar -C "$root" -c . | docker import - "$BASE" >/dev/null
    echo "built $BASE" >&2
fi

if ! docker image inspect "$CLI" >/dev/null 2>&1; then
    ctx=$(mktemp -d -t redquorum-cli.XXXXXX)
    cp "$(command -v docker)" "$ctx/docker"
    printf 'FROM %s\nCOPY docker /usr/local/bin/docker\n' "$BASE" > "$ctx/Dockerfile"
    docker build -q -t "$CLI" "$ctx" >/dev/null
    rm -rf "$ctx"
    echo "built $CLI" >&2
fi

if [ "${1:-}" = postgres ] && ! docker image inspect "$PG" >/dev/null 2>&1; then
    root=$(mktemp -d -t redquorum-pg-rootfs.XXXXXX)
    echo "debootstrap bookworm (minbase + postgresql) from $(mirror) ..." >&2
    debootstrap --variant=minbase --include=postgresql,procps bookworm "$root" "$(mirror)" >/dev/null
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    tar -C "$root" -c . | docker import - "$PG" >/dev/null
    rm -rf "$root"
    echo "built $PG" >&2
fi

if [ "${1:-}" = postgres ]; then
    echo "REDIS_IMAGE=$BASE BASE_IMAGE=$BASE DOCKER_CLI_IMAGE=$CLI PG_IMAGE=$PG"
else
    echo "REDIS_IMAGE=$BASE BASE_IMAGE=$BASE DOCKER_CLI_IMAGE=$CLI"
fi
