//! Serial-number benchmark: numbers per second from `SerialGenerator` (width
//! 9, five local nodes) with 1 and 64 concurrent callers, next to a naive
//! single-node `INCR` loop at the same concurrency, in the same run; and with
//! one of the five nodes paused (SIGSTOP).
//!
//! Run: `make bench` (or `cargo bench --bench serial`). Cells alternate in
//! short slices so machine noise hits both alike; `BENCH_SECS` sets the time
//! per cell (default 3).

#[path = "../tests/support/mod.rs"]
mod support;

mod common;

use std::sync::Arc;

use common::{run_tasks, Stats};
use redquorum::{Redlock, SerialGenerator};
use support::{Cluster, Persistence};

/// Alternating slices per cell.
const REPS: u32 = 6;

fn row(scenario: &str, client: &str, s: &mut Stats) {
    println!(
        "| {scenario} | {client} | {:.0} | {:.3} | {:.3} | {:.1} % |",
        s.rate(),
        s.pct(0.50).as_secs_f64() * 1e3,
        s.pct(0.99).as_secs_f64() * 1e3,
        s.success()
    );
}

fn main() {
    let Some(limit) = common::time_per_cell() else {
        return;
    };
    let slice = limit / REPS;
    let mut cluster = Cluster::start_with(5, Persistence::Aof);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let redlock = Redlock::builder()
        .nodes(cluster.urls())
        .build()
        .expect("redlock");
    let serials = Arc::new(
        SerialGenerator::builder(redlock)
            .width(9)
            .build()
            .expect("serials"),
    );
    let incr_conn = rt.block_on(async {
        redis::Client::open(cluster.nodes[0].url())
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("connect")
    });
    rt.block_on(async {
        for _ in 0..100 {
            serials.next("BENCH").await.expect("warm up");
        }
    });

    let ours_cell = |callers: usize| {
        let s = serials.clone();
        rt.block_on(run_tasks(callers, slice, usize::MAX, move |_, _| {
            let s = s.clone();
            async move { s.next("BENCH").await.is_ok() }
        }))
    };
    let incr_cell = |callers: usize| {
        let conn = incr_conn.clone();
        rt.block_on(run_tasks(callers, slice, usize::MAX, move |_, _| {
            let mut conn = conn.clone();
            async move {
                redis::cmd("INCR")
                    .arg("bench:incr")
                    .query_async::<u64>(&mut conn)
                    .await
                    .is_ok()
            }
        }))
    };

    println!("| scenario | numbers from | numbers/s | p50 ms | p99 ms | success |");
    println!("|---|---|---:|---:|---:|---:|");
    let mut results = Vec::new();
    for callers in [1usize, 64] {
        let (mut ours, mut incr) = (Stats::default(), Stats::default());
        for _ in 0..REPS {
            ours.add(ours_cell(callers));
            incr.add(incr_cell(callers));
        }
        let label = format!("{callers} caller{}", if callers == 1 { "" } else { "s" });
        row(&label, "redquorum (5 nodes, quorum CAS)", &mut ours);
        row(&label, "INCR (1 node, no safety)", &mut incr);
        results.push((callers, ours.rate(), incr.rate()));
    }
    cluster.nodes[2].pause();
    let mut paused = Stats::default();
    for _ in 0..REPS {
        paused.add(ours_cell(64));
    }
    row(
        "64 callers, 1 of 5 paused",
        "redquorum (5 nodes, quorum CAS)",
        &mut paused,
    );
    cluster.resume_all();

    println!();
    println!("ratios (same run):");
    for (callers, ours, incr) in &results {
        println!("  {callers} callers: redquorum / INCR = {:.2}", ours / incr);
    }
    let healthy64 = results[1].1;
    println!(
        "  64 callers: {:.0} numbers/s (target >= 20000, >= 0.5 x INCR); one node paused costs {:.1} % (target < 20 %)",
        healthy64,
        100.0 * (1.0 - paused.rate() / healthy64)
    );
}
