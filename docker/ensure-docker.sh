#!/usr/bin/env bash
# Makes sure the docker example's tools are here: the docker engine and
# client, a compose implementation, and debootstrap (for base images built
# offline when no container registry is reachable). Installs Debian's
# packages (docker.io, docker-compose, debootstrap) when missing and running
# as root with apt-get, like scripts/ensure-redis.sh does for redis-server.
# Exits 0 when everything is there, 1 when something is missing and cannot
# be installed here (the message says what to install).
set -euo pipefail
need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
if ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null 2>&1; then
    need+=(docker-compose)
fi
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian's ${need[*]} for the docker example" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    exit 0
fi
cat >&2 <<MSG
The docker example needs: ${need[*]}.
Install them, e.g. on Debian/Ubuntu:
  sudo apt-get install ${need[*]}
or install Docker Engine with its compose plugin from your distribution.
MSG
exit 1
