//! Read-write lock benchmark, against five local redis-server nodes
//! (started by the test harness on free loopback ports).
//!
//! Uncontended: one task, read acquire+release against plain lock
//! acquire+release, interleaved cells, operations per second.
//!
//! Readers and a writer: 16 reader tasks (2 clients) loop taking a read,
//! holding it 20 ms and releasing it; one writer (a third client) asks for
//! the lock every 50 ms and releases at once. The writer's wait against
//! the longest read hold: phase fairness bounds it by the reads in
//! progress when it came, plus a round trip or two.
//!
//! Run: `cargo bench --bench rwlock`. Every loop is bounded in operations
//! and time; `BENCH_SECS` sets the time per cell.

#[path = "../tests/support/mod.rs"]
mod support;

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Stats;

/// TTL of every lock here: far above any wait.
const TTL: Duration = Duration::from_secs(10);
/// How long a reader holds its read.
const HOLD: Duration = Duration::from_millis(20);

fn main() {
    let Some(limit) = common::time_per_cell() else {
        return;
    };
    let (_cluster, urls, rt) = common::five_nodes();
    let _guard = rt.enter();
    let client = || {
        redquorum::Redlock::builder()
            .nodes(&urls)
            .build()
            .expect("client")
    };
    uncontended(&rt, &client(), limit);
    readers_and_a_writer(&rt, [client(), client(), client()], limit * 2);
}

/// Read acquire+release against plain lock acquire+release, one task.
fn uncontended(rt: &tokio::runtime::Runtime, r: &redquorum::Redlock, limit: Duration) {
    let rw = r.rw_lock("bench-rw-free").expect("rw");
    let (mut reads, mut locks) = (Stats::default(), Stats::default());
    rt.block_on(async {
        for _ in 0..3 {
            let until = Instant::now() + limit;
            let t0 = Instant::now();
            while Instant::now() < until {
                match rw.read(TTL).try_once().await {
                    Ok(l) => {
                        let _ = l.release().await;
                        reads.ok += 1;
                    }
                    Err(_) => reads.failed += 1,
                }
            }
            reads.elapsed += t0.elapsed();
            let until = Instant::now() + limit;
            let t0 = Instant::now();
            while Instant::now() < until {
                match r.lock("bench-plain-free", TTL).try_once().await {
                    Ok(l) => {
                        let _ = l.release().await;
                        locks.ok += 1;
                    }
                    Err(_) => locks.failed += 1,
                }
            }
            locks.elapsed += t0.elapsed();
        }
    });
    println!("uncontended, one task, acquire+release:");
    println!("| lock | ops/s | failed |");
    println!("|---|---:|---:|");
    println!("| plain lock | {:.0} | {} |", locks.rate(), locks.failed);
    println!("| read | {:.0} | {} |", reads.rate(), reads.failed);
    println!(
        "ratio (same run): read / plain lock = {:.2}  (target >= 0.8)",
        reads.rate() / locks.rate()
    );
}

/// 16 readers looping, one writer every 50 ms: the writer's waits.
fn readers_and_a_writer(
    rt: &tokio::runtime::Runtime,
    clients: [redquorum::Redlock; 3],
    limit: Duration,
) {
    let stop = Arc::new(AtomicBool::new(false));
    let (writes, reads) = rt.block_on(async {
        let mut readers = Vec::new();
        for i in 0..16 {
            let rw = clients[i % 2].rw_lock("bench-rw").expect("rw");
            let stop = Arc::clone(&stop);
            readers.push(tokio::spawn(async move {
                let mut s = Stats::default();
                tokio::time::sleep(Duration::from_millis(i as u64 * 3)).await;
                for _ in 0..100_000 {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    match rw.read(TTL).wait(Duration::from_secs(10)).await {
                        Ok(r) => {
                            tokio::time::sleep(HOLD).await;
                            let _ = r.release().await;
                            s.ok += 1;
                        }
                        Err(_) => s.failed += 1,
                    }
                }
                s
            }));
        }
        let rw = clients[2].rw_lock("bench-rw").expect("rw");
        let mut w = Stats::default();
        let until = Instant::now() + limit;
        tokio::time::sleep(Duration::from_millis(200)).await;
        while Instant::now() < until {
            let t0 = Instant::now();
            match rw.write(TTL).wait(Duration::from_secs(10)).await {
                Ok(l) => {
                    w.lat.push(t0.elapsed());
                    w.ok += 1;
                    let _ = l.release().await;
                }
                Err(_) => w.failed += 1,
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        stop.store(true, Ordering::Relaxed);
        let mut r = Stats::default();
        for j in readers {
            r.merge(j.await.expect("reader"));
        }
        (w, r)
    });
    let mut w = writes;
    let hold_ms = HOLD.as_secs_f64() * 1e3;
    println!();
    println!("16 readers looping (hold {hold_ms:.0} ms), one writer every 50 ms:");
    println!("| writes | write wait p50 ms | p99 ms | max ms | reads | failed |");
    println!("|---:|---:|---:|---:|---:|---:|");
    let (p50, p99, max) = (w.pct(0.5), w.pct(0.99), w.pct(1.0));
    println!(
        "| {} | {:.1} | {:.1} | {:.1} | {} | {} |",
        w.ok,
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        max.as_secs_f64() * 1e3,
        reads.ok,
        w.failed + reads.failed
    );
    println!(
        "  write wait p99 - longest read hold = {:.1} ms  (target <= 30)",
        p99.as_secs_f64() * 1e3 - hold_ms
    );
    let wake = |c: &redquorum::Redlock| {
        let s = c.stats();
        format!(
            "attempts {}, woken by news {}, ttl {}, own release {}, cap {}",
            s.attempts,
            s.woken_by_notification,
            s.woken_by_ttl,
            s.woken_by_own_release,
            s.woken_by_cap
        )
    };
    println!("  writer: {}", wake(&clients[2]));
    println!("  readers: {}; {}", wake(&clients[0]), wake(&clients[1]));
}
