//! Evidence read while connected, on real nodes: a node that drops our
//! keys while a client stays connected to it (evicted under `maxmemory`, a
//! flush, also within the second after the client's last look, and our
//! marker written again by another client since) lets no second holder in, for the lock, the read-write lock's
//! leases and the semaphore's slots; and the holder whose quorum needed
//! that node is told (its lock is lost).

mod support;

use std::time::Duration;

use redquorum::Redlock;
use support::{Cluster, RedisNode};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A client that tries once, connected and checked before anything else
/// happens.
async fn client(c: &Cluster) -> Redlock {
    let r = c.builder().retry_count(0).build().unwrap();
    support::connected(&r).await;
    r
}

/// The keys of ours on `node` that have a TTL (what a `volatile-*` policy
/// evicts: every key a lock, lease or permit stands on), not the fill's.
fn ours(node: &RedisNode) -> Vec<String> {
    let mut conn = node.conn();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
    keys.into_iter()
        .filter(|k| !k.starts_with("fill:"))
        .filter(|k| redis::cmd("PTTL").arg(k).query::<i64>(&mut conn).unwrap() > 0)
        .collect()
}

/// `CONFIG SET name value` on `conn`.
fn config(conn: &mut redis::Connection, name: &str, value: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query(conn)
        .unwrap();
}

/// Makes `node` evict under `policy` until none of our keys is left on it
/// (bounded: 400 batches of 200 keys of 1 KB, each with a TTL), then lifts
/// the memory limit. Returns the keys evicted.
fn evict_ours(node: &RedisNode, policy: &str) -> u64 {
    let mut conn = node.conn();
    let info = |conn: &mut redis::Connection, section: &str, field: &str| -> u64 {
        let text: String = redis::cmd("INFO").arg(section).query(conn).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap()
    };
    assert!(!ours(node).is_empty(), "nothing of ours to evict");
    let before = info(&mut conn, "stats", "evicted_keys");
    let used = info(&mut conn, "memory", "used_memory");
    config(&mut conn, "maxmemory-policy", policy);
    config(&mut conn, "maxmemory", &(used + 1_000_000).to_string());
    let value = "x".repeat(1000);
    let mut batch = 0;
    while !ours(node).is_empty() {
        assert!(batch < 400, "our keys were never evicted: {:?}", ours(node));
        let mut pipe = redis::pipe();
        for i in 0..200 {
            pipe.cmd("SET")
                .arg(format!("fill:{batch}:{i}"))
                .arg(&value)
                .arg("PX")
                .arg(600_000)
                .ignore();
        }
        // Under noeviction-like refusals (OOM) the fill stops counting;
        // errors are fine, the loop is bounded.
        let _: redis::RedisResult<()> = pipe.query(&mut conn);
        batch += 1;
    }
    config(&mut conn, "maxmemory", "0");
    info(&mut conn, "stats", "evicted_keys") - before
}

/// How the nodes lose the first holder's keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Loss {
    /// Evicted under this `maxmemory-policy`.
    Evicted(&'static str),
    /// Evicted, then `CONFIG RESETSTAT`: the eviction count reads as
    /// before.
    EvictedThenReset,
    /// `FLUSHALL`.
    Flushed,
    /// `FLUSHALL`, then a new client connects and writes our marker again.
    FlushedThenMarked,
    /// `FLUSHALL`, `FLUSHDB` or `SWAPDB 0 1` (by name) within the second
    /// after the second client's last look at its nodes, then a new
    /// client connects and writes our marker again: only a read in the
    /// very round, of which writing of the marker is there, finds it.
    FlushedAtOnceThenMarked(&'static str),
    /// A snapshot taken before the first holder's lock (our marker in it,
    /// the lock's keys not) loaded again with `DEBUG RELOAD NOSAVE`: the
    /// node goes back in time, same process, the very marker back.
    ReloadedOlderSnapshot,
}

impl Loss {
    /// Whether the second client looked at its nodes within the second
    /// before the loss (on a quiet machine: under load more may pass).
    fn at_once(self) -> bool {
        matches!(self, Loss::FlushedAtOnceThenMarked(_))
    }

    /// Whether a new client writes our marker again after the loss.
    fn marked_again(self) -> bool {
        matches!(
            self,
            Loss::FlushedThenMarked | Loss::FlushedAtOnceThenMarked(_)
        )
    }
}

/// A second client gets nothing (`second`) where the first one's lock
/// (`first`) lost its keys on two of three nodes while both were
/// connected, as `loss` says. The first is then told: its lock is lost.
async fn nobody_else_after_a_loss<F, G, T, U>(loss: Loss, first: F, second: G)
where
    F: FnOnce(Redlock) -> T,
    G: FnOnce(Redlock) -> U,
    T: std::future::Future<Output = redquorum::Result<redquorum::Lock>>,
    U: std::future::Future<Output = redquorum::Result<redquorum::Lock>>,
{
    let c = Cluster::start(3);
    let (a, b) = (client(&c).await, client(&c).await);
    if loss == Loss::ReloadedOlderSnapshot {
        for node in &c.nodes[..2] {
            let _: () = redis::cmd("SAVE").query(&mut node.conn()).unwrap();
        }
    }
    let lock = first(a.clone()).await.unwrap();
    // The attempt returned once a quorum said yes; a slower node's write
    // may land later, after a flush: wait until the first two hold theirs.
    let landed = support::wait_until(ms(5_000), || {
        c.nodes[..2].iter().all(|n| !ours(n).is_empty())
    })
    .await;
    assert!(
        landed,
        "the first holder's keys never landed on nodes 0 and 1"
    );
    if !loss.at_once() {
        // Past one second since b checked its nodes: whatever b learnt of
        // them then is stale (a lower bound: more may pass).
        tokio::time::sleep(ms(1_100)).await;
    }
    for node in &c.nodes[..2] {
        match loss {
            Loss::Evicted(p) => assert!(evict_ours(node, p) > 0),
            Loss::EvictedThenReset => {
                assert!(evict_ours(node, "volatile-lru") > 0);
                let _: () = redis::cmd("CONFIG")
                    .arg("RESETSTAT")
                    .query(&mut node.conn())
                    .unwrap();
            }
            Loss::Flushed | Loss::FlushedThenMarked => {
                let _: () = redis::cmd("FLUSHALL").query(&mut node.conn()).unwrap();
            }
            Loss::FlushedAtOnceThenMarked(how) => {
                let mut cmd = redis::cmd(how);
                if how == "SWAPDB" {
                    cmd.arg(0).arg(1);
                }
                let _: () = cmd.query(&mut node.conn()).unwrap();
            }
            Loss::ReloadedOlderSnapshot => {
                let _: () = redis::cmd("DEBUG")
                    .arg("RELOAD")
                    .arg("NOSAVE")
                    .query(&mut node.conn())
                    .unwrap();
            }
        }
    }
    if loss.marked_again() {
        // Its check writes our marker again (not waited for by it).
        let _e = client(&c).await;
        let marked = |n: &RedisNode| {
            redis::cmd("EXISTS")
                .arg(n.marker_key())
                .query::<i64>(&mut n.conn())
                .unwrap()
                == 1
        };
        let again = support::wait_until(ms(5_000), || c.nodes[..2].iter().all(marked)).await;
        assert!(again, "the new client never marked the flushed nodes");
    }
    let left = [ours(&c.nodes[0]), ours(&c.nodes[1])];
    assert!(
        left.iter().all(Vec::is_empty),
        "{loss:?}: keys of ours left: {left:?}"
    );
    let taken = second(b.clone()).await;
    assert!(
        taken.is_err(),
        "{loss:?}: a second holder while the first has {:?} left\n{}",
        lock.validity(),
        c.logs()
    );
    // The first holder's client reads its nodes at least once a second
    // while it holds a lock: it finds the loss and cuts the lock.
    let told = tokio::time::timeout(ms(10_000), lock.lost()).await;
    assert!(told.is_ok(), "{loss:?}: the holder was never told");
    assert_eq!(lock.validity(), Duration::ZERO);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_evicted_or_flushed_while_connected_is_not_given_away() {
    for loss in [
        Loss::Evicted("volatile-lru"),
        Loss::Evicted("allkeys-lru"),
        Loss::EvictedThenReset,
        Loss::Flushed,
        Loss::FlushedThenMarked,
        Loss::FlushedAtOnceThenMarked("FLUSHALL"),
        Loss::FlushedAtOnceThenMarked("FLUSHDB"),
        // A Redis Cluster has one database: no `SWAPDB` there.
        Loss::FlushedAtOnceThenMarked("SWAPDB"),
        Loss::ReloadedOlderSnapshot,
    ]
    .into_iter()
    .filter(|l| {
        support::Members::from_env() == support::Members::Nodes
            || !matches!(l, Loss::FlushedAtOnceThenMarked("SWAPDB"))
    }) {
        let take = |r: Redlock| async move { r.lock("evicted-lock", ms(20_000)).try_once().await };
        nobody_else_after_a_loss(loss, take, take).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_lease_evicted_or_flushed_while_connected_lets_no_writer_in() {
    for loss in [
        Loss::Evicted("volatile-lru"),
        Loss::FlushedAtOnceThenMarked("FLUSHALL"),
    ] {
        nobody_else_after_a_loss(
            loss,
            |r| async move { r.rw_lock("evicted-rw")?.read(ms(20_000)).try_once().await },
            |r| async move { r.rw_lock("evicted-rw")?.write(ms(20_000)).try_once().await },
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_evicted_or_flushed_while_connected_is_not_given_away() {
    for loss in [
        Loss::Evicted("volatile-lru"),
        Loss::FlushedAtOnceThenMarked("FLUSHALL"),
    ] {
        let take = |r: Redlock| async move {
            let permits = r.semaphore("evicted-permits", 1)?;
            Ok(permits.acquire(ms(20_000)).try_once().await?.into_lock())
        };
        nobody_else_after_a_loss(loss, take, take).await;
    }
}

/// `CONFIG RESETSTAT` on each of a holder's three nodes while its client
/// keeps many requests in flight together, on nodes that can evict (so
/// every request that asks for a vote reads the node's command count):
/// replies are taken in by different tasks in any order, and a reading
/// that ran after the reset must not become the measure the next ones are
/// judged against. The reset comes in one transaction with as many `TIME`
/// calls as the node had answered, so the count of those reads as before
/// and only the command count can tell. Each node is found, and the
/// holder is told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_is_found_while_requests_overlap() {
    let c = Cluster::start(3);
    for node in &c.nodes {
        let mut conn = node.conn();
        config(&mut conn, "maxmemory-policy", "volatile-lru");
        config(&mut conn, "maxmemory", "1gb");
    }
    let a = client(&c).await;
    let lock = a.lock("reset-held", ms(20_000)).try_once().await.unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for i in 0..16 {
        let (a, stop) = (a.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            // Bounded: at most this many rounds per worker.
            for _ in 0..100_000 {
                if stop.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                if let Ok(l) = a
                    .lock(&format!("reset-traffic-{i}"), ms(5_000))
                    .try_once()
                    .await
                {
                    let _ = l.release().await;
                }
            }
        }));
    }
    tokio::time::sleep(ms(1_000)).await;
    for node in &c.nodes {
        let mut conn = node.conn();
        let commands: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut conn)
            .unwrap();
        let times: u64 = commands
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_time:calls="))
            .and_then(|l| l.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap();
        let mut reset = redis::pipe();
        reset.atomic().cmd("CONFIG").arg("RESETSTAT").ignore();
        // As many as it had answered, and those the traffic adds meanwhile.
        for _ in 0..times + 2_000 {
            reset.cmd("TIME").ignore();
        }
        let _: () = reset.query(&mut conn).unwrap();
    }
    let told = tokio::time::timeout(ms(10_000), lock.lost()).await;
    let mut standing = Vec::new();
    for _ in 0..100 {
        standing = a.node_trust().await;
        let found =
            |t: &redquorum::NodeTrust| matches!(t, redquorum::NodeTrust::Quarantined { .. });
        if standing.iter().all(found) {
            break;
        }
        tokio::time::sleep(ms(100)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for w in workers {
        w.await.unwrap();
    }
    assert!(told.is_ok(), "the holder was never told of the reset");
    assert_eq!(lock.validity(), Duration::ZERO);
    assert!(
        standing
            .iter()
            .all(|t| matches!(t, redquorum::NodeTrust::Quarantined { .. })),
        "a reset not found: {standing:?}"
    );
}
