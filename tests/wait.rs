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
use support::{wait_until, Cluster, Persistence, Proxy, ProxyMode};
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
            .lock_timeout(resource, ms(10_000), ms(9_000))
            .await
            .expect("the waiter gets the lock");
        (Instant::now(), lock)
    })
}

/// A client 20 ms away from every node (behind delaying proxies, which live
/// as long as the returned list): it hears of a release long after a client
/// next to the nodes does.
fn far_client(c: &Cluster) -> (Vec<Proxy>, Redlock) {
    let far: Vec<Proxy> = c.nodes.iter().map(|n| Proxy::start(n.port)).collect();
    for p in &far {
        p.set_mode(ProxyMode::Delay(20));
    }
    let client = Redlock::builder()
        .nodes(far.iter().map(Proxy::url))
        .wait_cap(ms(10_000))
        .build()
        .expect("client");
    (far, client)
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
            .lock_timeout(resource, ms(10_000), ms(9_000))
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
    let again = a
        .lock_timeout(resource, ms(10_000), ms(9_000))
        .await
        .unwrap();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_woken_by_another_clients_release() {
    let c = Cluster::start(5);
    let holder = c.redlock();
    let waiter = waiter_client(&c, ms(10_000));
    let held = holder.try_lock("wait_release", ms(10_000)).await.unwrap();
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
    let held = holder.try_lock("wait_kill", ms(10_000)).await.unwrap();
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
    let held = holder.try_lock("wait_kill", ms(10_000)).await.unwrap();
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
    let mut c = Cluster::start_with(5, Persistence::None);
    let holder = c.redlock();
    let (w1, w2) = (waiter_client(&c, ms(10_000)), waiter_client(&c, ms(10_000)));
    let held = holder.try_lock("wait_restart", ms(10_000)).await.unwrap();
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
    let held = redlock.try_lock("wait_fifo", ms(10_000)).await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let (r, o) = (redlock.clone(), Arc::clone(&order));
    let take = move |name: &'static str| {
        let (redlock, order) = (r.clone(), Arc::clone(&o));
        async move {
            let lock = redlock
                .lock_timeout("wait_fifo", ms(10_000), ms(9_000))
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
    let held = a.try_lock("wait_fair", ms(10_000)).await.unwrap();
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
    let held = x.try_lock("wait_fair_default", ms(10_000)).await.unwrap();
    let a_waits = {
        let a = a.clone();
        tokio::spawn(async move {
            a.lock_timeout("wait_fair_default", ms(10_000), ms(9_000))
                .await
                .expect("a gets the lock")
        })
    };
    registered(&c, "wait_fair_default").await;
    held.release().await.unwrap();
    let a_holds = a_waits.await.unwrap();
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
        assert_eq!(n.command_calls("set"), 1, "one SET NX per node");
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
        .lock_timeout("wait_no_leftovers", ms(30_000), ms(300))
        .await
        .unwrap_err();
    assert!(err.node_failures().len() == 2, "{err}");
    redlock.settle().await;
    assert_eq!(c.nodes[0].get("wait_no_leftovers"), None, "{}", c.logs());
}
