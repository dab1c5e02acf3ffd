#!/bin/sh
# Pauses the lock's holder past its lock's validity while the ledger
# workers run (compose-postgres.yaml). Each worker notes in the shared
# volume that it holds docker-demo:ledger right after taking it, then
# prepares (300 ms), then reads, checks validity, thinks (300 ms) and
# writes. Eight rounds, bounded: wait for a new note, then SIGSTOP that
# worker (its container's process) for 3 s (its lock's TTL is 2 s: another worker takes
# the lock meanwhile) and SIGCONT it: at once in odd rounds (it is preparing:
# with the fence, its write is refused), 400 ms later in even ones (it is
# thinking, past its validity check: without the fence, its write loses
# the next holder's increment). Then tells the workers the chaos is over.
set -eu
p="${PROJECT:?}"
cid() {
    docker ps -aq --filter "label=com.docker.compose.project=$p" \
        --filter "label=com.docker.compose.service=$1" | head -n1
}
note() { cat /shared/holder 2>/dev/null || echo none; }
sleep 3
for round in 1 2 3 4 5 6 7 8; do
    before=$(note)
    tries=0
    while [ "$(note)" = "$before" ] && [ $tries -lt 500 ]; do
        sleep 0.01
        tries=$((tries + 1))
    done
    holder=$(note | cut -d' ' -f1)
    case $holder in
        1|2|3) ;;
        *) echo "chaos round $round: no holder noted yet"; sleep 1; continue ;;
    esac
    case $round in
        1|3|5|7) when="while it prepares" ;;
        *) sleep 0.4; when="while it thinks" ;;
    esac
    docker kill --signal STOP "$(cid "worker$holder")" >/dev/null
    echo "chaos round $round: SIGSTOP to worker$holder $when, for 3 s"
    sleep 3
    docker kill --signal CONT "$(cid "worker$holder")" >/dev/null
    echo "chaos round $round: worker$holder resumed"
    sleep 1
done
touch /shared/chaos-done
echo "chaos: done"
