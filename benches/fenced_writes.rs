//! Fenced writes to data in Redis against the same writes unfenced, in one
//! run, on one local redis-server (AOF with `appendfsync always`, as the
//! quorum's nodes run; started by the test harness on a free loopback
//! port), through one multiplexed connection: one task, sequential writes,
//! the two taking turns in short slices.
//!
//! - `SET`: `FencedRedis::set` against a plain `SET key value`;
//! - `INCRBY`: `FencedRedis::incr_by` against a plain `INCRBY key 1`.
//!
//! Prints p50 and p99 of each and the ratios, and each command's cost on
//! the node per call (`INFO commandstats`: the fenced script against the
//! plain command).
//!
//! Run: `cargo bench --bench fenced_writes`; `BENCH_SECS` sets the time per
//! cell (default 3 s), split into slices. Every loop is bounded in time.

#[path = "../tests/support/mod.rs"]
mod support;

mod common;

use std::time::Duration;

use common::{run_tasks, Stats};
use redquorum::{Fence, FencedRedis};
use support::{Persistence, RedisNode};

/// Alternating slices per cell.
const REPS: u32 = 6;

fn main() {
    let Some(limit) = common::time_per_cell() else {
        return;
    };
    let node = RedisNode::start(Persistence::Aof);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let conn = rt.block_on(async {
        redis::Client::open(node.url())
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("connection")
    });
    let store = FencedRedis::new(conn.clone());
    let slice = limit / REPS;
    let cell = |fenced: bool, incr: bool| -> Stats {
        let (store, conn) = (store.clone(), conn.clone());
        rt.block_on(run_tasks(1, slice, usize::MAX, move |_, i| {
            let (store, mut conn) = (store.clone(), conn.clone());
            async move {
                let key = if incr { "counter" } else { "value" };
                let fence = Fence::new("bench", 1);
                match (fenced, incr) {
                    (true, false) => store.set(fence, key, i).await.is_ok(),
                    (true, true) => store.incr_by(fence, key, 1).await.is_ok(),
                    (false, false) => redis::cmd("SET")
                        .arg(key)
                        .arg(i)
                        .query_async::<()>(&mut conn)
                        .await
                        .is_ok(),
                    (false, true) => redis::cmd("INCRBY")
                        .arg(key)
                        .arg(1)
                        .query_async::<i64>(&mut conn)
                        .await
                        .is_ok(),
                }
            }
        }))
    };
    // Script cached, connection warm.
    cell(true, false);
    cell(true, true);
    cell(false, false);
    let mut cells: [Stats; 4] = Default::default();
    for _ in 0..REPS {
        for (j, (fenced, incr)) in [(true, false), (false, false), (true, true), (false, true)]
            .into_iter()
            .enumerate()
        {
            cells[j].add(cell(fenced, incr));
        }
    }
    let [mut set_f, mut set_p, mut incr_f, mut incr_p] = cells;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!("| write | fenced p50 ms | plain p50 ms | p50 ratio | fenced p99 ms | plain p99 ms | ops (fenced, plain) |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (name, f, p) in [
        ("SET", &mut set_f, &mut set_p),
        ("INCRBY", &mut incr_f, &mut incr_p),
    ] {
        let (f50, p50) = (f.pct(0.50), p.pct(0.50));
        println!(
            "| {name} | {:.3} | {:.3} | {:.2} | {:.3} | {:.3} | {}, {} |",
            ms(f50),
            ms(p50),
            f50.as_secs_f64() / p50.as_secs_f64(),
            ms(f.pct(0.99)),
            ms(p.pct(0.99)),
            f.ok,
            p.ok
        );
    }
    let per_call =
        |cmd: &str| node.command_stat(cmd, "usec") as f64 / node.command_calls(cmd).max(1) as f64;
    println!(
        "node µs per call: fenced script (EVALSHA) {:.2}, SET {:.2}, INCRBY {:.2} (the script's own SET/INCRBY/HMGET/HSET counted inside it too)",
        per_call("evalsha"),
        per_call("set"),
        per_call("incrby")
    );
}
