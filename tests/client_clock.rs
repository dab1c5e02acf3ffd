//! The client's own clock runs slow: a client process whose monotonic,
//! boot-time and wall clocks all run at 0.95 (the test harness's clock
//! preload, `tests/support/clockshift.c`), against five true nodes. It sees
//! every node's clock run 1/0.95 as fast as its own, counts each at that
//! rate, and its validity ends, in real time, before its keys expire: a
//! second client with a true clock, trying every 3 ms, never holds the
//! lock while the slow one counts it valid.
//!
//! The slow client is this test binary run again with the preload, in the
//! role `REDQUORUM_TEST_SLOW_CLIENT` names (the nodes' URLs); it tells the
//! test, on its stdout, each lock's validity and the real instant it read
//! it at. Real instants are `CLOCK_MONOTONIC` read by the system call
//! itself, which the preload does not change.

mod support;

use std::io::{BufRead as _, BufReader, Write as _};
use std::time::Duration;

use redquorum::Redlock;
use support::clock::{real_ns, run_preloaded, ClockFile};
use support::Cluster;

/// The slow client's clocks run at this rate.
const RATE: f64 = 0.95;
/// Hand-overs per run.
const HAND_OVERS: usize = 3;
/// The role's environment variable.
const ROLE: &str = "REDQUORUM_TEST_SLOW_CLIENT";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_whose_clock_runs_slow_counts_every_node_fast() {
    if let Ok(urls) = std::env::var(ROLE) {
        return slow_client(urls.split(',').map(str::to_owned).collect()).await;
    }
    for _ in 0..support::clock::runs() {
        slow_client_hands_over().await;
    }
}

/// The test: five nodes, the slow client in a process of its own, and a
/// true client here that takes each lock the moment it can.
async fn slow_client_hands_over() {
    let c = Cluster::start(5);
    let clock = ClockFile::new();
    clock.wall(0, RATE);
    let urls = c.urls().join(",");
    let mut child = run_preloaded(
        "a_client_whose_clock_runs_slow_counts_every_node_fast",
        (ROLE, &urls),
        &clock,
        RATE,
    );
    let mut to_child = child.stdin.take().unwrap();
    let (lines_tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let second = c.redlock();
    for _ in 0..5 {
        let lock = second.lock("warm-up", ms(2_000)).await.unwrap();
        lock.release().await.unwrap();
    }
    for _ in 0..HAND_OVERS {
        // "holding <real ns> <validity ns> <rate ppm of the slowest-read node>"
        let line = loop {
            let line = tokio::time::timeout(Duration::from_secs(60), lines.recv())
                .await
                .expect("the slow client reports within 60 s")
                .expect("the slow client ended early");
            // libtest's "test <name> ... " may come first on the line.
            if let Some(at) = line.find("holding ") {
                break line[at..].to_owned();
            }
        };
        let f: Vec<i128> = line
            .split_whitespace()
            .skip(1)
            .map(|w| w.parse().unwrap())
            .collect();
        // Its validity, on its clock, lasts validity / RATE of ours.
        let valid_until = f[0] + (f[1] as f64 / RATE) as i128;
        assert!(f[2] >= 50_000, "the slow client measured {} ppm", f[2]);
        let give_up = std::time::Instant::now() + Duration::from_secs(20);
        let (tried_at, taken) = loop {
            let tried_at = real_ns();
            if let Ok(taken) = second.lock("slow", ms(2_000)).try_once().await {
                break (tried_at, taken);
            }
            assert!(std::time::Instant::now() < give_up, "never taken");
            tokio::time::sleep(ms(3)).await;
        };
        let after = (tried_at - valid_until) as f64 / 1e6;
        println!("slow client clock: taken {after:.1} ms after its validity ended (real time)");
        assert!(
            tried_at >= valid_until,
            "two valid holders: tried {:.1} ms before the slow client's validity ended",
            -after
        );
        taken.release().await.unwrap();
        writeln!(to_child, "next").unwrap();
    }
    drop(to_child);
    assert!(child.wait().unwrap().success(), "the slow client failed");
}

/// The slow client's role: use the nodes until every one is measured and
/// counted (quarantine 3 s: the first readings, judged by the drift factor
/// alone, take the nodes for ones that jumped), then take `slow` for 2 s
/// without renewing, report, and wait for the next round.
async fn slow_client(urls: Vec<String>) {
    let client = Redlock::builder()
        .nodes(urls)
        .restart_quarantine(ms(3_000))
        .build()
        .unwrap();
    let measured = |client: &Redlock| {
        client
            .stats()
            .nodes
            .iter()
            .all(|n| n.clock_rate_ppm.is_some_and(|p| p >= 50_000) && !n.quarantined)
    };
    let mut tries = 0;
    while !measured(&client) {
        tries += 1;
        assert!(tries < 400, "not measured: {:?}", client.stats().nodes);
        if let Ok(lock) = client.lock("warm-up", ms(1_000)).try_once().await {
            lock.release().await.unwrap();
        }
        tokio::time::sleep(ms(25)).await;
    }
    let (next_tx, mut next) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines().map_while(Result::ok) {
            if next_tx.send(line).is_err() {
                break;
            }
        }
    });
    for _ in 0..HAND_OVERS {
        let lock = loop {
            if let Ok(lock) = client.lock("slow", ms(2_000)).try_once().await {
                break lock;
            }
            tokio::time::sleep(ms(3)).await;
        };
        let (validity, at) = (lock.validity(), real_ns());
        let slowest = client
            .stats()
            .nodes
            .iter()
            .filter_map(|n| n.clock_rate_ppm)
            .min()
            .unwrap_or(0);
        println!("holding {at} {} {slowest}", validity.as_nanos());
        std::io::stdout().flush().unwrap();
        // Kept, not released: the second client takes it once it expires.
        std::mem::forget(lock);
        if next.recv().await.is_none() {
            break;
        }
    }
}
