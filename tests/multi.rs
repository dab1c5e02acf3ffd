//! The lock on several resources at once, against real redis-server
//! processes: every key or none on each node, exclusion of the single locks
//! on the same resources both ways, extension, check and release of every
//! key, fencing tokens per resource, a waiter woken by the release of any
//! of its keys and not by others joining its waiting lists, one listed
//! behind a waiter that gives up let in at once, and requests naming two
//! resources in opposite orders from many tasks of three clients: no
//! deadlock, no overlap, every request served. The resources of one multi-lock share a hash tag (`{m1}-a`), as
//! on members that are Redis Clusters they must.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redquorum::{Error, Redlock};
use support::{wait_until, Cluster};
use tokio::time::Instant;

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_or_none() {
    let c = Cluster::start(3);
    let a = c.redlock();
    let b = c.redlock();
    let held = a
        .lock("{m1}-b", ms(10_000))
        .try_once()
        .await
        .expect("b alone");
    let err = b
        .lock_all(&["{m1}-a", "{m1}-b", "{m1}-c"], ms(10_000))
        .try_once()
        .await
        .expect_err("b is held");
    assert!(err.is_contended(), "{err}");
    assert!(err.to_string().contains("{m1}-a+{m1}-b+{m1}-c"), "{err}");
    b.settle().await;
    for key in ["{m1}-a", "{m1}-c"] {
        assert_eq!(c.set_on(key), 0, "{key} taken without the others");
    }
    held.release().await.expect("release");
    a.settle().await; // released on every node, not only a quorum
                      // The order callers name them in does not matter; repeats count once.
    let all = b
        .lock_all(&["{m1}-c", "{m1}-a", "{m1}-b", "{m1}-a"], ms(10_000))
        .try_once()
        .await
        .expect("all three");
    assert_eq!(all.resources(), ["{m1}-a", "{m1}-b", "{m1}-c"]);
    assert_eq!(all.resource(), "{m1}-a+{m1}-b+{m1}-c");
    b.settle().await; // the slowest node's take lands in the background
    for key in ["{m1}-a", "{m1}-b", "{m1}-c"] {
        assert_eq!(c.set_on(key), 3, "{key} on every node");
    }
    // It excludes the single lock on each of them, and is excluded by it.
    for key in ["{m1}-a", "{m1}-b", "{m1}-c"] {
        let err = a
            .lock(key, ms(1_000))
            .try_once()
            .await
            .expect_err("held together");
        assert!(err.is_contended(), "{err}");
    }
    all.release().await.expect("release all");
    b.settle().await;
    for key in ["{m1}-a", "{m1}-b", "{m1}-c"] {
        assert_eq!(c.set_on(key), 0, "{key} released");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_check_and_drop_act_on_every_key() {
    let c = Cluster::start(3);
    let r = c.redlock();
    let lock = r
        .lock_all(&["{m2}-a", "{m2}-b"], ms(2_000))
        .try_once()
        .await
        .expect("both");
    lock.extend(ms(20_000)).await.expect("extend");
    // The slowest node's take and extension land in the background, after
    // a quorum decided.
    r.settle().await;
    for node in &c.nodes {
        for key in ["{m2}-a", "{m2}-b"] {
            let pttl = node.pttl(key);
            assert!(pttl > 15_000, "{key} extended: {pttl}");
        }
    }
    assert!(lock.is_held().await.expect("check"));
    // Someone else's value on one key of a quorum: no longer ours.
    for node in &c.nodes[..2] {
        node.set("{m2}-b", "other", ms(20_000));
    }
    assert!(!lock.is_held().await.expect("check"));
    let err = lock.extend(ms(20_000)).await.expect_err("not all ours");
    assert!(
        !err.is_contended() || err.to_string().contains("{m2}-a+{m2}-b"),
        "{err}"
    );
    for node in &c.nodes[..2] {
        assert!(node.pttl("{m2}-a") <= 20_000);
    }
    drop(lock);
    r.settle().await;
    assert!(
        wait_until(ms(5_000), || c.set_on("{m2}-a") == 0).await,
        "a dropped multi-lock releases its keys where they are ours"
    );
    assert_eq!(c.holding("{m2}-b", "other"), 2, "another's keys stay");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_by_the_release_of_any_of_its_keys() {
    let c = Cluster::start(3);
    let holder = c.redlock();
    let waiter = c.builder().wait_cap(ms(10_000)).build().expect("client");
    let held = holder
        .lock("{m3}-b", ms(10_000))
        .try_once()
        .await
        .expect("b");
    let task = tokio::spawn(async move {
        let lock = waiter
            .lock_all(&["{m3}-b", "{m3}-a"], ms(10_000))
            .wait(ms(9_000))
            .await
            .expect("both, once b is released");
        (Instant::now(), lock)
    });
    assert!(
        wait_until(ms(5_000), || c.waiting_on("{m3}-a") >= 2
            && c.waiting_on("{m3}-b") >= 2)
        .await,
        "the waiter is listed for both resources"
    );
    let released = Instant::now();
    held.release().await.expect("release");
    let (at, lock) = task.await.expect("waiter");
    let after = at.saturating_duration_since(released);
    assert!(after < ms(2_000), "took both {after:?} after the release");
    lock.release().await.expect("release");
    assert!(
        wait_until(ms(5_000), || c.waiting_on("{m3}-a") == 0
            && c.waiting_on("{m3}-b") == 0)
        .await,
        "the waiter left both lists"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_multi_locks_carry_a_token_per_resource() {
    let c = Cluster::start(3);
    let r = c.redlock();
    let single = r.lock("{m4}-a", ms(5_000)).fenced().await.expect("a");
    let a_token = single.fencing_token().expect("token");
    single.release().await.expect("release");
    let both = r
        .lock_all(&["{m4}-b", "{m4}-a"], ms(5_000))
        .fenced()
        .await
        .expect("both");
    let (ta, tb) = (
        both.fencing_token_for("{m4}-a").expect("a's"),
        both.fencing_token_for("{m4}-b").expect("b's"),
    );
    assert!(ta > a_token, "a's token {ta} after {a_token}");
    assert_eq!(both.fencing_token(), Some(ta), "the first resource's");
    assert_eq!(both.fencing_token_for("{m4}-c"), None);
    both.release().await.expect("release");
    let again = r.lock("{m4}-b", ms(5_000)).fenced().await.expect("b");
    assert!(again.fencing_token().expect("token") > tb);
}

#[tokio::test]
async fn bad_resource_lists_are_refused_before_anything_is_sent() {
    let c = Cluster::start(3);
    let r = c.redlock();
    let before = c.nodes[0].command_calls("evalsha") + c.nodes[0].command_calls("eval");
    let empty: [&str; 0] = [];
    for (list, says) in [
        (&empty[..], "no resources"),
        (&["ok", ""][..], "empty"),
        (&["ok", "redquorum:x"][..], "reserved"),
    ] {
        match r.lock_all(list, ms(1_000)).try_once().await {
            Err(Error::InvalidConfig(m)) => assert!(m.contains(says), "{m}"),
            other => panic!("{list:?}: {other:?}"),
        }
    }
    let many: Vec<String> = (0..=redquorum::MAX_RESOURCES)
        .map(|i| format!("r{i}"))
        .collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let err = r.lock_all(&many, ms(1_000)).await.expect_err("too many");
    assert!(err.to_string().contains("at most"), "{err}");
    let after = c.nodes[0].command_calls("evalsha") + c.nodes[0].command_calls("eval");
    assert_eq!(before, after, "nothing sent");
}

/// Many tasks of three clients take two resources, half naming them in
/// one order and half in the other, each incrementing a counter per
/// resource by a read and a later write while it holds them: no request
/// fails (no deadlock: each waits at most a bounded time), and no update
/// is lost (no overlap).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opposite_orders_neither_deadlock_nor_overlap() {
    let c = Cluster::start(3);
    let clients: Vec<Redlock> = (0..3)
        .map(|_| c.builder().wait_cap(ms(10_000)).build().expect("client"))
        .collect();
    let counters = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let inside = Arc::new(AtomicUsize::new(0));
    const TASKS: usize = 4;
    const ROUNDS: usize = 15;
    let mut tasks = Vec::new();
    for (ci, client) in clients.iter().enumerate() {
        for t in 0..TASKS {
            let (client, counters, inside) =
                (client.clone(), Arc::clone(&counters), Arc::clone(&inside));
            let order: [&str; 2] = if (ci + t) % 2 == 0 {
                ["{m5}-a", "{m5}-b"]
            } else {
                ["{m5}-b", "{m5}-a"]
            };
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let lock = client
                        .lock_all(&order, ms(10_000))
                        .wait(ms(30_000))
                        .await
                        .expect("served");
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                    for counter in counters.iter() {
                        let seen = counter.load(Ordering::SeqCst);
                        tokio::task::yield_now().await;
                        counter.store(seen + 1, Ordering::SeqCst);
                    }
                    inside.fetch_sub(1, Ordering::SeqCst);
                    lock.release().await.expect("release");
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("task");
    }
    let want = 3 * TASKS * ROUNDS;
    for counter in counters.iter() {
        assert_eq!(counter.load(Ordering::SeqCst), want, "lost updates");
    }
}

/// One client waits for `a`+`b` and for `b`+`c` at once (two lines that
/// share `b`): the release of `b` wakes both, so the first waiter takes
/// its pair at once, not at its retry cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn news_of_a_shared_key_reaches_every_line_that_waits_for_it() {
    let c = Cluster::start(3);
    let holder = c.redlock();
    let waiter = c.builder().wait_cap(ms(10_000)).build().expect("client");
    let held = holder
        .lock("{m6}-b", ms(10_000))
        .try_once()
        .await
        .expect("b");
    let first = {
        let waiter = waiter.clone();
        tokio::spawn(async move {
            let lock = waiter
                .lock_all(&["{m6}-a", "{m6}-b"], ms(10_000))
                .wait(ms(9_000))
                .await
                .expect("a+b");
            (Instant::now(), lock)
        })
    };
    assert!(
        wait_until(ms(5_000), || c.waiting_on("{m6}-a") >= 2).await,
        "the first waiter is listed"
    );
    let second = tokio::spawn(async move {
        let lock = waiter
            .lock_all(&["{m6}-c", "{m6}-b"], ms(10_000))
            .wait(ms(9_000))
            .await
            .expect("b+c");
        (Instant::now(), lock)
    });
    assert!(
        wait_until(ms(5_000), || c.waiting_on("{m6}-c") >= 2).await,
        "the second waiter is listed"
    );
    let released = Instant::now();
    held.release().await.expect("release");
    let (at, lock) = first.await.expect("first");
    let after = at.saturating_duration_since(released);
    assert!(after < ms(2_000), "a+b taken {after:?} after b's release");
    let released = Instant::now();
    lock.release().await.expect("release");
    let (at, lock) = second.await.expect("second");
    let after = at.saturating_duration_since(released);
    assert!(after < ms(2_000), "b+c taken {after:?} after the release");
    lock.release().await.expect("release");
}

/// A waiter hears its keys, not its waiting lists: another waiter joining
/// the lists behind it does not wake it. (One kept out by a waiter listed
/// ahead reads who is first in its lists when its notification read finds
/// the keys free: `news_of_a_shared_key_reaches_every_line_that_waits_for_it`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newcomer_joining_the_lists_wakes_nobody_ahead_of_it() {
    let c = Cluster::start(3);
    let holder = c.redlock();
    let held = holder
        .lock("{m7}-a", ms(30_000))
        .try_once()
        .await
        .expect("a");
    // A short cap: an attempt that missed a node under load (its reply
    // late) lists and tracks it there at the next one.
    let first = c.builder().wait_cap(ms(2_000)).build().expect("client");
    let task = {
        let first = first.clone();
        tokio::spawn(async move {
            first
                .lock_all(&["{m7}-a", "{m7}-b"], ms(10_000))
                .wait(ms(25_000))
                .await
                .expect("a+b")
        })
    };
    // Bounds on conditions awaited (a fresh client connects, checks and
    // sets up its notifications first: seconds on a loaded machine).
    assert!(
        wait_until(ms(15_000), || c.waiting_on("{m7}-a") == 3
            && c.nodes.iter().all(|n| n.tracked_keys() >= 2))
        .await,
        "the first waiter is listed on every node, and every node tracks its keys for it"
    );
    // What the newcomer could cause: wake-ups by news, not by the cap.
    let heard = |r: &redquorum::Redlock| {
        let s = r.stats();
        s.woken_by_notification + s.woken_by_ttl + s.woken_by_own_release
    };
    let before = heard(&first);
    let newcomer = c.builder().wait_cap(ms(10_000)).build().expect("client");
    let later = tokio::spawn(async move {
        newcomer
            .lock_all(&["{m7}-b", "{m7}-a"], ms(10_000))
            .wait(ms(25_000))
            .await
            .expect("b+a")
    });
    assert!(
        wait_until(ms(15_000), || c.listed_everywhere("{m7}-a", 2)
            && c.listed_everywhere("{m7}-b", 2))
        .await,
        "the newcomer is listed behind it on every node"
    );
    // A wake-up follows the change within a round trip or two.
    let woken = wait_until(ms(1_000), || heard(&first) > before).await;
    assert!(
        !woken,
        "the first waiter woke when the newcomer joined: {} wake-ups, {before} before",
        heard(&first)
    );
    held.release().await.expect("release");
    task.await.expect("first").release().await.expect("release");
    later
        .await
        .expect("newcomer")
        .release()
        .await
        .expect("release");
}

/// A waiter kept out by one listed ahead of it, whose keys are free, hears
/// that one leave the list without taking them: here it timed out while
/// it waited for another of its resources.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_ahead_that_gives_up_lets_the_next_one_in() {
    behind_one_that_gives_up("m7", Next::AllOf).await;
}

/// The same with a single lock's waiter behind a multi-lock's waiter: it
/// hears that one leave its key's waiting list without taking the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_waiter_behind_a_multi_lock_waiter_that_gives_up_takes_the_lock_at_once() {
    behind_one_that_gives_up("m9", Next::One).await;
}

/// What the waiter behind asks for.
#[derive(Clone, Copy)]
enum Next {
    /// `x` and `z` together.
    AllOf,
    /// `x` alone, with a single lock.
    One,
}

/// `x` and `y` held; a multi-lock waits for both (3 s at most); `next`
/// waits behind it for `x` (10 s cap); `x` is released, `y` is not: once
/// the first gives up, the second takes its lock at once.
async fn behind_one_that_gives_up(tag: &str, next: Next) {
    let c = Cluster::start(3);
    let [x, y, z] = ["x", "y", "z"].map(|k| format!("{{{tag}}}-{k}"));
    let holder = c.redlock();
    let x_held = holder.lock(&x, ms(20_000)).try_once().await.expect("x");
    let y_held = holder.lock(&y, ms(20_000)).try_once().await.expect("y");
    let patient = || c.builder().wait_cap(ms(10_000)).build().expect("client");
    let ahead = {
        let (client, keys) = (patient(), [x.clone(), y.clone()]);
        tokio::spawn(async move {
            let keys = [keys[0].as_str(), keys[1].as_str()];
            let r = client.lock_all(&keys, ms(10_000)).wait(ms(3_000)).await;
            (Instant::now(), r.map(|_| ()))
        })
    };
    assert!(
        wait_until(ms(5_000), || c.waiting_on(&x) == 3).await,
        "the first waiter is listed"
    );
    let behind = {
        let (client, x, z) = (patient(), x.clone(), z.clone());
        tokio::spawn(async move {
            let (ttl, wait) = (ms(10_000), ms(9_000));
            let lock = match next {
                Next::AllOf => client.lock_all(&[&x, &z], ttl).wait(wait).await,
                Next::One => client.lock(&x, ttl).wait(wait).await,
            };
            (
                Instant::now(),
                lock.expect("taken, once the one ahead gave up"),
            )
        })
    };
    assert!(
        wait_until(ms(5_000), || c.listed_everywhere(&x, 2)).await,
        "the second waiter is listed behind it"
    );
    // x free: the second waits only for the one listed ahead.
    x_held.release().await.expect("release x");
    let (gave_up, r) = ahead.await.expect("first");
    assert!(r.is_err(), "y stays held: the first waiter times out");
    let (at, lock) = behind.await.expect("second");
    let after = at.saturating_duration_since(gave_up);
    assert!(
        after < ms(2_000),
        "taken {after:?} after the one ahead gave up"
    );
    lock.release().await.expect("release");
    y_held.release().await.expect("release y");
}

/// On cluster members a script takes keys of one hash slot only: a
/// multi-lock whose resources hash apart fails at once with
/// `Error::CrossSlot` (no waiting, no key left), one whose resources share
/// a hash tag works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_cluster_members_resources_share_a_hash_slot() {
    let c = Cluster::start_with(3, support::Persistence::OneShardCluster);
    let r = c.redlock();
    let started = Instant::now();
    let err = r
        .lock_all(&["m7-a", "m7-b"], ms(5_000))
        .await
        .expect_err("different slots");
    assert!(matches!(err, Error::CrossSlot { .. }), "{err:?}");
    assert!(err.to_string().contains("one hash tag"), "{err}");
    assert!(
        started.elapsed() < ms(1_500),
        "said at once, not after waiting"
    );
    let both = r
        .lock_all(&["{acct}:7", "{acct}:9"], ms(5_000))
        .await
        .expect("one hash tag");
    r.settle().await; // the slowest node's take lands in the background
    assert_eq!(c.set_on("{acct}:9"), 3);
    both.release().await.expect("release");
}
