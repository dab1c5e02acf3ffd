#!/bin/sh
# Breaks cluster members while the workers run, bounded:
# 1. twice, as chaos.sh does with nodes: kill -9 every node of member 3 and,
#    while it is down, pause every node of member 2 (two of five members
#    out: a quorum of three remains); then restart member 3 (its nodes
#    reload their AOF) and unpause member 2;
# 2. a failover of each of member 1's shards in turn: kill -9 its master,
#    wait for the cluster to promote the replica, restart the old master
#    (it comes back as the new master's replica).
# Touches /shared/chaos-done when it ends, however it ends.
set -eu
p="${PROJECT:?}"
trap 'touch /shared/chaos-done' EXIT
cid() {
    docker ps -aq --filter "label=com.docker.compose.project=$p" \
        --filter "label=com.docker.compose.service=$1" | head -n1
}
each() { # each ACTION SERVICE...
    action="$1"; shift
    for svc in "$@"; do docker $action "$(cid "$svc")" >/dev/null; done
}
role() { docker exec "$(cid "$1")" redis-cli role 2>/dev/null | head -n1; }
await_role() { # await_role SERVICE ROLE: bounded to 300 tries (30 s or more)
    tries=0
    until [ "$(role "$1")" = "$2" ]; do
        tries=$((tries + 1))
        [ "$tries" -le 300 ] || { echo "chaos: $1 is not a $2 after 300 tries" >&2; exit 1; }
        sleep 0.1
    done
}
sleep 2
for round in 1 2; do
    echo "chaos round $round: kill -9 member 3 (m3a m3b m3c)"
    each "kill --signal KILL" m3a m3b m3c
    echo "chaos round $round: pause member 2 (m2a m2b m2c)"
    each pause m2a m2b m2c
    sleep 3
    each start m3a m3b m3c
    echo "chaos round $round: member 3 restarted (AOF reloaded)"
    sleep 1
    each unpause m2a m2b m2c
    echo "chaos round $round: member 2 resumed"
    sleep 2
done
for s in a b c; do
    echo "chaos failover: kill -9 m1$s, master of member 1's shard $s"
    each "kill --signal KILL" "m1$s"
    killed=$(date +%s)
    await_role "m1${s}r" master
    echo "chaos failover: replica m1${s}r promoted within $(($(date +%s) - killed + 1)) s"
    each start "m1$s"
    await_role "m1$s" slave
    echo "chaos failover: m1$s is back, as m1${s}r's replica"
    sleep 1
done
echo "chaos: done"
