//! A process is trusted from when the client saw it, on real nodes: a
//! process that has long run elsewhere appearing behind a node's address
//! (a name or virtual IP moved, a proxy leading elsewhere), and a node
//! restarted empty whose uptime then jumps with its wall clock, let no
//! second holder in while the first holder's lock is valid, whether the
//! client saw the process before or not (a process marked for another node
//! list too); and the holder is told. For the
//! lock, the read-write lock (a reader's lease, a writer after it) and the
//! semaphore's slots.

mod support;

use std::time::Duration;

use redquorum::{Lock, NodeTrust, Redlock};
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

/// What is held, and what the others try.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// A lock; others try the lock.
    Lock,
    /// A read lease; others try to write.
    Read,
    /// The one permit of a semaphore; others try for one.
    Permit,
}

impl Kind {
    /// `r`'s one attempt at `resource`: the first holder's (`first`), or
    /// the others'.
    async fn take(self, r: &Redlock, resource: &str, first: bool) -> redquorum::Result<Lock> {
        match self {
            Kind::Lock => r.lock(resource, QUARANTINE).try_once().await,
            Kind::Read if first => r.rw_lock(resource)?.read(QUARANTINE).try_once().await,
            Kind::Read => r.rw_lock(resource)?.write(QUARANTINE).try_once().await,
            Kind::Permit => Ok(r
                .semaphore(resource, 1)?
                .acquire(QUARANTINE)
                .try_once()
                .await?
                .into_lock()),
        }
    }
}

/// The keys of ours on `node` with a TTL (what a lock, a lease or a
/// permit stands on; our marker has none).
fn ours(node: &RedisNode) -> Vec<String> {
    let mut conn = node.conn();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
    keys.into_iter()
        .filter(|k| redis::cmd("PTTL").arg(k).query::<i64>(&mut conn).unwrap() > 0)
        .collect()
}

/// `kind` held on nodes 0 and 1 of `c` only, by `a`: its keys on node 2
/// are deleted behind every client's back (as if its writes had never
/// arrived), so node 2 is free and trusted.
async fn held_on_0_and_1(c: &Cluster, a: &Redlock, kind: Kind, resource: &str) -> Lock {
    let lock = kind.take(a, resource, true).await.unwrap();
    let on_all =
        support::wait_until(ms(2_000), || c.nodes.iter().all(|n| !ours(n).is_empty())).await;
    assert!(on_all, "{kind:?}: not on every node");
    let mut conn = c.nodes[2].conn();
    for key in ours(&c.nodes[2]) {
        let _: i64 = redis::cmd("DEL").arg(&key).query(&mut conn).unwrap();
    }
    lock
}

/// None of `clients` gets `resource` while `lock` is valid, and `lock`'s
/// holder is told its lock is lost (its quorum needed the node that lost
/// it).
async fn nobody_else(lock: &Lock, clients: &[&Redlock], kind: Kind, resource: &str) {
    for (i, r) in clients.iter().enumerate() {
        let got = kind.take(r, resource, false).await;
        assert!(
            got.is_err(),
            "{kind:?}, client {i}: a second holder while the first has {:?} left",
            lock.validity()
        );
    }
    let told = tokio::time::timeout(ms(10_000), lock.lost()).await;
    assert!(told.is_ok(), "{kind:?}: the holder was never told");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_running_process_behind_an_address_gives_no_lock_away() {
    for kind in [Kind::Lock, Kind::Read, Kind::Permit] {
        swapped(kind).await;
    }
}

/// The swap, with `kind` held.
async fn swapped(kind: Kind) {
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
    let lock = held_on_0_and_1(&c, &a, kind, "swapped").await;
    assert!(lock.is_valid(), "the test took too long to set up");
    proxy.retarget(standby.port);
    let first_look = std::time::Instant::now();
    let fresh = client(urls).await;
    nobody_else(&lock, &[&seen, &fresh], kind, "swapped").await;
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
async fn a_process_marked_for_another_node_list_behind_an_address_gives_no_lock_away() {
    for kind in [Kind::Lock, Kind::Read, Kind::Permit] {
        adopted(kind, Tagged::Both).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_marker_without_our_tags_behind_an_address_gives_no_lock_away() {
    for tagged in [
        Tagged::MembersOlder,
        Tagged::SpareOlder,
        Tagged::SpareGarbage,
    ] {
        adopted(Kind::Lock, tagged).await;
    }
}

/// Which markers carry tags in [`adopted`].
#[derive(Clone, Copy, Debug)]
enum Tagged {
    /// The members' and the spare's, as written.
    Both,
    /// The spare's only: the members' markers are from before tags.
    MembersOlder,
    /// The members' only: the spare's marker is from before tags.
    SpareOlder,
    /// The members'; the spare's field holds nothing readable.
    SpareGarbage,
}

/// Deletes `node`'s marker's tags, or sets them to `to`.
fn set_tags(node: &RedisNode, to: Option<&str>) {
    let mut cmd = match to {
        None => redis::cmd("HDEL"),
        Some(_) => redis::cmd("HSET"),
    };
    cmd.arg("redquorum:node").arg("tags");
    if let Some(t) = to {
        cmd.arg(t);
    }
    let _: i64 = cmd.query(&mut node.conn()).unwrap();
}

/// `node`'s marker's tags.
fn tags(node: &RedisNode) -> Option<String> {
    redis::cmd("HGET")
        .arg("redquorum:node")
        .arg("tags")
        .query(&mut node.conn())
        .unwrap()
}

/// The swap to a spare that `redquorum init` marked alone, with `kind`
/// held, the markers' tags as `tagged` says.
async fn adopted(kind: Kind, tagged: Tagged) {
    let what = format!("{kind:?}, {tagged:?}");
    let c = Cluster::start(3);
    // The spare carries our marker naming it with no loss: an operator
    // declared it new, as a node list of its own.
    let spare = RedisNode::start(Persistence::Aof);
    let alone = client(vec![spare.url()]).await;
    let declared = alone.init_new_nodes().await;
    assert_eq!(declared, [redquorum::NodeInit::Declared], "{what}");
    drop(alone);
    match tagged {
        Tagged::Both => {}
        Tagged::MembersOlder => c.nodes.iter().for_each(|n| set_tags(n, None)),
        Tagged::SpareOlder => set_tags(&spare, None),
        Tagged::SpareGarbage => set_tags(&spare, Some(",,,")),
    }

    // Two ways to node 0's address: the holder and `seen` use one, the
    // clients that first look after the swap the other. The swap reaches
    // the second first, so the fresh client's first look is the first
    // any client takes at the spare (the holder's connections, cut by the
    // swap, would otherwise race it there and record a restart first).
    let (old, new) = (Proxy::start(c.nodes[0].port), Proxy::start(c.nodes[0].port));
    let urls = vec![old.url(), c.nodes[1].url(), c.nodes[2].url()];
    let (a, seen) = (client(urls.clone()).await, client(urls).await);
    let lock = held_on_0_and_1(&c, &a, kind, "adopted").await;
    assert!(lock.is_valid(), "the test took too long to set up");
    new.retarget(spare.port);
    let urls = vec![new.url(), c.nodes[1].url(), c.nodes[2].url()];
    let fresh = client(urls.clone()).await;
    let got = kind.take(&fresh, "adopted", false).await;
    assert!(
        got.is_err(),
        "{what}: a second holder while the first has {:?} left",
        lock.validity()
    );
    match &fresh.node_trust().await[0] {
        NodeTrust::Quarantined { cause, .. } => {
            assert!(cause.contains("another node list"), "{what}: {cause}");
        }
        other => panic!("{what}: the spare counts at once: {other:?}"),
    }
    old.retarget(spare.port);
    nobody_else(&lock, &[&seen], kind, "adopted").await;
    // Once the fresh client watched its quarantine pass, the spare carries
    // our tag, and a client that comes later counts it for locks at once
    // (suspect for counters where the client that saw the swap recorded
    // it as a restart). The holder and `seen` each found a restart of
    // their own there after the fresh client's first look (they had seen
    // node 0's process), and the fresh client watches a whole quarantine
    // from its first sight of the latest: up to 14.5 s beside three builds.
    let served = fresh.serve_quarantines(QUARANTINE * 10).await;
    assert_eq!(served[0], redquorum::Serving::Served, "{what}");
    let ours = tags(&c.nodes[1]).unwrap();
    assert!(
        tags(&spare).unwrap().split(',').any(|t| t == ours),
        "{what}: {:?} lacks {ours}",
        tags(&spare)
    );
    let later = client(urls).await;
    let now = later.node_trust().await;
    assert!(
        matches!(now[0], NodeTrust::Trusted | NodeTrust::Suspect { .. }),
        "{what}: {:?}",
        now[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uptime_that_jumps_with_the_wall_clock_gives_no_lock_away() {
    for kind in [Kind::Lock, Kind::Read, Kind::Permit] {
        stepped(kind).await;
    }
}

/// The restart and step, with `kind` held.
async fn stepped(kind: Kind) {
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
    let lock = held_on_0_and_1(&c, &a, kind, "stepped").await;
    // Node 0 restarts without its data, then its wall clock steps 10 s
    // ahead: its uptime reads 10 s more than it has run.
    c.nodes[0].restart(Persistence::None);
    clock.wall(10_000_000_000, 1.0);
    let stepped = support::wait_until(ms(2_000), || uptime(&c.nodes[0]) >= 10).await;
    assert!(stepped, "the step did not reach the node");
    assert!(lock.is_valid(), "the test took too long to set up");
    let fresh = client(c.urls()).await;
    nobody_else(&lock, &[&fresh], kind, "stepped").await;
}
