//! Nodes that may have lost writes, on real nodes: a lock whose node
//! restarted empty stays exclusive (quarantine), a durable restart is
//! quarantined too, persistence settings decide nothing, serial numbers stay
//! unique through restarts-empty under chaos (repair), and a client that
//! starts later keeps the quarantine another found.

mod support;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redquorum::{NodeTrust, Redlock, SerialGenerator};
use support::{wait_until, Cluster, Persistence};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A client of `c` with a 3 s restart quarantine (so a 3 s TTL is the
/// longest it may use).
fn client(c: &Cluster, quarantine: Duration) -> Redlock {
    c.builder()
        .restart_quarantine(quarantine)
        .retry_count(0)
        .build()
        .unwrap()
}

/// A holds nodes 0 and 1 of 3 (node 2 was down while it locked, and comes
/// back with its data). Returns A's lock.
async fn holder_on_nodes_0_and_1(c: &mut Cluster, a: &Redlock) -> redquorum::Lock {
    c.nodes[2].stop();
    let lock = a.lock("q_res", ms(3_000)).try_once().await.unwrap();
    c.nodes[2].restart(Persistence::Aof);
    assert_eq!(c.set_on("q_res"), 2);
    lock
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_empty_cannot_give_a_held_lock_away() {
    let mut c = Cluster::start(3);
    let a = client(&c, ms(3_000));
    let lock = holder_on_nodes_0_and_1(&mut c, &a).await;
    let valid_until = lock.valid_until();
    c.nodes[0].restart(Persistence::None);
    let b = client(&c, ms(3_000));
    // Node 0 forgot A's key, but its yes does not count: no quorum, and
    // the error says why (not "held by another owner").
    let err = b.lock("q_res", ms(3_000)).try_once().await.unwrap_err();
    assert!(!err.is_contended(), "{err}");
    let text = err.to_string();
    assert!(
        text.contains(&format!("0 (127.0.0.1:{})", c.nodes[0].port))
            && text.contains("quarantined for another"),
        "{text}"
    );
    assert!(text.contains("none of our marks"), "{text}");
    assert!(matches!(
        b.node_trust().await[0],
        NodeTrust::Quarantined { .. }
    ));
    // B waits: it gets the lock only after A's has expired, and promptly:
    // once A's lock expired and the waiter's own quarantines (3 s from its
    // first look at the restarted nodes) are over.
    let first_look = tokio::time::Instant::now();
    let waiter = c.builder().restart_quarantine(ms(3_000)).build().unwrap();
    let got = waiter
        .lock("q_res", ms(3_000))
        .wait(ms(8_000))
        .await
        .unwrap();
    let at = tokio::time::Instant::now();
    assert!(at >= valid_until, "B took the lock while A's was valid");
    let free = valid_until.max(first_look + ms(3_000));
    let late = at.saturating_duration_since(free);
    assert!(
        late < ms(1_000),
        "B took it {late:?} after A's lock expired and its quarantines ended"
    );
    // A's client, which reads its nodes while it holds a lock, found the
    // restart: a lock whose quorum needed node 0 is over.
    assert_eq!(lock.validity(), Duration::ZERO);
    assert!(lock.valid_until() < valid_until, "A was never told");
    got.release().await.unwrap();
}

/// Sleeps until the wall clock's fraction of a second is `frac` ms.
async fn wall_clock_at(frac: u32) {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let wait = (frac + 1_000 - now.subsec_millis()) % 1_000;
    tokio::time::sleep(ms(wait.into())).await;
}

/// The wall clock's fraction of a second, ms.
fn wall_clock_fraction() -> u32 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_millis()
}

/// Redis reports uptime as the difference of two wall-clock readings, each
/// cut to a whole second: a node started at x.9 s says it has run 1 s at
/// (x+1).02 s. Its quarantine still lasts until A's lock has expired: it
/// counts from the client's first sight, whatever the uptime says (it
/// ended up to a second early when the client took the uptime at its word).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_just_before_a_second_ticks_is_quarantined_in_full() {
    // Each try needs a node restart to fall just before a second ticks;
    // a loaded machine may miss the moment, so up to five tries.
    for _ in 0..5 {
        let mut c = Cluster::start(3);
        let a = client(&c, ms(3_000));
        c.nodes[2].stop();
        wall_clock_at(700).await;
        let lock = a.lock("q_grain", ms(3_000)).try_once().await.unwrap();
        c.nodes[2].restart(Persistence::Aof);
        if wall_clock_fraction() >= 880 {
            continue;
        }
        wall_clock_at(900).await;
        c.nodes[0].restart(Persistence::None);
        wall_clock_at(30).await;
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query(&mut c.nodes[0].conn())
            .unwrap();
        if !info.contains("uptime_in_seconds:1\r\n") {
            continue; // the restart came after the tick
        }
        // Node 0 says it has run 1 s; it has run about 0.1 s.
        let waiter = c.builder().restart_quarantine(ms(3_000)).build().unwrap();
        let got = waiter
            .lock("q_grain", ms(3_000))
            .wait(ms(6_000))
            .await
            .unwrap();
        let at = tokio::time::Instant::now();
        assert!(
            at >= lock.valid_until(),
            "B took the lock {:?} before A's expired",
            lock.valid_until() - at
        );
        got.release().await.unwrap();
        return;
    }
    panic!("in 5 tries, node 0 never restarted just before a second ticked");
}

/// The same scenario without quarantine gives the lock to two holders: the
/// test above would fail if the rule were gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_quarantine_the_same_restart_gives_two_holders() {
    let mut c = Cluster::start(3);
    let a = client(&c, Duration::ZERO);
    let lock = holder_on_nodes_0_and_1(&mut c, &a).await;
    c.nodes[0].restart(Persistence::None);
    let b = client(&c, Duration::ZERO);
    let second = b.lock("q_res", ms(3_000)).try_once().await.unwrap();
    assert!(lock.is_valid() && second.is_valid(), "two valid holders");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_restart_is_quarantined_and_keeps_what_it_holds() {
    let mut c = Cluster::start(3);
    // A TTL long enough to outlast a restart on a busy machine: A's key
    // must still be on every node when B tries.
    let a = client(&c, ms(20_000));
    let lock = a.lock("q_res", ms(20_000)).try_once().await.unwrap();
    assert!(wait_until(ms(2_000), || c.set_on("q_res") == 3).await);
    c.nodes[0].restart(Persistence::Aof);
    let b = client(&c, ms(3_000));
    // Node 0 kept A's key (AOF, appendfsync always) and refuses: plain
    // contention. But nothing on it proves it kept everything (an old
    // backup looks the same), so its yes would not count either.
    let err = b.lock("q_res", ms(3_000)).try_once().await.unwrap_err();
    assert!(err.is_contended(), "{err}");
    match &b.node_trust().await[..] {
        [NodeTrust::Quarantined { cause, .. }, NodeTrust::Trusted, NodeTrust::Trusted] => {
            assert!(cause.contains("restarted"), "{cause}");
        }
        other => panic!("{other:?}"),
    }
    lock.release().await.unwrap();
    let got = b.lock("q_res", ms(3_000)).try_once().await.unwrap();
    got.release().await.unwrap();
}

/// A node still loading its data answers reads at our marker's key with
/// `LOADING`: that tells nothing (it is not something unreadable there, a
/// loss), so the client judges the node once it has loaded, and finds the
/// restart for what it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_still_loading_is_judged_once_it_has_loaded() {
    let mut c = Cluster::start(3);
    assert_eq!(
        client(&c, ms(3_000)).node_trust().await,
        vec![NodeTrust::Trusted; 3]
    );
    c.nodes[0].restart_loading_slowly(3_000, ms(2));
    let b = client(&c, ms(3_000));
    let loading = b.node_trust().await;
    assert!(
        c.nodes[0].is_loading(),
        "node 0 loaded before the client looked: the test needs a longer load"
    );
    assert_eq!(loading[0], NodeTrust::Unknown, "judged while loading");
    let loaded = c.nodes[0].is_loading();
    assert!(
        wait_until(ms(30_000), || !c.nodes[0].is_loading()).await,
        "{loaded}"
    );
    match b.node_trust().await.remove(0) {
        NodeTrust::Quarantined { cause, .. } => assert!(cause.contains("restarted"), "{cause}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistence_settings_decide_nothing() {
    // Just started, with AOF and appendfsync always, CONFIG readable or
    // not: all four look alike to a client. Undeclared, each may be a node
    // whose data directory was wiped; declared new, each counts.
    for persistence in [Persistence::Aof, Persistence::AofWithoutConfig] {
        let fresh = Cluster::start_undeclared(1, persistence);
        match &fresh.redlock().node_trust().await[0] {
            NodeTrust::Quarantined {
                remaining, cause, ..
            } => {
                assert!(*remaining > Duration::from_secs(55), "{remaining:?}");
                assert!(cause.contains("none of our marks"), "{cause}");
            }
            other => panic!("{persistence:?}: {other:?}"),
        }
        fresh.declare_new();
        assert_eq!(fresh.redlock().node_trust().await, vec![NodeTrust::Trusted]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_starts_later_keeps_the_quarantine_until_one_served_it() {
    let c = Cluster::start(3);
    let first = client(&c, ms(3_000));
    assert_eq!(first.node_trust().await, vec![NodeTrust::Trusted; 3]);
    // Our marker is deleted (nothing flushed: the node's statistics show
    // nothing), and the first client's connections are remade: it saw the
    // process marked, so the marker's absence is a loss, from now.
    let mut conn = c.nodes[1].conn();
    let _: () = redis::cmd("DEL")
        .arg(c.nodes[1].marker_key())
        .query(&mut conn)
        .unwrap();
    let _: redis::Value = redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "normal"])
        .query(&mut conn)
        .unwrap();
    let NodeTrust::Quarantined { cause, until, .. } = first.node_trust().await.remove(1) else {
        panic!("{:?}", first.node_trust().await);
    };
    assert!(cause.contains("lost the marker"), "{cause}");
    // A client that never saw the node could not tell from the node
    // itself; it reads the loss from the marker the first one left, and
    // serves a whole quarantine from its own first look (nothing tells it
    // when the loss was found).
    let later = client(&c, ms(3_000));
    let seen_at = Instant::now();
    match later.node_trust().await.remove(1) {
        NodeTrust::Quarantined {
            until: u, cause, ..
        } => {
            assert!(cause.contains("another client"), "{cause}");
            assert!(u >= seen_at + ms(2_900), "{:?}", u - seen_at);
        }
        other => panic!("{other:?}"),
    }
    // Once the first client's quarantine is over, its next request checks
    // the node again and records in our marker that the loss was served.
    assert!(wait_until(ms(10_000), || Instant::now() > until).await);
    let served = || {
        redis::cmd("HGET")
            .arg(c.nodes[1].marker_key())
            .arg("served")
            .query::<Option<String>>(&mut c.nodes[1].conn())
            .unwrap()
            .is_some_and(|by| by != "-")
    };
    assert!(!served(), "served before anyone watched it pass");
    let mut recorded = false;
    for _ in 0..10 {
        let lock = first.lock("q_later", ms(1_000)).try_once().await.unwrap();
        lock.release().await.unwrap();
        if wait_until(ms(1_500), served).await {
            recorded = true;
            break;
        }
    }
    assert!(recorded, "the first client never recorded the served loss");
    // A client made after that counts the node for locks at once, and it
    // stays suspect for counters.
    let after = client(&c, ms(3_000));
    assert!(matches!(
        after.node_trust().await[1],
        NodeTrust::Suspect { .. }
    ));
    let lock = after.lock("q_later", ms(1_000)).try_once().await.unwrap();
    lock.release().await.unwrap();
}

/// Serial numbers through the existing chaos plus two nodes restarted empty
/// at different times (one while another node is paused): no duplicate,
/// and the restarted nodes' counter records are repaired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serial_numbers_survive_restarts_empty_under_chaos() {
    let mut c = Cluster::start(5);
    let redlock = c.builder().node_timeout(ms(100)).build().unwrap();
    let serials = SerialGenerator::builder(redlock.clone())
        .width(9)
        .build()
        .unwrap();
    let issued = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for _ in 0..4 {
        let (s, out, stop) = (serials.clone(), issued.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            for _ in 0..5_000 {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                match s.next("QR").await {
                    Ok(n) => out.lock().unwrap().push(n.to_string()),
                    Err(_) => tokio::time::sleep(ms(5)).await,
                }
            }
        }));
    }
    let count = || issued.lock().unwrap().len();
    let grows = |from: usize| {
        let issued = issued.clone();
        async move {
            wait_until(Duration::from_secs(10), || {
                issued.lock().unwrap().len() >= from + 50
            })
            .await
        }
    };
    assert!(grows(0).await);
    c.nodes[1].pause();
    c.nodes[0].restart(Persistence::None);
    assert!(
        grows(count()).await,
        "node 0 empty, node 1 paused\n{}",
        c.logs()
    );
    c.nodes[1].resume();
    assert!(grows(count()).await, "node 1 back");
    c.nodes[3].restart(Persistence::None);
    c.nodes[2].stop();
    assert!(
        grows(count()).await,
        "node 3 empty, node 2 down\n{}",
        c.logs()
    );
    c.nodes[2].restart(Persistence::Aof);
    assert!(grows(count()).await, "node 2 back");
    stop.store(true, Ordering::SeqCst);
    for w in workers {
        w.await.unwrap();
    }
    let all = issued.lock().unwrap().clone();
    let distinct: HashSet<&String> = all.iter().collect();
    assert_eq!(distinct.len(), all.len(), "duplicates among {}", all.len());
    // The restarted nodes' records were stamped repaired.
    let key = support::internal_key("serial", "serial:day:QR");
    for i in [0, 3] {
        let stamp: Option<String> = redis::cmd("HGET")
            .arg(&key)
            .arg("r")
            .query(&mut c.nodes[i].conn())
            .unwrap();
        assert!(stamp.is_some(), "node {i} not repaired");
    }
}
