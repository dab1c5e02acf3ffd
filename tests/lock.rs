//! The Redlock client against real redis-server processes, with real faults.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redquorum::{Error, NodeErrorKind, Redlock};
use support::{wait_until, Cluster, Persistence, Proxy, ProxyMode, RedisNode};
use tokio::time::Instant;

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_no_lost_update() {
    no_lost_update(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_no_lost_update_without_notifications() {
    no_lost_update(false).await;
}

/// 3 clients x 6 tasks increment a counter under the lock, waiting for it
/// (with or without the nodes' notifications); any overlap of two holders
/// loses an increment.
async fn no_lost_update(notifications: bool) {
    let c = Cluster::start(5);
    const CLIENTS: usize = 3;
    const TASKS: usize = 6;
    const ROUNDS: usize = 15;
    let counter_node = c.nodes[0].plain_url();
    let mut joins = Vec::new();
    for _ in 0..CLIENTS {
        // A node timeout that a busy machine's pauses do not reach: every
        // release here must succeed (each is awaited and checked).
        let redlock = c
            .builder()
            .node_timeout(ms(1000))
            .retry_delay(ms(1))
            .retry_jitter(ms(5))
            .wait_cap(ms(20))
            .notifications(notifications)
            .build()
            .unwrap();
        for _ in 0..TASKS {
            let redlock = redlock.clone();
            let url = counter_node.clone();
            joins.push(tokio::spawn(async move {
                let client = redis::Client::open(url).unwrap();
                let mut conn = client.get_multiplexed_async_connection().await.unwrap();
                for _ in 0..ROUNDS {
                    let lock = redlock
                        .lock("mutex_counter_lock", ms(2000))
                        .wait(Duration::from_secs(60))
                        .await
                        .expect("lock");
                    // GET, yield to let others run, then SET: any overlap of
                    // two holders loses an increment.
                    let v: Option<u64> = redis::cmd("GET")
                        .arg("mutex_counter")
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    tokio::task::yield_now().await;
                    let _: () = redis::cmd("SET")
                        .arg("mutex_counter")
                        .arg(v.unwrap_or(0) + 1)
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    lock.release().await.expect("release");
                }
            }));
        }
    }
    for j in joins {
        j.await.unwrap();
    }
    let total: u64 = c.nodes[0].get("mutex_counter").unwrap().parse().unwrap();
    assert_eq!(total, (CLIENTS * TASKS * ROUNDS) as u64, "{}", c.logs());
}

#[tokio::test]
async fn quorum_subsets_like_redsync() {
    let c = Cluster::start(5);
    let redlock = c.builder().retry_count(0).build().unwrap();
    let key = "quorum_subsets";
    for mask in 0u32..32 {
        for (i, n) in c.nodes.iter().enumerate() {
            if mask & (1 << i) != 0 {
                n.set(key, "someone-else", ms(60_000));
            } else {
                let _: () = redis::cmd("DEL").arg(key).query(&mut n.conn()).unwrap();
            }
        }
        let free = 5 - mask.count_ones();
        let result = redlock.lock(key, ms(5000)).try_once().await;
        if free >= 3 {
            let lock = result.unwrap_or_else(|e| panic!("mask {mask:05b}: {e:?}"));
            lock.release().await.unwrap();
        } else {
            let err = result.expect_err("must fail without quorum");
            assert!(err.is_contended(), "mask {mask:05b}: {err:?}");
            // The failed attempt leaves no key of ours anywhere.
            let ours_gone = wait_until(Duration::from_secs(2), || {
                c.values(key).iter().enumerate().all(|(i, v)| match v {
                    Some(v) => v == "someone-else" && mask & (1 << i) != 0,
                    None => mask & (1 << i) == 0,
                })
            })
            .await;
            assert!(
                ours_gone,
                "mask {mask:05b}: {:?}\n{}",
                c.values(key),
                c.logs()
            );
        }
    }
}

#[tokio::test]
async fn survives_two_dead_nodes_and_names_three() {
    let mut c = Cluster::start(5);
    let redlock = c.builder().retry_count(0).build().unwrap();
    c.nodes[1].kill();
    c.nodes[3].kill();
    let lock = redlock
        .lock("dead_nodes", ms(2000))
        .try_once()
        .await
        .expect("2 of 5 down is fine");
    lock.release().await.unwrap();
    c.nodes[4].kill();
    let err = redlock
        .lock("dead_nodes", ms(2000))
        .try_once()
        .await
        .unwrap_err();
    match &err {
        Error::NoQuorum {
            needed, failures, ..
        } => {
            assert_eq!(*needed, 3);
            // In node order, as documented.
            let idx: Vec<usize> = failures.iter().map(|f| f.index).collect();
            assert_eq!(idx, vec![1, 3, 4], "{err:?}");
            for f in failures {
                assert!(c.nodes[f.index].named_by(&f.addr), "{f:?}");
                assert!(matches!(f.kind, NodeErrorKind::Redis(_)), "{f:?}");
                assert!(std::error::Error::source(f).is_some());
                // The cause, not a bare "redis error": nodes 1 and 3 were
                // down before their first request (node 4's connection broke
                // under it, so its cause may be a reset).
                let text = f.to_string();
                assert!(!text.ends_with("redis error"), "{text}");
                if f.index != 4 {
                    assert!(text.contains("connection refused"), "{text}");
                }
            }
            let text = err.to_string();
            assert!(text.contains("3 of 5 nodes failed"), "{text}");
            assert!(text.ends_with("; 3 needed"), "{text}");
        }
        other => panic!("expected NoQuorum, got {other:?}"),
    }
    assert!(err.is_retryable());
}

#[tokio::test]
async fn paused_nodes_add_no_latency() {
    let mut c = Cluster::start(5);
    // A generous per-node timeout: waiting for a hung node would show up as
    // a whole second per operation.
    let node_timeout = Duration::from_secs(1);
    let redlock = c
        .builder()
        .node_timeout(node_timeout)
        .retry_count(0)
        .build()
        .unwrap();
    // Warm up connections so the measurement is of the steady state.
    redlock
        .lock("paused", ms(2000))
        .try_once()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    for paused in [1usize, 2] {
        c.nodes[paused].pause();
        for _ in 0..5 {
            let t = Instant::now();
            let lock = redlock
                .lock("paused", ms(5000))
                .try_once()
                .await
                .unwrap_or_else(|e| {
                    panic!("{paused} paused: {e:?}\n{}", c.logs());
                });
            lock.release().await.expect("release with paused nodes");
            let took = t.elapsed();
            assert!(
                took < node_timeout,
                "{paused} paused: lock+release took {took:?}"
            );
        }
    }
    c.resume_all();
}

/// A node whose script cache was emptied (`SCRIPT FLUSH`, or a restart
/// without persistence of it) would answer NOSCRIPT to `EVALSHA`, and a
/// fallback `EVAL` would land out of order; a script goes out in full the
/// first time on a connection, also in batches, so extensions land on
/// every node, in order, and no node answers NOSCRIPT. (A cache emptied
/// after a script went out: tests/scripts.rs.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_go_out_in_full_after_script_flush() {
    let c = Cluster::start(5);
    // Node 0 lags, so concurrent extensions reach it in batches.
    let (_slow, urls) = slow_first_node(&c, 30);
    let redlock = single_try_client(&urls, ms(1000));
    let keys: Vec<String> = (0..12).map(|i| format!("flushed_{i}")).collect();
    let mut locks = Vec::new();
    for key in &keys {
        locks.push(redlock.lock(key, ms(30_000)).try_once().await.unwrap());
    }
    for node in &c.nodes {
        let () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query(&mut node.conn())
            .unwrap();
    }
    let joins: Vec<_> = locks
        .into_iter()
        .map(|lock| tokio::spawn(async move { lock.extend(ms(60_000)).await.map(|()| lock) }))
        .collect();
    let mut locks = Vec::new();
    for j in joins {
        locks.push(j.await.unwrap().expect("extend after SCRIPT FLUSH"));
    }
    // The slow node's extensions finish in the background.
    redlock.settle().await;
    for key in &keys {
        let pttl: Vec<i64> = c.nodes.iter().map(|n| n.pttl(key)).collect();
        assert!(pttl.iter().all(|&t| t > 40_000), "{key}: pttl {pttl:?}");
    }
    for node in &c.nodes {
        let errors = node.error_stats();
        assert!(!errors.contains("NOSCRIPT"), "{errors}");
    }
    for lock in locks {
        lock.release().await.unwrap();
    }
}

#[tokio::test]
async fn expiry_and_extend_rules() {
    let c = Cluster::start(5);
    let a = c.builder().retry_count(0).build().unwrap();
    let b = c.builder().build().unwrap();
    // Connected first: the validity below is the TTL less one round, not
    // less the connections' set-up too.
    support::connected(&a).await;
    support::connected(&b).await;
    let key = "expiry_rules";
    let first = a.lock(key, ms(300)).try_once().await.unwrap();
    assert!(first.validity() > ms(200) && first.validity() <= ms(300));
    assert!(b
        .lock(key, ms(300))
        .try_once()
        .await
        .unwrap_err()
        .is_contended());
    // After the TTL, somebody else gets it.
    let second = b
        .lock(key, ms(5000))
        .wait(Duration::from_secs(3))
        .await
        .expect("lock after expiry");
    assert!(!first.is_valid());
    assert!(first.ensure_valid(Duration::ZERO).unwrap_err().is_expired());
    // Extending an expired lock fails and deletes nothing.
    let err = first.extend(ms(5000)).await.unwrap_err();
    assert!(err.is_expired(), "{err:?}");
    assert!(!first.is_held().await.unwrap());
    assert!(second.is_held().await.unwrap());
    // Releasing the stale lock does not touch the new holder's key either.
    assert!(first.release().await.unwrap_err().is_expired());
    assert!(second.is_held().await.unwrap());
    // Extending within validity pushes the TTL on a quorum.
    second.extend(ms(20_000)).await.unwrap();
    assert!(second.validity() > ms(19_000));
    // A lock that is still ours but for less than asked is not "expired".
    let short = second.ensure_valid(ms(60_000)).unwrap_err();
    assert!(
        matches!(short, Error::ValidityTooShort { left, needed, .. } if left > ms(19_000) && needed == ms(60_000)),
        "{short:?}"
    );
    assert!(!short.is_expired());
    assert!(second.ensure_valid(ms(1_000)).is_ok());
    let extended = c.nodes.iter().filter(|n| n.pttl(key) > 15_000).count();
    assert!(
        extended >= 3,
        "pttl: {:?}",
        c.nodes.iter().map(|n| n.pttl(key)).collect::<Vec<_>>()
    );
    second.release().await.unwrap();
    assert!(wait_until(Duration::from_secs(2), || c.values(key) == vec![None; 5]).await);
}

#[tokio::test]
async fn failed_extend_keeps_the_lock() {
    let mut c = Cluster::start(5);
    let redlock = c.builder().node_timeout(ms(100)).build().unwrap();
    // Connected and checked first: the test is about the extension, and a
    // first request under 100 ms on a busy machine is not.
    support::connected(&redlock).await;
    let key = "failed_extend";
    let lock = redlock.lock(key, ms(5000)).try_once().await.unwrap();
    // The call returned at quorum; let the last SETs land before pausing.
    let on_all = wait_until(Duration::from_secs(2), || {
        c.values(key).iter().all(Option::is_some)
    })
    .await;
    assert!(on_all, "{:?}", c.values(key));
    for i in 0..3 {
        c.nodes[i].pause();
    }
    let err = lock.extend(ms(5000)).await.unwrap_err();
    assert!(matches!(err, Error::NoQuorum { .. }), "{err:?}");
    assert!(err.is_timeout());
    c.resume_all();
    // The key is still there on every node: a failed extend deletes nothing.
    let value = c.nodes[4].get(key).expect("key present");
    assert_eq!(c.holding(key, &value), 5);
    assert!(lock.is_valid());
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_extend_outlives_ttl() {
    let c = Cluster::start(5);
    // A TTL and node timeout a busy machine's pauses fit in: each
    // extension has time to reach a quorum before the validity runs out.
    let redlock = c.builder().node_timeout(ms(300)).build().unwrap();
    let ttl = ms(1000);
    let kept = redlock
        .lock("auto_extend", ttl)
        .run(|lock| async move {
            let mut min_validity = Duration::MAX;
            // Work for ~2.5 TTLs, checking the lock stays valid throughout.
            for _ in 0..50 {
                tokio::time::sleep(ms(50)).await;
                min_validity = min_validity.min(lock.validity());
            }
            min_validity
        })
        .await
        .expect("with_lock");
    assert!(kept > Duration::ZERO, "validity hit zero");
    let released = wait_until(Duration::from_secs(2), || {
        c.values("auto_extend") == vec![None; 5]
    });
    assert!(released.await, "released after work");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_signal_fires_when_validity_runs_out_unrenewed() {
    let mut c = Cluster::start(5);
    let redlock = c.builder().node_timeout(ms(50)).build().unwrap();
    support::connected(&redlock).await;
    let lock = redlock
        .lock("lost_signal", ms(1000))
        .try_once()
        .await
        .unwrap();
    lock.auto_extend();
    let lost = lock.lost();
    for i in 0..3 {
        c.nodes[i].pause();
    }
    let valid_until = lock.valid_until();
    tokio::time::timeout(Duration::from_secs(5), lost)
        .await
        .expect("lost fired");
    // Renewals failing for want of answers are tried again while validity
    // is left: lost no sooner than the last one that could still land (a
    // round of the node timeout before the end).
    assert!(
        tokio::time::Instant::now() + ms(100) >= valid_until,
        "lost while {:?} of validity was left",
        valid_until - tokio::time::Instant::now()
    );
    assert!(!lock.is_valid());
    c.resume_all();
    drop(lock);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_cancels_work_when_lost() {
    let mut c = Cluster::start(5);
    let redlock = c.builder().node_timeout(ms(50)).build().unwrap();
    support::connected(&redlock).await;
    let reached_end = Arc::new(AtomicUsize::new(0));
    let flag = reached_end.clone();
    let paused = Arc::new(tokio::sync::Notify::new());
    let p2 = paused.clone();
    let work = redlock
        .lock("with_lock_lost", ms(600))
        .run(|_lock| async move {
            p2.notified().await;
            tokio::time::sleep(Duration::from_secs(10)).await;
            flag.store(1, Ordering::SeqCst);
        });
    let pauser = async {
        // Give with_lock time to acquire, then take the majority away.
        while c.nodes[0].get("with_lock_lost").is_none() {
            tokio::time::sleep(ms(5)).await;
        }
        for i in 0..3 {
            c.nodes[i].pause();
        }
        paused.notify_one();
    };
    let (result, ()) = tokio::join!(work, pauser);
    assert!(result.unwrap_err().is_expired());
    assert_eq!(reached_end.load(Ordering::SeqCst), 0);
    c.resume_all();
}

#[tokio::test]
async fn drop_releases_in_background() {
    let c = Cluster::start(5);
    // A first contact on a loaded machine can outlast the default 100 ms
    // per node; what is tested is the release.
    let redlock = c
        .builder()
        .node_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let lock = redlock
        .lock("drop_release", ms(60_000))
        .try_once()
        .await
        .unwrap();
    let on_all = || c.set_on("drop_release") == 5;
    assert!(wait_until(Duration::from_secs(2), on_all).await);
    drop(lock);
    let gone = wait_until(Duration::from_secs(2), || {
        c.values("drop_release").iter().all(Option::is_none)
    })
    .await;
    assert!(gone, "{:?}", c.values("drop_release"));
}

#[tokio::test]
async fn cancelled_acquire_leaves_no_key() {
    let mut c = Cluster::start(5);
    let redlock = c
        .builder()
        .node_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    // With three nodes hung the attempt cannot decide; drop it midway.
    for i in 0..3 {
        c.nodes[i].pause();
    }
    let attempt = redlock.lock("cancelled_acquire", ms(60_000)).try_once();
    assert!(tokio::time::timeout(ms(200), attempt).await.is_err());
    c.resume_all();
    let gone = wait_until(Duration::from_secs(3), || {
        c.values("cancelled_acquire").iter().all(Option::is_none)
    })
    .await;
    assert!(gone, "{:?}", c.values("cancelled_acquire"));
}

#[tokio::test]
async fn reconnects_after_restart() {
    let mut c = Cluster::start_with(5, Persistence::Aof);
    // This checks that restarted nodes take part, not how fast: a new
    // connection's check costs a round trip, which a loaded machine can
    // stretch past the default 100 ms a straggler is waited for.
    let redlock = c
        .builder()
        .retry_count(0)
        .node_timeout(ms(1000))
        .build()
        .unwrap();
    redlock
        .lock("restart", ms(5000))
        .try_once()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    c.nodes[0].restart(Persistence::Aof);
    c.nodes[1].restart(Persistence::Aof);
    // The restarted nodes take part again. A connection the client was
    // opening while a node went down may fail the request it carried (the
    // node's check or the first write finds the old process gone), so the
    // first lock after the restarts may miss one of them; the next finds
    // it on a new connection. Each lock's last replies land after the
    // quorum answered: awaited.
    let mut back = false;
    for _ in 0..5 {
        let lock = redlock.lock("restart", ms(5000)).try_once().await.unwrap();
        back = wait_until(Duration::from_secs(2), || {
            let held = c.values("restart");
            held[0].is_some() && held[1].is_some()
        })
        .await;
        lock.release().await.unwrap();
        if back {
            break;
        }
    }
    assert!(back, "{:?}\n{}", c.values("restart"), c.logs());
}

/// Node URLs with node 0 behind a proxy that delays each chunk by
/// `delay_ms`; keep the proxy alive while the URLs are used.
fn slow_first_node(c: &Cluster, delay_ms: u64) -> (Proxy, Vec<String>) {
    let slow = Proxy::start(c.nodes[0].port);
    slow.set_mode(ProxyMode::Delay(delay_ms));
    let urls = std::iter::once(slow.url())
        .chain(c.nodes[1..].iter().map(|n| n.url()))
        .collect();
    (slow, urls)
}

/// A client of `urls` that makes one attempt per lock, with `node_timeout`.
fn single_try_client(urls: &[String], node_timeout: Duration) -> Redlock {
    Redlock::builder()
        .nodes(urls)
        .node_timeout(node_timeout)
        .retry_count(0)
        .build()
        .unwrap()
}

/// Requests that wait for a node's connection to open go out in the order
/// they were made. (They used to race each other once it opened: a release
/// could land before the `SET` it undoes, leaving our key for a whole TTL.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_waiting_for_a_connection_keep_their_order() {
    let c = Cluster::start(5);
    // Node 0's connection takes a few round trips of 20 ms to open.
    let (_slow, urls) = slow_first_node(&c, 20);
    for i in 0..20u64 {
        // A fresh client: its first requests to node 0 wait for the
        // connection, while the other nodes decide.
        let redlock = single_try_client(&urls, ms(1000));
        let key = format!("queued_{i}");
        let lock = redlock.lock(&key, ms(10_000)).try_once().await.unwrap();
        lock.release().await.unwrap();
        redlock.settle().await;
        assert_eq!(
            c.nodes[0].command_calls("set"),
            (i + 1) * (1 + c.nodes[0].opening_sets()),
            "the SET reached node 0"
        );
        assert_eq!(
            c.nodes[0].get(&key),
            None,
            "round {i}: released key left on node 0"
        );
    }
}

/// A node that lags behind gets our requests in batches (many rounds queue
/// for it while a few are outstanding). Batches keep the order, and releases
/// are delivered even after the rounds stopped waiting for them (its round
/// trip, 120 ms, is longer than the node timeout): nothing of ours is left on
/// the slow node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_requests_keep_order_and_deliver_releases() {
    let c = Cluster::start(5);
    let (_slow, urls) = slow_first_node(&c, 60);
    let redlock = single_try_client(&urls, ms(100));
    // The connection's opening runs requests of its own, then the
    // release: count from after those.
    if let Ok(lock) = redlock.lock("warm", ms(30_000)).try_once().await {
        lock.release().await.unwrap();
    }
    let warm = c.nodes[0].opening_calls() + 1;
    assert!(wait_until(ms(5000), || c.nodes[0].release_calls() >= warm).await);
    let base = c.nodes[0].release_calls();
    let (tasks, ops) = (16, 5);
    let mut joins = Vec::new();
    for t in 0..tasks {
        let redlock = redlock.clone();
        joins.push(tokio::spawn(async move {
            for i in 0..ops {
                let lock = redlock
                    .lock(&format!("batch_{t}_{i}"), ms(30_000))
                    .try_once()
                    .await
                    .unwrap();
                lock.release().await.unwrap();
            }
        }));
    }
    for j in joins {
        j.await.unwrap();
    }
    // Every release reaches node 0, after its SET if that was sent at all.
    let all_released = wait_until(Duration::from_secs(5), || {
        c.nodes[0].release_calls() == base + tasks * ops
    })
    .await;
    assert!(
        all_released,
        "releases on node 0: {}",
        c.nodes[0].release_calls() - base
    );
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("batch_*")
        .query(&mut c.nodes[0].conn())
        .unwrap();
    assert!(keys.is_empty(), "left on the slow node: {keys:?}");
}

/// A client's first round opens every node's connection, which takes
/// several round trips (the handshake, the check for lost writes, then the
/// request): it waits for that set-up, up to the connect timeout, rather
/// than failing on a per-node timeout meant for one round trip. Later rounds
/// keep the per-node timeout.
#[tokio::test]
async fn the_first_round_waits_for_connection_set_up() {
    let c = Cluster::start(3);
    let slow: Vec<Proxy> = c.nodes.iter().map(|n| Proxy::start(n.port)).collect();
    // A round trip of 100 ms on every node, under the 200 ms node timeout;
    // a connection's set-up takes at least three.
    for p in &slow {
        p.set_mode(ProxyMode::Delay(50));
    }
    let urls: Vec<String> = slow.iter().map(Proxy::url).collect();
    let redlock = single_try_client(&urls, ms(200));
    let t = Instant::now();
    let first = redlock.lock("set_up", ms(10_000)).try_once().await;
    let took = t.elapsed();
    let first = first.unwrap_or_else(|e| panic!("first round after {took:?}: {e}"));
    assert!(
        took > ms(300),
        "set-up took {took:?}: not several round trips"
    );
    first.release().await.unwrap();
    // Connected: a node that stops answering times out after 200 ms again.
    slow[0].set_mode(ProxyMode::Blackhole);
    slow[1].set_mode(ProxyMode::Blackhole);
    let err = redlock
        .lock("set_up", ms(10_000))
        .try_once()
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    for f in err.node_failures().iter().filter(|f| f.index < 2) {
        assert!(
            matches!(f.kind, NodeErrorKind::Timeout(d) if d == ms(200)),
            "{err}"
        );
    }
}

#[tokio::test]
async fn node_down_at_build_is_fine() {
    let mut c = Cluster::start(5);
    c.nodes[2].kill();
    let redlock = c.redlock();
    let lock = redlock
        .lock("down_at_build", ms(2000))
        .try_once()
        .await
        .unwrap();
    lock.release().await.unwrap();
    c.nodes[2] = RedisNode::start_member(Persistence::None); // new port: just not listed
}

#[tokio::test]
async fn blackholed_and_slow_links() {
    let c = Cluster::start(5);
    let proxies: Vec<Proxy> = c.nodes.iter().map(|n| Proxy::start(n.port)).collect();
    let node_timeout = ms(300);
    let redlock = Redlock::builder()
        .nodes(proxies.iter().map(Proxy::url))
        .node_timeout(node_timeout)
        .retry_count(0)
        .build()
        .unwrap();
    redlock
        .lock("links", ms(5000))
        .try_once()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    proxies[0].set_mode(ProxyMode::Blackhole);
    proxies[1].set_mode(ProxyMode::Delay(1000));
    for _ in 0..3 {
        let t = Instant::now();
        let lock = redlock.lock("links", ms(5000)).try_once().await.unwrap();
        lock.release().await.unwrap();
        assert!(t.elapsed() < node_timeout, "took {:?}", t.elapsed());
    }
    proxies[2].set_mode(ProxyMode::Blackhole);
    let err = redlock
        .lock("links", ms(5000))
        .try_once()
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    let mut timed_out: Vec<usize> = err.node_failures().iter().map(|f| f.index).collect();
    timed_out.sort();
    assert_eq!(timed_out, vec![0, 1, 2]);
}

/// A release must reach every node ahead of our next request there, also the
/// first release on fresh connections (empty script caches). With a
/// `EVALSHA`→`NOSCRIPT`→`EVAL` fallback the release reached the two slow
/// nodes a round trip late, behind our next `SET NX`, which they refused:
/// with two other nodes down that was a spurious `Contended`.
#[tokio::test]
async fn first_release_lands_before_the_next_lock() {
    let mut c = Cluster::start(5);
    let slow: Vec<Proxy> = c.nodes[3..].iter().map(|n| Proxy::start(n.port)).collect();
    for p in &slow {
        p.set_mode(ProxyMode::Delay(30));
    }
    let urls = c.nodes[..3]
        .iter()
        .map(|n| n.url())
        .chain(slow.iter().map(Proxy::url));
    let redlock = Redlock::builder()
        .nodes(urls)
        .node_timeout(ms(1000))
        .retry_count(0)
        .build()
        .unwrap();
    let key = "first_release";
    // Won on the three direct nodes; the slow ones get SET, then the release.
    let lock = redlock.lock(key, ms(10_000)).try_once().await.unwrap();
    lock.release().await.unwrap();
    // Now only nodes 2, 3 and 4 can form a quorum.
    c.nodes[0].pause();
    c.nodes[1].pause();
    let again = redlock.lock(key, ms(10_000)).try_once().await;
    c.resume_all();
    let again = again.unwrap_or_else(|e| panic!("relock: {e:?}\n{}", c.logs()));
    assert!(again.is_valid());
    again.release().await.unwrap();
    // No node answered NOSCRIPT: a release never needs a second trip.
    for n in &c.nodes {
        let errors = n.error_stats();
        assert!(!errors.contains("NOSCRIPT"), "{errors}");
    }
}

#[tokio::test]
async fn interoperates_on_plain_keys() {
    let c = Cluster::start(5);
    let redlock = c.redlock();
    // Another Redlock client (redsync, node-redlock ...) holds "interop".
    for n in &c.nodes {
        n.set("interop", "go-client-value", ms(60_000));
    }
    assert!(redlock
        .lock("interop", ms(1000))
        .try_once()
        .await
        .unwrap_err()
        .is_contended());
    // Our key is the bare resource with a 128-bit random hex value.
    let lock = redlock
        .lock("interop_ours", ms(5000))
        .try_once()
        .await
        .unwrap();
    // (The call returned at quorum: node 0 may still be a straggler.)
    let v = c
        .values("interop_ours")
        .into_iter()
        .flatten()
        .next()
        .unwrap();
    assert_eq!(v.len(), 32);
    assert!(v.chars().all(|ch| ch.is_ascii_hexdigit()));
    assert!(
        wait_until(Duration::from_secs(2), || c.holding("interop_ours", &v)
            == 5)
        .await
    );
    lock.release().await.unwrap();
    // A prefix, when configured, is prepended.
    let prefixed = c.builder().key_prefix("redlock:").build().unwrap();
    let lock = prefixed
        .lock("interop_ours", ms(5000))
        .try_once()
        .await
        .unwrap();
    let on_quorum = || c.set_on("redlock:interop_ours") >= 3;
    assert!(wait_until(Duration::from_secs(2), on_quorum).await);
    lock.release().await.unwrap();
}

#[tokio::test]
async fn bad_input_is_a_typed_error() {
    let c = Cluster::start(3);
    let redlock = c.redlock();
    let bad = |r: redquorum::Result<redquorum::Lock>| matches!(r, Err(Error::InvalidConfig(_)));
    assert!(bad(redlock.lock("", ms(1000)).try_once().await));
    assert!(bad(redlock.lock("x", Duration::ZERO).try_once().await));
    assert!(bad(redlock.lock("x", ms(2)).try_once().await));
    assert!(bad(redlock
        .lock("x", Duration::from_micros(500))
        .try_once()
        .await));
    assert!(bad(redlock
        .lock("x", Duration::from_secs(u64::MAX / 4))
        .try_once()
        .await));
    assert!(matches!(
        Redlock::builder().nodes(["not a url"]).build(),
        Err(Error::InvalidUrl { .. })
    ));
    // A missing scheme gets a hint with the fix.
    for (given, meant) in [
        ("127.0.0.1:7401", "redis://127.0.0.1:7401"),
        ("localhost:6379", "redis://localhost:6379"),
    ] {
        let err = Redlock::builder().nodes([given]).build().unwrap_err();
        assert!(
            matches!(&err, Error::InvalidUrl { hint: Some(h), .. } if h == meant),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(
            text.ends_with(&format!("did you mean {meant:?}?")),
            "{text}"
        );
    }
    let err = Redlock::builder()
        .nodes(["redis://:secret@127.0.0.1:notaport"])
        .build()
        .unwrap_err();
    assert!(!format!("{err}{err:?}").contains("secret"), "{err:?}");
    assert!(matches!(
        Redlock::builder().nodes(Vec::<String>::new()).build(),
        Err(Error::InvalidConfig(_))
    ));
    let dup = c.urls()[0].clone();
    assert!(matches!(
        Redlock::builder().nodes([dup.clone(), dup]).build(),
        Err(Error::InvalidConfig(_))
    ));
    assert!(matches!(
        c.builder().drift_factor(0.7).build(),
        Err(Error::InvalidConfig(_))
    ));
    assert!(matches!(
        c.builder().node_timeout(Duration::ZERO).build(),
        Err(Error::InvalidConfig(_))
    ));
    // Zero retry delay and jitter work: a contended lock fails after the
    // retries, without panicking or spinning forever.
    let fast = c
        .builder()
        .retry_delay(Duration::ZERO)
        .retry_jitter(Duration::ZERO)
        .retry_count(50)
        .build()
        .unwrap();
    let held = redlock
        .lock("zero_delay", ms(10_000))
        .try_once()
        .await
        .unwrap();
    assert!(fast
        .lock("zero_delay", ms(1000))
        .await
        .unwrap_err()
        .is_contended());
    held.release().await.unwrap();
    // A zero wait is one attempt, reported as a timeout.
    let held = redlock
        .lock("zero_wait", ms(10_000))
        .try_once()
        .await
        .unwrap();
    let err = fast
        .lock("zero_wait", ms(1000))
        .wait(Duration::ZERO)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Timeout { .. }) && err.is_contended(),
        "{err:?}"
    );
    held.release().await.unwrap();
}

#[tokio::test]
async fn even_node_count_works() {
    let c = Cluster::start(4);
    let redlock = c.redlock();
    assert_eq!(redlock.quorum(), 3);
    let lock = redlock.lock("even", ms(2000)).try_once().await.unwrap();
    let values = c.values("even");
    let ours = values.iter().flatten().next().unwrap();
    assert!(c.holding("even", ours) >= 3, "{values:?}");
    lock.release().await.unwrap();
}

#[test]
fn redlock_is_clone_send_sync() {
    fn check<T: Clone + Send + Sync + 'static>() {}
    check::<Redlock>();
    fn check_send<T: Send + 'static>() {}
    check_send::<redquorum::Lock>();
    check_send::<redquorum::LockHandle>();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_clients_never_contend_with_themselves() {
    // `make test` also runs this one optimised: only at release speed does a
    // task complete enough rounds in one poll to exhaust tokio's cooperative
    // budget, which is what used to reorder requests (380 of 3200 failed).
    //
    // 32 tasks lock and release their own resources as fast as they can.
    // Every node must be handed each task's requests in order (a release
    // never overtakes its own SET): otherwise stale keys of ours pile up
    // unnoticed while five nodes answer, and make attempts fail once two
    // nodes hang and every remaining node is needed.
    //
    // Nor may a release be dropped: a node descheduled for a moment while
    // the others carried the rounds gets a release for each round it
    // missed, more than a queue holds of votes (dropped, they left 10 s
    // keys that failed every round once two nodes hung: 127-430 of 3200).
    //
    // The node timeout is a second: this is about order, and on a machine
    // whose cores are busy with other work (CI beside a build) a worker
    // thread can be descheduled past the 100 ms default, which fails rounds
    // for want of replies that were there all along.
    let mut c = Cluster::start(5);
    let redlock = c
        .builder()
        .retry_count(0)
        .node_timeout(ms(1000))
        .build()
        .unwrap();
    let hammer = |ops: usize| {
        let redlock = redlock.clone();
        async move {
            let mut joins = Vec::new();
            for t in 0..32 {
                let redlock = redlock.clone();
                joins.push(tokio::spawn(async move {
                    let resource = format!("self_contention_{t}");
                    let mut failures = Vec::new();
                    for _ in 0..ops {
                        match redlock.lock(&resource, ms(10_000)).try_once().await {
                            Ok(lock) => {
                                if let Err(e) = lock.release().await {
                                    failures.push(format!("release: {e}"));
                                }
                            }
                            Err(e) => failures.push(format!("lock: {e}")),
                        }
                    }
                    failures
                }));
            }
            let mut failures = Vec::new();
            for j in joins {
                failures.extend(j.await.unwrap());
            }
            failures
        }
    };
    let healthy = hammer(300).await;
    assert!(healthy.is_empty(), "healthy: {healthy:?}");
    c.nodes[1].pause();
    c.nodes[3].pause();
    let failures = hammer(100).await;
    c.resume_all();
    assert!(
        failures.is_empty(),
        "{} of {} operations failed with 2 nodes hung, first: {:?}",
        failures.len(),
        32 * 100,
        &failures[..failures.len().min(3)]
    );
}

#[tokio::test]
async fn tls_urls_never_panic() {
    let c = Cluster::start(3);
    // rediss:// against plain-text nodes: a typed error either way, whether
    // this build has TLS (handshake fails at lock time) or not (bad URL).
    let urls = c.urls_as("rediss://");
    let built = Redlock::builder()
        .nodes(&urls)
        .node_timeout(ms(300))
        .build();
    if cfg!(feature = "tls") {
        let redlock = built.expect("tls build accepts rediss://");
        let err = redlock.lock("tls", ms(1000)).try_once().await.unwrap_err();
        assert!(matches!(err, Error::NoQuorum { .. }), "{err:?}");
    } else {
        assert!(matches!(built, Err(Error::InvalidUrl { .. })), "{built:?}");
    }
    // `#insecure` (no certificate check) is refused when the client is
    // built, by either build, never at lock time.
    let insecure = Redlock::builder()
        .nodes([format!("rediss://127.0.0.1:{}/#insecure", c.nodes[0].port)])
        .build()
        .unwrap_err();
    assert!(matches!(insecure, Error::InvalidUrl { .. }), "{insecure:?}");
    if cfg!(feature = "tls") {
        assert!(insecure.to_string().contains("#insecure"), "{insecure}");
    }
}

/// The forms the acquisition builder replaced still work for a release, as
/// the builder they call: one attempt, a bounded wait, a fenced lock, work
/// run under the lock; and so do the semaphore's and the read-write lock's.
#[tokio::test]
#[allow(deprecated)]
async fn the_older_acquisition_forms_still_work() {
    let c = Cluster::start(3);
    let r = c.redlock();
    let held = r.try_lock("older", ms(5_000)).await.unwrap();
    let err = r.try_lock("older", ms(5_000)).await.unwrap_err();
    assert!(err.is_contended(), "{err}");
    let err = r
        .lock_timeout("older", ms(5_000), ms(200))
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    held.release().await.unwrap();
    let fenced = r.lock_fenced("older", ms(5_000)).await.unwrap();
    let first = fenced.fencing_token().expect("a token");
    fenced.release().await.unwrap();
    let again = r.lock_fenced_timeout("older", ms(5_000), ms(2_000)).await;
    assert!(again.unwrap().fencing_token().expect("a token") > first);
    let seven = r.with_lock("older-work", ms(5_000), |_| async { 7 }).await;
    assert_eq!(seven.unwrap(), 7);
    let both = r
        .try_lock_all(&["{older}-a", "{older}-b"], ms(5_000))
        .await
        .unwrap();
    assert!(r.try_lock("{older}-b", ms(5_000)).await.is_err());
    both.release().await.unwrap();
    let sem = r.semaphore("older-sem", 1).unwrap();
    let permit = sem.try_acquire(ms(5_000)).await.unwrap();
    assert!(sem.acquire_timeout(ms(5_000), ms(200)).await.is_err());
    permit.release().await.unwrap();
    let rw = r.rw_lock("older-rw").unwrap();
    let read = rw.try_read(ms(5_000)).await.unwrap();
    assert!(rw.try_write(ms(5_000)).await.is_err());
    read.release().await.unwrap();
}
