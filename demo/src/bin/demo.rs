//! The main demo: several "instances" (separate `Redlock` clients) contend for
//! one lock on five Redis nodes, each doing a read-modify-write of a shared
//! counter inside the lock. It prints every acquisition with its validity and
//! checks at the end that no update was lost.
//!
//! Run it with `make demo`, which starts five local nodes of its own whatever
//! the environment says. `make demo-on-nodes` runs it against the nodes in
//! `REDQUORUM_NODES` instead, and then writes the key `demo:counter` on the
//! first of them.
//! Set `RUST_LOG=redquorum=debug` to see per-node outcomes.

use std::io::IsTerminal as _;
use std::time::{Duration, Instant};

use redquorum::redis;
use redquorum::Redlock;
use tracing_subscriber::EnvFilter;

const INSTANCES: usize = 4;
const ROUNDS: usize = 5;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::from_default_env())
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
    let nodes = std::env::var("REDQUORUM_NODES")
        .map_err(|_| "set REDQUORUM_NODES=redis://host:port,... (make demo does this)")?;
    let urls = redquorum::split_node_list(&nodes);
    println!(
        "== redquorum demo: {} nodes, {INSTANCES} instances contending ==",
        urls.len()
    );

    // The shared counter lives on the first node (or the plain node
    // DEMO_STORE names: `make demo-cluster` gives one); a real service would
    // keep it in its own database. Reset it so the final check is exact.
    let store = match std::env::var("DEMO_STORE") {
        Ok(store) => store,
        Err(_) => urls
            .first()
            .cloned()
            .ok_or("REDQUORUM_NODES names no node")?,
    };
    let store = redis::Client::open(store.as_str())?;
    let mut conn = store.get_multiplexed_async_connection().await?;
    redis::cmd("DEL")
        .arg("demo:counter")
        .exec_async(&mut conn)
        .await?;

    let started = Instant::now();
    let mut tasks = Vec::new();
    for instance in 0..INSTANCES {
        // Each instance has its own client, like separate processes would.
        let redlock = Redlock::builder().nodes(&urls).build()?;
        let mut conn = conn.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                let lock = redlock
                    .lock("demo:resource", Duration::from_secs(5)).wait(Duration::from_secs(30))
                    .await?;
                let value: Option<u64> = redis::cmd("GET")
                    .arg("demo:counter")
                    .query_async(&mut conn)
                    .await?;
                let next = value.unwrap_or(0) + 1;
                // Pretend to work a little while holding the lock.
                tokio::time::sleep(Duration::from_millis(20)).await;
                redis::cmd("SET")
                    .arg("demo:counter")
                    .arg(next)
                    .exec_async(&mut conn)
                    .await?;
                println!(
                    "[{:>6.3}s] instance {instance} round {round}: acquired (validity {:>4} ms), counter -> {next}",
                    started.elapsed().as_secs_f64(),
                    lock.validity().as_millis(),
                );
                lock.release().await?;
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        }));
    }
    for t in tasks {
        t.await?.map_err(|e| e.to_string())?;
    }
    let total: u64 = redis::cmd("GET")
        .arg("demo:counter")
        .query_async(&mut conn)
        .await?;
    let expected = (INSTANCES * ROUNDS) as u64;
    println!(
        "counter = {total}, expected {expected}: lost updates = {}",
        expected - total
    );
    if total != expected {
        return Err("lost update detected".into());
    }

    // .run(f) renews the lock while the work runs longer than the TTL.
    let redlock = Redlock::builder().nodes(&urls).build()?;
    let kept = redlock
        .lock("demo:long-job", Duration::from_millis(300))
        .run(|lock| async move {
            tokio::time::sleep(Duration::from_millis(900)).await;
            lock.validity()
        })
        .await?;
    println!(
        "lock(..).run(f): 900 ms of work under a 300 ms TTL, validity left at the end {kept:?}"
    );
    Ok(())
}
