//! Quorum members that are Redis Clusters of several shards (feature
//! `cluster`), on real clusters made by `redis-cli --cluster create`: every
//! request goes to the shard serving its key; the primitives work on such
//! members and on members of both kinds mixed; a killed shard fails its
//! member only for the resources in its slots; a live reshard under locks
//! and serial numbers loses no update and repeats no number; and a shard
//! whose master
//! changed (a forced failover that lost a lock) stays out of lock quorums
//! for that shard alone, while a client without the check hands the lock
//! to a second holder; a slot moved out of such a shard (failed over, or
//! restarted without its data) keeps the shard that took it out too; a
//! member down when first asked is reached at the first request once back;
//! a re-check a shard cannot answer (its marker's slot no longer served)
//! makes a new connection, checked again.
#![cfg(feature = "cluster")]

mod support;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use redquorum::{NodeInit, NodeTrust, Redlock, SerialGenerator};
use support::{Cluster, ShardedCluster};

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// `n` clusters of `shards` masters (and `replicas` replicas each),
/// started side by side.
fn clusters(n: usize, shards: usize, replicas: usize) -> Vec<ShardedCluster> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|_| s.spawn(move || ShardedCluster::start_with_replicas(shards, replicas)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// A client of `urls`: its first request to a cluster member reads the slot
/// map, then connects to the shard and checks it, so a loaded machine gets
/// more than the default 100 ms for it.
fn client(urls: &[String]) -> redquorum::RedlockBuilder {
    Redlock::builder().nodes(urls).node_timeout(ms(1_000))
}

/// A client of `urls` whose members were all declared new (every shard).
async fn declared(urls: &[String]) -> Redlock {
    let redlock = client(urls).build().unwrap();
    let done = redlock.init_new_nodes().await;
    assert!(
        done.iter().all(|d| *d == NodeInit::Declared),
        "declaring the members new: {done:?}"
    );
    redlock
}

/// Resource names until `per_shard` of them fall in each shard of `c`.
fn spread(c: &ShardedCluster, shards: usize, per_shard: usize) -> Vec<(String, usize)> {
    let mut count = vec![0; c.nodes.len()];
    let mut out = Vec::new();
    for i in 0.. {
        let name = format!("res-{i}");
        let owner = c.owner_index(&name);
        if count[owner] < per_shard {
            count[owner] += 1;
            out.push((name, owner));
        }
        if out.len() == shards * per_shard {
            break;
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_works_on_members_that_are_clusters_each_key_on_its_shard() {
    let members = clusters(3, 3, 0);
    let urls: Vec<String> = members.iter().map(ShardedCluster::url).collect();
    let a = declared(&urls).await;
    let b = client(&urls).build().unwrap();
    // Locks: each key on the shard that serves it, in every member.
    let resources = spread(&members[0], 3, 3);
    let mut held = Vec::new();
    for (name, _) in &resources {
        held.push(
            a.lock(name, ms(10_000))
                .try_once()
                .await
                .expect("a free resource"),
        );
    }
    for (name, _) in &resources {
        for m in &members {
            assert!(m.get(name).is_some(), "{name} on its shard");
        }
        let err = b.lock(name, ms(10_000)).try_once().await.unwrap_err();
        assert!(err.is_contended(), "{name}: {err}");
    }
    // A waiter takes a lock once it is released.
    let (first, _) = &resources[0];
    let waiter = {
        let (b, name) = (b.clone(), first.clone());
        tokio::spawn(async move { b.lock(&name, ms(10_000)).wait(ms(20_000)).await })
    };
    for lock in held {
        lock.release().await.unwrap();
    }
    let taken = waiter
        .await
        .unwrap()
        .expect("the waiter takes the released lock");
    taken.release().await.unwrap();
    for (name, _) in &resources {
        for m in &members {
            assert_eq!(m.get(name), None, "{name} released");
        }
    }
    // Fencing tokens grow; serial numbers never repeat.
    let t1 = a.lock("fenced", ms(5_000)).fenced().await.unwrap();
    let first_token = t1.fencing_token().unwrap();
    t1.release().await.unwrap();
    let t2 = b.lock("fenced", ms(5_000)).fenced().await.unwrap();
    assert!(t2.fencing_token().unwrap() > first_token);
    t2.release().await.unwrap();
    let serials = SerialGenerator::builder(a.clone())
        .width(6)
        .build()
        .unwrap();
    let mut seen = HashSet::new();
    for _ in 0..20 {
        assert!(seen.insert(serials.next("ORDER").await.unwrap().to_string()));
    }
    // Several resources together: one hash tag, one slot; else refused
    // before anything is sent.
    let both = a
        .lock_all(&["{acct-7}:from", "{acct-7}:to"], ms(5_000))
        .try_once()
        .await
        .unwrap();
    both.release().await.unwrap();
    let err = a
        .lock_all(&["acct-1", "acct-2"], ms(5_000))
        .try_once()
        .await
        .unwrap_err();
    assert!(matches!(err, redquorum::Error::CrossSlot { .. }), "{err}");
    assert!(members
        .iter()
        .all(|m| m.get("acct-1").is_none() && m.get("acct-2").is_none()));
    // A read-write lock: two readers, then a writer.
    let rw = a.rw_lock("doc").unwrap();
    let r1 = rw.read(ms(5_000)).try_once().await.unwrap();
    let r2 = rw.read(ms(5_000)).try_once().await.unwrap();
    assert!(rw.write(ms(5_000)).try_once().await.is_err());
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    rw.write(ms(5_000))
        .try_once()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // A semaphore of 2 and an election.
    let sem = a.semaphore("pool", 2).unwrap();
    let p1 = sem.acquire(ms(5_000)).try_once().await.unwrap();
    let p2 = sem.acquire(ms(5_000)).try_once().await.unwrap();
    assert!(sem
        .acquire(ms(5_000))
        .try_once()
        .await
        .unwrap_err()
        .is_contended());
    p1.release().await.unwrap();
    p2.release().await.unwrap();
    let election = b.election("cron", ms(5_000)).unwrap();
    let leader = election
        .campaign("one")
        .wait(ms(10_000))
        .await
        .expect("elected");
    assert!(leader.term() >= 1);
    leader.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_by_the_shard_that_holds_its_key_on_every_shard() {
    let members = clusters(3, 3, 0);
    let urls: Vec<String> = members.iter().map(ShardedCluster::url).collect();
    let a = declared(&urls).await;
    // The waiter never polls within the test: only the nodes' news can
    // wake it (or the held locks' TTL, a minute away).
    let b = client(&urls).wait_cap(ms(60_000)).build().unwrap();
    for (name, shard) in spread(&members[0], 3, 1) {
        let held = a.lock(&name, ms(60_000)).try_once().await.unwrap();
        let waiter = {
            let (b, name) = (b.clone(), name.clone());
            tokio::spawn(async move { b.lock(&name, ms(10_000)).wait(ms(30_000)).await })
        };
        // Released once the waiter is in line on every member.
        let deadline = tokio::time::Instant::now() + ms(10_000);
        while a.inspect(&name).await.unwrap().waiting < 1 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the waiter never lined up"
            );
            tokio::time::sleep(ms(10)).await;
        }
        let before = b.stats();
        held.release().await.unwrap();
        let taken = waiter.await.unwrap();
        let taken = taken.unwrap_or_else(|e| panic!("shard {shard}: {e}"));
        let after = b.stats();
        assert!(
            after.woken_by_notification > before.woken_by_notification,
            "shard {shard}: woken by {after:?}"
        );
        assert_eq!(after.woken_by_cap, before.woken_by_cap, "shard {shard}");
        taken.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_shard_fails_its_member_only_for_resources_in_its_slots() {
    let mut members = clusters(3, 3, 0);
    let urls: Vec<String> = members.iter().map(ShardedCluster::url).collect();
    let redlock = declared(&urls).await;
    let resources = spread(&members[0], 3, 2);
    let dead = resources[0].1;
    members[0].nodes[dead].kill();
    for (name, shard) in &resources {
        let lock = redlock
            .lock(name, ms(10_000))
            .try_once()
            .await
            .expect("two members of three are enough");
        let on_member0 = members[0].nodes[*shard].is_running() && members[0].get(name).is_some();
        assert_eq!(on_member0, *shard != dead, "{name} in shard {shard}");
        for m in &members[1..] {
            assert!(m.get(name).is_some(), "{name}");
        }
        lock.release().await.unwrap();
    }
    // Where member 0 alone must answer, the error names the shard that
    // failed, not only the member (once the client has its slot map: a
    // first request waits for it, and then nothing says where it went).
    let alone = client(&urls[..1]).build().unwrap();
    let (name, _) = resources.iter().find(|(_, s)| *s == dead).unwrap();
    assert!(alone.lock(name, ms(10_000)).try_once().await.is_err());
    let err = alone.lock(name, ms(10_000)).try_once().await.unwrap_err();
    let shard = format!("(shard 127.0.0.1:{})", members[0].nodes[dead].port);
    assert!(err.to_string().contains(&shard), "{err}");
}

/// A member that was down when the client first asked it is reached by the
/// first request once it is back, however long it was away: that request
/// waits for a new read of the slot map rather than failing with what the
/// last one met. (Its seed is a proxy that closes every connection, then
/// forwards them; the map names the node itself.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_down_at_first_is_reached_by_the_first_request_once_back() {
    let c = Cluster::start_with(1, support::Persistence::OneShardCluster);
    let seed = support::Proxy::start(c.nodes[0].port);
    seed.set_mode(support::ProxyMode::Refuse);
    let url = format!("redis+cluster://127.0.0.1:{}", seed.port);
    // No quarantine: what is asked is whether the member is reached.
    let redlock = client(&[url])
        .retry_count(0)
        .restart_quarantine(Duration::ZERO)
        .build()
        .unwrap();
    assert!(redlock.lock("back", ms(10_000)).try_once().await.is_err());
    // Longer than the reads of the map that failure asked for.
    tokio::time::sleep(ms(500)).await;
    seed.set_mode(support::ProxyMode::Pass);
    let lock = redlock
        .lock("back", ms(10_000))
        .try_once()
        .await
        .expect("the first request after the member is back");
    lock.release().await.unwrap();
}

/// A client's first round on a member reads its slot map (here through a
/// seed 120 ms of round trip away), then connects to the shard and checks
/// it: it waits for that set-up, up to the connect timeout, rather than
/// failing on a 150 ms node timeout meant for one round trip.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_round_on_a_member_waits_for_its_slot_map_and_shard() {
    let c = Cluster::start_with(3, support::Persistence::OneShardCluster);
    let seeds: Vec<support::Proxy> = c
        .nodes
        .iter()
        .map(|n| support::Proxy::start(n.port))
        .collect();
    for seed in &seeds {
        seed.set_mode(support::ProxyMode::Delay(60));
    }
    let urls: Vec<String> = seeds
        .iter()
        .map(|s| format!("redis+cluster://127.0.0.1:{}", s.port))
        .collect();
    // No quarantine: what is asked is whether the first round waits.
    let redlock = Redlock::builder()
        .nodes(&urls)
        .node_timeout(ms(150))
        .retry_count(0)
        .restart_quarantine(Duration::ZERO)
        .build()
        .unwrap();
    let t = Instant::now();
    let first = redlock.lock("set_up", ms(10_000)).try_once().await;
    let took = t.elapsed();
    let first = first.unwrap_or_else(|e| panic!("first round after {took:?}: {e}"));
    assert!(
        took > ms(150),
        "set-up took {took:?}: not through the seeds"
    );
    first.release().await.unwrap();
}

/// Our markers on `node` (a shard): a connection check writes one in a
/// slot the shard serves.
fn markers(node: &support::RedisNode) -> Vec<String> {
    redis::cmd("KEYS")
        .arg("redquorum:node:*")
        .query(&mut node.conn())
        .expect("KEYS")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_opens_and_checks_every_shard_of_every_member_up_front() {
    let members = clusters(3, 3, 0);
    let urls: Vec<String> = members.iter().map(ShardedCluster::url).collect();
    let redlock = client(&urls).build().unwrap();
    let shards = || members.iter().flat_map(|m| m.nodes.iter());
    assert!(
        shards().all(|n| markers(n).is_empty()),
        "nothing checked yet"
    );
    let standing = redlock.connect(Duration::from_secs(20)).await.unwrap();
    assert_eq!(standing.len(), 3);
    assert!(!standing.contains(&NodeTrust::Unknown), "{standing:?}");
    // Every shard was connected and checked, not only the one a keyless
    // request goes to.
    for (m, member) in members.iter().enumerate() {
        for (i, shard) in member.nodes.iter().enumerate() {
            assert_eq!(markers(shard).len(), 1, "member {m}, shard {i}");
        }
    }
    // No limit at all: done as soon as every shard answers.
    let again = redlock.connect(Duration::MAX).await.unwrap();
    assert!(!again.contains(&NodeTrust::Unknown), "{again:?}");
}

/// A re-check the shard cannot answer makes a new connection: with
/// `cluster-require-full-coverage no` and our marker's slot no longer
/// served, the marker's read answers `CLUSTERDOWN` while the shard's other
/// slots still take votes. The old connection would keep voting with the
/// check unread; a new one is checked again, in a slot the shard still
/// serves, which writes our marker there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recheck_the_shard_cannot_answer_makes_a_new_connection_checked_again() {
    let members = clusters(3, 1, 0);
    let urls: Vec<String> = members.iter().map(ShardedCluster::url).collect();
    let redlock = declared(&urls).await;
    let shard = &members[0].nodes[0];
    let before = markers(shard);
    assert_eq!(before.len(), 1, "one marker after the first check");
    let mut conn = shard.conn();
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(&before[0])
        .query(&mut conn)
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("cluster-require-full-coverage")
        .arg("no")
        .query(&mut conn)
        .unwrap();
    let _: () = redis::cmd("CLUSTER")
        .arg("DELSLOTS")
        .arg(slot)
        .query(&mut conn)
        .unwrap();
    // Requests keep coming, so that re-checks fall due behind them.
    let requests = async {
        for i in 0..400 {
            if let Ok(lock) = redlock.lock(&format!("r-{i}"), ms(5_000)).try_once().await {
                let _ = lock.release().await;
            }
            if markers(shard).len() > 1 {
                return true;
            }
            tokio::time::sleep(ms(50)).await;
        }
        false
    };
    assert!(
        requests.await,
        "the shard's evidence was read again, on a new connection, in a slot it serves: \
         markers {:?}",
        markers(shard)
    );
}

/// Shard `shard`'s master dies and its replica takes over without `key`,
/// as an asynchronous replica that missed the write would. Returns the
/// replica's position.
fn fail_over_losing(member: &mut ShardedCluster, shard: usize, key: &str) -> usize {
    let replica = member.replica_of(member.nodes[shard].port);
    member.nodes[shard].kill();
    let _: () = redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .arg("TAKEOVER")
        .query(&mut member.nodes[replica].conn())
        .unwrap();
    member.await_ok(|c| c.owner_index(key) == replica);
    let _: i64 = redis::cmd("DEL")
        .arg(key)
        .query(&mut member.nodes[replica].conn())
        .unwrap();
    replica
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_failover_that_lost_a_lock_keeps_that_shard_alone_out_of_lock_quorums() {
    // Member 0 is a cluster of 3 shards with a replica each; members 1 and
    // 2 are standalone nodes.
    let mut member0 = clusters(1, 3, 1).pop().unwrap();
    let mut nodes = Cluster::start_undeclared(2, support::Persistence::Aof);
    let urls = vec![member0.url(), nodes.nodes[0].url(), nodes.nodes[1].url()];
    let _declared = declared(&urls).await;
    let checked = client(&urls).build().unwrap();
    let unchecked = client(&urls)
        .restart_quarantine(Duration::ZERO)
        .build()
        .unwrap();
    let resources = spread(&member0, 3, 1);
    let (lost, shard) = resources[0].clone();
    let (other, other_shard) = resources[1].clone();
    assert_ne!(shard, other_shard);
    // Both later clients have used the shard before it fails over.
    for c in [&checked, &unchecked] {
        c.lock(&lost, ms(1_000))
            .try_once()
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    // The holder's lock reached member 0 and node 1 only (node 2 never
    // heard of it, as where that request was lost): a client of those two.
    let two = client(&urls[..2]).build().unwrap();
    let held = two.lock(&lost, ms(30_000)).try_once().await.unwrap();
    assert!(member0.nodes[shard].get(&lost).is_some());
    assert_eq!(nodes.nodes[1].get(&lost), None);
    fail_over_losing(&mut member0, shard, &lost);
    // With the check: the promoted shard's yes does not count; the lock
    // stays with its holder, whatever the tries.
    for _ in 0..20 {
        assert!(checked.lock(&lost, ms(10_000)).try_once().await.is_err());
        assert!(nodes.nodes[0].get(&lost).is_some(), "node 1 still holds it");
        tokio::time::sleep(ms(100)).await;
    }
    // By now the checked client reads the new map and has checked the
    // promoted master: quarantined.
    assert!(
        matches!(checked.node_trust().await[0], NodeTrust::Quarantined { .. }),
        "{:?}",
        checked.node_trust().await
    );
    assert!(checked.lock(&lost, ms(10_000)).try_once().await.is_err());
    // Its other shards count as before: with node 1 paused, a resource
    // elsewhere in member 0 still wins (member 0 and node 2).
    nodes.nodes[0].pause();
    let elsewhere = checked
        .lock(&other, ms(5_000))
        .try_once()
        .await
        .expect("member 0's other shards are trusted");
    nodes.nodes[0].resume();
    elsewhere.release().await.unwrap();
    // Without it (the rule removed): a second holder, once the client has
    // read the new slot map.
    let mut second = None;
    for _ in 0..50 {
        if let Ok(lock) = unchecked.lock(&lost, ms(10_000)).try_once().await {
            second = Some(lock);
            break;
        }
        tokio::time::sleep(ms(100)).await;
    }
    assert!(
        second.is_some(),
        "without the check the promoted shard's yes hands the lock to a second holder"
    );
    drop(held);
}

/// One more try at `resource` fails, member 0's yes to it set aside (a
/// quarantined shard's).
async fn assert_set_aside(redlock: &Redlock, resource: &str) {
    let before = redlock.stats().nodes[0].quarantined_votes;
    assert!(redlock.lock(resource, ms(10_000)).try_once().await.is_err());
    let after = redlock.stats().nodes[0].quarantined_votes;
    assert_eq!(after, before + 1, "member 0's yes was not set aside");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_moved_out_of_a_failed_over_shard_takes_its_loss_to_the_shard_that_took_it() {
    // Member 0 is a cluster of 3 shards with a replica each; members 1 and
    // 2 are standalone nodes.
    let mut member0 = clusters(1, 3, 1).pop().unwrap();
    let nodes = Cluster::start_undeclared(2, support::Persistence::Aof);
    let urls = vec![member0.url(), nodes.nodes[0].url(), nodes.nodes[1].url()];
    let _declared = declared(&urls).await;
    let resources = spread(&member0, 3, 1);
    let (lost, shard) = resources[0].clone();
    let (there, to) = resources[1].clone();
    // A client whose connections to both shards are made and checked
    // before anything happens: only what it sees of the move can tell it.
    let live = client(&urls).build().unwrap();
    for r in [&lost, &there] {
        let lock = live.lock(r, ms(1_000)).try_once().await.unwrap();
        lock.release().await.unwrap();
    }
    // The holder's lock reached member 0 and node 1 only.
    let two = client(&urls[..2]).build().unwrap();
    let held = two.lock(&lost, ms(30_000)).try_once().await.unwrap();
    let replica = fail_over_losing(&mut member0, shard, &lost);
    // The lost lock's slot moves to shard `to`: no key goes with it (the
    // failover lost it), so nothing of the lock is left anywhere in
    // member 0.
    let slot = member0.slot(&lost);
    tokio::task::block_in_place(|| member0.move_slot(slot, replica, to));
    assert_eq!(member0.get(&lost), None);
    // The live client: the shard that took the slot over does not count
    // (it saw the slot move); the lock stays with its holder, and member
    // 0's yes was set aside.
    kept_out(&live, &lost, &nodes.nodes[0], ms(10_000)).await;
    assert!(
        matches!(live.node_trust().await[0], NodeTrust::Quarantined { .. }),
        "{:?}",
        live.node_trust().await
    );
    // A client made now, with no map before: the shard's own evidence
    // (its epoch grew with the slot it took) keeps it out too.
    let fresh = client(&urls).build().unwrap();
    kept_out(&fresh, &lost, &nodes.nodes[0], ms(10_000)).await;
    drop(held);
}

/// Twenty tries by `redlock` for `resource`, 50 ms apart, each refused
/// while `holder` (member 1) keeps the first holder's key; then one more
/// shows member 0's yes set aside.
async fn kept_out(redlock: &Redlock, resource: &str, holder: &support::RedisNode, ttl: Duration) {
    for _ in 0..20 {
        assert!(redlock.lock(resource, ttl).try_once().await.is_err());
        assert!(holder.get(resource).is_some(), "node 1 still holds it");
        tokio::time::sleep(ms(50)).await;
    }
    assert_set_aside(redlock, resource).await;
}

/// A shard's configuration epoch (`cluster_my_epoch`).
fn my_epoch(node: &support::RedisNode) -> u64 {
    info_number(node, &["CLUSTER", "INFO"], "cluster_my_epoch")
}

/// A node's uptime, s.
fn uptime(node: &support::RedisNode) -> u64 {
    info_number(node, &["INFO", "server"], "uptime_in_seconds")
}

/// The number `field` in `node`'s reply to `command` (in `INFO` form).
fn info_number(node: &support::RedisNode, command: &[&str], field: &str) -> u64 {
    let mut cmd = redis::cmd(command[0]);
    cmd.arg(&command[1..]);
    let info: String = cmd.query(&mut node.conn()).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {info}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_given_away_by_a_shard_restarted_empty_takes_its_loss_to_the_shard_that_took_it() {
    // Member 0 is a cluster of 3 masters; members 1 and 2 are standalone.
    let mut member0 = clusters(1, 3, 0).pop().unwrap();
    // The slot will go to shard 0, which now takes the cluster's greatest
    // epoch, so that taking it over does not raise it, and no key moves
    // with it: nothing but the slots it serves shows what it took. (Its
    // lowest slot, where its marker lives, stays as it was: a shard given
    // a slot below its own looks unmarked, and is quarantined for that.)
    let to = 0;
    let _: String = redis::cmd("CLUSTER")
        .arg("BUMPEPOCH")
        .query(&mut member0.nodes[to].conn())
        .unwrap();
    let epochs: Vec<u64> = member0.nodes.iter().map(my_epoch).collect();
    let greatest = (0..3).max_by_key(|&i| epochs[i]);
    assert_eq!(greatest, Some(to), "{epochs:?}");
    assert_eq!(member0.slot_owner(0), to, "shard 0 serves the lowest slots");
    let nodes = Cluster::start_undeclared(2, support::Persistence::Aof);
    let urls = vec![member0.url(), nodes.nodes[0].url(), nodes.nodes[1].url()];
    let _declared = declared(&urls).await;
    let (lost, shard) = spread(&member0, 3, 1)
        .into_iter()
        .find(|(_, s)| *s != to)
        .unwrap();
    // The holder's lock reached member 0 and node 1 only.
    let two = client(&urls[..2]).build().unwrap();
    let held = two.lock(&lost, ms(30_000)).try_once().await.unwrap();
    // Its shard comes back in place without its data, then gives the
    // lock's slot away.
    tokio::task::block_in_place(|| {
        member0.nodes[shard].restart_empty_in_place();
        member0.await_ok(|_| true);
        member0.move_slot(member0.slot(&lost), shard, to);
    });
    assert_eq!(member0.get(&lost), None);
    assert_eq!(
        my_epoch(&member0.nodes[to]),
        epochs[to],
        "its epoch did not grow"
    );
    // A client made now, with no map before, connects to that shard for
    // the first time: the slot it serves beyond our marker's record keeps
    // it out; the lock stays with its holder.
    let fresh = client(&urls).build().unwrap();
    kept_out(&fresh, &lost, &nodes.nodes[0], ms(10_000)).await;
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_given_below_the_lowest_of_a_long_running_shard_keeps_that_shard_out() {
    // As above, but the slot goes to the shard serving the highest slots
    // (the cluster's greatest epoch, as redis-cli made it), below its
    // lowest: our marker's key there follows its lowest slot, so a new
    // client finds no marker on it. A node with no marker that has run
    // longer than the quarantine counts at once; a shard must not.
    let mut member0 = clusters(1, 3, 0).pop().unwrap();
    let epochs: Vec<u64> = member0.nodes.iter().map(my_epoch).collect();
    let (from, to) = (member0.slot_owner(0), 2);
    assert_eq!((0..3).max_by_key(|&i| epochs[i]), Some(to), "{epochs:?}");
    assert_ne!(from, to);
    let nodes = Cluster::start_undeclared(2, support::Persistence::Aof);
    let urls = vec![member0.url(), nodes.nodes[0].url(), nodes.nodes[1].url()];
    let _declared = declared(&urls).await;
    let lost = spread(&member0, 3, 1)
        .into_iter()
        .find(|(_, s)| *s == from)
        .unwrap()
        .0;
    // Quarantines (and TTLs) of 10 s; the shard taking the slot has run
    // longer than that, so only its being a shard keeps it out.
    let quarantine = ms(10_000);
    let old = support::wait_until(ms(30_000), || uptime(&member0.nodes[to]) > 11).await;
    assert!(old, "the shard has run past the quarantine");
    let two = client(&urls[..2])
        .restart_quarantine(quarantine)
        .build()
        .unwrap();
    let held = two.lock(&lost, quarantine).try_once().await.unwrap();
    tokio::task::block_in_place(|| {
        member0.nodes[from].restart_empty_in_place();
        member0.await_ok(|_| true);
        member0.move_slot(member0.slot(&lost), from, to);
    });
    assert_eq!(member0.get(&lost), None);
    let fresh = client(&urls)
        .restart_quarantine(quarantine)
        .build()
        .unwrap();
    kept_out(&fresh, &lost, &nodes.nodes[0], quarantine).await;
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_reshard_loses_no_update_under_the_lock_and_repeats_no_number() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let members = clusters(3, 3, 0);
    let urls: Vec<String> = members.iter().map(ShardedCluster::url).collect();
    let redlock = declared(&urls).await;
    // Resources in the slots the reshard moves: member 0's shard 0 gives
    // up its lowest slots (10 % of all) to shard 1.
    let moving: Vec<String> = (0..)
        .map(|i| format!("hot-{i}"))
        .filter(|n| members[0].owner_index(n) == 0 && members[0].slot(n) < 1638)
        .take(3)
        .collect();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let inside = Arc::new(AtomicUsize::new(0));
    let counter = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for t in 0..4 {
        let (redlock, inside, counter, done, stop) = (
            redlock.clone(),
            inside.clone(),
            counter.clone(),
            done.clone(),
            stop.clone(),
        );
        let resource = moving[t % moving.len()].clone();
        let shared = moving[0].clone();
        tasks.push(tokio::spawn(async move {
            // Until the reshard is over, at most 5,000 tries each; the
            // shared resource every other one.
            for i in 0..5_000 {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let name = if i % 2 == 0 { &shared } else { &resource };
                let Ok(lock) = redlock.lock(name, ms(5_000)).wait(ms(2_000)).await else {
                    continue;
                };
                if name == &shared {
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                    let seen = counter.load(Ordering::SeqCst);
                    tokio::time::sleep(ms(2)).await;
                    counter.store(seen + 1, Ordering::SeqCst);
                    done.fetch_add(1, Ordering::SeqCst);
                    inside.fetch_sub(1, Ordering::SeqCst);
                }
                let _ = lock.release().await;
            }
        }));
    }
    let serials = SerialGenerator::builder(redlock.clone())
        .width(6)
        .build()
        .unwrap();
    let stop2 = stop.clone();
    let issuing = tokio::spawn(async move {
        let mut numbers = Vec::new();
        for _ in 0..5_000 {
            if stop2.load(Ordering::SeqCst) {
                break;
            }
            if let Ok(n) = serials.next("RESHARD").await {
                numbers.push(n.to_string());
            }
        }
        numbers
    });
    let member0 = &members[0];
    tokio::task::block_in_place(|| member0.reshard(0, 1, 1638));
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        t.await.unwrap();
    }
    let numbers = issuing.await.unwrap();
    assert_eq!(
        counter.load(Ordering::SeqCst),
        done.load(Ordering::SeqCst),
        "an update under the lock was lost"
    );
    assert!(done.load(Ordering::SeqCst) > 0);
    let distinct: HashSet<&String> = numbers.iter().collect();
    assert_eq!(distinct.len(), numbers.len(), "a number was issued twice");
    assert!(!numbers.is_empty());
    // The moved resources now live on shard 1 of member 0, and requests
    // to member 0 met the move (redirections, as server errors).
    assert_eq!(members[0].owner_index(&moving[0]), 1);
    let stats = redlock.stats();
    assert!(stats.nodes[0].server_errors > 0, "{:?}", stats.nodes[0]);
}
