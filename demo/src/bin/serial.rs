//! Three simulated service instances (separate clients, as separate processes
//! would be) issue order numbers at the same time from the same five nodes.
//! Prints a sample and checks that no number was issued twice.
//!
//! Run it with `make demo`, which starts five local nodes of its own whatever
//! the environment says. `make demo-on-nodes` runs it against the nodes in
//! `REDQUORUM_NODES` instead, with the prefix `DEMO` (`DEMO_SERIAL_PREFIX`),
//! so that it burns no real order numbers.

use std::collections::HashSet;
use std::io::IsTerminal as _;

use redquorum::chrono_tz;
use redquorum::{Redlock, SerialGenerator};
use tracing_subscriber::EnvFilter;

const INSTANCES: usize = 3;
const CALLERS_PER_INSTANCE: usize = 8;
const NUMBERS_PER_CALLER: usize = 25;

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
    let prefix: &'static str = std::env::var("DEMO_SERIAL_PREFIX")
        .unwrap_or_else(|_| "ORDER".to_owned())
        .leak();
    println!("== serial numbers: {INSTANCES} instances x {CALLERS_PER_INSTANCE} callers ==");

    let mut tasks = Vec::new();
    for instance in 0..INSTANCES {
        let redlock = Redlock::builder().nodes(&urls).build()?;
        let serials = SerialGenerator::builder(redlock)
            .time_zone(chrono_tz::Asia::Shanghai)
            .width(4)
            .build()?;
        for caller in 0..CALLERS_PER_INSTANCE {
            let serials = serials.clone();
            tasks.push(tokio::spawn(async move {
                let mut mine = Vec::new();
                for _ in 0..NUMBERS_PER_CALLER {
                    mine.push(serials.next(prefix).await?.to_string());
                }
                if caller == 0 {
                    println!(
                        "instance {instance}, caller 0: {} .. {}",
                        mine[0],
                        mine[mine.len() - 1]
                    );
                }
                Ok::<_, redquorum::Error>(mine)
            }));
        }
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await??);
    }
    let distinct: HashSet<&String> = all.iter().collect();
    let batch = SerialGenerator::builder(Redlock::builder().nodes(&urls).build()?)
        .time_zone(chrono_tz::Asia::Shanghai)
        .build()?
        .next_batch(prefix, 3)
        .await?;
    let batch: Vec<String> = batch.iter().map(ToString::to_string).collect();
    println!("a batch of 3: {}", batch.join(" "));
    println!(
        "numbers={} distinct={} duplicates={}",
        all.len(),
        distinct.len(),
        all.len() - distinct.len()
    );
    if distinct.len() != all.len() {
        return Err("duplicate serial numbers".into());
    }
    Ok(())
}
