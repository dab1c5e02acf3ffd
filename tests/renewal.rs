//! Renewals on real nodes: a renewal that fails for want of answers is
//! tried again while the lock's validity lasts, so a majority of nodes
//! paused around a renewal, or a busy machine, loses no healthy lock; the
//! lost signal still fires at once when the nodes say the key is someone
//! else's.

mod support;

use std::time::Duration;

use support::Cluster;
use tokio::time::Instant;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_paused_around_a_renewal_loses_no_lock() {
    let mut c = Cluster::start(5);
    // The default node timeout (the harness gives members that are
    // clusters a longer one): a node paused 0.6 s fails a renewal.
    let redlock = c.builder().node_timeout(ms(100)).build().unwrap();
    support::connected(&redlock).await;
    // TTL 3 s: renewed every second. Three of five nodes are paused from
    // 0.8 s to 1.4 s after the lock is taken, so the first renewal finds
    // no quorum.
    let taken = Instant::now();
    let work = redlock
        .lock("renew-paused", ms(3_000))
        .run(|lock| async move {
            tokio::time::sleep(ms(4_000)).await;
            lock.validity()
        });
    let pauser = async {
        tokio::time::sleep_until(taken + ms(800)).await;
        for n in &mut c.nodes[..3] {
            n.pause();
        }
        tokio::time::sleep(ms(600)).await;
        for n in &mut c.nodes[..3] {
            n.resume();
        }
    };
    let (held, ()) = tokio::join!(work, pauser);
    let left = held.expect("the lock was lost though it was valid throughout");
    assert!(left > Duration::ZERO);
    let stats = redlock.stats();
    assert_eq!(stats.lost, 0, "{stats:?}");
    assert!(stats.extend_failed > 0, "no renewal failed: {stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_taken_over_is_lost_at_the_next_renewal() {
    let c = Cluster::start(5);
    let redlock = c.builder().build().unwrap();
    support::connected(&redlock).await;
    let lock = redlock
        .lock("renew-taken", ms(3_000))
        .try_once()
        .await
        .unwrap();
    assert!(support::wait_until(ms(2_000), || c.set_on("renew-taken") == 5).await);
    let valid_until = lock.valid_until();
    lock.auto_extend();
    // Someone else's value on every node (an operator, a client that
    // ignores ours): the first renewal, at 1 s, finds it.
    for n in &c.nodes {
        n.set("renew-taken", "someone-else", ms(10_000));
    }
    tokio::time::timeout(ms(10_000), lock.lost())
        .await
        .expect("never told");
    let at = Instant::now();
    assert!(
        at < valid_until,
        "told only when the validity ran out: the renewal's answer was not final"
    );
    assert!(lock.lost_reason().is_some_and(|e| e.is_expired()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_locks_renewed_on_a_busy_machine_are_never_lost() {
    // Twelve holders of 1 s locks, each renewed every 333 ms for 6 s, all
    // at once (bounded: 6 s of work each), with a node timeout of 10 ms: on
    // a busy machine many round trips take longer, as a 100 ms one does on
    // a machine busier still. Such a renewal is tried again, and no lock
    // is lost.
    let c = Cluster::start(5);
    let redlock = c.builder().node_timeout(ms(10)).build().unwrap();
    support::connected(&redlock).await;
    let mut holders = Vec::new();
    for i in 0..12 {
        let r = redlock.clone();
        holders.push(tokio::spawn(async move {
            r.lock(&format!("soak-{i}"), ms(1_000))
                .run(|_| async {
                    tokio::time::sleep(ms(6_000)).await;
                })
                .await
        }));
    }
    for h in holders {
        h.await.unwrap().expect("a healthy lock was lost");
    }
    let stats = redlock.stats();
    assert_eq!(stats.lost, 0, "{stats:?}");
}
