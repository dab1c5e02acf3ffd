//! Semaphore and election benchmark, against five local redis-server nodes
//! (started by the test harness on free loopback ports).
//!
//! Semaphore: K = 4 permits, 3 clients x 8 tasks, hold 1 ms: acquisitions/s
//! against the limit (K tasks alone doing the same loop, nobody to wait
//! for), waits against the fair-share wait `(tasks - K) / limit`; how soon
//! the longest waiter takes a permit after another client releases one.
//!
//! Election: how soon a waiting candidate leads after the leader's
//! `resign()` returns, and after a leader crashed (its runtime dropped,
//! nothing released: the TTL frees it); how soon an observer (a third
//! client) learns of each new leader.
//!
//! Run: `cargo bench --bench coordinate`. Every loop is bounded in
//! operations and time; `BENCH_SECS` sets the time per cell.

#[path = "../tests/support/mod.rs"]
mod support;

mod common;
#[allow(dead_code)]
mod contended;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Stats;
use contended::{CLIENTS, TASKS};

/// Permits of the benchmarked semaphore.
const PERMITS: usize = 4;
/// A permit's TTL: far above any wait here.
const TTL: Duration = Duration::from_secs(10);
/// Hand-overs measured.
const SAMPLES: usize = 30;

type Release = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Takes a permit (waiting at most 10 s); returns its release.
async fn permit(s: Arc<redquorum::Semaphore>) -> Option<impl FnOnce() -> Release + Send> {
    let p = s.acquire(TTL).wait(Duration::from_secs(10)).await.ok()?;
    Some(move || -> Release {
        Box::pin(async move {
            let _ = p.release().await;
        })
    })
}

fn clients(urls: &[String], n: usize) -> Vec<redquorum::Redlock> {
    (0..n)
        .map(|_| {
            redquorum::Redlock::builder()
                .nodes(urls)
                .build()
                .expect("client")
        })
        .collect()
}

fn main() {
    let Some(limit) = common::time_per_cell() else {
        return;
    };
    let (_cluster, urls, rt) = common::five_nodes();
    let _guard = rt.enter();
    semaphore(&rt, &urls, limit * 5);
    election(&rt, &urls);
}

/// The semaphore's table and ratios.
fn semaphore(rt: &tokio::runtime::Runtime, urls: &[String], limit: Duration) {
    let redlocks = clients(urls, CLIENTS);
    let sems: Vec<Arc<redquorum::Semaphore>> = redlocks
        .iter()
        .map(|c| Arc::new(c.semaphore("bench-pool", PERMITS).expect("semaphore")))
        .collect();
    let (mut alone, mut all) = (Stats::default(), Stats::default());
    let (mut alone_effort, mut all_effort) = (Effort::default(), Effort::default());
    for _ in 0..2 {
        let before = Effort::of(&redlocks);
        alone.add(contended::cell(rt, &sems[..1], PERMITS, limit, permit));
        let between = Effort::of(&redlocks);
        all.add(contended::cell(rt, &sems, TASKS, limit, permit));
        alone_effort.add(&between, &before);
        all_effort.add(&Effort::of(&redlocks), &between);
    }
    let tasks = CLIENTS * TASKS;
    let fair = Duration::from_secs_f64((tasks - PERMITS) as f64 / alone.rate());
    println!(
        "semaphore, K = {PERMITS}: {CLIENTS} clients x {TASKS} tasks, hold 1 ms (fair-share wait (tasks - K) / limit = {:.1} ms)",
        fair.as_secs_f64() * 1e3
    );
    contended::table(&mut [
        ("limit: K tasks alone", &mut alone),
        ("redquorum semaphore", &mut all),
    ]);
    let mut handover = permit_handover(rt, urls);
    println!();
    println!("ratios (same run):");
    println!(
        "  semaphore acquisitions/s / limit = {:.2}  (target >= 0.85)",
        all.rate() / alone.rate()
    );
    println!(
        "  semaphore wait p99 / fair share = {:.2}  (target <= 1.5); max / fair share = {:.2}  (target <= 2)",
        all.pct(0.99).as_secs_f64() / fair.as_secs_f64(),
        all.pct(1.0).as_secs_f64() / fair.as_secs_f64()
    );
    report(
        "permit taken by the longest waiter after a release",
        &mut handover,
    );
    println!("  attempts per acquisition: limit {alone_effort}; semaphore {all_effort}");
}

/// What the clients did, from their [`redquorum::Stats`], and the CPU time
/// this process and its children (the nodes) used.
#[derive(Clone, Copy, Debug, Default)]
struct Effort {
    acquired: u64,
    attempts: u64,
    requests: u64,
    notifications: u64,
    moves: u64,
    moves_won: u64,
    cpu_ticks: u64,
}

/// CPU clock ticks (user + system) used so far by process `pid`.
fn ticks(pid: &str) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let at = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    at(11) + at(12)
}

/// CPU ticks of this process and its child processes so far.
fn cpu_ticks() -> u64 {
    let mut total = ticks("self");
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for task in tasks.flatten() {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            total += children.split_whitespace().map(ticks).sum::<u64>();
        }
    }
    total
}

impl Effort {
    /// The sums over `clients` now.
    fn of(clients: &[redquorum::Redlock]) -> Self {
        clients
            .iter()
            .map(redquorum::Redlock::stats)
            .fold(Self::default(), |e, s| Self {
                acquired: e.acquired + s.acquired,
                attempts: e.attempts + s.attempts,
                requests: e.requests + s.nodes.iter().map(|n| n.requests).sum::<u64>(),
                notifications: e.notifications + s.notifications,
                moves: e.moves + s.permit_moves,
                moves_won: e.moves_won + s.permit_moves_won,
                cpu_ticks: 0,
            })
            .with_cpu()
    }

    /// With the CPU used so far.
    fn with_cpu(mut self) -> Self {
        self.cpu_ticks = cpu_ticks();
        self
    }

    /// Adds what happened between `from` and `to`.
    fn add(&mut self, to: &Self, from: &Self) {
        self.acquired += to.acquired - from.acquired;
        self.attempts += to.attempts - from.attempts;
        self.requests += to.requests - from.requests;
        self.notifications += to.notifications - from.notifications;
        self.moves += to.moves - from.moves;
        self.moves_won += to.moves_won - from.moves_won;
        self.cpu_ticks += to.cpu_ticks - from.cpu_ticks;
    }
}

impl std::fmt::Display for Effort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let per = |x: u64| x as f64 / self.acquired.max(1) as f64;
        write!(
            f,
            "{:.2} ({:.1} node requests, {:.1} notifications, {:.2} move rounds of which {:.2} won, {:.2} ms CPU each)",
            per(self.attempts),
            per(self.requests),
            per(self.notifications),
            per(self.moves),
            per(self.moves_won),
            per(self.cpu_ticks) * 10.0
        )
    }
}

/// Prints a hand-over latency line.
fn report(what: &str, s: &mut Stats) {
    println!(
        "  {what}: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} of {}; target <= 30 ms)",
        s.pct(0.5).as_secs_f64() * 1e3,
        s.pct(0.99).as_secs_f64() * 1e3,
        s.pct(1.0).as_secs_f64() * 1e3,
        s.ok,
        s.ok + s.failed
    );
}

/// How soon the first of two waiting clients takes a permit after a
/// holder of all of them releases one.
fn permit_handover(rt: &tokio::runtime::Runtime, urls: &[String]) -> Stats {
    let c = clients(urls, 3);
    rt.block_on(async move {
        let mut s = Stats::default();
        for i in 0..SAMPLES {
            let name = format!("bench-handover{i}");
            let holder = c[0].semaphore(&name, 2).expect("semaphore");
            let held = [
                holder.acquire(TTL).try_once().await.expect("free"),
                holder.acquire(TTL).try_once().await.expect("free"),
            ];
            let mut waiters = Vec::new();
            for w in &c[1..] {
                let sem = w.semaphore(&name, 2).expect("semaphore");
                waiters.push(tokio::spawn(async move {
                    let p = sem.acquire(TTL).wait(Duration::from_secs(5)).await;
                    (Instant::now(), p)
                }));
                // The first waiter registers before the second.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let [first, second] = held;
            first.release().await.expect("release");
            let released = Instant::now();
            let (at, p) = waiters.remove(0).await.expect("task");
            match p {
                Ok(p) => {
                    s.lat.push(at.saturating_duration_since(released));
                    s.ok += 1;
                    let _ = p.release().await;
                }
                Err(_) => s.failed += 1,
            }
            let _ = second.release().await;
            if let Ok((_, Ok(p))) = waiters.remove(0).await {
                let _ = p.release().await;
            }
        }
        s
    })
}

/// The election's hand-over lines.
fn election(rt: &tokio::runtime::Runtime, urls: &[String]) {
    let (mut resign, mut observed) = resign_handover(rt, urls);
    let ttl = Duration::from_millis(300);
    let mut crash = crash_handover(rt, urls, ttl);
    println!();
    println!("election ({SAMPLES} hand-overs each):");
    report("new leader after resign()", &mut resign);
    report(
        "observer learns the new leader after it was elected",
        &mut observed,
    );
    println!(
        "  new leader after the leader crashed (TTL {} ms): p50 {:.0} ms, max {:.0} ms ({} of {}; target <= TTL + 30 ms)",
        ttl.as_millis(),
        crash.pct(0.5).as_secs_f64() * 1e3,
        crash.pct(1.0).as_secs_f64() * 1e3,
        crash.ok,
        crash.ok + crash.failed
    );
}

/// Leader on client 0 resigns while client 1 campaigns and client 2
/// observes: (after resign, observer after election).
fn resign_handover(rt: &tokio::runtime::Runtime, urls: &[String]) -> (Stats, Stats) {
    let c = clients(urls, 3);
    rt.block_on(async move {
        let (mut s, mut o) = (Stats::default(), Stats::default());
        let name = "bench-election";
        let (a, b) = (
            c[0].election(name, TTL).expect("election"),
            c[1].election(name, TTL).expect("election"),
        );
        let mut observer = c[2].election(name, TTL).expect("election").observe();
        // The term the observer last returned.
        let mut seen = observer.changed().await.ok().flatten().map(|l| l.term);
        let mut leader = a.campaign("a").await.expect("leader");
        for i in 0..SAMPLES {
            let next = if i % 2 == 0 { b.clone() } else { a.clone() };
            let waiting = tokio::spawn(async move {
                let l = next.campaign("x").await;
                (Instant::now(), l)
            });
            tokio::time::sleep(Duration::from_millis(10)).await;
            // The observer is up to date before the hand-over.
            let term = leader.term();
            while seen != Some(term) {
                seen = observer.changed().await.ok().flatten().map(|l| l.term);
            }
            leader.resign().await.expect("resign");
            let resigned = Instant::now();
            let (elected, l) = waiting.await.expect("task");
            let l = l.expect("leader");
            s.lat.push(elected.saturating_duration_since(resigned));
            s.ok += 1;
            let new = l.term();
            let at = loop {
                match observer.changed().await {
                    Ok(Some(x)) if x.term == new => break Instant::now(),
                    Ok(_) => {}
                    Err(_) => break Instant::now() + Duration::from_secs(1),
                }
            };
            seen = Some(new);
            o.lat.push(at.saturating_duration_since(elected));
            o.ok += 1;
            leader = l;
        }
        let _ = leader.resign().await;
        (s, o)
    })
}

/// A leader whose process dies (its runtime dropped: no release, no more
/// renewals) while another candidate waits: how long after the death the
/// other leads.
fn crash_handover(rt: &tokio::runtime::Runtime, urls: &[String], ttl: Duration) -> Stats {
    let waiter = clients(urls, 1).remove(0);
    let mut s = Stats::default();
    for i in 0..10 {
        let name = format!("bench-crash{i}");
        let doomed = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let urls = urls.to_vec();
        let n = name.clone();
        doomed.block_on(async move {
            let c = redquorum::Redlock::builder()
                .nodes(&urls)
                .build()
                .expect("client");
            let l = c
                .election(&n, ttl)
                .expect("election")
                .campaign("doomed")
                .await;
            std::mem::forget(l.expect("leader"));
        });
        let e = waiter.election(&name, ttl).expect("election");
        let (crashed, next) = rt.block_on(async {
            let task = tokio::spawn(async move {
                let l = e.campaign("next").await;
                (Instant::now(), l)
            });
            tokio::time::sleep(Duration::from_millis(20)).await;
            doomed.shutdown_background();
            let crashed = Instant::now();
            (crashed, task.await.expect("task"))
        });
        match next {
            (at, Ok(l)) => {
                s.lat.push(at.saturating_duration_since(crashed));
                s.ok += 1;
                rt.block_on(async move {
                    let _ = l.resign().await;
                });
            }
            (_, Err(_)) => s.failed += 1,
        }
    }
    s
}
