//! Redis against Valkey, and on Valkey its own commands against our
//! scripts, in one run: three sets of five local nodes (AOF, `appendfsync
//! always`), started by the test harness on free loopback ports:
//!
//! - `redis`: `redis-server`, where release and extension are scripts;
//! - `valkey`: the pinned `valkey-server`, where the plain lock's release
//!   is `DELIFEQ` (its extension `SET … IFEQ … PX`);
//! - `valkey, scripts`: the same server, the client's ACL user denied
//!   `DELIFEQ`, so that the release is our script there too.
//!
//! Each set: (a) one task, sequential lock+release (p50, p99) and (b) 32
//! tasks on distinct resources (throughput), with the nodes' CPU per
//! operation; the sets take turns in short slices, so that background noise
//! hits them alike. Then each Valkey set's own cost per call of the release,
//! from `INFO commandstats`.
//!
//! Run: `cargo bench --bench servers`; `BENCH_SECS` sets the time per cell
//! (default 3 s), split into slices. Every loop is bounded in time.

#[path = "../tests/support/mod.rs"]
mod support;

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{run_tasks, watch_nodes, Stats};
use support::Cluster;

const TTL: Duration = Duration::from_secs(10);
const TASKS: usize = 32;
/// Alternating slices per set.
const REPS: u32 = 6;

/// One lock and its release on a fresh-enough resource.
async fn op(redlock: &redquorum::Redlock, resource: &str) -> bool {
    match redlock.lock(resource, TTL).try_once().await {
        Ok(lock) => lock.release().await.is_ok(),
        Err(_) => false,
    }
}

/// One set of nodes and the client that uses them.
struct Set {
    name: &'static str,
    nodes: Cluster,
    client: Arc<redquorum::Redlock>,
    a: Stats,
    b: Stats,
}

impl Set {
    /// Five nodes of `binary`; with `deny` (ACL rules: `-delifeq`), the
    /// client's user may not run those commands.
    fn start(name: &'static str, binary: &str, deny: &[&str]) -> Self {
        let nodes = Cluster::start_on(&vec![binary.to_owned(); 5]);
        let urls = if deny.is_empty() {
            nodes.urls()
        } else {
            nodes.app_user(deny)
        };
        let client = redquorum::Redlock::builder()
            .nodes(&urls)
            .retry_count(0)
            .build()
            .expect("client");
        Set {
            name,
            nodes,
            client: Arc::new(client),
            a: Stats::default(),
            b: Stats::default(),
        }
    }

    /// `tasks` tasks of lock+release for `limit`, the set's nodes watched.
    fn cell(&self, rt: &tokio::runtime::Runtime, tasks: usize, limit: Duration) -> Stats {
        watch_nodes(self.nodes.nodes.iter().map(|n| n.pid()));
        let c = self.client.clone();
        rt.block_on(run_tasks(tasks, limit, usize::MAX, move |t, i| {
            let c = c.clone();
            async move {
                let name = if tasks == 1 {
                    format!("seq{}", i % 64)
                } else {
                    format!("res{t}")
                };
                op(&c, &name).await
            }
        }))
    }

    /// The nodes' mean cost per call of `cmd` (µs, `INFO commandstats`).
    fn usec_per_call(&self, cmd: &str) -> f64 {
        let (calls, usec) = self.nodes.nodes.iter().fold((0, 0), |(c, u), n| {
            (c + n.command_calls(cmd), u + n.command_stat(cmd, "usec"))
        });
        usec as f64 / calls.max(1) as f64
    }
}

fn main() {
    let Some(limit) = common::time_per_cell() else {
        return;
    };
    let valkey = support::valkey_binary();
    let mut sets = [
        Set::start("redis", "redis-server", &[]),
        Set::start("valkey", &valkey, &[]),
        Set::start("valkey, scripts", &valkey, &["-delifeq"]),
    ];
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    for set in &sets {
        // Connections open and scripts are cached before the clock runs.
        rt.block_on(async {
            for i in 0..200 {
                op(&set.client, &format!("warm{i}")).await;
            }
        });
    }
    let slice = limit / REPS;
    for _ in 0..REPS {
        for set in &mut sets {
            let a = set.cell(&rt, 1, slice);
            set.a.add(a);
            let b = set.cell(&rt, TASKS, slice);
            set.b.add(b);
        }
    }
    println!("| nodes | (a) p50 ms | (a) p99 ms | (a) nodes CPU µs/op | (b) ops/s | (b) nodes CPU µs/op | release µs/call |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for set in &mut sets {
        let release = if set.nodes.nodes[0].command_calls("delifeq") > 1_000 {
            format!("{:.2} (`DELIFEQ`)", set.usec_per_call("delifeq"))
        } else {
            format!("{:.2} (`EVALSHA`)", set.usec_per_call("evalsha"))
        };
        println!(
            "| {} | {:.3} | {:.3} | {:.0} | {:.0} | {:.0} | {release} |",
            set.name,
            set.a.pct(0.50).as_secs_f64() * 1e3,
            set.a.pct(0.99).as_secs_f64() * 1e3,
            set.a.node_cpu_per_op_us(),
            set.b.rate(),
            set.b.node_cpu_per_op_us(),
        );
    }
    let p50 = |set: &mut Set| set.a.pct(0.50).as_secs_f64();
    let (redis, valkey) = (p50(&mut sets[0]), p50(&mut sets[1]));
    println!(
        "(a) p50, valkey / redis: {:.2}; (b) nodes CPU per operation on valkey, DELIFEQ / script: {:.2}",
        valkey / redis,
        sets[1].b.node_cpu_per_op_us() / sets[2].b.node_cpu_per_op_us()
    );
}
