#!/bin/sh
# Makes the example's five Redis Clusters of three masters each (member N's
# at $NET.N1-3) with `redis-cli --cluster create`, gives each of member 1's
# shards a replica ($NET.14-16), and waits (bounded) until every node says
# its cluster is ok and every replica has synced.
set -eu
net="${NET:?}"
for m in 1 2 3 4 5; do
    redis-cli --cluster create "$net.${m}1:6379" "$net.${m}2:6379" "$net.${m}3:6379" \
        --cluster-yes >/tmp/create-$m.log 2>&1 || { cat /tmp/create-$m.log >&2; exit 1; }
    echo "member $m: a cluster of 3 shards ($net.${m}1-${m}3)"
done
for s in 1 2 3; do
    master="$net.1$s"
    replica="$net.1$((s + 3))"
    redis-cli --cluster add-node "$replica:6379" "$master:6379" --cluster-slave \
        --cluster-master-id "$(redis-cli -h "$master" cluster myid)" \
        >/tmp/replica-$s.log 2>&1 || { cat /tmp/replica-$s.log >&2; exit 1; }
done
echo "member 1: a replica per shard ($net.14-16)"
waited=0
for ip in $(for m in 1 2 3 4 5; do echo "$net.${m}1 $net.${m}2 $net.${m}3"; done) \
    "$net.14" "$net.15" "$net.16"; do
    until redis-cli -h "$ip" cluster info | grep -q '^cluster_state:ok' \
        && redis-cli -h "$ip" info replication \
            | grep -qE '^(role:master|master_link_status:up)'; do
        waited=$((waited + 1))
        [ "$waited" -le 600 ] || { echo "clusters not ready within 60 s ($ip)" >&2; exit 1; }
        sleep 0.1
    done
done
echo "clusters: every node ok"
