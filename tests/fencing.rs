//! Fencing tokens under load, on real redis-server processes: many holders
//! minting from one shared counter at once all get a token (their mints are
//! group-committed and take turns across clients), tokens are unique and
//! increase per resource, and a counter's errors name the counter.

mod support;

use std::collections::HashSet;
use std::time::Duration;

use support::{internal_key, Cluster};

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Holders per client, and locks each takes in turn.
const HOLDERS: usize = 32;
const ROUNDS: usize = 5;

/// 64 holders in two clients (32 each), each taking its own resource five
/// times with a fencing token from one shared counter: all 320 fenced
/// locks are granted, the tokens are unique, and each resource's tokens
/// increase. (With a compare-and-set round per mint, 264-288 of 320 failed
/// with `CounterContention`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_holders_on_one_shared_counter_all_get_tokens() {
    let c = Cluster::start(3);
    let clients = [
        c.builder().fencing_counter("invoices").build().unwrap(),
        c.builder().fencing_counter("invoices").build().unwrap(),
    ];
    let mut tasks = Vec::new();
    for (i, redlock) in (0..2 * HOLDERS).zip(clients.iter().cycle()) {
        let redlock = redlock.clone();
        tasks.push(tokio::spawn(async move {
            let resource = format!("invoice-{i}");
            let mut tokens = Vec::new();
            for _ in 0..ROUNDS {
                let lock = redlock.lock(&resource, ms(10_000)).fenced().await?;
                tokens.push(lock.fencing_token().expect("a fenced lock has a token"));
                lock.release().await?;
            }
            Ok::<_, redquorum::Error>(tokens)
        }));
    }
    let mut failed = Vec::new();
    let mut all = HashSet::new();
    for task in tasks {
        match task.await.unwrap() {
            Ok(tokens) => {
                assert!(
                    tokens.windows(2).all(|w| w[0] < w[1]),
                    "one resource's tokens go back: {tokens:?}"
                );
                for t in tokens {
                    assert!(all.insert(t), "token {t} given twice");
                }
            }
            Err(e) => failed.push(e.to_string()),
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} holders failed, first: {:?}",
        failed.len(),
        2 * HOLDERS,
        failed.first()
    );
    assert_eq!(all.len(), 2 * HOLDERS * ROUNDS);
    // The counter's record (the highest a node holds) is the highest token.
    let key = internal_key("fence", "fence:invoices");
    let record = c
        .nodes
        .iter()
        .map(|node| {
            let n: u64 = redis::cmd("HGET")
                .arg(&key)
                .arg("n")
                .query(&mut node.conn())
                .unwrap();
            n
        })
        .max();
    assert_eq!(record, all.iter().max().copied());
}

/// A counter that cannot mint names itself, not the resource the holder
/// asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_counters_error_names_the_counter() {
    let c = Cluster::start(3);
    let key = internal_key("fence", "fence:invoices");
    for node in &c.nodes {
        let _: () = redis::cmd("HSET")
            .arg(&key)
            .arg("p")
            .arg("")
            .arg("n")
            .arg(u64::MAX)
            .query(&mut node.conn())
            .unwrap();
    }
    let redlock = c.builder().fencing_counter("invoices").build().unwrap();
    let err = redlock
        .lock("invoice-7", ms(5_000))
        .fenced()
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("\"invoices\""), "{text}");
    assert!(!text.contains("invoice-7"), "{text}");
    redlock.settle().await;
    assert_eq!(c.set_on("invoice-7"), 0, "the lock was released");
}
