//! Messages an operator reads, on real redis-server processes: one line,
//! the cause in plain words, the fix where one is obvious.

mod support;

use std::time::Duration;

use redquorum::{Error, Redlock};
use support::Cluster;

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn one_line(e: &Error) -> String {
    let text = e.to_string();
    assert!(!text.contains('\n'), "more than one line: {text}");
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_is_not_redis_is_named_so_in_one_line() {
    let c = Cluster::start(3);
    let redlock = Redlock::builder()
        .nodes([
            format!("redis://127.0.0.1:{}", support::not_redis()),
            format!("redis://127.0.0.1:{}", support::not_redis()),
            c.nodes[0].url(),
        ])
        .build()
        .unwrap();
    let err = redlock
        .lock("not_redis", ms(5000))
        .try_once()
        .await
        .unwrap_err();
    let text = one_line(&err);
    // Both nodes named, the cause once for both.
    assert_eq!(text.matches("not a Redis server").count(), 1, "{text}");
    assert!(
        text.contains("2 of 3 nodes failed (0 (127.0.0.1:"),
        "{text}"
    );
    assert!(!text.contains("Parse error"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_wrong_password_is_said_plainly() {
    let c = Cluster::start(1);
    let mut conn = c.nodes[0].conn();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("s3cret-pw")
        .query(&mut conn)
        .unwrap();
    let port = c.nodes[0].port;
    let missing = Redlock::builder()
        .nodes([format!("redis://127.0.0.1:{port}")])
        .build()
        .unwrap()
        .lock("auth", ms(5000))
        .try_once()
        .await
        .unwrap_err();
    let text = one_line(&missing);
    assert!(text.contains("the node requires a password"), "{text}");
    let wrong = Redlock::builder()
        .nodes([format!("redis://:wrong-pw@127.0.0.1:{port}")])
        .build()
        .unwrap()
        .lock("auth", ms(5000))
        .try_once()
        .await
        .unwrap_err();
    let text = one_line(&wrong);
    assert!(text.contains("authentication failed"), "{text}");
    assert!(!text.contains("wrong-pw") && !format!("{wrong:?}").contains("wrong-pw"));
    // No wait fixes a wrong password: a waiting call and serial numbers
    // fail at once with the cause, not with a timeout after the wait.
    let client = Redlock::builder()
        .nodes([format!("redis://:wrong-pw@127.0.0.1:{port}")])
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    let waited = client
        .lock("auth", ms(5000))
        .wait(ms(30_000))
        .await
        .unwrap_err();
    assert!(waited.needs_operator() && !waited.is_timeout(), "{waited}");
    assert!(!waited.is_retryable());
    let serial = redquorum::SerialGenerator::builder(client).build().unwrap();
    let issued = serial.next("AUTH").await.unwrap_err();
    assert!(issued.needs_operator(), "{issued}");
    assert!(
        started.elapsed() < ms(15_000),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_that_refuses_a_command_names_what_is_needed() {
    let c = Cluster::start(3);
    for n in &c.nodes {
        let mut conn = n.conn();
        let _: () = redis::cmd("ACL")
            .arg(&["SETUSER", "app", "on", ">app-pw", "~*", "+@all", "-zadd"])
            .query(&mut conn)
            .unwrap();
    }
    let urls = c.urls_as("redis://app:app-pw@");
    // The plain lock needs no ZADD; waiting for a held one does.
    let holder = c.redlock();
    let held = holder.lock("acl", ms(30_000)).try_once().await.unwrap();
    let redlock = Redlock::builder().nodes(&urls).build().unwrap();
    let err = redlock
        .lock("acl", ms(5000))
        .wait(ms(500))
        .await
        .unwrap_err();
    let text = one_line(&err);
    assert!(!err.is_contended(), "{text}");
    assert!(text.contains("ACL user may not run"), "{text}");
    assert!(text.contains("ZADD"), "{text}");
    held.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_shorter_than_the_round_trip_says_so() {
    let c = Cluster::start(3);
    // 20 ms each way: no 3 ms lock can ever be valid.
    let (_proxies, builder) = c.far_builder(20);
    let redlock = builder.retry_count(2).build().unwrap();
    let once = redlock
        .lock("too_short", ms(3))
        .try_once()
        .await
        .unwrap_err();
    assert!(matches!(once, Error::TtlTooShort { .. }), "{once:?}");
    let text = one_line(&once);
    assert!(text.contains("use a longer TTL"), "{text}");
    assert!(!text.contains("expired or was lost"), "{text}");
    let waited = redlock.lock("too_short", ms(3)).await.unwrap_err();
    let text = one_line(&waited);
    assert!(text.contains("after waiting"), "{text}");
    assert!(text.contains("use a longer TTL"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_says_how_long_it_waited() {
    let c = Cluster::start(3);
    let holder = c.redlock();
    let held = holder
        .lock("patience", ms(30_000))
        .try_once()
        .await
        .unwrap();
    let redlock = c.builder().retry_count(3).build().unwrap();
    let err = redlock.lock("patience", ms(5000)).await.unwrap_err();
    assert!(err.is_contended(), "{err:?}");
    let text = one_line(&err);
    assert!(
        text.starts_with("gave up on \"patience\" after waiting "),
        "{text}"
    );
    assert!(text.ends_with("held by another owner"), "{text}");
    held.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_not_waited_for_are_explained() {
    let urls: Vec<String> = support::free_ports(5)
        .into_iter()
        .map(|port| format!("redis://127.0.0.1:{port}"))
        .collect();
    let redlock = Redlock::builder().nodes(&urls).build().unwrap();
    let err = redlock
        .lock("refused", ms(1000))
        .try_once()
        .await
        .unwrap_err();
    let text = one_line(&err);
    if !text.contains("5 of 5 nodes failed") {
        assert!(
            text.contains("not waited for (a quorum was already out of reach)"),
            "{text}"
        );
    }
}

/// Fresh nodes not declared new: the first client's refusal and a second
/// client's both name `redquorum init` (the second reads the loss from the
/// marker the first one's look wrote); and nodes that answered with a yes
/// that does not count are not said to have answered nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_client_on_fresh_nodes_is_pointed_to_init() {
    let c = Cluster::start_undeclared(3, support::Persistence::Aof);
    for client in ["first", "second"] {
        let r = c.builder().retry_count(0).build().unwrap();
        let err = r.lock("fresh", ms(1_000)).try_once().await.unwrap_err();
        let text = one_line(&err);
        assert!(text.contains("`redquorum init`"), "{client}: {text}");
        assert!(!text.contains("none answered"), "{client}: {text}");
    }
}

#[test]
fn node_urls_that_cannot_work_are_refused_with_the_reason() {
    let refused = |urls: &[&str]| {
        let e = Redlock::builder()
            .nodes(urls.iter().copied())
            .build()
            .unwrap_err();
        one_line(&e)
    };
    // One server spelled two ways.
    for pair in [
        ["redis://localhost:7601", "redis://127.0.0.1:7601/"],
        ["redis://localhost", "redis://127.0.0.1:6379/0"],
        ["redis://[::1]:7601", "redis://LOCALHOST:7601"],
    ] {
        let text = refused(&pair);
        assert!(text.contains("is node 0 again"), "{pair:?}: {text}");
    }
    // Two databases of one server are one node, not two independent ones.
    let text = refused(&["redis://127.0.0.1:7601/0", "redis://127.0.0.1:7601/1"]);
    assert!(text.contains("is node 0 again"), "{text}");
    // Different ports are different nodes.
    assert!(Redlock::builder()
        .nodes(["redis://127.0.0.1:7601", "redis://127.0.0.1:7602"])
        .build()
        .is_ok());
    for (urls, says) in [
        (&["redis://127.0.0.1:1", ""][..], "empty entry"),
        (&["redis://127.0.0.1:99999"][..], "not a port number"),
        (&["redis://127.0.0.1:abc"][..], "not a port number"),
        (&["http://127.0.0.1:6379"][..], "scheme is not Redis's"),
        (
            &["redis://127.0.0.1:7601 redis://127.0.0.1:7602"][..],
            "separate node URLs with commas",
        ),
    ] {
        let text = refused(urls);
        assert!(text.contains(says), "{urls:?}: {text}");
        assert!(!text.contains("did you mean \"redis://\""), "{text}");
    }
    let text = refused(&["http://127.0.0.1:6379"]);
    assert!(
        text.contains("did you mean \"redis://127.0.0.1:6379\""),
        "{text}"
    );
}

/// The minimal ACL user in docs/configuration.md can do everything: plain and waited-for
/// locks, push-woken waiting, fencing tokens, serial numbers and a
/// semaphore's named wake-ups.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_minimal_acl_user_is_enough() {
    let readme = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/configuration.md"
    ))
    .expect("docs");
    let start = readme.find("`ACL SETUSER app").expect("the ACL line") + 1;
    let acl: String = readme[start..]
        .split('`')
        .next()
        .unwrap()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let c = Cluster::start(3);
    // Members that are clusters: with the words the docs add for them.
    let cluster_words = c.nodes[0].is_one_shard().then(|| {
        let at = readme
            .find("On a member that is a Redis Cluster, add `")
            .expect("the words for cluster members");
        readme[at..].split('`').nth(1).unwrap().to_owned()
    });
    let acl = match cluster_words {
        Some(more) => format!(
            "{acl} {}",
            more.split_whitespace().collect::<Vec<_>>().join(" ")
        ),
        None => acl,
    };
    // Valkey's own release: with the words the docs add for it.
    let valkey_words = {
        let at = readme
            .find("on Valkey 9.0 and later add `")
            .expect("the words for Valkey");
        readme[at..].split('`').nth(1).unwrap().to_owned()
    };
    for n in &c.nodes {
        let mut conn = n.conn();
        let mut cmd = redis::cmd("ACL");
        for word in acl.split(' ').skip(1) {
            cmd.arg(if word == ">PASSWORD" { ">app-pw" } else { word });
        }
        if n.has_command("delifeq") {
            cmd.arg(valkey_words.split_whitespace().collect::<Vec<_>>());
        }
        let _: () = cmd.query(&mut conn).unwrap();
    }
    let urls = c.urls_as("redis://app:app-pw@");
    let a = Redlock::builder().nodes(&urls).build().unwrap();
    let b = Redlock::builder()
        .nodes(&urls)
        .wait_cap(ms(10_000))
        .build()
        .unwrap();
    let b2 = b.clone();
    let held = a.lock("acl_all", ms(10_000)).try_once().await.unwrap();
    held.extend(ms(10_000)).await.unwrap();
    assert!(held.is_held().await.unwrap());
    let waiter = tokio::spawn(async move { b.lock("acl_all", ms(5000)).wait(ms(4000)).await });
    assert!(
        support::wait_until(ms(3000), || c.waiting_on("acl_all") >= 2).await,
        "registered as a waiter"
    );
    // The waiter's notification connection opens after its attempt.
    let tracking = || c.nodes.iter().any(|n| n.tracking_clients() > 0);
    assert!(
        support::wait_until(ms(3000), tracking).await,
        "notifications are on"
    );
    let released = std::time::Instant::now();
    held.release().await.unwrap();
    let lock = waiter.await.unwrap().unwrap();
    assert!(released.elapsed() < ms(2000), "woken, not polled at 10 s");
    lock.release().await.unwrap();
    let fenced = a.lock("acl_all", ms(5000)).fenced().await.unwrap();
    assert_eq!(fenced.fencing_token(), Some(1));
    fenced.release().await.unwrap();
    let serials = redquorum::SerialGenerator::builder(a.clone())
        .build()
        .unwrap();
    serials.next("ACL").await.unwrap();
    // A semaphore's waiter hears the release that names it.
    let (sem_a, sem_b) = (
        a.semaphore("acl", 1).unwrap(),
        b2.semaphore("acl", 1).unwrap(),
    );
    let held = sem_a.acquire(ms(10_000)).try_once().await.unwrap();
    let waiter = tokio::spawn(async move { sem_b.acquire(ms(5000)).wait(ms(4000)).await });
    let channel = support::internal_key("wake", "redquorum:semaphore:{acl}:acl");
    let heard = || {
        c.nodes.iter().any(|n| {
            let (_, subscribers): (String, usize) = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(&channel)
                .query(&mut n.conn())
                .unwrap();
            subscribers > 0
        })
    };
    assert!(
        support::wait_until(ms(3000), heard).await,
        "the waiter hears the channel"
    );
    // Subscribed is not yet waiting: a release before its attempt was
    // refused on a quorum would hand it the permit on that attempt, with no
    // wake-up to count. Listed on every node, its attempt ran (and was
    // refused) everywhere.
    let everywhere = c.nodes.len();
    assert!(
        support::wait_until(ms(3000), || c.waiting_on("redquorum:semaphore:{acl}:acl")
            >= everywhere)
        .await,
        "the waiter is listed on every node"
    );
    let woken = b2.stats().woken_by_notification;
    let released = std::time::Instant::now();
    held.release().await.unwrap();
    waiter.await.unwrap().unwrap().release().await.unwrap();
    assert!(released.elapsed() < ms(2000), "woken, not polled at 10 s");
    assert!(b2.stats().woken_by_notification > woken);
    // Where the node has it, the plain lock's release was Valkey's own,
    // never refused.
    for n in c.nodes.iter().filter(|n| n.has_command("delifeq")) {
        assert_eq!(n.command_stat("delifeq", "rejected_calls"), 0);
        assert!(n.command_calls("delifeq") > 0, "DELIFEQ never ran");
    }
}

/// A member that is one shard of a Redis Cluster with several holds only
/// part of the key space: the lock fails at once, saying so, and nothing
/// is written there (the shards of one cluster named as three members is
/// the mistake made here). Where an ACL hides `CLUSTER INFO`, the nodes'
/// `MOVED` replies say the same (the marker's `MOVED` quarantined those
/// nodes first, so that client waits out its timeout).
/// What `lock_timeout` (5 s) on a client of `urls` says, and how long it
/// took to say it.
async fn lock_refused(urls: &[String]) -> (String, Duration) {
    let redlock = Redlock::builder().nodes(urls).build().unwrap();
    let started = std::time::Instant::now();
    let err = redlock
        .lock("sharded", ms(5_000))
        .wait(ms(5_000))
        .await
        .unwrap_err();
    (one_line(&err), started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_is_one_shard_of_several_is_named_so_at_once() {
    let cluster = support::ShardedCluster::start(3);
    let urls: Vec<String> = cluster.nodes.iter().map(|n| n.url()).collect();
    let (text, took) = lock_refused(&urls).await;
    assert!(
        text.contains("one of 3 shards of a Redis Cluster"),
        "{text}"
    );
    assert!(text.contains("name standalone nodes"), "{text}");
    assert_eq!(text.matches("holds only part").count(), 1, "{text}");
    assert!(took < ms(2_000), "said at once, not after waiting");
    let keys =
        |n: &support::RedisNode| -> usize { redis::cmd("DBSIZE").query(&mut n.conn()).unwrap() };
    assert!(
        cluster.nodes.iter().all(|n| keys(n) == 0),
        "nothing written"
    );
    for n in &cluster.nodes {
        let _: () = redis::cmd("ACL")
            .arg(&[
                "SETUSER", "app", "on", ">app-pw", "~*", "&*", "+@all", "-cluster",
            ])
            .query(&mut n.conn())
            .unwrap();
    }
    let hidden: Vec<String> = cluster
        .nodes
        .iter()
        .map(|n| format!("redis://app:app-pw@127.0.0.1:{}", n.port))
        .collect();
    let (text, _) = lock_refused(&hidden).await;
    assert!(
        text.contains("one shard of a Redis Cluster with several (it sent us to 127.0.0.1:"),
        "{text}"
    );
}
