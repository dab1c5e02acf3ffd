//! How scripts reach the nodes, on real redis-server processes: in full
//! once per connection, then by digest; a node whose script cache was
//! emptied costs one failed request; a user whose ACL denies `EVALSHA`
//! keeps sending them in full. The script these tests follow is the
//! plain lock's release; a node that runs Valkey's `DELIFEQ` for us gets
//! that instead (tests/valkey.rs), so there the client's user is denied it.

mod support;

use std::time::Duration;

use redquorum::Redlock;
use support::{wait_until, Cluster};

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// `n` locks and releases of fresh resources named `name-<i>`.
async fn rounds(redlock: &Redlock, name: &str, n: usize) {
    for i in 0..n {
        let lock = redlock
            .lock(&format!("{name}-{i}"), ms(30_000))
            .try_once()
            .await
            .unwrap();
        lock.release().await.unwrap();
    }
}

/// A client as user `app`, allowed everything but `deny` and, where the
/// nodes have it, `DELIFEQ`: its plain lock's release is a script on every
/// server.
fn scripts_client(c: &Cluster, deny: &[&str]) -> Redlock {
    let mut rules: Vec<&str> = deny.to_vec();
    if c.nodes[0].has_command("delifeq") {
        rules.push("-delifeq");
    }
    Redlock::builder()
        .nodes(c.app_user(&rules))
        .build()
        .unwrap()
}

/// How many `NOSCRIPT` replies node `n` gave (one is the probe each
/// connection makes when it opens).
fn noscripts(n: &support::RedisNode) -> u64 {
    n.error_stats()
        .lines()
        .find_map(|l| l.strip_prefix("errorstat_NOSCRIPT:count="))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_goes_in_full_once_per_connection_then_by_digest() {
    let c = Cluster::start(3);
    let redlock = scripts_client(&c, &[]);
    rounds(&redlock, "warm", 1).await;
    redlock.settle().await;
    let eval: Vec<u64> = c.nodes.iter().map(|n| n.command_calls("eval")).collect();
    let sha: Vec<u64> = c.nodes.iter().map(|n| n.command_calls("evalsha")).collect();
    rounds(&redlock, "again", 20).await;
    redlock.settle().await;
    for (i, n) in c.nodes.iter().enumerate() {
        // Every release is a script: all 20 by digest, none in full.
        assert_eq!(n.command_calls("eval"), eval[i], "node {i}: in full");
        assert_eq!(
            n.command_calls("evalsha"),
            sha[i] + 20,
            "node {i}: by digest"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emptied_script_cache_costs_one_failed_request() {
    let c = Cluster::start(3);
    let redlock = scripts_client(&c, &[]);
    rounds(&redlock, "warm", 1).await;
    redlock.settle().await;
    let before = noscripts(&c.nodes[0]);
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut c.nodes[0].conn())
        .unwrap();
    // The first release after the flush finds no script on node 0 (the
    // other two release the lock) ...
    rounds(&redlock, "flushed", 1).await;
    redlock.settle().await;
    assert_eq!(noscripts(&c.nodes[0]), before + 1);
    assert_eq!(
        c.nodes[0].get("flushed-0").map(|_| 1),
        Some(1),
        "node 0 kept it"
    );
    // ... and the next goes in full, and frees the key there too.
    rounds(&redlock, "after", 3).await;
    redlock.settle().await;
    let freed = wait_until(ms(5000), || c.nodes[0].get("after-2").is_none()).await;
    assert!(
        freed,
        "node 0 still holds after-2: {:?}",
        c.nodes[0].get("after-2")
    );
    assert_eq!(noscripts(&c.nodes[0]), before + 1, "one NOSCRIPT only");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_denied_evalsha_sends_scripts_in_full() {
    let c = Cluster::start(3);
    let redlock = scripts_client(&c, &["-evalsha"]);
    let eval: Vec<u64> = c.nodes.iter().map(|n| n.command_calls("eval")).collect();
    rounds(&redlock, "denied", 10).await;
    redlock.settle().await;
    for (i, n) in c.nodes.iter().enumerate() {
        assert!(n.get("denied-9").is_none(), "node {i} kept a released lock");
        assert!(
            n.command_calls("eval") >= eval[i] + 10,
            "node {i}: releases in full: {}",
            n.command_calls("eval") - eval[i]
        );
    }
}
