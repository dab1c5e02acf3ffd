//! Multi-resource lock benchmark, against five local redis-server nodes
//! (started by the test harness on free loopback ports).
//!
//! Free path: the latency of taking free resources with one client, one
//! call at a time: `try_lock` of one resource against `try_lock_all` of 2
//! and of 8, interleaved (each sample on resources nobody holds; each
//! released before the next).
//!
//! Opposite orders: 3 clients x 8 tasks take two resources, half naming
//! them `a`, `b` and half `b`, `a`, hold 1 ms and release: acquisitions/s,
//! the waits against the fair share `(tasks - 1) / limit` (the limit: one
//! task alone doing the same loop), failed requests (a deadlock would show
//! as requests failing at their 10 s wait).
//!
//! Run: `cargo bench --bench multi`. Every loop is bounded in operations
//! and time; `BENCH_SECS` sets the time per cell.

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

/// A lock's TTL: far above any wait here.
const TTL: Duration = Duration::from_secs(10);
/// Free-path samples per kind.
const SAMPLES: usize = 2_000;

type Release = Pin<Box<dyn Future<Output = ()> + Send>>;

fn main() {
    let Some(limit) = common::time_per_cell() else {
        return;
    };
    let (_cluster, urls, rt) = common::five_nodes();
    let _guard = rt.enter();
    free_path(&rt, &urls);
    opposite_orders(&rt, &urls, limit * 3);
}

/// Acquisition latency of 1, 2 and 8 free resources, interleaved.
fn free_path(rt: &tokio::runtime::Runtime, urls: &[String]) {
    let redlock = redquorum::Redlock::builder()
        .nodes(urls)
        .build()
        .expect("client");
    let mut cells: [Stats; 3] = Default::default();
    let sizes = [1, 2, 8];
    rt.block_on(async {
        for i in 0..SAMPLES + 100 {
            for (cell, n) in cells.iter_mut().zip(sizes) {
                let names: Vec<String> = (0..n).map(|k| format!("free-{n}-{i}-{k}")).collect();
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                let t0 = Instant::now();
                let lock = if n == 1 {
                    redlock.lock(names[0], TTL).try_once().await
                } else {
                    redlock.lock_all(&names, TTL).try_once().await
                };
                let took = t0.elapsed();
                match lock {
                    Ok(lock) => {
                        let _ = lock.release().await;
                        if i >= 100 {
                            cell.ok += 1;
                            cell.lat.push(took);
                        }
                    }
                    Err(_) => cell.failed += 1,
                }
            }
        }
    });
    println!("free path, one client, {SAMPLES} acquisitions each (then released), interleaved:");
    println!("| resources | p50 ms | p99 ms | failed |");
    println!("|---:|---:|---:|---:|");
    for (cell, n) in cells.iter_mut().zip(sizes) {
        println!(
            "| {n} | {:.3} | {:.3} | {} |",
            cell.pct(0.5).as_secs_f64() * 1e3,
            cell.pct(0.99).as_secs_f64() * 1e3,
            cell.failed
        );
    }
    let single = cells[0].pct(0.5).as_secs_f64();
    println!("ratios (same run):");
    for (cell, n) in cells.iter_mut().zip(sizes).skip(1) {
        println!(
            "  p50 of {n} resources / p50 of one = {:.2}  (target <= 1.1)",
            cell.pct(0.5).as_secs_f64() / single
        );
    }
}

/// A client and the order its tasks name the two resources in.
struct Caller {
    redlock: redquorum::Redlock,
    order: [&'static str; 2],
}

/// Takes both resources in the caller's order (waiting at most 10 s).
async fn both(c: Arc<Caller>) -> Option<impl FnOnce() -> Release + Send> {
    let lock = c
        .redlock
        .lock_all(&c.order, TTL)
        .wait(Duration::from_secs(10))
        .await
        .ok()?;
    Some(move || -> Release {
        Box::pin(async move {
            let _ = lock.release().await;
        })
    })
}

/// Opposite-order contention on two resources, against one task alone.
fn opposite_orders(rt: &tokio::runtime::Runtime, urls: &[String], limit: Duration) {
    let callers: Vec<Arc<Caller>> = (0..CLIENTS)
        .flat_map(|_| {
            let redlock = redquorum::Redlock::builder()
                .nodes(urls)
                .build()
                .expect("client");
            [["pair-a", "pair-b"], ["pair-b", "pair-a"]].map(|order| {
                Arc::new(Caller {
                    redlock: redlock.clone(),
                    order,
                })
            })
        })
        .collect();
    // Each client once (two callers share it), for what woke its waiters.
    let clients: Vec<Arc<redquorum::Redlock>> = callers
        .iter()
        .step_by(2)
        .map(|c| Arc::new(c.redlock.clone()))
        .collect();
    let (mut alone, mut all) = (Stats::default(), Stats::default());
    let mut wakes = contended::Wakes::default();
    for _ in 0..2 {
        alone.add(contended::cell(rt, &callers[..1], 1, limit, both));
        let before = contended::Wakes::of(&clients);
        all.add(contended::cell(rt, &callers, TASKS / 2, limit, both));
        wakes.add(&contended::Wakes::of(&clients), &before);
    }
    let tasks = CLIENTS * TASKS;
    let fair = Duration::from_secs_f64((tasks - 1) as f64 / alone.rate());
    println!();
    println!(
        "opposite orders: {CLIENTS} clients x {TASKS} tasks (half a,b, half b,a), hold 1 ms (fair-share wait (tasks - 1) / limit = {:.1} ms)",
        fair.as_secs_f64() * 1e3
    );
    contended::table(&mut [
        ("limit: one task alone", &mut alone),
        ("redquorum lock_all", &mut all),
    ]);
    println!("ratios (same run):");
    println!(
        "  wait p99 / fair share = {:.2}  (target <= 1.5); failed requests {} (target 0)",
        all.pct(0.99).as_secs_f64() / fair.as_secs_f64(),
        all.failed
    );
    println!("  lock_all per acquisition: {wakes}");
}
