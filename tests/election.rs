//! Leader election on real nodes: one leader at a time with terms that
//! increase in the order of leadership, hand-over on resignation, a leader
//! cut off from the nodes replaced within its TTL, a minority of nodes
//! down, and observers that learn each change from the nodes.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redquorum::{Leader, Redlock};
use support::{Cluster, ProxyMode};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn client(c: &Cluster) -> Redlock {
    c.builder().build().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_and_terms_follow_leadership() {
    let c = Cluster::start(3);
    // (start, end, term) of every leadership, by real time.
    let log = Arc::new(Mutex::new(Vec::<(Instant, Instant, u64)>::new()));
    let mut tasks = Vec::new();
    for i in 0..3 {
        let election = client(&c).election("sched", ms(2_000)).unwrap();
        let log = log.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..4 {
                let l = election
                    .campaign(&format!("node-{i}"))
                    .wait(Duration::from_secs(20))
                    .await
                    .unwrap();
                let start = Instant::now();
                assert!(l.is_valid());
                tokio::time::sleep(ms(3)).await;
                l.ensure_valid(ms(1)).unwrap();
                let end = Instant::now();
                let term = l.term();
                l.resign().await.unwrap();
                log.lock().unwrap().push((start, end, term));
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut log = log.lock().unwrap().clone();
    log.sort_by_key(|(start, _, _)| *start);
    assert_eq!(log.len(), 12);
    for pair in log.windows(2) {
        let ((_, end, term), (start, _, next)) = (pair[0], pair[1]);
        assert!(end <= start, "two leaders at once");
        assert!(next > term, "term {next} after {term}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resignation_hands_over_and_observers_follow() {
    let c = Cluster::start(3);
    let (a, b, watcher) = (client(&c), client(&c), client(&c));
    let ea = a.election("cron", ms(5_000)).unwrap();
    let eb = b.election("cron", ms(5_000)).unwrap();
    let ew = watcher.election("cron", ms(5_000)).unwrap();
    assert_eq!(ew.leader().await.unwrap(), None);
    let mut observer = ew.observe();
    assert_eq!(observer.changed().await.unwrap(), None);
    let la = ea.campaign("a").await.unwrap();
    let first = observer.changed().await.unwrap().unwrap();
    assert_eq!(
        first,
        Leader {
            value: "a".into(),
            term: la.term()
        }
    );
    assert_eq!(ew.leader().await.unwrap(), Some(first.clone()));
    let waiting = tokio::spawn(async move {
        let lb = eb.campaign("b").await.unwrap();
        (Instant::now(), lb)
    });
    // b is queued on the nodes before a resigns.
    let key = "cron";
    assert!(support::wait_until(Duration::from_secs(3), || c.waiting_on(key) >= 2).await);
    let resigned = Instant::now();
    la.resign().await.unwrap();
    let (elected, lb) = waiting.await.unwrap();
    assert!(lb.term() > first.term);
    // Woken by the nodes, well before the retry cap or the TTL.
    assert!(elected - resigned < ms(150), "{:?}", elected - resigned);
    let mut next = observer.changed().await.unwrap();
    if next.is_none() {
        next = observer.changed().await.unwrap();
    }
    assert_eq!(
        next,
        Some(Leader {
            value: "b".into(),
            term: lb.term()
        })
    );
    lb.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_is_replaced_within_its_ttl_and_knows_it() {
    let c = Cluster::start(3);
    let (proxies, builder) = c.far_builder(0);
    let cut_off = builder.build().unwrap();
    let other = client(&c);
    let ttl = ms(1_000);
    let leader = cut_off
        .election("svc", ttl)
        .unwrap()
        .campaign("far")
        .await
        .unwrap();
    let e = other.election("svc", ttl).unwrap();
    let started = Instant::now();
    for p in &proxies {
        p.set_mode(ProxyMode::Blackhole);
    }
    let next = e.campaign("near").await.unwrap();
    let took = started.elapsed();
    assert!(took <= ttl + ms(100), "{took:?}");
    assert!(next.term() > leader.term());
    // The old leader learnt it lost before the new one could lead.
    assert!(leader.lost_reason().is_some() || !leader.is_valid());
    assert!(leader.valid_until() <= tokio::time::Instant::now());
    next.resign().await.unwrap();
    drop(leader);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elections_go_on_with_a_minority_down_and_say_when_they_cannot() {
    let mut c = Cluster::start(3);
    c.nodes[2].kill();
    let redlock = c.builder().node_timeout(ms(300)).build().unwrap();
    let e = redlock.election("ops", ms(2_000)).unwrap();
    let l = e.campaign("x").await.unwrap();
    assert_eq!(e.leader().await.unwrap().map(|l| l.term), Some(l.term()));
    l.resign().await.unwrap();
    c.nodes[1].kill();
    let err = e.leader().await.unwrap_err();
    assert!(err.node_failures().len() == 2, "{err}");
    let err = e.campaign("x").wait(ms(300)).await.unwrap_err();
    assert!(err.to_string().contains("nodes"), "{err}");
    assert!(redlock.election("", ms(1)).is_err());
}

/// A campaign keeps trying through a term it cannot mint (a counter node
/// away while another is not yet repaired): it wins once the node is back,
/// where it used to fail with no quorum right after winning the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_goes_on_through_a_term_it_cannot_mint() {
    let mut c = Cluster::start(3);
    let redlock = c.builder().restart_quarantine(ms(1_000)).build().unwrap();
    // Node 1 loses its data: quarantined for locks for about 2 s, and
    // suspect for counters after that.
    c.nodes[1].restart_wiped();
    let deadline = Instant::now() + ms(10_000);
    loop {
        let trust = redlock.node_trust().await;
        if matches!(trust[1], redquorum::NodeTrust::Suspect { .. }) {
            break;
        }
        assert!(Instant::now() < deadline, "{trust:?}");
        tokio::time::sleep(ms(50)).await;
    }
    // Node 2 goes away: the lock has its quorum (nodes 0 and 1), the term
    // does not (node 1's acceptance does not count until repaired).
    c.nodes[2].stop();
    let election = redlock.election("mint_outage", ms(1_000)).unwrap();
    let campaign = tokio::spawn(async move { election.campaign("a").wait(ms(20_000)).await });
    tokio::time::sleep(ms(1_000)).await;
    c.nodes[2].restart(support::Persistence::Aof);
    let leadership = campaign.await.unwrap().unwrap();
    assert!(leadership.term() >= 1);
}

/// A candidate whose round trip is a fifth of the TTL (100 ms each way,
/// TTL 1 s) keeps its leadership, and a client whose round trip is 27 %
/// of the TTL (200 ms each way, TTL 1.5 s) keeps a fenced lock it renews
/// (its first renewal lands 285 ms before the validity ends, where one
/// sent a third of the TTL after the call lands 215 ms too late):
/// renewals start from the
/// validity left, not a fixed interval after the call returned
/// (leaderships were lost about 0.38 s in).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_far_candidate_keeps_its_leadership() {
    let c = Cluster::start(3);
    // Two clients, each behind proxies of its own (a proxy delays what it
    // forwards one read at a time: one client's traffic never waits on the
    // other's).
    let (_proxies_a, builder_a) = c.far_builder(100);
    let (_proxies_b, builder_b) = c.far_builder(200);
    let (a, b) = (builder_a.build().unwrap(), builder_b.build().unwrap());
    // Connections made first: a new one takes two more round trips (its
    // handshake and check), which would leave a 1 s lock no validity.
    let _ = futures::join!(a.node_trust(), b.node_trust());
    let election = a.election("far_leader", ms(1_000)).unwrap();
    let leadership = election.campaign("far").await.unwrap();
    let fenced = b.lock("far_lock", ms(1_500)).fenced().await.unwrap();
    fenced.auto_extend();
    // Kept for three TTLs: neither is lost meanwhile.
    let kept = tokio::time::timeout(ms(3_000), async {
        tokio::select! {
            () = leadership.lost() => "leadership",
            () = fenced.lost() => "fenced lock",
        }
    })
    .await;
    assert!(
        kept.is_err(),
        "lost the {}: {:?} {:?}",
        kept.unwrap_or_default(),
        leadership.lost_reason(),
        fenced.lost_reason()
    );
    assert!(leadership.is_valid() && fenced.is_valid());
}

/// One name, one lock: a name's leader holds its lock key, so the name's
/// lock, its readers and any client's `SET NX` on it keep out a candidate,
/// and a leader keeps them out; each waits for the other and is woken by
/// its release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_names_lock_and_its_election_exclude_each_other() {
    let c = Cluster::start(3);
    let (a, b) = (client(&c), client(&c));
    let held = a.lock("duty", ms(5_000)).try_once().await.expect("free");
    let election = b.election("duty", ms(5_000)).unwrap();
    let err = election
        .campaign("b")
        .try_once()
        .await
        .expect_err("the name's lock holds it");
    assert!(err.is_contended(), "{err}");
    let candidate = tokio::spawn(async move {
        let leadership = election.campaign("b").await;
        (leadership, Instant::now())
    });
    assert!(
        support::wait_until(Duration::from_secs(15), || c.listed_everywhere("duty", 1)).await,
        "the candidate is listed on every node"
    );
    let released = Instant::now();
    held.release().await.unwrap();
    let (leadership, at) = candidate.await.unwrap();
    let leadership = leadership.expect("the leadership, once the lock is released");
    assert!(
        at.duration_since(released) < ms(2_000),
        "led {:?} after the release",
        at.duration_since(released)
    );
    // While it leads, the name is taken whichever way it is asked for.
    let err = a
        .lock("duty", ms(5_000))
        .try_once()
        .await
        .expect_err("a leader holds the name");
    assert!(err.is_contended(), "{err}");
    let err = a
        .rw_lock("duty")
        .unwrap()
        .read(ms(5_000))
        .try_once()
        .await
        .expect_err("a leader holds the name");
    assert!(err.is_contended(), "{err}");
    // A node that missed the leader's request (a quorum is enough) may
    // take it; a majority never does.
    let got = c.bare_set_nx("duty");
    assert!(
        got < 2,
        "a bare SET NX got the name on {got} of 3 nodes beside a leader"
    );
    // A plain lock waits behind the leader and takes the name at its
    // resignation.
    let waiter = c.builder().wait_cap(ms(10_000)).build().expect("client");
    let plain = tokio::spawn(async move {
        let lock = waiter.lock("duty", ms(5_000)).wait(ms(30_000)).await;
        (lock, Instant::now())
    });
    assert!(
        support::wait_until(Duration::from_secs(15), || c.listed_everywhere("duty", 1)).await,
        "the plain lock is listed on every node"
    );
    let resigned = Instant::now();
    leadership.resign().await.unwrap();
    let (lock, at) = plain.await.unwrap();
    let lock = lock.expect("the plain lock, once the leader resigned");
    assert!(
        at.duration_since(resigned) < ms(2_000),
        "taken {:?} after the resignation",
        at.duration_since(resigned)
    );
    let watcher = client(&c).election("duty", ms(5_000)).unwrap();
    assert_eq!(watcher.leader().await.unwrap(), None, "a lock is no leader");
    lock.release().await.unwrap();
}
