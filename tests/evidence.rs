//! Trust from evidence, on real nodes: a node configured durably (AOF,
//! `appendfsync always`) that comes back without its data, or from an old
//! backup, never lets a second holder, a second leader or a duplicate
//! number through; a flush is seen; a restart this client saw stays a loss
//! whatever the marker says; and only new nodes can be declared new.

mod support;

use std::time::Duration;

use redquorum::{NodeErrorKind, NodeInit, NodeTrust, Redlock, SerialGenerator};
use support::{wait_until, Cluster};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A client that tries once.
fn client(c: &Cluster) -> Redlock {
    c.builder().retry_count(0).build().unwrap()
}

/// What each node's connection check makes of it, for a new client.
async fn trust(c: &Cluster) -> Vec<NodeTrust> {
    c.redlock().node_trust().await
}

fn quarantined_because(t: &NodeTrust, words: &str) -> bool {
    matches!(t, NodeTrust::Quarantined { cause, .. } if cause.contains(words))
}

/// How a held lock's nodes lose it: two of three wiped, or put back to a
/// backup taken before the lock was taken.
#[derive(Clone, Copy, Debug)]
enum Loss {
    Wiped,
    OldBackup,
}

/// A holds `res` on all three nodes; then nodes 0 and 1 lose it as `loss`
/// says and come back with the same (durable) settings. Returns A's lock
/// and the end of its validity before the loss (A's client cuts it once it
/// finds the loss: its quorum needed those nodes).
async fn held_then_lost(
    c: &mut Cluster,
    a: &Redlock,
    res: &str,
    loss: Loss,
) -> (redquorum::Lock, tokio::time::Instant) {
    let backups = [c.nodes[0].backup(), c.nodes[1].backup()];
    let lock = a.lock(res, ms(20_000)).try_once().await.unwrap();
    let until = lock.valid_until();
    assert!(wait_until(ms(2_000), || c.set_on(res) == 3).await);
    for (n, backup) in backups.iter().enumerate() {
        match loss {
            Loss::Wiped => c.nodes[n].restart_wiped(),
            Loss::OldBackup => c.nodes[n].restart_from_backup(backup),
        }
    }
    assert_eq!(c.set_on(res), 1, "the lock survives on node 2 only");
    (lock, until)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_or_restored_durable_node_gives_no_held_lock_away() {
    for loss in [Loss::Wiped, Loss::OldBackup] {
        let mut c = Cluster::start(3);
        let a = client(&c);
        let res = format!("ev_lock_{loss:?}");
        let (_lock, until) = held_then_lost(&mut c, &a, &res, loss).await;
        let b = client(&c);
        let err = b.lock(&res, ms(5_000)).try_once().await.unwrap_err();
        assert!(
            tokio::time::Instant::now() < until,
            "{loss:?}: A's TTL ran out"
        );
        assert!(!err.is_contended(), "{loss:?}: {err}");
        let t = b.node_trust().await;
        let cause = match loss {
            Loss::Wiped => "none of our marks",
            Loss::OldBackup => "restarted",
        };
        // A's client, which reads its nodes while it holds a lock, may have
        // found the loss first and recorded it in our marker: B then reads
        // it from there.
        let found = "found by another client";
        assert!(
            t[..2]
                .iter()
                .all(|t| quarantined_because(t, cause) || quarantined_because(t, found)),
            "{loss:?}: {t:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_durable_node_makes_no_second_leader() {
    let mut c = Cluster::start(3);
    let a = client(&c);
    let leader = a.election("ev_lead", ms(20_000)).unwrap();
    let first = leader.campaign("a").await.unwrap();
    let until = first.valid_until();
    // The leadership's keys reach the third node too.
    let keys = |n: &support::RedisNode| redis::cmd("DBSIZE").query::<usize>(&mut n.conn()).unwrap();
    let full = keys(&c.nodes[0]);
    assert!(wait_until(ms(2_000), || c.nodes.iter().all(|n| keys(n) == full)).await);
    c.nodes[0].restart_wiped();
    c.nodes[1].restart_wiped();
    let b = client(&c);
    let second = b
        .election("ev_lead", ms(20_000))
        .unwrap()
        .campaign("b")
        .wait(ms(1_500))
        .await;
    assert!(second.is_err(), "a second leader: {second:?}");
    // Refused while the first leadership's TTL had not run out (its own
    // client may have cut it already: its quorum needed the wiped nodes).
    assert!(tokio::time::Instant::now() < until);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wiped_durable_nodes_issue_no_number_twice() {
    let mut c = Cluster::start(3);
    let serial = |c: &Cluster| {
        SerialGenerator::builder(client(c))
            .width(6)
            .build()
            .unwrap()
    };
    let a = serial(&c);
    let mut last = String::new();
    for _ in 0..5 {
        last = a.next("EV").await.unwrap().to_string();
    }
    // Node 2, the only one that keeps the record, is away while the other
    // two come back empty: a new client must not start again at 1.
    c.nodes[2].stop();
    c.nodes[0].restart_wiped();
    c.nodes[1].restart_wiped();
    let b = serial(&c);
    let err = b.next("EV").await.unwrap_err();
    assert!(!err.is_contended(), "{err}");
    // With node 2 back, numbering goes on after the last one issued.
    c.nodes[2].restart(support::Persistence::Aof);
    let next = b.next("EV").await.unwrap().to_string();
    assert!(next > last, "{next} after {last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_this_client_saw_stays_a_loss_whatever_the_marker_says() {
    let mut c = Cluster::start(3);
    let a = client(&c);
    assert_eq!(a.node_trust().await, vec![NodeTrust::Trusted; 3]);
    c.nodes[0].restart_wiped();
    // An operator declares the wiped node new before A reconnects (with
    // the node list it serves in: declared on its own, it would be another
    // list's node, `tests/sight.rs`).
    let operator = c.redlock();
    assert_eq!(
        operator.init_new_nodes().await,
        vec![NodeInit::Declared, NodeInit::InUse, NodeInit::InUse]
    );
    // A new client takes the operator's word; A saw the process before.
    assert_eq!(trust(&c).await[0], NodeTrust::Trusted);
    let t = a.node_trust().await;
    assert!(quarantined_because(&t[0], "restarted"), "{t:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_is_seen_by_every_client() {
    let c = Cluster::start(3);
    let a = client(&c);
    assert_eq!(a.node_trust().await, vec![NodeTrust::Trusted; 3]);
    let _: () = redis::cmd("FLUSHALL")
        .query(&mut c.nodes[0].conn())
        .unwrap();
    // A client that never saw the node reads the flush in its statistics.
    let t = trust(&c).await;
    assert!(quarantined_because(&t[0], "flushed"), "{t:?}");
    // A's connections are remade (a new connection is checked): it keeps
    // the quarantine the marker now records.
    let _: redis::Value = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .query(&mut c.nodes[0].conn())
        .unwrap();
    // The first look may still go out on the killed connection, before
    // the client has noticed: look again until a new one is made and
    // checked (bounded).
    let mut t = a.node_trust().await;
    for _ in 0..50 {
        if matches!(t[0], NodeTrust::Quarantined { .. }) {
            break;
        }
        tokio::time::sleep(ms(100)).await;
        t = a.node_trust().await;
    }
    assert!(matches!(t[0], NodeTrust::Quarantined { .. }), "{t:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_new_nodes_can_be_declared_new() {
    let c = Cluster::start_undeclared(4, support::Persistence::Aof);
    // Node 1 is in use; node 2 holds someone's key; node 3 restarted
    // under a client's eyes (its marker says so).
    let user = Redlock::builder()
        .nodes([c.nodes[1].url()])
        .build()
        .unwrap();
    assert_eq!(user.init_new_nodes().await, vec![NodeInit::Declared]);
    c.nodes[2].set("theirs", "x", ms(60_000));
    let mut c = c;
    let watcher = Redlock::builder()
        .nodes([c.nodes[3].url()])
        .build()
        .unwrap();
    let _ = watcher.node_trust().await;
    c.nodes[3].restart_wiped();
    let _ = watcher.node_trust().await;
    // Node 0 was only looked at by a client (its first check marked it
    // "unmarked"): still new.
    let _ = trust(&c).await;
    let done = c.redlock().init_new_nodes().await;
    assert_eq!(
        done,
        vec![
            NodeInit::Declared,
            NodeInit::InUse,
            NodeInit::NotEmpty,
            NodeInit::InUse
        ]
    );
    // Each declared node counts for its own node list.
    for (i, node) in c.nodes[..2].iter().enumerate() {
        let own = Redlock::builder().nodes([node.url()]).build().unwrap();
        assert_eq!(own.node_trust().await, [NodeTrust::Trusted], "node {i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_reaches_a_quorum_up_front_and_names_the_members_it_could_not() {
    let mut c = Cluster::start(3);
    c.nodes[2].kill();
    let redlock = c.redlock();
    let standing = redlock
        .connect(Duration::from_secs(5))
        .await
        .expect("two members of three are a quorum");
    assert_eq!(
        standing,
        [NodeTrust::Trusted, NodeTrust::Trusted, NodeTrust::Unknown]
    );
    c.nodes[1].pause();
    let err = redlock.connect(Duration::from_secs(2)).await.unwrap_err();
    c.nodes[1].resume();
    let failed: Vec<(usize, bool)> = err
        .node_failures()
        .iter()
        .map(|f| (f.index, matches!(f.kind, NodeErrorKind::Timeout(_))))
        .collect();
    // The paused member never answered; the dead one refused.
    assert_eq!(failed, [(1, true), (2, false)], "{err}");
    let text = err.to_string();
    assert!(text.starts_with("no quorum: 2 of 3 nodes failed"), "{text}");
    // Once the member is back, it is reached again.
    let standing = redlock.connect(Duration::from_secs(5)).await.unwrap();
    assert_eq!(standing[1], NodeTrust::Trusted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_tries_a_refusing_member_again_until_its_limit() {
    let mut c = Cluster::start(3);
    c.nodes[2].kill();
    // The proxy accepts, then closes: the member refuses every try.
    let proxy = support::Proxy::start(c.nodes[2].port);
    let urls = [c.nodes[0].url(), c.nodes[1].url(), proxy.url()];
    let redlock = Redlock::builder().nodes(urls).build().unwrap();
    let connecting = tokio::spawn({
        let redlock = redlock.clone();
        async move { redlock.connect(Duration::from_secs(60)).await }
    });
    assert!(
        wait_until(Duration::from_secs(20), || proxy.accepted() >= 2).await,
        "tried once only: {}",
        proxy.accepted()
    );
    c.nodes[2].restart(support::Persistence::Aof);
    let standing = connecting.await.unwrap().unwrap();
    assert_ne!(standing[2], NodeTrust::Unknown, "{standing:?}");
}
