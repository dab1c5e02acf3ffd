//! Lock benchmark: redquorum vs the `rslock` and `redlock` crates, in one run,
//! against the same five local redis-server nodes (started by the test
//! harness on free loopback ports).
//!
//! (a) one task, sequential lock+release: p50 / p99
//! (b) 32 tasks on distinct resources: lock+release throughput
//! (c) (b) with 1 and with 2 of 5 nodes paused (SIGSTOP): success, p99
//! (d) 3 clients x 8 tasks on one resource, hold 1 ms: acquisitions/s and
//!     wait p50/p99/max, against the limit (one task alone) and the
//!     fair-share wait; handover latency after a release and after a TTL
//!     (see `contended/mod.rs`)
//! (e) 64 tasks on distinct resources, fenced from one shared counter, against
//!     the same tasks taking plain locks (see `fenced/mod.rs`)
//!
//! Two floors run in the same slices as (a): the same commands with no lock
//! logic, through redis-rs and on plain sockets (see `floor/mod.rs`).
//! `BENCH_PROFILE=a` runs (a) for our client alone; `BENCH_PROFILE=reads`
//! runs it beside the redis-rs floor with a `TIME`, and with a `TIME` and
//! the read of our marker, behind its `SET`: what those reads cost without
//! our client.
//!
//! Run: `make bench` (or `cargo bench --bench lock`). Every loop is bounded in
//! operations and time. `BENCH_SECS` sets the duration per throughput cell.
//! The cost of the `metrics` feature: `--features metrics` (no recorder), and
//! with `BENCH_RECORDER=prometheus` a Prometheus recorder installed.

#[path = "../tests/support/mod.rs"]
mod support;

mod common;
mod contended;
mod fenced;
mod floor;

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{run_tasks, run_threads, Stats};
use support::{Cluster, Persistence};

const TTL: Duration = Duration::from_secs(10);
const TASKS: usize = 32;
/// Alternating slices per client in (a) and (b).
const REPS: u32 = 6;

async fn ours(redlock: &redquorum::Redlock, resource: &str) -> bool {
    let r = match redlock.lock(resource, TTL).try_once().await {
        Ok(lock) => lock.release().await,
        Err(e) => Err(e),
    };
    if let Err(e) = &r {
        if std::env::var_os("BENCH_DEBUG").is_some() {
            eprintln!("redquorum op failed: {e:?}");
        }
    }
    r.is_ok()
}

async fn rslock_op(m: &rslock::LockManager, resource: &str) -> bool {
    match m.lock(resource.as_bytes(), TTL).await {
        Ok(lock) => {
            m.unlock(&lock).await;
            true
        }
        Err(_) => false,
    }
}

/// Runs `op(client, task, i)` in `tasks` tasks on `rt` for `limit`.
fn cell<C, F, Fut>(
    rt: &tokio::runtime::Runtime,
    client: &Arc<C>,
    tasks: usize,
    limit: Duration,
    op: F,
) -> Stats
where
    C: Send + Sync + 'static,
    F: Fn(Arc<C>, usize, usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = bool> + Send,
{
    let c = client.clone();
    rt.block_on(run_tasks(tasks, limit, usize::MAX, move |t, i| {
        op(c.clone(), t, i)
    }))
}

/// Runs [`ours`] in `tasks` tasks for `limit`, each operation on the
/// resource `name(task, op)`.
fn ours_cell(
    rt: &tokio::runtime::Runtime,
    client: &Arc<redquorum::Redlock>,
    tasks: usize,
    limit: Duration,
    name: fn(usize, usize) -> String,
) -> Stats {
    cell(rt, client, tasks, limit, move |c, t, i| async move {
        ours(&c, &name(t, i)).await
    })
}

/// [`ours_cell`] for rslock; with `bound`, each operation is cut off after
/// it (rslock waits for every node, also a hung one).
fn rs_cell(
    rt: &tokio::runtime::Runtime,
    client: &Arc<rslock::LockManager>,
    tasks: usize,
    limit: Duration,
    name: fn(usize, usize) -> String,
    bound: Option<Duration>,
) -> Stats {
    cell(rt, client, tasks, limit, move |c, t, i| async move {
        match bound {
            Some(b) => tokio::time::timeout(b, rslock_op(&c, &name(t, i)))
                .await
                .unwrap_or(false),
            None => rslock_op(&c, &name(t, i)).await,
        }
    })
}

fn redlock_op(r: &redlock::RedLock, resource: &str) -> bool {
    match r.lock(resource.as_bytes(), TTL.as_millis() as usize) {
        Ok(Some(lock)) => {
            r.unlock(&lock);
            true
        }
        _ => false,
    }
}

fn row(out: &mut Vec<String>, scenario: &str, client: &str, s: &mut Stats) {
    let line = format!(
        "| {scenario} | {client} | {:.0} | {:.3} | {:.3} | {:.1} % | {:.0} | {:.0} |",
        s.rate(),
        s.pct(0.50).as_secs_f64() * 1e3,
        s.pct(0.99).as_secs_f64() * 1e3,
        s.success(),
        s.cpu_per_op_us(),
        s.node_cpu_per_op_us()
    );
    println!("{line}");
    out.push(line);
}

fn main() {
    let Some(limit) = common::time_per_cell() else {
        return;
    };
    #[cfg(feature = "metrics")]
    if std::env::var("BENCH_RECORDER").as_deref() == Ok("prometheus") {
        metrics_exporter_prometheus::PrometheusBuilder::new()
            .install_recorder()
            .expect("install the Prometheus recorder");
        println!("metrics: a Prometheus recorder is installed");
    }
    let mut cluster = Cluster::start_with(5, Persistence::Aof);
    let urls = cluster.urls();
    let mut builder = if std::env::var("BENCH_RT").as_deref() == Ok("current") {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    let rt = builder.enable_all().build().expect("runtime");
    let ours_client = Arc::new(
        redquorum::Redlock::builder()
            .nodes(&urls)
            .retry_count(0)
            .build()
            .expect("redquorum"),
    );
    let rs = Arc::new(rt.block_on(async { rslock::LockManager::new(urls.clone()) }));
    let rl = redlock::RedLock::new(urls.clone());
    let raw = Arc::new(tokio::sync::Mutex::new(
        rt.block_on(floor::RawSockets::connect(&urls)),
    ));
    let via_redis_rs = Arc::new(rt.block_on(floor::RedisRs::connect(&urls)));

    common::watch_nodes(cluster.nodes.iter().map(|n| n.pid()));
    if std::env::var("BENCH_ONLY").as_deref() == Ok("d") {
        scenario_d(&rt, &cluster, &urls, limit);
        return;
    }
    if std::env::var("BENCH_ONLY").as_deref() == Ok("e") {
        scenario_e(&rt, &urls, limit);
        return;
    }
    println!(
        "| scenario | client | ops/s | p50 ms | p99 ms | success | client CPU µs/op | nodes CPU µs/op |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    let mut out = Vec::new();

    // Warm up connections (and script caches) for both async clients.
    rt.block_on(async {
        for i in 0..200 {
            ours(&ours_client, &format!("warm{i}")).await;
            rslock_op(&rs, &format!("warm{i}")).await;
        }
    });

    if std::env::var("BENCH_PROFILE").as_deref() == Ok("rs") {
        let mut s = rs_cell(&rt, &rs, TASKS, limit, |t, _| format!("rs-res{t}"), None);
        row(&mut out, "(b) 32 tasks", "rslock", &mut s);
        return;
    }
    if std::env::var("BENCH_PROFILE").as_deref() == Ok("reads") {
        reads_floor(&rt, &ours_client, &via_redis_rs, limit);
        return;
    }
    if std::env::var_os("BENCH_PROFILE").is_some() {
        // Only our client, for profiling: (a) then (b).
        let mut s = ours_cell(&rt, &ours_client, 1, limit, |_, i| format!("seq{}", i % 64));
        row(&mut out, "(a) sequential", "redquorum", &mut s);
        if std::env::var("BENCH_PROFILE").as_deref() == Ok("a") {
            return;
        }
        let mut s = ours_cell(&rt, &ours_client, TASKS, limit, |t, _| {
            format!("ours-res{t}")
        });
        row(&mut out, "(b) 32 tasks", "redquorum", &mut s);
        return;
    }

    // (a) and (b): the clients take turns in short slices, REPS times, so
    // that background noise on the machine hits them alike.
    let slice = limit / REPS;
    let mut a_ours = Stats::default();
    let mut a_rs = Stats::default();
    let mut b_ours = Stats::default();
    let mut b_rs = Stats::default();
    let (mut a_raw, mut a_redis_rs) = (Stats::default(), Stats::default());
    for _ in 0..REPS {
        a_ours.add(ours_cell(&rt, &ours_client, 1, slice, |_, i| {
            format!("seq{}", i % 64)
        }));
        a_rs.add(rs_cell(
            &rt,
            &rs,
            1,
            slice,
            |_, i| format!("rs-seq{}", i % 64),
            None,
        ));
        a_raw.add(cell(&rt, &raw, 1, slice, |c, _, i| async move {
            c.lock().await.op(&format!("raw-seq{}", i % 64), TTL).await
        }));
        a_redis_rs.add(cell(&rt, &via_redis_rs, 1, slice, |c, _, i| async move {
            c.op(&format!("redis-rs-seq{}", i % 64), TTL, floor::Reads::None)
                .await
        }));
        b_ours.add(ours_cell(&rt, &ours_client, TASKS, slice, |t, _| {
            format!("ours-res{t}")
        }));
        b_rs.add(rs_cell(
            &rt,
            &rs,
            TASKS,
            slice,
            |t, _| format!("rs-res{t}"),
            None,
        ));
    }
    let mut a_rl = run_threads(1, limit / 2, 1_000, |_, i| {
        redlock_op(&rl, &format!("rl-seq{}", i % 64))
    });
    let mut b_rl = run_threads(TASKS, limit / 2, usize::MAX, |t, _| {
        redlock_op(&rl, &format!("rl-res{t}"))
    });
    row(&mut out, "(a) sequential", "redquorum", &mut a_ours);
    row(&mut out, "(a) sequential", "rslock", &mut a_rs);
    row(&mut out, "(a) sequential", "redlock", &mut a_rl);
    row(
        &mut out,
        "(a) floor: same commands, no lock logic",
        "redis-rs fan-out",
        &mut a_redis_rs,
    );
    row(
        &mut out,
        "(a) floor: same commands, no lock logic",
        "raw sockets, no library",
        &mut a_raw,
    );
    row(&mut out, "(b) 32 tasks", "redquorum", &mut b_ours);
    row(&mut out, "(b) 32 tasks", "rslock", &mut b_rs);
    row(&mut out, "(b) 32 tasks", "redlock", &mut b_rl);

    // (c) paused nodes. Our client alternates slices: healthy, 1 paused,
    // 2 paused, so the p99 ratio compares like with like.
    let (mut c_healthy, mut c_one, mut c_two) =
        (Stats::default(), Stats::default(), Stats::default());
    for _ in 0..REPS {
        for (paused, stats) in [(0usize, &mut c_healthy), (1, &mut c_one), (2, &mut c_two)] {
            for p in 0..paused {
                cluster.nodes[p * 2 + 1].pause();
            }
            stats.add(ours_cell(&rt, &ours_client, TASKS, slice, |t, _| {
                format!("ours-res{t}")
            }));
            cluster.resume_all();
            // Let resumed nodes work off the requests queued while they hung
            // before the next slice measures anything.
            rt.block_on(ours_client.settle());
            std::thread::sleep(Duration::from_millis(300));
        }
    }
    row(
        &mut out,
        "(c) 32 tasks, healthy (same slices)",
        "redquorum",
        &mut c_healthy,
    );
    let mut paused_p99 = Vec::new();
    for (paused, stats) in [(1usize, &mut c_one), (2, &mut c_two)] {
        let label = format!("(c) 32 tasks, {paused} of 5 paused");
        row(&mut out, &label, "redquorum", stats);
        paused_p99.push(stats.pct(0.99));
        for p in 0..paused {
            cluster.nodes[p * 2 + 1].pause();
        }
        // rslock waits for every node: bound each operation so the run ends.
        let bound = Some(Duration::from_secs(5));
        let mut c_rs = rs_cell(
            &rt,
            &rs,
            TASKS,
            limit / 2,
            |t, _| format!("rs-res{t}"),
            bound,
        );
        row(&mut out, &label, "rslock", &mut c_rs);
        // redlock (sync, no timeouts) blocks on a hung node: try one op with
        // a watchdog instead of a full cell.
        let done = AtomicBool::new(false);
        let t0 = Instant::now();
        std::thread::scope(|s| {
            s.spawn(|| {
                redlock_op(&rl, "hung");
                done.store(true, Ordering::SeqCst);
            });
            while !done.load(Ordering::SeqCst) && t0.elapsed() < Duration::from_secs(3) {
                std::thread::sleep(Duration::from_millis(10));
            }
            let line = if done.load(Ordering::SeqCst) {
                format!(
                    "| {label} | redlock | one op took {:?} | | | | |",
                    t0.elapsed()
                )
            } else {
                format!("| {label} | redlock | blocked > 3 s on one op (no timeout) | | | | | |")
            };
            println!("{line}");
            out.push(line);
            cluster.resume_all(); // lets a blocked redlock op finish
        });
    }

    println!();
    println!("ratios (same run):");
    println!(
        "  (a) p50 redquorum / rslock = {:.2}  (target <= 0.6)",
        a_ours.pct(0.5).as_secs_f64() / a_rs.pct(0.5).as_secs_f64()
    );
    let rs_p50 = a_rs.pct(0.5).as_secs_f64();
    println!(
        "  (a) floor: redis-rs fan-out / rslock = {:.2}; raw sockets / rslock = {:.2}",
        a_redis_rs.pct(0.5).as_secs_f64() / rs_p50,
        a_raw.pct(0.5).as_secs_f64() / rs_p50
    );
    println!(
        "  (b) throughput redquorum / rslock = {:.2}  (target >= 1.5); / redlock = {:.2}",
        b_ours.rate() / b_rs.rate(),
        b_ours.rate() / b_rl.rate()
    );
    let healthy_p99 = c_healthy.pct(0.99).as_secs_f64();
    for (i, p) in paused_p99.iter().enumerate() {
        println!(
            "  (c) {} paused: p99 / healthy p99 = {:.2}  (target <= 2)",
            i + 1,
            p.as_secs_f64() / healthy_p99
        );
    }
    println!();
    scenario_d(&rt, &cluster, &urls, limit);
    println!();
    scenario_e(&rt, &urls, limit);
}

/// (e): fenced locks from one shared counter against plain ones, 64 tasks.
fn scenario_e(rt: &tokio::runtime::Runtime, urls: &[String], limit: Duration) {
    let plain = fenced::client(urls, false);
    let with_tokens = fenced::client(urls, true);
    let (mut p, mut f) = (Stats::default(), Stats::default());
    // Alternate short slices so machine noise hits both alike.
    for _ in 0..REPS {
        p.add(fenced::slice(rt, &plain, false, limit / REPS));
        f.add(fenced::slice(rt, &with_tokens, true, limit / REPS));
    }
    println!(
        "| scenario | client | ops/s | p50 ms | p99 ms | success | client CPU µs/op | nodes CPU µs/op |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    let mut out = Vec::new();
    let label = format!("(e) {} tasks, distinct resources", fenced::TASKS);
    row(&mut out, &label, "redquorum, lock", &mut p);
    row(
        &mut out,
        &label,
        "redquorum, lock_fenced (one shared counter)",
        &mut f,
    );
    println!();
    println!("ratios (same run):");
    println!(
        "  (e) throughput fenced / plain = {:.2}  (target >= 0.5); fenced failed: {} of {}",
        f.rate() / p.rate(),
        f.failed,
        f.ok + f.failed
    );
}

/// (d): one contended resource, printed as its own table with its targets.
fn scenario_d(rt: &tokio::runtime::Runtime, cluster: &Cluster, urls: &[String], limit: Duration) {
    use contended::{CLIENTS, TASKS};
    let ours_on = contended::ours(urls, true);
    let ours_off = contended::ours(urls, false);
    let rs: Vec<Arc<rslock::LockManager>> = (0..CLIENTS)
        .map(|_| Arc::new(rt.block_on(async { rslock::LockManager::new(urls.to_vec()) })))
        .collect();
    let cell_limit = limit * 5;
    let (mut alone, mut on, mut off, mut rsl) = (
        Stats::default(),
        Stats::default(),
        Stats::default(),
        Stats::default(),
    );
    let mut wakes = contended::Wakes::default();
    let mut cells_p99 = Vec::new();
    // Alternate the cells so machine noise hits every client alike.
    for _ in 0..2 {
        alone.add(contended::cell(
            rt,
            &ours_on[..1],
            1,
            cell_limit,
            contended::ours_acquire,
        ));
        let before = contended::Wakes::of(&ours_on);
        let mut cell = contended::cell(rt, &ours_on, TASKS, cell_limit, contended::ours_acquire);
        wakes.add(&contended::Wakes::of(&ours_on), &before);
        cells_p99.push(format!("{:.1}", cell.pct(0.99).as_secs_f64() * 1e3));
        on.add(cell);
        off.add(contended::cell(
            rt,
            &ours_off,
            TASKS,
            cell_limit,
            contended::ours_acquire,
        ));
        rsl.add(contended::cell(
            rt,
            &rs,
            TASKS,
            cell_limit,
            contended::rslock_acquire,
        ));
    }
    let k = CLIENTS * TASKS;
    let fair = Duration::from_secs_f64((k - 1) as f64 / alone.rate());
    println!(
        "(d) {CLIENTS} clients x {TASKS} tasks, one resource, hold 1 ms (fair-share wait (K - 1) / limit = {:.1} ms)",
        fair.as_secs_f64() * 1e3
    );
    contended::table(&mut [
        ("limit: one task alone (redquorum)", &mut alone),
        ("redquorum", &mut on),
        ("redquorum, notifications off", &mut off),
        ("rslock", &mut rsl),
    ]);
    let mut handover = contended::after_release(rt, urls, 30);
    let mut expiry = contended::after_expiry(rt, cluster, urls, 15);
    println!();
    println!("ratios (same run):");
    println!(
        "  (d) acquisitions/s redquorum / limit = {:.2}  (target >= 0.85); / rslock = {:.2}",
        on.rate() / alone.rate(),
        on.rate() / rsl.rate()
    );
    println!(
        "  (d) wait p99 / fair share = {:.2}  (target <= 1.5); max / fair share = {:.2}  (target <= 2)",
        on.pct(0.99).as_secs_f64() / fair.as_secs_f64(),
        on.pct(1.0).as_secs_f64() / fair.as_secs_f64()
    );
    println!(
        "  (d) redquorum per acquisition: {wakes}; wait p99 per cell: {} ms",
        cells_p99.join(", ")
    );
    for (after, s) in [
        ("another client's release", &mut handover),
        ("a crashed holder's TTL ran out", &mut expiry),
    ] {
        println!(
            "  (d) lock taken after {after}: p50 {:.2} ms, max {:.2} ms ({} of {}; target <= 30 ms)",
            s.pct(0.5).as_secs_f64() * 1e3,
            s.pct(1.0).as_secs_f64() * 1e3,
            s.ok,
            s.ok + s.failed
        );
    }
}

/// `BENCH_PROFILE=reads`: what the reads behind each vote-asking request
/// cost without our client. (a) by our client, and the redis-rs floor's
/// `SET` with a `TIME` behind it, then with a `TIME` and the `HMGET` of
/// our marker, taking turns in slices; the ratio of the two floors is the
/// marker read's own cost (Redis's and redis-rs's) on this machine.
fn reads_floor(
    rt: &tokio::runtime::Runtime,
    ours_client: &Arc<redquorum::Redlock>,
    via_redis_rs: &Arc<floor::RedisRs>,
    limit: Duration,
) {
    let slice = limit / REPS;
    let mut out = Vec::new();
    let (mut a_ours, mut timed, mut marked) =
        (Stats::default(), Stats::default(), Stats::default());
    for rep in 0..REPS {
        a_ours.add(ours_cell(rt, ours_client, 1, slice, |_, i| {
            format!("seq{}", i % 64)
        }));
        // Each first in half of the slices.
        let mut floors = [
            (floor::Reads::Time, &mut timed),
            (floor::Reads::TimeAndMarker, &mut marked),
        ];
        if rep % 2 == 1 {
            floors.reverse();
        }
        for (reads, stats) in floors {
            stats.add(cell(rt, via_redis_rs, 1, slice, move |c, _, i| async move {
                c.op(&format!("redis-rs-seq{}", i % 64), TTL, reads).await
            }));
        }
    }
    row(&mut out, "(a) sequential", "redquorum", &mut a_ours);
    row(
        &mut out,
        "(a) floor, SET + TIME",
        "redis-rs fan-out",
        &mut timed,
    );
    row(
        &mut out,
        "(a) floor, SET + TIME + HMGET marker",
        "redis-rs fan-out",
        &mut marked,
    );
    println!(
        "  (a) floor p50, with the marker read / without = {:.4}",
        marked.pct(0.50).as_secs_f64() / timed.pct(0.50).as_secs_f64()
    );
}
