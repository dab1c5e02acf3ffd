//! `Redlock::stats()` on real nodes: each counter and gauge of the
//! snapshot moves in the situation it describes, and a node's failures are
//! counted by kind.

mod support;

use std::time::Duration;

use support::Cluster;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquisitions_waits_and_releases_are_counted() {
    let c = Cluster::start(3);
    let (a, b) = (c.redlock(), c.builder().retry_count(0).build().unwrap());
    assert_eq!(a.stats().acquired, 0);
    let lock = a.lock("r", ms(10_000)).await.unwrap();
    assert!(b
        .lock("r", ms(10_000))
        .try_once()
        .await
        .unwrap_err()
        .is_contended());
    let waiter = {
        let a2 = c.redlock();
        tokio::spawn(async move {
            let lock = a2.lock("r", ms(10_000)).await;
            (lock, a2)
        })
    };
    assert!(support::wait_until(ms(5_000), || c.waiting_on("r") == 3).await);
    lock.extend(ms(10_000)).await.unwrap();
    lock.release().await.unwrap();
    let (lock, a2) = waiter.await.unwrap();
    lock.unwrap().release().await.unwrap();

    let s = a.stats();
    assert_eq!(
        (s.acquired, s.attempts, s.extended, s.released),
        (1, 1, 1, 1),
        "{s:?}"
    );
    assert_eq!(b.stats().contended, 1);
    let w = a2.stats();
    assert_eq!(w.acquired, 1, "{w:?}");
    assert!(
        w.attempts >= 2,
        "a waiter attempts again after its wake-up: {w:?}"
    );
    assert!(
        w.woken_by_notification >= 1,
        "the release was pushed by the nodes: {w:?}"
    );
    assert!(
        w.notifications >= 1 && w.notification_connections == 3,
        "{w:?}"
    );
    assert_eq!(s.held_locks + w.held_locks, 0, "everything was released");

    let late = b.lock("gone", ms(10_000)).wait(ms(0)).await;
    assert!(late.is_ok());
    let held = b.stats();
    assert_eq!(held.held_locks, 1, "{held:?}");
    drop(late);
    assert_eq!(b.stats().held_locks, 0, "dropping releases");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_leaderships_losses_and_allocations_are_counted() {
    let c = Cluster::start(3);
    let a = c.redlock();
    let permit = a
        .semaphore("pool", 3)
        .unwrap()
        .acquire(ms(5_000))
        .await
        .unwrap();
    let election = a.election("sched", ms(2_000)).unwrap();
    let leadership = election.campaign("me").await.unwrap();
    let s = a.stats();
    assert_eq!(
        (s.held_permits, s.held_leaderships, s.held_locks),
        (1, 1, 0),
        "{s:?}"
    );
    // The term came from the counter, an allocation.
    assert_eq!(s.allocations, 1, "{s:?}");
    leadership.resign().await.unwrap();
    permit.release().await.unwrap();
    let s = a.stats();
    assert_eq!((s.held_permits, s.held_leaderships), (0, 0), "{s:?}");

    // A client's first mint of a counter another client minted from loses
    // one compare-and-set round.
    let b = c.redlock();
    support::fenced_once(&b, "f").await;
    support::fenced_once(&a, "f").await;
    let s = a.stats();
    assert_eq!((s.allocations, s.allocation_conflicts), (2, 1), "{s:?}");
    // Its next mint guesses the number it minted last: one round.
    support::fenced_once(&a, "f").await;
    let s = a.stats();
    assert_eq!((s.allocations, s.allocation_conflicts), (3, 1), "{s:?}");

    // A lock whose key is taken from it: its renewal fails, it is lost.
    support::lose_to_another_owner(&c, &a, "stolen").await;
    let s = a.stats();
    assert_eq!((s.lost, s.extend_failed, s.held_locks), (1, 1, 0), "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_node_counts_its_requests_and_failures_by_kind() {
    let mut c = Cluster::start(3);
    let a = c.builder().node_timeout(ms(100)).build().unwrap();
    support::locked_once(&a, "r").await;
    let s = a.stats();
    assert_eq!(s.nodes_up, 3, "{s:?}");
    assert!(s.nodes.iter().all(|n| n.requests >= 1 && n.up), "{s:?}");
    assert!(
        s.nodes.iter().all(|n| !n.addr.is_empty() && !n.quarantined),
        "{s:?}"
    );

    c.nodes[1].kill();
    c.nodes[2].pause();
    assert!(a.lock("r", ms(5_000)).try_once().await.is_err());
    let s = a.stats();
    c.nodes[2].resume(); // (its late reply then shows it up again)
    let (killed, paused) = (&s.nodes[1], &s.nodes[2]);
    assert!(killed.connection_errors >= 1 && !killed.up, "{killed:?}");
    assert_eq!((paused.timeouts, paused.up), (1, false), "{paused:?}");
    assert_eq!(
        s.nodes[0].timeouts + s.nodes[0].connection_errors,
        0,
        "{s:?}"
    );
    assert_eq!((s.nodes_up, s.failed), (1, 1), "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_lacks_nodes_pauses_and_says_so() {
    let mut c = Cluster::start(3);
    c.nodes[1].kill();
    c.nodes[2].kill();
    let a = c
        .builder()
        .retry_delay(ms(20))
        .retry_jitter(ms(0))
        .build()
        .unwrap();
    let e = a.lock("p", ms(10_000)).wait(ms(300)).await.unwrap_err();
    assert!(e.is_timeout() && !e.is_contended(), "{e}");
    let s = a.stats();
    // Failing nodes give no time to wait for: it pauses `retry_delay`
    // before each attempt after its first queued one (the plain attempt is
    // followed by the queued one at once), and counts each pause. A pause
    // that ends past the deadline (a loaded machine wakes it late) is
    // followed by no attempt.
    assert!(s.paused >= 2, "{s:?}");
    assert!(
        s.attempts == s.paused + 2 || s.attempts == s.paused + 1,
        "{s:?}"
    );
    assert_eq!(
        (s.woken_by_notification, s.woken_by_ttl, s.woken_by_cap),
        (0, 0, 0),
        "{s:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_whose_validity_ran_out_is_lost_and_no_longer_held() {
    let c = Cluster::start(3);
    let a = c.redlock();
    // A 300 ms TTL leaves no room for the connections' set-up.
    support::connected(&a).await;
    let lock = a.lock("ran_out", ms(300)).try_once().await.unwrap();
    let handle = lock.handle();
    assert_eq!(a.stats().held_locks, 1);
    assert!(lock.lost_reason().is_none() && handle.is_valid());
    // Nobody renews or releases it.
    lock.lost().await;
    assert!(matches!(
        lock.lost_reason(),
        Some(redquorum::Error::Expired { .. })
    ));
    assert!(!handle.is_valid());
    assert!(support::wait_until(ms(2_000), || a.stats().held_locks == 0).await);
    let s = a.stats();
    assert_eq!((s.held_locks, s.lost), (0, 1), "{s:?}");
    // Released late, it is not counted twice.
    let _ = lock.release().await;
    assert_eq!(a.stats().lost, 1);
    // A released lock has no loss to report.
    let lock = a.lock("ran_out_2", ms(5_000)).try_once().await.unwrap();
    let handle = lock.handle();
    lock.release().await.unwrap();
    assert!(handle.lost_reason().is_none());
}
