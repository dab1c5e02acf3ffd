//! The README's usage program, letter for letter below this header
//! (`tests/readme.rs` checks that the two stay the same text), built by CI
//! with `redquorum` and `tokio` alone and no warnings.
//!
//! Run: `scripts/with-nodes.sh 5 cargo run --example readme`.

use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Five independent nodes, no replication between them, e.g.
    // REDQUORUM_NODES=redis://10.0.0.1:6379,redis://10.0.0.2:6379,...
    let nodes = std::env::var("REDQUORUM_NODES")?;
    let redlock = redquorum::Redlock::builder()
        .node_list(&nodes) // commas; a cluster's seeds stay together
        .build()?; // sync; connects lazily; nodes down now are fine

    // Take, use, release.
    let lock = redlock.lock("orders", Duration::from_secs(10)).await?; // waits its turn (~2 s max)
    lock.ensure_valid(Duration::from_millis(500))?; // cheap local check
    lock.extend(Duration::from_secs(10)).await?; // only within validity
    lock.release().await?; // compare-and-delete everywhere

    // Wait at most 3 s; tell contention from outages.
    let ttl = Duration::from_secs(10);
    match redlock
        .lock("orders", ttl)
        .wait(Duration::from_secs(3))
        .await
    {
        Ok(lock) => lock.release().await?,
        Err(e) if e.is_contended() => println!("someone else holds it"),
        Err(e) => e.node_failures().iter().for_each(|f| eprintln!("{f}")),
    }

    // Auto-extended while the work runs; the work is cancelled if the lock is lost.
    let left = redlock
        .lock("report", Duration::from_secs(5))
        .run(|lock| async move {
            // ... the work; lock.validity(), lock.lost() ...
            lock.validity()
        })
        .await?;
    println!("the report finished with {left:?} of validity left");

    // Fencing token: strictly larger than any earlier holder's.
    let lock = redlock
        .lock("invoice-7", Duration::from_secs(5))
        .fenced()
        .await?;
    let token = lock.fencing_token().unwrap_or_default(); // pass it to your storage
    println!("fencing token {token}");
    lock.release().await?;

    // Serial numbers.
    let serials = redquorum::SerialGenerator::builder(redlock.clone())
        .time_zone(redquorum::chrono_tz::Asia::Shanghai) // default: the local zone
        .width(4) // default 4: 0001..9999 per day
        .build()?;
    let s = serials.next("ORDER").await?; // e.g. ORDER202611220001
    let batch = serials.next_batch("ORDER", 50).await?;
    println!("{s}, then {} to {}", batch[0], batch[49]);
    Ok(())
}
