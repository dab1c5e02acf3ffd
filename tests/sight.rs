//! A process is trusted from when the client saw it, on real nodes: a
//! process that has long run elsewhere appearing behind a node's address
//! (a name or virtual IP moved, a proxy leading elsewhere), and a node
//! restarted empty whose uptime then jumps with its wall clock, let no
//! second holder in while the first holder's lock is valid, whether the
//! client saw the process before or not; and the holder is told.

mod support;

use std::time::Duration;

use redquorum::{NodeTrust, Redlock};
use support::{clock::ClockFile, Cluster, Persistence, Proxy, RedisNode};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The restart quarantine the clients use, and so the longest TTL.
const QUARANTINE: Duration = Duration::from_secs(3);

/// A client of `urls` with [`QUARANTINE`], trying once, connected and
/// checked before it returns.
async fn client(urls: Vec<String>) -> Redlock {
    let r = Redlock::builder()
        .nodes(urls)
        .restart_quarantine(QUARANTINE)
        .retry_count(0)
        .build()
        .unwrap();
    support::connected(&r).await;
    r
}

/// `node`'s `uptime_in_seconds`.
fn uptime(node: &RedisNode) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut node.conn())
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("uptime_in_seconds:"))
        .and_then(|u| u.trim().parse().ok())
        .unwrap()
}

/// A lock on nodes 0 and 1 of `c` only, by `a`: its key on node 2 is
/// deleted behind every client's back (as if its SET had never arrived),
/// so node 2 is free and trusted.
async fn held_on_0_and_1(c: &Cluster, a: &Redlock, resource: &str) -> redquorum::Lock {
    let lock = a.try_lock(resource, QUARANTINE).await.unwrap();
    assert!(support::wait_until(ms(2_000), || c.set_on(resource) == 3).await);
    let _: i64 = redis::cmd("DEL")
        .arg(resource)
        .query(&mut c.nodes[2].conn())
        .unwrap();
    lock
}

/// Neither `clients` gets `resource` while `lock` is valid, and `lock`'s
/// holder is told its lock is lost (its quorum needed the node that lost
/// it).
async fn nobody_else(lock: &redquorum::Lock, clients: &[&Redlock], resource: &str) {
    for (i, r) in clients.iter().enumerate() {
        let got = r.try_lock(resource, QUARANTINE).await;
        assert!(
            got.is_err(),
            "client {i}: a second holder while the first has {:?} left",
            lock.validity()
        );
    }
    let told = tokio::time::timeout(ms(10_000), lock.lost()).await;
    assert!(told.is_ok(), "the holder was never told");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_running_process_behind_an_address_gives_no_lock_away() {
    let c = Cluster::start(3);
    // The standby has run longer than the quarantine: its uptime says
    // nothing of when it appeared at the address.
    let standby = RedisNode::start(Persistence::Aof);
    let proxy = Proxy::start(c.nodes[0].port);
    let urls = vec![proxy.url(), c.nodes[1].url(), c.nodes[2].url()];
    let past =
        support::wait_until(ms(20_000), || uptime(&standby) > QUARANTINE.as_secs() + 1).await;
    assert!(past, "the standby never ran past the quarantine");
    let (a, seen) = (client(urls.clone()).await, client(urls.clone()).await);
    let lock = held_on_0_and_1(&c, &a, "swapped").await;
    assert!(lock.is_valid(), "the test took too long to set up");
    proxy.retarget(standby.port);
    let first_look = std::time::Instant::now();
    let fresh = client(urls).await;
    nobody_else(&lock, &[&seen, &fresh], "swapped").await;
    // Out for the whole quarantine from the fresh client's first look,
    // however long the standby has run.
    match &fresh.node_trust().await[0] {
        NodeTrust::Quarantined { until, .. } => {
            assert!(*until >= first_look + QUARANTINE, "{until:?}");
        }
        other => assert!(first_look.elapsed() >= QUARANTINE, "{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uptime_that_jumps_with_the_wall_clock_gives_no_lock_away() {
    let clock = ClockFile::new();
    let mut c = Cluster {
        nodes: vec![
            RedisNode::start_with_clock(Persistence::Aof, &clock),
            RedisNode::start(Persistence::Aof),
            RedisNode::start(Persistence::Aof),
        ],
    };
    c.declare_new();
    let a = client(c.urls()).await;
    let lock = held_on_0_and_1(&c, &a, "stepped").await;
    // Node 0 restarts without its data, then its wall clock steps 10 s
    // ahead: its uptime reads 10 s more than it has run.
    c.nodes[0].restart(Persistence::None);
    clock.wall(10_000_000_000, 1.0);
    let stepped = support::wait_until(ms(2_000), || uptime(&c.nodes[0]) >= 10).await;
    assert!(stepped, "the step did not reach the node");
    assert!(lock.is_valid(), "the test took too long to set up");
    let fresh = client(c.urls()).await;
    nobody_else(&lock, &[&fresh], "stepped").await;
}
