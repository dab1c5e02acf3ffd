#!/bin/sh
# Breaks nodes while the workers run: kill -9 redis3 and, while it is down,
# pause redis2 (two of five nodes out: a quorum of three remains); then
# restart redis3 (it reloads its AOF) and unpause redis2. Two rounds, bounded.
set -eu
p="${PROJECT:?}"
cid() {
    docker ps -aq --filter "label=com.docker.compose.project=$p" \
        --filter "label=com.docker.compose.service=$1" | head -n1
}
sleep 2
for round in 1 2; do
    echo "chaos round $round: kill -9 redis3"
    docker kill --signal KILL "$(cid redis3)" >/dev/null
    echo "chaos round $round: pause redis2"
    docker pause "$(cid redis2)" >/dev/null
    sleep 3
    docker start "$(cid redis3)" >/dev/null
    echo "chaos round $round: redis3 restarted (AOF reloaded)"
    sleep 1
    docker unpause "$(cid redis2)" >/dev/null
    echo "chaos round $round: redis2 resumed"
    sleep 2
done
echo "chaos: done"
