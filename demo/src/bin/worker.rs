//! The worker of the five-node docker example (`docker/`), also runnable on
//! its own. Each worker, many times over:
//!
//! 1. inside the Redlock on `docker-demo:counter`, reads a counter from a file
//!    on the shared volume, waits a moment, and writes it back plus one (a
//!    read-modify-write that loses updates unless the lock really excludes);
//! 2. issues a serial number and appends it to its own file.
//!
//! `worker verify` then reads every file and prints
//! `numbers=N duplicates=D lost_updates=L`, exiting non-zero on any duplicate
//! or lost update. With `EXPECT_SET_ASIDE=i` it also prints how many yes
//! votes of node `i` the workers set aside (it may have lost data: a shard
//! that failed over) and fails when none were.
//!
//! Run: `REDQUORUM_NODES=redis://...,... DATA_DIR=/tmp/x cargo run -p redquorum-demo --bin worker -- run`
//! (env: WORKER_ID, ITERATIONS, PACE_MS between iterations; RUN_UNTIL: a
//! file whose appearance the worker also waits for, going on past
//! ITERATIONS, at most ten times as many), then `... --bin worker -- verify`.

use std::collections::HashSet;
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use redquorum::{Redlock, SerialGenerator};
use tracing_subscriber::EnvFilter;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")),
        )
        .with_ansi(std::io::stdout().is_terminal())
        .init();
    let data = PathBuf::from(std::env::var("DATA_DIR").unwrap_or_else(|_| "/data".into()));
    match std::env::args().nth(1).as_deref() {
        Some("run") => run(&data).await,
        Some("verify") => verify(&data),
        _ => Err("usage: worker run | worker verify".into()),
    }
}

async fn run(data: &Path) -> Result<(), BoxError> {
    let id = std::env::var("WORKER_ID").unwrap_or_else(|_| "1".into());
    let iterations: u64 = std::env::var("ITERATIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let pace = Duration::from_millis(
        std::env::var("PACE_MS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
    );
    // Keep going until this file appears (the chaos is over), however fast
    // this machine ran the iterations; bounded all the same.
    let until = std::env::var_os("RUN_UNTIL").map(PathBuf::from);
    let nodes = std::env::var("REDQUORUM_NODES")?;
    let redlock = Redlock::builder().node_list(&nodes).build()?;
    let serials = SerialGenerator::builder(redlock.clone()).width(6).build()?;
    std::fs::create_dir_all(data)?;
    let counter = data.join("counter");
    let mut issued = Vec::new();
    let (mut increments, mut lock_failures, mut serial_failures) = (0u64, 0u64, 0u64);
    for i in 0.. {
        if i >= iterations && until.as_ref().is_none_or(|f| f.exists()) {
            break;
        }
        if i >= iterations.saturating_mul(10).max(1) {
            return Err(format!("worker {id}: {i} iterations and RUN_UNTIL never appeared").into());
        }
        // (a) the read-modify-write under the lock
        match redlock
            .lock("docker-demo:counter", Duration::from_secs(2))
            .wait(Duration::from_secs(30))
            .await
        {
            Ok(lock) => {
                let value = read_counter(&counter)?;
                tokio::time::sleep(Duration::from_millis(2)).await;
                // Never write if the lock may have expired meanwhile.
                if lock.ensure_valid(Duration::from_millis(500)).is_ok() {
                    write_counter(data, &counter, value + 1)?;
                    increments += 1;
                } else {
                    lock_failures += 1;
                }
                if let Err(e) = lock.release().await {
                    eprintln!("worker {id}: release: {e}");
                }
            }
            Err(e) => {
                lock_failures += 1;
                eprintln!("worker {id}: iteration {i}: lock: {e}");
            }
        }
        // (b) a serial number
        match serials.next("ORDER").await {
            Ok(s) => issued.push(s.to_string()),
            Err(e) => {
                serial_failures += 1;
                eprintln!("worker {id}: iteration {i}: serial: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        tokio::time::sleep(pace).await;
        if (i + 1) % 100 == 0 {
            println!(
                "worker {id}: {} iterations, {increments} increments, {} numbers",
                i + 1,
                issued.len()
            );
        }
    }
    std::fs::write(
        data.join(format!("serials-{id}.txt")),
        issued.join("\n") + "\n",
    )?;
    std::fs::write(
        data.join(format!("increments-{id}.txt")),
        format!("{increments}\n"),
    )?;
    // Each node's yes votes set aside because it may have lost data.
    let votes: String = redlock
        .stats()
        .nodes
        .iter()
        .map(|n| format!("{} {}\n", n.index, n.quarantined_votes))
        .collect();
    std::fs::write(data.join(format!("set-aside-{id}.txt")), votes)?;
    redlock.settle().await;
    println!(
        "worker {id}: done: increments={increments} numbers={} lock_failures={lock_failures} serial_failures={serial_failures}",
        issued.len()
    );
    Ok(())
}

fn read_counter(path: &Path) -> Result<u64, BoxError> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(s.trim().parse()?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(e.into()),
    }
}

/// Writes via a temp file and rename, so a reader never sees half a number.
fn write_counter(dir: &Path, path: &Path, value: u64) -> Result<(), BoxError> {
    let tmp = dir.join(format!("counter.tmp.{}", std::process::id()));
    std::fs::write(&tmp, format!("{value}\n"))?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

fn verify(data: &Path) -> Result<(), BoxError> {
    let expect: Option<usize> = match std::env::var("EXPECT_SET_ASIDE") {
        Ok(s) => Some(s.parse().map_err(|_| "EXPECT_SET_ASIDE: a node index")?),
        Err(_) => None,
    };
    let (mut numbers, mut seen, mut increments) = (0usize, HashSet::new(), 0u64);
    let mut set_aside = 0u64;
    for entry in std::fs::read_dir(data)? {
        let path = entry?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        if name.starts_with("serials-") {
            for line in std::fs::read_to_string(&path)?
                .lines()
                .filter(|l| !l.is_empty())
            {
                numbers += 1;
                seen.insert(line.to_owned());
            }
        } else if name.starts_with("increments-") {
            increments += std::fs::read_to_string(&path)?.trim().parse::<u64>()?;
        } else if name.starts_with("set-aside-") {
            for line in std::fs::read_to_string(&path)?.lines() {
                if let Some((node, votes)) = line.split_once(' ') {
                    if expect == Some(node.parse()?) {
                        set_aside += votes.parse::<u64>()?;
                    }
                }
            }
        }
    }
    let counter = read_counter(&data.join("counter"))?;
    let duplicates = numbers - seen.len();
    let lost = increments.abs_diff(counter);
    println!("numbers={numbers} duplicates={duplicates} lost_updates={lost} (counter={counter}, increments={increments})");
    if let Some(node) = expect {
        println!("yes votes of node {node} set aside (it may have lost data): {set_aside}");
    }
    if duplicates > 0 || lost > 0 || numbers == 0 || (expect.is_some() && set_aside == 0) {
        return Err("verification failed".into());
    }
    Ok(())
}
