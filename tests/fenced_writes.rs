//! The storage side of fencing on real redis-server processes: a write
//! lands only if no higher token of its resource wrote the key first.

mod support;

use std::sync::Arc;
use std::time::Duration;

use redquorum::{Fence, FenceError, FencedRedis};
use support::{Cluster, Persistence, RedisNode};

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Fenced writes to a data node of its own (not one of the quorum's).
async fn store(data: &RedisNode) -> FencedRedis<redis::aio::MultiplexedConnection> {
    let client = redis::Client::open(data.url()).unwrap();
    FencedRedis::new(client.get_multiplexed_async_connection().await.unwrap())
}

/// A holder that paused past its lock's validity writes after the next
/// holder did: refused, naming both tokens, and the next holder's value
/// stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holders_write_is_refused_after_a_later_holders() {
    let c = Cluster::start(3);
    let data = RedisNode::start(Persistence::None);
    let store = store(&data).await;
    let redlock = c.redlock();
    let first = redlock.lock("account", ms(300)).fenced().await.unwrap();
    let stale = first.fence().unwrap();
    // The first holder pauses: its lock expires and another takes it.
    let took_over = redlock
        .lock("account", ms(10_000))
        .fenced()
        .wait(ms(5000))
        .await
        .expect("the next holder");
    let fresh = took_over.fence().unwrap();
    assert!(fresh.token() > stale.token());
    store.set(fresh, "balance", 70).await.unwrap();
    let refused = store.set(stale, "balance", 100).await.unwrap_err();
    match &refused {
        FenceError::Stale { token, seen, .. } => {
            assert_eq!((*token, *seen), (stale.token(), fresh.token()));
        }
        other => panic!("not stale: {other:?}"),
    }
    let text = refused.to_string();
    assert!(
        text.contains(&format!(
            "token {} of \"account\" is below {}",
            stale.token(),
            fresh.token()
        )),
        "{text}"
    );
    assert!(
        store.incr_by(stale, "balance", 5).await.is_err(),
        "an increment too"
    );
    assert!(store.del(stale, "balance").await.is_err(), "a delete too");
    assert_eq!(data.get("balance").as_deref(), Some("70"));
    assert_eq!(
        store.fence_of("balance").await.unwrap(),
        Some(("account".to_owned(), fresh.token()))
    );
    took_over.release().await.unwrap();
}

/// A fenced multi-lock's fences: its first resource's by default, each
/// resource's by name, never the joined name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_locks_fences_name_each_resource() {
    let c = Cluster::start(3);
    let redlock = c.redlock();
    // One hash tag: members that are clusters keep both in one slot.
    let both = ["{t}from", "{t}to"];
    let lock = redlock.lock_all(&both, ms(10_000)).fenced().await.unwrap();
    let first = lock.resources()[0];
    let fence = lock.fence().unwrap();
    assert_eq!(fence.resource(), first);
    assert_eq!(Some(fence.token()), lock.fencing_token_for(first));
    for r in both {
        let fence = lock.fence_for(r).unwrap();
        assert_eq!(
            (fence.resource(), Some(fence.token())),
            (r, lock.fencing_token_for(r))
        );
    }
    assert_eq!(lock.fence_for(lock.resource()), None, "{}", lock.resource());
    assert_eq!(lock.handle().fence(), lock.fence());
    lock.release().await.unwrap();
}

/// A holder writes as often as it likes under one token; a delete keeps
/// the fence, so a stale holder cannot write the key again either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn equal_tokens_pass_and_a_delete_keeps_the_fence() {
    let data = RedisNode::start(Persistence::None);
    let store = store(&data).await;
    let holder = Fence::new("cart", 7);
    assert_eq!(store.incr_by(holder, "items", 2).await.unwrap(), 2);
    assert_eq!(store.incr_by(holder, "items", 3).await.unwrap(), 5);
    store.set(holder, "items", "9").await.unwrap();
    assert!(store.del(holder, "items").await.unwrap());
    assert!(!store.del(holder, "items").await.unwrap(), "already gone");
    let stale = store.set(Fence::new("cart", 6), "items", "1").await;
    assert!(
        matches!(stale, Err(FenceError::Stale { seen: 7, .. })),
        "{stale:?}"
    );
    assert_eq!(data.get("items"), None);
    // Tokens past 2^53 compare exactly (Lua's numbers would not).
    let big = u64::MAX - 1;
    store
        .set(Fence::new("cart", big), "items", "a")
        .await
        .unwrap();
    let below = store.set(Fence::new("cart", big - 1), "items", "b").await;
    assert!(matches!(below, Err(FenceError::Stale { .. })), "{below:?}");
    store
        .set(Fence::new("cart", big + 1), "items", "c")
        .await
        .unwrap();
    assert_eq!(data.get("items").as_deref(), Some("c"));
}

/// Tokens of one resource say nothing of another's: a key written under
/// one resource refuses the other's, however high.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_of_another_resource_is_refused() {
    let data = RedisNode::start(Persistence::None);
    let store = store(&data).await;
    store
        .set(Fence::new("orders", 3), "total", 10)
        .await
        .unwrap();
    let other = store.set(Fence::new("refunds", 1_000), "total", 0).await;
    match other {
        Err(FenceError::OtherResource {
            guarded_by,
            resource,
            ..
        }) => assert_eq!(
            (guarded_by.as_str(), resource.as_str()),
            ("orders", "refunds")
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(data.get("total").as_deref(), Some("10"));
}

/// Writers with tokens in every order at once: the writes that land do so
/// in token order, and the highest token's lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_fenced_writers_land_in_token_order() {
    let data = RedisNode::start(Persistence::None);
    let store = Arc::new(store(&data).await);
    let mut tokens: Vec<u64> = (1..=40).collect();
    // A fixed shuffle: high and low tokens interleaved.
    tokens.sort_by_key(|t| (t * 7919) % 41);
    let writers: Vec<_> = tokens
        .into_iter()
        .map(|token| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                // The result is the write's place in the order writes landed.
                let landed = store.incr_by(Fence::new("log", token), "log", 1).await;
                (token, landed)
            })
        })
        .collect();
    let mut landed = Vec::new();
    for w in writers {
        match w.await.unwrap() {
            (token, Ok(place)) => landed.push((place, token)),
            (_, Err(FenceError::Stale { .. })) => {}
            (token, Err(e)) => panic!("token {token}: {e}"),
        }
    }
    landed.sort_unstable();
    let order: Vec<u64> = landed.iter().map(|(_, t)| *t).collect();
    assert!(
        order.windows(2).all(|w| w[0] <= w[1]),
        "landed out of token order: {order:?}"
    );
    assert_eq!(order.last(), Some(&40), "the highest token lands");
}

/// A write Redis refuses (an increment of a word) lands nothing, not even
/// the fence; keys in redquorum's namespace are refused before anything
/// is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_write_leaves_the_fence_and_reserved_keys_are_refused() {
    let data = RedisNode::start(Persistence::None);
    let store = store(&data).await;
    store
        .set(Fence::new("r", 1), "word", "hello")
        .await
        .unwrap();
    let failed = store.incr_by(Fence::new("r", 5), "word", 1).await;
    assert!(
        matches!(failed, Err(FenceError::Redis { .. })),
        "{failed:?}"
    );
    assert_eq!(
        store.fence_of("word").await.unwrap(),
        Some(("r".to_owned(), 1))
    );
    let reserved = store.set(Fence::new("r", 9), "redquorum:node", "x").await;
    assert!(
        matches!(reserved, Err(FenceError::Reserved { .. })),
        "{reserved:?}"
    );
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut data.conn()).unwrap();
    assert!(!keys.iter().any(|k| k == "redquorum:node"), "{keys:?}");
}

/// Data on a Redis Cluster of three shards, each key written on the shard
/// that serves its slot: the fence lives in the key's slot (else the
/// script's two keys would be refused, `CROSSSLOT`), on every shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_writes_to_data_on_a_redis_cluster() {
    let cluster = support::ShardedCluster::start(3);
    let keys: Vec<String> = (0..30).map(|i| format!("k{i}")).collect();
    for key in &keys {
        let store = store(cluster.owner(key)).await;
        store.set(Fence::new("c", 2), key, "two").await.unwrap();
        let stale = store.set(Fence::new("c", 1), key, "one").await;
        assert!(
            matches!(stale, Err(FenceError::Stale { .. })),
            "{key}: {stale:?}"
        );
    }
    let tagged = "{user:1}:cart";
    let store = store(cluster.owner(tagged)).await;
    store.set(Fence::new("c", 1), tagged, "x").await.unwrap();
    let on_shards = cluster
        .nodes
        .iter()
        .filter(|n| {
            let n: usize = redis::cmd("DBSIZE").query(&mut n.conn()).unwrap();
            n > 0
        })
        .count();
    assert_eq!(on_shards, 3, "the keys spread over every shard");
}
