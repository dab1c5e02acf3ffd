//! Waiting for a held lock, against real redis-server processes: woken by
//! anyone's release (another client, a foreign Redlock client, TTL expiry),
//! across a killed notification connection and a node restart, served in
//! arrival order inside a client and across clients, and a free path that
//! sends nothing extra.
//!
//! The waiters here use a retry cap far above the bounds asserted, so only
//! what the test is about (a notification, the holder's TTL, a local
//! release) can wake them in time. Bounds are generous (a second against a
//! 10 s cap and TTL); the benchmark measures the real latency.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redquorum::{Lock, Redlock};
use support::{wait_until, Cluster, Persistence, Proxy};
use tokio::task::JoinHandle;
use tokio::time::Instant;

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A client whose waiters sleep at most `cap` without news.
fn waiter_client(c: &Cluster, cap: Duration) -> Redlock {
    c.builder().wait_cap(cap).build().expect("client")
}

/// Starts waiting for `resource` (up to 9 s); yields when it got the lock
/// and the lock.
fn wait_for(redlock: &Redlock, resource: &'static str) -> JoinHandle<(Instant, Lock)> {
    let redlock = redlock.clone();
    tokio::spawn(async move {
        let lock = redlock
            .lock(resource, ms(10_000))
            .wait(ms(9_000))
            .await
            .expect("the waiter gets the lock");
        (Instant::now(), lock)
    })
}

/// A client 20 ms away from every node (behind delaying proxies, which live
/// as long as the returned list): it hears of a release long after a client
/// next to the nodes does.
fn far_client(c: &Cluster) -> (Vec<Proxy>, Redlock) {
    let (far, builder) = c.far_builder(20);
    (far, builder.wait_cap(ms(10_000)).build().expect("client"))
}

/// Waits for `resource` with `b`; once it has it, notes "b" in `order`,
/// holds it 50 ms and releases it.
fn note_when_held(
    b: Redlock,
    resource: &'static str,
    order: &Arc<Mutex<Vec<&'static str>>>,
) -> JoinHandle<()> {
    let order = Arc::clone(order);
    tokio::spawn(async move {
        let lock = b
            .lock(resource, ms(10_000))
            .wait(ms(9_000))
            .await
            .expect("b gets the lock");
        order.lock().unwrap().push("b");
        tokio::time::sleep(ms(50)).await;
        lock.release().await.expect("release");
    })
}

/// The lock `task` got, after checking it got it less than `bound` after
/// `since` (the release, or the expiry, that freed it).
async fn got_it_soon(task: JoinHandle<(Instant, Lock)>, since: Instant, bound: Duration) -> Lock {
    let (at, lock) = task.await.expect("waiter");
    let after = at.saturating_duration_since(since);
    assert!(after < bound, "got the lock {after:?} after the release");
    lock
}

/// A releases `held` and asks for `resource` again at once; B (`waiter`,
/// from [`note_when_held`]) waited longer and must get it first.
async fn release_and_ask_again(
    a: &Redlock,
    held: Lock,
    resource: &'static str,
    order: &Arc<Mutex<Vec<&'static str>>>,
    waiter: JoinHandle<()>,
) {
    held.release().await.unwrap();
    let again = a.lock(resource, ms(10_000)).wait(ms(9_000)).await.unwrap();
    order.lock().unwrap().push("a");
    again.release().await.unwrap();
    waiter.await.unwrap();
    assert_eq!(*order.lock().unwrap(), ["b", "a"]);
}

/// Waits until a waiter is registered for `resource` on a quorum of nodes.
async fn registered(c: &Cluster, resource: &str) {
    assert!(
        wait_until(ms(5_000), || c.waiting_on(resource) >= 3).await,
        "no waiter registered for {resource}\n{}",
        c.logs()
    );
}

/// Waits until no node lists a waiter for `resource`.
async fn unlisted(c: &Cluster, resource: &str) {
    assert!(
        wait_until(ms(5_000), || c.waiting_on(resource) == 0).await,
        "a waiter stayed listed for {resource}\n{}",
        c.logs()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_woken_by_another_clients_release() {
    let c = Cluster::start(5);
    let holder = c.redlock();
    let waiter = waiter_client(&c, ms(10_000));
    let held = holder
        .lock("wait_release", ms(10_000))
        .try_once()
        .await
        .unwrap();
    let task = wait_for(&waiter, "wait_release");
    registered(&c, "wait_release").await;
    held.release().await.unwrap();
    let released = Instant::now();
    let lock = got_it_soon(task, released, ms(1_000)).await;
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_woken_by_a_foreign_clients_release() {
    let c = Cluster::start(5);
    // redsync, node-redlock ...: a plain key, then plain compare-and-delete.
    for n in &c.nodes {
        n.set("wait_foreign", "go-client-value", ms(10_000));
    }
    let waiter = waiter_client(&c, ms(10_000));
    let task = wait_for(&waiter, "wait_foreign");
    registered(&c, "wait_foreign").await;
    assert!(!task.is_finished(), "the foreign holder excludes us");
    for n in &c.nodes {
        assert_eq!(n.compare_and_delete("wait_foreign", "go-client-value"), 1);
    }
    let released = Instant::now();
    let lock = got_it_soon(task, released, ms(1_000)).await;
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_ends_when_a_crashed_holders_ttl_runs_out() {
    let c = Cluster::start(5);
    // No notifications (the server's expiry may push one): only the
    // holder's TTL, read with the failed attempt, can wake it in time.
    let waiter = c
        .builder()
        .wait_cap(ms(10_000))
        .notifications(false)
        .build()
        .unwrap();
    // A holder that crashed: its keys just run out (1.5 s).
    let set_from = Instant::now();
    for n in &c.nodes {
        n.set("wait_expiry", "crashed-holder", ms(1_500));
    }
    let set_until = Instant::now();
    let task = wait_for(&waiter, "wait_expiry");
    let (at, lock) = task.await.unwrap();
    assert!(
        at >= set_from + ms(1_500),
        "got the lock {:?} after the keys were set, before they expired",
        at - set_from
    );
    let late = at.saturating_duration_since(set_until + ms(1_500));
    assert!(
        late < ms(1_000),
        "got the lock {late:?} after the TTL ran out"
    );
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_survives_a_killed_notification_connection() {
    let c = Cluster::start(5);
    let holder = c.redlock();
    let cap = ms(3_000);
    let waiter = waiter_client(&c, cap);
    let held = holder
        .lock("wait_kill", ms(10_000))
        .try_once()
        .await
        .unwrap();
    let task = wait_for(&waiter, "wait_kill");
    registered(&c, "wait_kill").await;
    let tracking = || c.nodes.iter().filter(|n| n.tracking_clients() > 0).count();
    assert!(
        wait_until(ms(5_000), || tracking() >= 3).await,
        "notifications never connected"
    );
    let killed: usize = c.nodes.iter().map(|n| n.kill_tracking_clients()).sum();
    assert!(killed >= 3, "killed {killed} notification connections");
    held.release().await.unwrap();
    let released = Instant::now();
    let lock = got_it_soon(task, released, cap + ms(1_000)).await;
    lock.release().await.unwrap();
    // Notifications work again: the waiter reconnects them by itself, and
    // a release wakes it well within the cap.
    let held = holder
        .lock("wait_kill", ms(10_000))
        .try_once()
        .await
        .unwrap();
    let task = wait_for(&waiter, "wait_kill");
    registered(&c, "wait_kill").await;
    assert!(
        wait_until(ms(5_000), || tracking() >= 3).await,
        "notifications did not come back"
    );
    held.release().await.unwrap();
    let released = Instant::now();
    let lock = got_it_soon(task, released, ms(1_000)).await;
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_get_the_lock_across_a_node_restart() {
    let mut c = Cluster::start_with(5, Persistence::Aof);
    let holder = c.redlock();
    let (w1, w2) = (waiter_client(&c, ms(10_000)), waiter_client(&c, ms(10_000)));
    let held = holder
        .lock("wait_restart", ms(10_000))
        .try_once()
        .await
        .unwrap();
    let mut t1 = wait_for(&w1, "wait_restart");
    let mut t2 = wait_for(&w2, "wait_restart");
    assert!(
        wait_until(ms(5_000), || c
            .nodes
            .iter()
            .all(|n| n.waiters("wait_restart") == 2))
        .await,
        "both waiters registered"
    );
    // Node 2 comes back empty: the lock and the waiting list are gone there.
    c.nodes[2].restart(Persistence::None);
    held.release().await.unwrap();
    let released = Instant::now();
    // One waiter gets it at once, the other after it is released: never
    // both at a time.
    let (first, second) = tokio::select! {
        r = &mut t1 => (r.unwrap(), t2),
        r = &mut t2 => (r.unwrap(), t1),
    };
    let after = first.0.saturating_duration_since(released);
    assert!(
        after < ms(1_000),
        "got the lock {after:?} after the release"
    );
    assert!(!second.is_finished(), "both waiters hold the lock");
    first.1.release().await.unwrap();
    let handed = Instant::now();
    let lock = got_it_soon(second, handed, ms(1_000)).await;
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_one_client_go_in_arrival_order() {
    let c = Cluster::start(5);
    let redlock = waiter_client(&c, ms(10_000));
    let held = redlock
        .lock("wait_fifo", ms(10_000))
        .try_once()
        .await
        .unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let (r, o) = (redlock.clone(), Arc::clone(&order));
    let take = move |name: &'static str| {
        let (redlock, order) = (r.clone(), Arc::clone(&o));
        async move {
            let lock = redlock
                .lock("wait_fifo", ms(10_000))
                .wait(ms(9_000))
                .await
                .expect("lock");
            order.lock().unwrap().push(name);
            tokio::task::yield_now().await;
            lock.release().await.expect("release");
        }
    };
    // Polled in this order, they join the line as a, b, c.
    let all = tokio::spawn(async move {
        tokio::join!(take("a"), take("b"), take("c"));
    });
    registered(&c, "wait_fifo").await;
    held.release().await.unwrap();
    all.await.unwrap();
    assert_eq!(*order.lock().unwrap(), ["a", "b", "c"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_releasing_holder_does_not_overtake_a_waiter() {
    let c = Cluster::start(5);
    // B is 20 ms away from every node, A next to them: A hears of its own
    // release long before B does, and would win a plain race. A never had
    // to wait for the lock: only strict FIFO makes its release ask whether
    // others wait.
    let (_far, b) = far_client(&c);
    let a = c.builder().strict_fifo(true).build().unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let held = a.lock("wait_fair", ms(10_000)).try_once().await.unwrap();
    let waiter = note_when_held(b, "wait_fair", &order);
    registered(&c, "wait_fair").await;
    release_and_ask_again(&a, held, "wait_fair", &order, waiter).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_waited_does_not_overtake_the_next_waiter() {
    let c = Cluster::start(5);
    let (_far, b) = far_client(&c);
    // Default mode. A takes the lock after waiting for X: it knows the
    // resource is contended, so its release asks whether others wait.
    let (x, a) = (c.redlock(), c.redlock());
    let held = x
        .lock("wait_fair_default", ms(10_000))
        .try_once()
        .await
        .unwrap();
    let a_waits = {
        let a = a.clone();
        tokio::spawn(async move {
            a.lock("wait_fair_default", ms(10_000))
                .wait(ms(9_000))
                .await
                .expect("a gets the lock")
        })
    };
    registered(&c, "wait_fair_default").await;
    held.release().await.unwrap();
    let a_holds = a_waits.await.unwrap();
    // A left the list as it took the lock, in the background: until that
    // lands, A's old entry would pass for B's registration below.
    unlisted(&c, "wait_fair_default").await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let waiter = note_when_held(b, "wait_fair_default", &order);
    registered(&c, "wait_fair_default").await;
    release_and_ask_again(&a, a_holds, "wait_fair_default", &order, waiter).await;
}

#[tokio::test]
async fn the_free_path_sends_nothing_extra() {
    let c = Cluster::start(5);
    let redlock = c.redlock();
    let lock = redlock.lock("wait_free", ms(5_000)).await.unwrap();
    lock.release().await.unwrap();
    redlock.settle().await;
    for n in &c.nodes {
        let opening = n.opening_sets();
        assert_eq!(n.command_calls("set"), 1 + opening, "one SET NX per node");
        for cmd in ["zadd", "pttl", "client|tracking", "exists"] {
            assert_eq!(n.command_calls(cmd), 0, "{cmd} on an uncontended lock");
        }
        assert_eq!(n.tracking_clients(), 0, "no notification connection");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_wait_leaves_no_key_behind() {
    // Fresh nodes (empty script caches) and a quorum that cannot be won:
    // every attempt fails, and each is undone by a release right behind it.
    // A waiter's attempt that went out as EVALSHA got NOSCRIPT, and its
    // EVAL came after the release: our key stayed for a whole TTL.
    let mut c = Cluster::start(3);
    c.nodes[1].kill();
    c.nodes[2].kill();
    let redlock = c.redlock();
    let err = redlock
        .lock("wait_no_leftovers", ms(30_000))
        .wait(ms(300))
        .await
        .unwrap_err();
    assert!(err.node_failures().len() == 2, "{err}");
    redlock.settle().await;
    assert_eq!(c.nodes[0].get("wait_no_leftovers"), None, "{}", c.logs());
}

/// A head waiter that can never get a valid lock (its round trip is longer
/// than its TTL) gives its place up instead of blocking everyone behind it
/// for its whole patience. (A direct waiter behind a 30 ms-away waiter with
/// a 50 ms TTL used to time out after 3 s while the key was free.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_cannot_use_the_lock_yields_its_place() {
    let c = Cluster::start(3);
    let key = "hopeless_head";
    let holder = c.redlock();
    let held = holder.lock(key, ms(10_000)).try_once().await.unwrap();
    let (_far, builder) = c.far_builder(30);
    let hopeless = builder.build().unwrap();
    let head =
        tokio::spawn(async move { hopeless.lock(key, ms(50)).wait(ms(4000)).await.map(|_| ()) });
    assert!(
        wait_until(ms(3000), || c.waiting_on(key) >= 2).await,
        "far waiter registered"
    );
    // Its default-sized cap: the head leaving the list changes no key, so
    // only the far waiter's release of its useless SET, or the cap, wakes it.
    let near = waiter_client(&c, ms(200));
    let next = tokio::spawn(async move {
        let started = Instant::now();
        near.lock(key, ms(5000))
            .wait(ms(3000))
            .await
            .map(|l| (started.elapsed(), l))
    });
    let both = wait_until(ms(3000), || c.nodes.iter().all(|n| n.waiters(key) >= 2)).await;
    assert!(both, "both waiters registered");
    held.release().await.unwrap();
    let (waited, lock) = next.await.unwrap().expect("the near waiter gets the lock");
    assert!(waited < ms(2500), "{waited:?}");
    lock.release().await.unwrap();
    assert!(
        head.await.unwrap().is_err(),
        "a 50 ms lock 60 ms away is never valid"
    );
}

/// An entry at the head of the waiting list whose lease is gone (evicted,
/// deleted) is swept by the next waiter, not kept while others keep the
/// list alive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_entry_without_a_lease_is_swept() {
    let c = Cluster::start(3);
    let key = "leaseless_head";
    let queue = support::internal_key("waiters", key);
    for node in &c.nodes {
        let _: () = redis::cmd("ZADD")
            .arg(&queue)
            .arg(1)
            .arg("ghost")
            .query(&mut node.conn())
            .unwrap();
    }
    let holder = c.redlock();
    let held = holder.lock(key, ms(10_000)).try_once().await.unwrap();
    let waiter = wait_for(&waiter_client(&c, ms(100)), key);
    let swept_and_queued = || {
        c.nodes.iter().all(|n| {
            let ghost: Option<f64> = redis::cmd("ZSCORE")
                .arg(&queue)
                .arg("ghost")
                .query(&mut n.conn())
                .unwrap();
            ghost.is_none() && n.waiters(key) == 1
        })
    };
    assert!(
        wait_until(ms(3000), swept_and_queued).await,
        "the ghost was never swept"
    );
    held.release().await.unwrap();
    let (_, lock) = tokio::time::timeout(ms(3000), waiter)
        .await
        .unwrap()
        .unwrap();
    lock.release().await.unwrap();
}

/// The waiting list lives as long as its longest lease: a client with a
/// short wait cap does not cut it short for a client with a long one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_lease_never_shortens_the_list() {
    let c = Cluster::start(3);
    let key = "lease_lengths";
    let queue = support::internal_key("waiters", key);
    let held = c.redlock().lock(key, ms(10_000)).try_once().await.unwrap();
    // Lease 3 x 2 s + 2 x 100 ms: the list lives 12.4 s after each attempt.
    let patient = wait_for(&waiter_client(&c, ms(2000)), key);
    assert!(wait_until(ms(3000), || c.nodes.iter().all(|n| n.waiters(key) >= 1)).await);
    // Lease 3 x 20 ms + 2 x 100 ms: 520 ms; it attempts every 10-20 ms.
    let hasty = wait_for(&waiter_client(&c, ms(20)), key);
    assert!(wait_until(ms(3000), || c.nodes.iter().all(|n| n.waiters(key) >= 2)).await);
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&queue)
        .query(&mut c.nodes[0].conn())
        .unwrap();
    assert!(pttl > 5_000, "the list expires in {pttl} ms");
    held.release().await.unwrap();
    for w in [patient, hasty] {
        let (_, lock) = w.await.unwrap();
        lock.release().await.unwrap();
    }
}

/// A release that asks whether others wait counts only live waiters: a dead
/// entry (its lease over) does not make the releasing client queue its next
/// `lock()` (a script) instead of taking a free lock with a plain `SET NX`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_does_not_count_dead_waiters() {
    let c = Cluster::start(3);
    let key = "dead_waiter";
    for node in &c.nodes {
        let mut conn = node.conn();
        for (kind, score) in [("waiters", 1), ("leases", 1)] {
            let _: () = redis::cmd("ZADD")
                .arg(support::internal_key(kind, key))
                .arg(score)
                .arg("ghost")
                .query(&mut conn)
                .unwrap();
        }
    }
    let redlock = c.builder().strict_fifo(true).build().unwrap();
    redlock
        .lock(key, ms(5000))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    redlock.settle().await;
    let evals: Vec<u64> = c.nodes.iter().map(|n| n.script_calls()).collect();
    redlock
        .lock(key, ms(5000))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    redlock.settle().await;
    for (node, before) in c.nodes.iter().zip(evals) {
        // The release only: the lock was a plain SET NX, not a waiter's script.
        assert_eq!(node.script_calls(), before + 1, "{}", c.logs());
    }
}

/// Nodes without RESP3 (HELLO renamed away, as on Redis 5) cannot push
/// notifications: waiting falls back to timed retries and still works,
/// never fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_without_notifications_are_polled() {
    let c = Cluster::start_with(3, Persistence::NoneWithoutHello);
    let holder = c.redlock();
    let waiter = waiter_client(&c, ms(100));
    let held = holder
        .lock("wait_old", ms(10_000))
        .try_once()
        .await
        .unwrap();
    let task = wait_for(&waiter, "wait_old");
    registered(&c, "wait_old").await;
    held.release().await.unwrap();
    let released = Instant::now();
    // Polled every 50-100 ms: found free within a few caps.
    let lock = got_it_soon(task, released, ms(2_000)).await;
    lock.release().await.unwrap();
    for n in &c.nodes {
        assert_eq!(n.tracking_clients(), 0, "no node could track");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_still_tracked_is_not_read_again_and_its_change_still_wakes() {
    let c = Cluster::start(3);
    let holder = c.builder().build().expect("client");
    let held = holder.lock("tracked", ms(10_000)).try_once().await.unwrap();
    let waiter = waiter_client(&c, ms(10_000));
    // Short waits that fail (nothing changes); the key is read on node 0's
    // notification connection after the first only if news of it came.
    const CALLS: u64 = 8;
    let waits = |touch: bool| {
        let (waiter, c) = (waiter.clone(), &c);
        async move {
            let before = c.nodes[0].command_calls("pttl");
            for _ in 0..CALLS {
                if touch {
                    let _: () = redis::cmd("PEXPIRE")
                        .arg("tracked")
                        .arg(10_000)
                        .query(&mut c.nodes[0].conn())
                        .unwrap();
                }
                let e = waiter.lock("tracked", ms(10_000)).wait(ms(30)).await;
                assert!(e.unwrap_err().is_timeout());
            }
            c.nodes[0].command_calls("pttl") - before
        }
    };
    let untouched = waits(false).await;
    let touched = waits(true).await;
    // The attempts read the key's TTL alike in both; only the waits whose
    // key changed read it again to be told of the next change.
    assert!(
        touched >= untouched + CALLS / 2,
        "{touched} PTTL calls with news before each wait, {untouched} without"
    );
    // Still told of the next change without reading it again.
    let listed = || c.nodes[0].waiters("tracked");
    assert!(wait_until(Duration::from_secs(3), || listed() == 0).await);
    let task = wait_for(&waiter, "tracked");
    assert!(wait_until(Duration::from_secs(3), || listed() == 1).await);
    let released = Instant::now();
    held.release().await.unwrap();
    let (got, lock) = task.await.unwrap();
    assert!(got - released < ms(1_000), "{:?}", got - released);
    lock.release().await.unwrap();
}

/// Three of five nodes take no new connection (`maxclients` reached) once
/// the clients' request connections are open: the waiter's notification
/// connections cannot open there, so too few nodes can tell it of a
/// change. It then tries again within a few node timeouts, not at its
/// 10 s retry cap or the holder's expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_cannot_hear_a_quorum_tries_again_soon() {
    let c = Cluster::start(5);
    let holder = c.redlock();
    let waiter = waiter_client(&c, ms(10_000));
    for client in [&holder, &waiter] {
        let lock = client.lock("unheard", ms(1_000)).try_once().await.unwrap();
        lock.release().await.unwrap();
    }
    let mut conns: Vec<redis::Connection> = c.nodes.iter().map(|n| n.conn()).collect();
    for conn in &mut conns[..3] {
        support::refuse_new_connections(conn);
    }
    let held = holder.lock("unheard", ms(10_000)).try_once().await.unwrap();
    let task = wait_for(&waiter, "unheard");
    let key = support::internal_key("waiters", "unheard");
    let listed = |conn: &mut redis::Connection| {
        redis::cmd("ZCARD").arg(&key).query::<u64>(conn).unwrap() > 0
    };
    let mut registered = false;
    for _ in 0..500 {
        registered = conns.iter_mut().all(&listed);
        if registered {
            break;
        }
        tokio::time::sleep(ms(10)).await;
    }
    assert!(registered, "the waiter registers on every node");
    // Past the first timed retries that the failed connections caused.
    tokio::time::sleep(ms(1_000)).await;
    held.release().await.unwrap();
    let released = Instant::now();
    got_it_soon(task, released, ms(2_000))
        .await
        .release()
        .await
        .unwrap();
}

/// A waiter refused because another waits ahead of it, where that one
/// takes the lock and releases it before the refused waiter's notification
/// read lands: the read finds the key as free as it was, so the key has
/// nothing more to tell; the waiting list does (the one ahead left it). H
/// is 20 ms from the nodes, X 30 ms: X's attempt lands while H holds
/// (still listed), X's read after H released and left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_behind_one_that_came_and_went_is_not_left_asleep() {
    let c = Cluster::start(3);
    let key = "came_and_went";
    let holder = c.redlock();
    let (_near, h) = c.far_builder(20);
    let h = h.wait_cap(ms(10_000)).build().unwrap();
    let (_far, x) = c.far_builder(30);
    let x = x.wait_cap(ms(10_000)).build().unwrap();
    let held = holder.lock(key, ms(10_000)).try_once().await.unwrap();
    let first = tokio::spawn(async move {
        let lock = h.lock(key, ms(10_000)).wait(ms(9_000)).await.expect("h");
        lock.release().await.expect("h releases");
    });
    let listed = |n: usize| c.nodes.iter().all(|node| node.waiters(key) >= n);
    assert!(wait_until(ms(5_000), || listed(1)).await, "h listed");
    let second = wait_for(&x, key);
    assert!(wait_until(ms(5_000), || listed(2)).await, "x listed");
    held.release().await.unwrap();
    let released = Instant::now();
    first.await.unwrap();
    let lock = got_it_soon(second, released, ms(2_000)).await;
    lock.release().await.unwrap();
}
