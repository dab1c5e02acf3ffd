//! The README's usage snippet, as written, compiled with `redquorum` and
//! `tokio` alone (`tests/readme.rs` checks that the two stay the same text).
//! It only needs to build: the node addresses are placeholders, and `main`
//! does not call it.
//!
//! Build: `cargo build --example readme`.

#![allow(unused_variables, dead_code)]

#[tokio::main]
async fn main() {
    println!("this example only proves that the README snippet compiles");
}

#[rustfmt::skip]
async fn readme_snippet() -> Result<(), Box<dyn std::error::Error>> {
    // README: begin
    use std::time::Duration;

    let redlock = redquorum::Redlock::builder()
        .nodes(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379",
                "redis://10.0.0.4:6379", "redis://10.0.0.5:6379"])
        .build()?;                    // sync; connects lazily; nodes down now are fine

    // Take, use, release.
    let lock = redlock.lock("orders", Duration::from_secs(10)).await?;   // waits its turn (~2 s max)
    lock.ensure_valid(Duration::from_millis(500))?;                       // cheap local check
    lock.extend(Duration::from_secs(10)).await?;                          // only within validity
    lock.release().await?;                                                // compare-and-delete everywhere

    // Wait at most 3 s; tell contention from outages.
    match redlock.lock_timeout("orders", Duration::from_secs(10), Duration::from_secs(3)).await {
        Ok(lock) => lock.release().await?,
        Err(e) if e.is_contended() => { /* someone else holds it */ }
        Err(e) => { for f in e.node_failures() { eprintln!("{f}"); } }
    }

    // Auto-extended while the work runs; the work is cancelled if the lock is lost.
    let n = redlock.with_lock("report", Duration::from_secs(5), |lock| async move {
        // ... lock.validity(), lock.lost() ...
        42
    }).await?;

    // Fencing token: strictly larger than any earlier holder's.
    let lock = redlock.lock_fenced("invoice-7", Duration::from_secs(5)).await?;
    let token = lock.fencing_token();            // Some(u64): pass it to your storage
    lock.release().await?;

    // Serial numbers.
    let serials = redquorum::SerialGenerator::builder(redlock.clone())
        .time_zone(redquorum::chrono_tz::Asia::Shanghai)   // default: the local zone
        .width(4)                                 // default 4: 0001..9999 per day
        .build()?;
    let s = serials.next("ORDER").await?;        // s.to_string() == "ORDER202611220001"
    let batch = serials.next_batch("ORDER", 50).await?;
    // README: end
    Ok(())
}
