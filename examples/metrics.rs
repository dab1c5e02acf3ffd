//! The metrics an operator graphs, served in the Prometheus text format
//! while a small workload runs: workers contending for a lock, a semaphore
//! of two permits, an election and serial numbers, on the nodes in
//! `REDQUORUM_NODES`. It serves `GET /metrics` on `METRICS_ADDR` (default
//! `127.0.0.1:9185`) for `METRICS_SECONDS` (default 5), then prints what a
//! scrape returned and stops.
//!
//! Run: `make metrics` (five local nodes of its own), or
//! `scripts/with-nodes.sh 5 cargo run --release --features metrics --example metrics`.

use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The recorder first, then the descriptions (units, help texts).
    let prometheus = PrometheusBuilder::new()
        .with_recommended_naming(true)
        .install_recorder()?;
    redquorum::describe_metrics();

    let nodes = std::env::var("REDQUORUM_NODES")?;
    let redlock = redquorum::Redlock::builder()
        .node_list(&nodes) // commas; a cluster's seeds stay together
        // Label by class, never by the raw name: `invoice-17` is `invoice`.
        .metric_class(|resource| resource.split('-').next().unwrap_or("other").to_owned())
        .build()?;

    let addr = std::env::var("METRICS_ADDR").unwrap_or_else(|_| "127.0.0.1:9185".into());
    let listener = TcpListener::bind(&addr).await?;
    let addr = listener.local_addr()?.to_string(); // port 0: a free one
    tokio::spawn(serve(listener, prometheus.clone()));
    println!("serving http://{addr}/metrics while the workload runs");

    let seconds: u64 = std::env::var("METRICS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let until = tokio::time::Instant::now() + Duration::from_secs(seconds);
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..4 {
        let redlock = redlock.clone();
        tasks.spawn(async move {
            let ttl = Duration::from_secs(2);
            let semaphore = redlock.semaphore("exports", 2)?;
            // Waiting longer than the workload runs: a busy machine makes
            // waits long, not failures (a timeout still shows in the
            // metrics, as outcome="timeout").
            let wait = Duration::from_secs(10);
            while tokio::time::Instant::now() < until {
                let invoice = format!("invoice-{}", worker % 2);
                let lock = redlock.lock(&invoice, ttl).wait(wait).await?;
                tokio::time::sleep(Duration::from_millis(2)).await;
                // A release that too few nodes answered in time is no
                // reason to stop: the keys expire by their TTL, and the
                // failure shows in the metrics (outcome="failed").
                if let Err(e) = lock.release().await {
                    eprintln!("release of {invoice}: {e}");
                }
                let permit = semaphore.acquire(ttl).wait(wait).await?;
                tokio::time::sleep(Duration::from_millis(3)).await;
                if let Err(e) = permit.release().await {
                    eprintln!("release of an exports permit: {e}");
                }
            }
            Ok::<_, redquorum::Error>(())
        });
    }
    let election = redlock.election("scheduler", Duration::from_secs(1))?;
    let serials = redquorum::SerialGenerator::builder(redlock.clone()).build()?;
    while tokio::time::Instant::now() < until {
        let leadership = election
            .campaign("metrics-example")
            .wait(Duration::from_secs(10))
            .await?;
        // `next` already tries again for about two seconds; after that the
        // caller may ask again (an unconfirmed number is never handed out).
        if let Err(e) = serials.next("ORDER").await {
            eprintln!("serial number: {e}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        if let Err(e) = leadership.resign().await {
            eprintln!("resign: {e}"); // the term ends by its TTL
        }
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    redlock.settle().await;

    let scrape = scrape(&addr).await?;
    println!("{scrape}");
    let stats = redlock.stats();
    println!(
        "# stats(): {} acquired, {} attempts, {} woken by a notification, {} nodes up",
        stats.acquired, stats.attempts, stats.woken_by_notification, stats.nodes_up
    );
    Ok(())
}

/// Answers every connection with the current metrics (a minimal HTTP/1.1
/// responder: enough for Prometheus and curl).
async fn serve(listener: TcpListener, prometheus: PrometheusHandle) {
    while let Ok((mut conn, _)) = listener.accept().await {
        let body = prometheus.render();
        tokio::spawn(async move {
            let mut request = [0u8; 1024];
            let _ = conn.read(&mut request).await;
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = conn.write_all(head.as_bytes()).await;
            let _ = conn.write_all(body.as_bytes()).await;
        });
    }
}

/// One scrape of our own endpoint, as Prometheus would make it.
async fn scrape(addr: &str) -> std::io::Result<String> {
    let mut conn = tokio::net::TcpStream::connect(addr).await?;
    conn.write_all(b"GET /metrics HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await?;
    let mut response = String::new();
    conn.read_to_string(&mut response).await?;
    Ok(response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or(response))
}
