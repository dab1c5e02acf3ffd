//! Test harness: real `redis-server` processes on free loopback ports, with
//! fault injection (stop, kill -9, SIGSTOP/SIGCONT, restart on the same port
//! with or without AOF) and a TCP proxy that can add latency or blackhole.
//!
//! The binary comes from `REDQUORUM_REDIS_SERVER` or `redis-server` on PATH.
//! Each node lives in its own temp dir with its log file; every failure
//! message should include [`Cluster::logs`]. Everything is killed on Drop,
//! also when a test panics.
//!
//! By concern: `node.rs` (one process: start, URLs, spawn), `node_faults.rs`
//! (stop, kill, pause, restarts), `node_reads.rs` (what a test reads of a
//! node), `ports.rs`, `cluster.rs` (N nodes and the clients on them),
//! `proxy.rs`, `sharded.rs` (a Redis Cluster), `clock.rs` (the clock
//! preload), `postgres.rs`; this file keeps the helpers every test shares.

#![allow(dead_code)]
// Each test binary uses a part of the harness.
#![allow(unused_imports)]

pub mod clock;
mod cluster;
mod node;
mod node_faults;
mod node_reads;
mod ports;
pub mod postgres;
mod proxy;
mod sharded;

pub use cluster::*;
pub use node::*;
pub use ports::*;
pub use proxy::*;
pub use sharded::*;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Our internal key of `kind` for `key` (no key prefix, no `}` outside a
/// hash tag), as the crate's docs describe the reserved namespace: in
/// `key`'s hash slot, through its hash tag or the whole key.
pub fn internal_key(kind: &str, key: &str) -> String {
    let tag = key
        .split_once('{')
        .and_then(|(_, rest)| rest.split_once('}'))
        .map(|(tag, _)| tag)
        .filter(|tag| !tag.is_empty())
        .unwrap_or(key);
    format!("redquorum:{kind}:{{{tag}}}:{key}")
}

/// Waits (up to 10 s) until `redlock` has connected to and checked every
/// member (`Redlock::connect`), so that a test's first request does not
/// also carry the connections' set-up within a short node timeout.
pub async fn connected(redlock: &redquorum::Redlock) {
    let standing = redlock
        .connect(Duration::from_secs(10))
        .await
        .expect("connected");
    assert!(
        !standing.contains(&redquorum::NodeTrust::Unknown),
        "never connected: {standing:?}"
    );
}

/// How many times `redlock`'s waiters woke up, for whatever reason.
pub fn wake_ups(redlock: &redquorum::Redlock) -> u64 {
    let s = redlock.stats();
    s.woken_by_notification + s.woken_by_ttl + s.woken_by_own_release + s.woken_by_cap
}

/// Polls `cond` every 5 ms until it holds or `timeout` passes; returns whether it held.
pub async fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Takes `resource` in one attempt (TTL 5 s) and releases it.
pub async fn locked_once(redlock: &redquorum::Redlock, resource: &str) {
    let lock = redlock
        .lock(resource, Duration::from_secs(5))
        .try_once()
        .await;
    lock.expect("lock").release().await.expect("release");
}

/// Takes `resource` with a fencing token (TTL 5 s) and releases it.
pub async fn fenced_once(redlock: &redquorum::Redlock, resource: &str) {
    let lock = redlock
        .lock(resource, Duration::from_secs(5))
        .fenced()
        .await;
    lock.expect("fenced lock").release().await.expect("release");
}

/// Takes `resource` (TTL 600 ms, renewed in the background), gives its key
/// to another owner on every node, and waits (at most 5 s) until the
/// client's renewal fails and the lock is lost.
pub async fn lose_to_another_owner(c: &Cluster, redlock: &redquorum::Redlock, resource: &str) {
    let lock = redlock.lock(resource, Duration::from_millis(600)).await;
    let lock = lock.expect("lock");
    lock.auto_extend();
    for node in &c.nodes {
        node.set(resource, "another-owner", Duration::from_secs(10));
    }
    let lost = tokio::time::timeout(Duration::from_secs(5), lock.lost()).await;
    lost.expect("the lock was never marked lost");
}
