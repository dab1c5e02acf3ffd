//! Scenario (d): one contended resource. Independent clients (each its own
//! connections, as separate processes would have) run tasks that lock the
//! same resource, hold it 1 ms, release it, again and again. Measured per
//! acquisition: how long the task waited; per cell: acquisitions per
//! second. Next to them: the limit (one task alone, the same loop, nobody
//! to hand over to) and the fair-share wait, `(K - 1) / limit` for K tasks
//! served in turn.
//!
//! Also measured: how soon a waiter takes the lock after another client's
//! `release()` returns, and after a crashed holder's TTL runs out.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::Stats;
use crate::support::Cluster;

/// Independent clients.
pub const CLIENTS: usize = 3;
/// Tasks per client.
pub const TASKS: usize = 8;
/// Acquisitions per task (bounded in time too).
const ROUNDS: usize = 30;
/// How long a holder holds the lock.
const HOLD: Duration = Duration::from_millis(1);
/// TTL of the contended lock: far above any wait here.
const TTL: Duration = Duration::from_secs(10);
/// The one resource.
const RESOURCE: &str = "contended";

/// One cell: `clients` × `tasks` loops of `acquire` (returns the release
/// to run after the hold), each `ROUNDS` times or until `limit` passes.
/// `Stats::lat` holds the waits.
pub fn cell<C, A, Fut, R, RFut>(
    rt: &tokio::runtime::Runtime,
    clients: &[Arc<C>],
    tasks: usize,
    limit: Duration,
    acquire: A,
) -> Stats
where
    C: Send + Sync + 'static,
    A: Fn(Arc<C>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Option<R>> + Send,
    R: FnOnce() -> RFut + Send,
    RFut: Future<Output = ()> + Send,
{
    rt.block_on(async {
        let start = Instant::now();
        let deadline = start + limit;
        let mut joins = Vec::new();
        for client in clients {
            for _ in 0..tasks {
                let (client, acquire) = (Arc::clone(client), acquire.clone());
                joins.push(tokio::spawn(async move {
                    let mut s = Stats::default();
                    for _ in 0..ROUNDS {
                        if Instant::now() >= deadline {
                            break;
                        }
                        let t0 = Instant::now();
                        match acquire(Arc::clone(&client)).await {
                            Some(release) => {
                                s.lat.push(t0.elapsed());
                                s.ok += 1;
                                tokio::time::sleep(HOLD).await;
                                release().await;
                            }
                            None => s.failed += 1,
                        }
                    }
                    s
                }));
            }
        }
        let mut all = Stats::default();
        for j in joins {
            all.merge(j.await.expect("task"));
        }
        all.elapsed = start.elapsed();
        all
    })
}

/// Redquorum clients for (d), with notifications on or off.
pub fn ours(urls: &[String], notifications: bool) -> Vec<Arc<redquorum::Redlock>> {
    (0..CLIENTS)
        .map(|_| {
            Arc::new(
                redquorum::Redlock::builder()
                    .nodes(urls)
                    .notifications(notifications)
                    .build()
                    .expect("redquorum"),
            )
        })
        .collect()
}

/// Takes the contended lock with redquorum (waiting at most 10 s).
pub async fn ours_acquire(
    c: Arc<redquorum::Redlock>,
) -> Option<impl FnOnce() -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> + Send> {
    let lock = c
        .lock(RESOURCE, TTL)
        .wait(Duration::from_secs(10))
        .await
        .ok()?;
    Some(
        move || -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
            Box::pin(async move {
                let _ = lock.release().await;
            })
        },
    )
}

/// Takes the contended lock with rslock (its own retry loop, at most 10 s).
pub async fn rslock_acquire(
    m: Arc<rslock::LockManager>,
) -> Option<impl FnOnce() -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> + Send> {
    let lock = tokio::time::timeout(
        Duration::from_secs(10),
        m.acquire_no_guard(RESOURCE.as_bytes(), TTL),
    )
    .await
    .ok()?
    .ok()?;
    Some(
        move || -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
            Box::pin(async move { m.unlock(&lock).await })
        },
    )
}

/// How soon a waiter (another client) takes the lock after a holder's
/// `release()` returns: `samples` handovers.
pub fn after_release(rt: &tokio::runtime::Runtime, urls: &[String], samples: usize) -> Stats {
    let clients = ours(urls, true);
    let (holder, waiter) = (Arc::clone(&clients[0]), Arc::clone(&clients[1]));
    rt.block_on(async move {
        let mut s = Stats::default();
        for i in 0..samples {
            let key = format!("handover{i}");
            let held = holder.lock(&key, TTL).try_once().await.expect("free");
            let (w, k) = (Arc::clone(&waiter), key.clone());
            let task = tokio::spawn(async move {
                let lock = w.lock(&k, TTL).wait(Duration::from_secs(5)).await;
                (Instant::now(), lock)
            });
            // Let the waiter fail its first attempt and go to sleep.
            tokio::time::sleep(Duration::from_millis(20)).await;
            held.release().await.expect("release");
            let released = Instant::now();
            let (at, lock) = task.await.expect("task");
            match lock {
                Ok(lock) => {
                    s.lat.push(at.saturating_duration_since(released));
                    s.ok += 1;
                    let _ = lock.release().await;
                }
                Err(_) => s.failed += 1,
            }
        }
        s
    })
}

/// How soon a waiter takes the lock after a crashed holder's keys expire
/// (set for `ttl` on every node by a plain connection): `samples` times.
pub fn after_expiry(
    rt: &tokio::runtime::Runtime,
    cluster: &Cluster,
    urls: &[String],
    samples: usize,
) -> Stats {
    let waiter = Arc::clone(&ours(urls, true)[0]);
    let ttl = Duration::from_millis(200);
    let mut s = Stats::default();
    for i in 0..samples {
        let key = format!("expiry{i}");
        for n in &cluster.nodes {
            n.set(&key, "crashed-holder", ttl);
        }
        let expired = Instant::now() + ttl;
        let w = Arc::clone(&waiter);
        let (at, lock) = rt.block_on(async move {
            let lock = w.lock(&key, TTL).wait(Duration::from_secs(5)).await;
            (Instant::now(), lock)
        });
        match lock {
            Ok(lock) => {
                s.lat.push(at.saturating_duration_since(expired));
                s.ok += 1;
                rt.block_on(async move {
                    let _ = lock.release().await;
                });
            }
            Err(_) => s.failed += 1,
        }
    }
    s
}

/// Prints the waiting table: one row per `(name, stats)`.
pub fn table(rows: &mut [(&str, &mut Stats)]) {
    println!("| client | acquisitions/s | wait p50 ms | wait p99 ms | wait max ms | failed |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, s) in rows {
        println!(
            "| {name} | {:.0} | {:.2} | {:.1} | {:.1} | {} |",
            s.rate(),
            s.pct(0.5).as_secs_f64() * 1e3,
            s.pct(0.99).as_secs_f64() * 1e3,
            s.pct(1.0).as_secs_f64() * 1e3,
            s.failed
        );
    }
}

/// What woke the waiters of some clients, from their [`redquorum::Stats`]:
/// counted between two readings.
#[derive(Clone, Copy, Debug, Default)]
pub struct Wakes {
    acquired: u64,
    attempts: u64,
    notification: u64,
    ttl: u64,
    own_release: u64,
    cap: u64,
}

impl Wakes {
    /// The clients' counters now.
    pub fn of(clients: &[Arc<redquorum::Redlock>]) -> Self {
        clients.iter().fold(Self::default(), |w, c| {
            let s = c.stats();
            Self {
                acquired: w.acquired + s.acquired,
                attempts: w.attempts + s.attempts,
                notification: w.notification + s.woken_by_notification,
                ttl: w.ttl + s.woken_by_ttl,
                own_release: w.own_release + s.woken_by_own_release,
                cap: w.cap + s.woken_by_cap,
            }
        })
    }

    /// Adds what happened between `before` and `after`.
    pub fn add(&mut self, after: &Self, before: &Self) {
        self.acquired += after.acquired - before.acquired;
        self.attempts += after.attempts - before.attempts;
        self.notification += after.notification - before.notification;
        self.ttl += after.ttl - before.ttl;
        self.own_release += after.own_release - before.own_release;
        self.cap += after.cap - before.cap;
    }
}

impl std::fmt::Display for Wakes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let per = |n: u64| n as f64 / self.acquired.max(1) as f64;
        write!(
            f,
            "{:.2} attempts, woken by: notification {:.2}, TTL {:.2}, own release {:.2}, cap {:.2}",
            per(self.attempts),
            per(self.notification),
            per(self.ttl),
            per(self.own_release),
            per(self.cap)
        )
    }
}
