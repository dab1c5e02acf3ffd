//! Scale-out benchmark: five members, each a Redis Cluster of S = 1, 2 and
//! 4 shards, and five plain nodes for comparison, every `redis-server` held
//! to the same small CPU share by a cgroup (v1) CPU quota, as if each ran
//! on a small machine of its own; the client runs unrestricted.
//!
//! Cells, in one run for every S (each run starts its members anew), in
//! this order:
//! - hot: the same tasks as below on one resource (`lock_timeout`,
//!   waiting): acquisitions/s, which cannot grow with shards (one slot, one
//!   shard per member);
//! - spread: `SCALE_TASKS` tasks (default 256) take and release random resources of 10^5
//!   (`try_lock`, then `release`; a resource another task holds is an
//!   answer, not a failure): operations/s, p50, p99, node CPU µs per
//!   operation (all nodes' CPU time over the operations), failed
//!   operations (errors);
//! - a shard down (S = 4 only), right after the spread cell it is compared
//!   with: the same with one shard master of one member killed:
//!   operations/s and failed operations.
//!
//! Run: `cargo bench --features cluster --bench scale` (as root, for the
//! quota: `/sys/fs/cgroup/cpu` writable; without it the nodes run
//! unrestricted and the bench says so). `BENCH_SECS` sets the time per
//! cell (default 3), `SCALE_RUNS` the runs (default 1), `SCALE_QUOTA_PCT`
//! each node's share of one core (default 2: 1 ms of CPU per 50 ms),
//! `SCALE_SHARDS` which deployments run (default `0,1,2,4`; 0 is plain
//! nodes; ratios against S = 1 need 1). Every loop is bounded in operations
//! and time.

#[path = "../tests/support/mod.rs"]
mod support;

mod common;

use std::time::Duration;

use common::{run_tasks, Stats};
use redquorum::Redlock;
use support::{Cluster, Persistence, ShardedCluster};

/// Resources the spread cells pick from.
const RESOURCES: u32 = 100_000;
/// A lock's TTL: far above any operation here.
const TTL: Duration = Duration::from_secs(10);
/// The cgroup (v1) all node groups live under.
const CGROUP: &str = "/sys/fs/cgroup/cpu/redquorum-scale";
/// Each node's CPU time per quota period, µs (the kernel's least): the
/// period is set for the share asked, as short as that allows, so that a
/// throttled node waits milliseconds, not a tenth of a second.
const QUOTA_US: u64 = 1_000;

/// One deployment under test: five members of `shards` shards (0: plain
/// nodes).
struct Deployment {
    /// Members that are clusters.
    clusters: Vec<ShardedCluster>,
    /// Plain nodes (S = 0).
    plain: Option<Cluster>,
    /// The members' URLs.
    urls: Vec<String>,
}

impl Deployment {
    /// Five members of `shards` shards each (0: five plain nodes), every
    /// node under the CPU quota.
    fn start(shards: usize, period_us: Option<u64>) -> Self {
        let (clusters, plain) = if shards == 0 {
            (Vec::new(), Some(Cluster::start_with(5, Persistence::Aof)))
        } else {
            let clusters = std::thread::scope(|s| {
                let hs: Vec<_> = (0..5)
                    .map(|_| s.spawn(move || ShardedCluster::start(shards)))
                    .collect();
                hs.into_iter().map(|h| h.join().expect("cluster")).collect()
            });
            (clusters, None)
        };
        let urls = match &plain {
            Some(c) => c.urls(),
            None => clusters.iter().map(ShardedCluster::url).collect(),
        };
        let d = Self {
            clusters,
            plain,
            urls,
        };
        let pids = d.pids();
        if let Some(period) = period_us {
            for pid in &pids {
                limit(*pid, period);
            }
        }
        common::watch_nodes(pids);
        d
    }

    /// Every node's process id.
    fn pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self
            .clusters
            .iter()
            .flat_map(|c| c.nodes.iter().map(|n| n.pid()))
            .collect();
        if let Some(c) = &self.plain {
            pids.extend(c.nodes.iter().map(|n| n.pid()));
        }
        pids
    }
}

/// Puts process `pid` in a CPU group of its own allowed [`QUOTA_US`] per
/// `period_us`.
fn limit(pid: u32, period_us: u64) {
    let dir = format!("{CGROUP}/n{pid}");
    let write = |file: &str, v: String| std::fs::write(format!("{dir}/{file}"), v);
    let done = std::fs::create_dir_all(&dir)
        .and_then(|()| write("cpu.cfs_period_us", period_us.to_string()))
        .and_then(|()| write("cpu.cfs_quota_us", QUOTA_US.to_string()))
        .and_then(|()| write("cgroup.procs", pid.to_string()));
    done.unwrap_or_else(|e| panic!("cgroup for node {pid}: {e}"));
}

/// Removes the node groups left (their processes gone).
fn clean_groups() {
    if let Ok(entries) = std::fs::read_dir(CGROUP) {
        for e in entries.flatten() {
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

/// A client of `urls` whose members were declared new (so nothing waits
/// out a restart quarantine), with time for a first map read under quota.
fn client(rt: &tokio::runtime::Runtime, urls: &[String]) -> Redlock {
    let redlock = Redlock::builder()
        .nodes(urls)
        .node_timeout(Duration::from_millis(500))
        .build()
        .expect("client");
    rt.block_on(async {
        redlock.init_new_nodes().await;
        // Every shard's connection made and checked before the cells.
        for i in 0..200u32 {
            if let Ok(l) = redlock.lock(&format!("warm-{i}"), TTL).try_once().await {
                let _ = l.release().await;
            }
        }
    });
    redlock
}

/// `tasks` tasks running `op` with a clone of `redlock` for `limit`.
fn cell<F, Fut>(
    rt: &tokio::runtime::Runtime,
    redlock: &Redlock,
    (tasks, limit): (usize, Duration),
    op: F,
) -> Stats
where
    F: Fn(Redlock) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let redlock = redlock.clone();
    rt.block_on(run_tasks(tasks, limit, 1_000_000, move |_, _| {
        op(redlock.clone())
    }))
}

/// Takes and releases a random resource: whether it got an answer (a
/// resource another task holds is one, not a failure).
async fn spread_op(redlock: Redlock) -> bool {
    let r = rand::random::<u32>() % RESOURCES;
    match redlock.lock(&format!("r{r}"), TTL).try_once().await {
        Ok(lock) => lock.release().await.is_ok(),
        Err(e) => e.is_contended(),
    }
}

/// Takes the one hot resource (waiting) and releases it.
async fn hot_op(redlock: Redlock) -> bool {
    match redlock.lock("hot", TTL).wait(Duration::from_secs(10)).await {
        Ok(lock) => lock.release().await.is_ok(),
        Err(_) => false,
    }
}

/// One table row.
fn row(name: &str, s: &mut Stats, base: Option<(f64, Duration)>) {
    let (rate, p50, p99) = (s.rate(), s.pct(0.5), s.pct(0.99));
    let ratio = |b: Option<(f64, Duration)>| {
        b.map_or("-".to_owned(), |(r, p)| {
            format!(
                "{:.2} / {:.2}",
                rate / r,
                p99.as_secs_f64() / p.as_secs_f64()
            )
        })
    };
    println!(
        "| {name} | {rate:.0} | {:.2} | {:.2} | {:.0} | {:.0} | {} | {} |",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        s.node_cpu_per_op_us(),
        s.cpu_per_op_us(),
        s.failed,
        ratio(base),
    );
}

fn main() {
    let Some(limit) = common::time_per_cell() else {
        return;
    };
    let env = |name: &str, default: u64| -> u64 {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let tasks = env("SCALE_TASKS", 256) as usize;
    let period = QUOTA_US * 100 / env("SCALE_QUOTA_PCT", 2).clamp(1, 100);
    let period = match std::fs::create_dir_all(CGROUP) {
        Ok(()) => Some(period),
        Err(e) => {
            println!("no CPU quota ({CGROUP}: {e}): nodes run unrestricted");
            None
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let _guard = rt.enter();
    println!(
        "5 members; each node {}; {tasks} tasks; {} s cells",
        period.map_or("unlimited".to_owned(), |p| format!(
            "{QUOTA_US} µs of CPU per {p} µs"
        )),
        limit.as_secs_f64()
    );
    let run_cell = (tasks, limit);
    let deployments: Vec<usize> = std::env::var("SCALE_SHARDS")
        .unwrap_or_else(|_| "0,1,2,4".to_owned())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    for run in 1..=env("SCALE_RUNS", 1) {
        println!("\nrun {run}\n");
        println!(
            "| cell | ops/s | p50 ms | p99 ms | node CPU µs/op | client CPU µs/op | failed | \
             vs S=1: ops, p99 |"
        );
        println!("|---|---|---|---|---|---|---|---|");
        let mut base = None;
        let mut hot_rows = Vec::new();
        for &shards in &deployments {
            let mut d = Deployment::start(shards, period);
            let redlock = client(&rt, &d.urls);
            let name = match shards {
                0 => "plain nodes".to_owned(),
                s => format!("S={s}"),
            };
            // The hot cell first, so that a shard goes down right after the
            // spread cell it is compared with.
            hot_rows.push((name.clone(), cell(&rt, &redlock, run_cell, hot_op)));
            let mut s = cell(&rt, &redlock, run_cell, spread_op);
            if shards == 1 {
                base = Some((s.rate(), s.pct(0.99)));
            }
            row(
                &format!("spread, {name}"),
                &mut s,
                base.filter(|_| shards > 0),
            );
            if shards == 4 {
                d.clusters[0].nodes[0].kill();
                let mut down = cell(&rt, &redlock, run_cell, spread_op);
                let full = Some((s.rate(), s.pct(0.99)));
                row(
                    "spread, S=4, a shard of member 0 down (vs S=4)",
                    &mut down,
                    full,
                );
            }
            drop(redlock);
            drop(d);
            clean_groups();
        }
        for (name, mut s) in hot_rows {
            row(&format!("hot, {name}"), &mut s, None);
        }
    }
}
