//! Helpers shared by the benchmarks: timed cells of concurrent operations
//! and their statistics. Every cell is bounded in time and operations.

#![allow(dead_code)]

use std::future::Future;
use std::time::{Duration, Instant};

/// Latency samples and counts of one benchmark cell.
#[derive(Default)]
pub struct Stats {
    pub ok: usize,
    pub failed: usize,
    pub lat: Vec<Duration>,
    pub elapsed: Duration,
    /// CPU time this process (client side) spent during the cell.
    pub cpu: Duration,
    /// CPU time the nodes (the processes given to [`watch_nodes`]) spent.
    pub node_cpu: Duration,
}

impl Stats {
    /// Adds a whole cell (counts, samples and time).
    pub fn add(&mut self, other: Stats) {
        self.elapsed += other.elapsed;
        self.cpu += other.cpu;
        self.node_cpu += other.node_cpu;
        self.merge(other);
    }
    pub fn merge(&mut self, other: Stats) {
        self.ok += other.ok;
        self.failed += other.failed;
        self.lat.extend(other.lat);
    }
    pub fn pct(&mut self, p: f64) -> Duration {
        if self.lat.is_empty() {
            return Duration::ZERO;
        }
        self.lat.sort_unstable();
        let i = ((self.lat.len() as f64 * p).ceil() as usize).clamp(1, self.lat.len()) - 1;
        self.lat[i]
    }
    pub fn rate(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64()
    }
    /// Client CPU microseconds per successful operation.
    pub fn cpu_per_op_us(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e6 / self.ok.max(1) as f64
    }
    /// Nodes' CPU microseconds per successful operation.
    pub fn node_cpu_per_op_us(&self) -> f64 {
        self.node_cpu.as_secs_f64() * 1e6 / self.ok.max(1) as f64
    }
    pub fn success(&self) -> f64 {
        100.0 * self.ok as f64 / (self.ok + self.failed).max(1) as f64
    }
}

/// Runs `op(task, i)` in `tasks` concurrent tasks until `limit` passes or
/// each task did `max_ops`.
pub async fn run_tasks<F, Fut>(tasks: usize, limit: Duration, max_ops: usize, op: F) -> Stats
where
    F: Fn(usize, usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = bool> + Send,
{
    let start = Instant::now();
    let (cpu0, nodes0) = (process_cpu(), nodes_cpu());
    let deadline = start + limit;
    let mut joins = Vec::new();
    for t in 0..tasks {
        let op = op.clone();
        joins.push(tokio::spawn(async move {
            let mut s = Stats::default();
            for i in 0..max_ops {
                if Instant::now() >= deadline {
                    break;
                }
                let t0 = Instant::now();
                if op(t, i).await {
                    s.ok += 1;
                    s.lat.push(t0.elapsed());
                } else {
                    s.failed += 1;
                }
            }
            s
        }));
    }
    let mut all = Stats::default();
    for j in joins {
        all.merge(j.await.expect("bench task"));
    }
    all.elapsed = start.elapsed();
    all.cpu = process_cpu().saturating_sub(cpu0);
    all.node_cpu = nodes_cpu().saturating_sub(nodes0);
    all
}

/// Node processes whose CPU time cells record.
static NODES: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

/// Makes cells record the CPU time of these processes (the nodes).
pub fn watch_nodes(pids: impl IntoIterator<Item = u32>) {
    *NODES.lock().expect("nodes") = pids.into_iter().collect();
}

/// CPU time of the watched nodes so far.
fn nodes_cpu() -> Duration {
    let pids = NODES.lock().expect("nodes").clone();
    pids.iter()
        .map(|p| cpu_of(&format!("/proc/{p}/stat")))
        .sum()
}

/// User + system CPU time of this process so far (from /proc; zero elsewhere).
pub fn process_cpu() -> Duration {
    cpu_of("/proc/self/stat")
}

/// User + system CPU time from a `/proc/<pid>/stat` file.
fn cpu_of(path: &str) -> Duration {
    let Ok(stat) = std::fs::read_to_string(path) else {
        return Duration::ZERO;
    };
    // Fields after the command name (which is in parentheses).
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return Duration::ZERO;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11).and_then(|u| u.parse().ok()).unwrap_or(0)
        + f.get(12).and_then(|s| s.parse().ok()).unwrap_or(0);
    Duration::from_millis(ticks * 10) // USER_HZ is 100 on Linux
}

/// The same for a blocking client, on OS threads.
pub fn run_threads<F>(threads: usize, limit: Duration, max_ops: usize, op: F) -> Stats
where
    F: Fn(usize, usize) -> bool + Sync,
{
    let start = Instant::now();
    let (cpu0, nodes0) = (process_cpu(), nodes_cpu());
    let deadline = start + limit;
    let mut all = Stats::default();
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let op = &op;
                s.spawn(move || {
                    let mut st = Stats::default();
                    for i in 0..max_ops {
                        if Instant::now() >= deadline {
                            break;
                        }
                        let t0 = Instant::now();
                        if op(t, i) {
                            st.ok += 1;
                            st.lat.push(t0.elapsed());
                        } else {
                            st.failed += 1;
                        }
                    }
                    st
                })
            })
            .collect();
        for h in hs {
            all.merge(h.join().expect("bench thread"));
        }
    });
    all.elapsed = start.elapsed();
    all.cpu = process_cpu().saturating_sub(cpu0);
    all.node_cpu = nodes_cpu().saturating_sub(nodes0);
    all
}

/// Five `redis-server` nodes with AOF (`appendfsync always`) on free
/// loopback ports, their URLs, and a multi-thread runtime (the caller
/// enters it): how most benchmarks start.
pub fn five_nodes() -> (
    crate::support::Cluster,
    Vec<String>,
    tokio::runtime::Runtime,
) {
    let cluster = crate::support::Cluster::start_with(5, crate::support::Persistence::Aof);
    let urls = cluster.urls();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    (cluster, urls, rt)
}

/// Time per benchmark cell from `BENCH_SECS` (default 3 s), or `None` when a
/// test runner only probes the binary with `--list` (a benchmark lists
/// nothing).
pub fn time_per_cell() -> Option<Duration> {
    if std::env::args().any(|a| a == "--list") {
        return None;
    }
    let secs: f64 = std::env::var("BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    Some(Duration::from_secs_f64(secs))
}
