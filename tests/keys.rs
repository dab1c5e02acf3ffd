//! Keys that are ours alone, on real redis-server processes: our waiting
//! lists and counters never touch a user's keys and resource names never
//! reach ours; a wrong-typed key is named; counters go on from where an
//! older version kept them; members may be one-shard Redis Clusters.

mod support;

use std::time::Duration;

use redquorum::{Error, Redlock, SerialGenerator};
use support::{internal_key, wait_until, Cluster, Persistence};

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// `waiter` waits for `resource` held by `holder`'s `lock`, then gets it
/// once it is released.
async fn hand_over(c: &Cluster, holder: redquorum::Lock, waiter: &Redlock, resource: &str) {
    let waiter = waiter.clone();
    let name = resource.to_owned();
    let waiting = tokio::spawn(async move {
        waiter
            .lock(&name, ms(5000))
            .wait(Duration::from_secs(5))
            .await
            .map(|l| l.validity())
    });
    let queued = wait_until(Duration::from_secs(3), || c.waiting_on(resource) >= 2).await;
    assert!(
        queued || waiting.is_finished(),
        "the waiter never registered"
    );
    holder.release().await.unwrap();
    let got = waiting.await.unwrap();
    assert!(got.is_ok(), "{resource}: {got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_keys_and_the_users_never_meet() {
    let c = Cluster::start(3);
    let a = c.redlock();
    let b = c.redlock();
    // A user's own sorted set where our waiting list used to be.
    for node in &c.nodes {
        let _: () = redis::cmd("ZADD")
            .arg("app:waiters")
            .arg(1)
            .arg("mine")
            .query(&mut node.conn())
            .unwrap();
    }
    let held = a.lock("app", ms(5000)).try_once().await.unwrap();
    hand_over(&c, held, &b, "app").await;
    for node in &c.nodes {
        let mut conn = node.conn();
        let members: Vec<String> = redis::cmd("ZRANGE")
            .arg("app:waiters")
            .arg(0)
            .arg(-1)
            .query(&mut conn)
            .unwrap();
        let ttl: i64 = redis::cmd("TTL")
            .arg("app:waiters")
            .query(&mut conn)
            .unwrap();
        assert_eq!((members, ttl), (vec!["mine".to_owned()], -1));
    }
    // A lock named like a waiting list does not stop waiters of `coll`.
    let other = a.lock("coll:waiters", ms(10_000)).try_once().await.unwrap();
    let held = a.lock("coll", ms(5000)).try_once().await.unwrap();
    hand_over(&c, held, &b, "coll").await;
    other.release().await.unwrap();
    // A fenced resource's counter does not take a resource's name.
    a.lock("foo", ms(5000))
        .fenced()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    a.lock("fence:foo", ms(5000))
        .try_once()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // Serial counters neither.
    let serials = SerialGenerator::builder(a.clone()).build().unwrap();
    serials.next("ORDER").await.unwrap();
    a.lock("serial:day:ORDER", ms(5000))
        .try_once()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let rev = a
        .lock("serial:day:REV", ms(10_000))
        .try_once()
        .await
        .unwrap();
    serials.next("REV").await.unwrap();
    rev.release().await.unwrap();
    // Our namespace is ours.
    let err = a
        .lock("redquorum:waiters:x", ms(5000))
        .try_once()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidConfig(_)), "{err:?}");
    assert!(err.to_string().contains("reserved"), "{err}");
}

/// Data of another type at a key we use is named, not reported as
/// contention or an outage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_typed_key_is_named() {
    let c = Cluster::start(3);
    let redlock = c.redlock();
    let fence = internal_key("fence", "fence:bar");
    for node in &c.nodes {
        node.set(&fence, "not a counter", Duration::from_secs(60));
    }
    let err = redlock.lock("bar", ms(5000)).fenced().await.unwrap_err();
    match &err {
        Error::WrongType { key, .. } => assert_eq!(key, &fence),
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("another type"), "{err}");
    redlock.settle().await;
    assert_eq!(c.set_on("bar"), 0, "the lock was released");
}

/// Counters of an older version (kept at `fence:<resource>`) go on from
/// where they were: a storage that saw token 41 accepts the next one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_go_on_from_an_older_versions_keys() {
    let c = Cluster::start(3);
    for node in &c.nodes {
        let _: () = redis::cmd("HSET")
            .arg("fence:baz")
            .arg("p")
            .arg("")
            .arg("n")
            .arg(41)
            .query(&mut node.conn())
            .unwrap();
    }
    let redlock = c.redlock();
    let lock = redlock.lock("baz", ms(5000)).fenced().await.unwrap();
    assert_eq!(lock.fencing_token(), Some(42));
    lock.release().await.unwrap();
}

/// One fencing counter for every resource: one record on the nodes, tokens
/// increasing across resources.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_fencing_counter_keeps_one_record() {
    let c = Cluster::start(3);
    let redlock = c.builder().fencing_counter("invoices").build().unwrap();
    let mut last = 0;
    for i in 0..5 {
        let lock = redlock
            .lock(&format!("invoice-{i}"), ms(5000))
            .fenced()
            .await
            .unwrap();
        let token = lock.fencing_token().unwrap();
        assert!(token > last, "{token} after {last}");
        last = token;
        lock.release().await.unwrap();
    }
    let mut conn = c.nodes[0].conn();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*fence*").query(&mut conn).unwrap();
    assert_eq!(keys, [internal_key("fence", "fence:invoices")]);
}

/// Members that are one-shard Redis Clusters: every script keeps its keys
/// in the lock key's slot (a hash tag in the name is respected), so waiting,
/// telling releases, fencing and serial numbers work. (Waiters failed with
/// CROSSSLOT, and with `strict_fifo(true)` release never released.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_shard_cluster_members_work() {
    let c = Cluster::start_with(3, Persistence::OneShardCluster);
    let a = c.builder().strict_fifo(true).build().unwrap();
    let b = c.builder().strict_fifo(true).build().unwrap();
    for resource in ["orders", "{user42}:cart"] {
        let held = a.lock(resource, ms(5000)).try_once().await.unwrap();
        hand_over(&c, held, &b, resource).await;
        a.settle().await;
        b.settle().await;
        let freed = wait_until(Duration::from_secs(3), || c.set_on(resource) == 0).await;
        assert!(
            freed,
            "{resource} never released: {:?}\n{}",
            c.values(resource),
            c.logs()
        );
    }
    let lock = a.lock("{user42}:cart", ms(5000)).fenced().await.unwrap();
    assert!(lock.fencing_token().is_some());
    lock.release().await.unwrap();
    let serials = SerialGenerator::builder(a.clone()).build().unwrap();
    serials.next_batch("ORDER", 3).await.unwrap();
}
