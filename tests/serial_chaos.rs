//! Serial numbers under a schedule of faults: three generators (three
//! clients, as three processes would be) issue numbers on five durable
//! nodes while nodes restart, pause, die and come back; where a quorum can
//! answer, numbers keep coming.

mod support;

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redquorum::SerialGenerator;
use support::{Cluster, Persistence};
use tokio::time::Instant;

/// What the workers saw: numbers issued, with when, and errors by text.
#[derive(Default)]
struct Seen {
    numbers: Vec<(Duration, String)>,
    errors: BTreeMap<String, usize>,
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numbers_keep_coming_where_a_quorum_can_answer() {
    let mut c = Cluster::start_with(5, Persistence::Aof);
    let seen = Arc::new(Mutex::new(Seen::default()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    let mut clients = Vec::new();
    // Each generator issues its first number before the clock starts: its
    // first contact with the nodes and its pin round are not what the
    // windows below measure (on a loaded machine they take longer than
    // one).
    let mut generators = Vec::new();
    let mut first = Vec::new();
    for _ in 0..3 {
        let redlock = c.builder().node_timeout(ms(100)).build().unwrap();
        clients.push(redlock.clone());
        let serials = SerialGenerator::builder(redlock).width(9).build().unwrap();
        first.push(serials.next("CH").await.unwrap().to_string());
        generators.push(serials);
    }
    let start = Instant::now();
    for serials in generators {
        for _ in 0..2 {
            let (s, seen, stop) = (serials.clone(), seen.clone(), stop.clone());
            workers.push(tokio::spawn(async move {
                // Bounded: at most this many calls per worker.
                for _ in 0..200_000 {
                    if stop.load(std::sync::atomic::Ordering::SeqCst) {
                        break;
                    }
                    match s.next("CH").await {
                        Ok(n) => seen
                            .lock()
                            .unwrap()
                            .numbers
                            .push((start.elapsed(), n.to_string())),
                        Err(e) => {
                            let text = e.to_string();
                            let text: String = text.chars().take(90).collect();
                            *seen.lock().unwrap().errors.entry(text).or_default() += 1;
                            tokio::time::sleep(ms(5)).await;
                        }
                    }
                }
            }));
        }
    }
    let at = |t: u64| tokio::time::sleep_until(start + ms(t));
    at(2_000).await;
    c.nodes[0].restart(Persistence::Aof);
    at(3_000).await;
    c.nodes[1].pause();
    at(5_000).await;
    c.nodes[1].resume();
    at(6_500).await;
    c.nodes[2].kill();
    c.nodes[3].kill();
    at(8_000).await;
    c.nodes[2].restart(Persistence::Aof);
    c.nodes[3].restart(Persistence::Aof);
    at(9_500).await;
    c.nodes[4].restart(Persistence::None);
    at(11_000).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for w in workers {
        w.await.unwrap();
    }
    let seen = seen.lock().unwrap();
    let distinct: HashSet<&String> = seen.numbers.iter().map(|(_, n)| n).chain(&first).collect();
    assert_eq!(
        distinct.len(),
        seen.numbers.len() + first.len(),
        "duplicates"
    );
    let mut per_250 = BTreeMap::<u128, usize>::new();
    for (t, _) in &seen.numbers {
        *per_250.entry(t.as_millis() / 250).or_default() += 1;
    }
    let count = |b: u128| per_250.get(&b).copied().unwrap_or(0);
    let windows: Vec<String> = (0..44)
        .map(|b| format!("{}:{}", b * 250, count(b)))
        .collect();
    let lost: u64 = clients.iter().map(|c| c.stats().allocation_conflicts).sum();
    let report = format!(
        "{} numbers, {lost} rounds lost; per 250 ms: {}; errors: {:?}",
        seen.numbers.len(),
        windows.join(" "),
        seen.errors
    );
    println!("{report}");
    // A quorum answered throughout: no caller hears an error.
    assert!(seen.errors.is_empty(), "{report}");
    // No window without a number: 250 ms, or on a machine so loaded that
    // the two calm seconds issued fewer than 20 numbers per 250 ms, a
    // window long enough to hold 20 at the calm rate, up to a second (a
    // stall where a quorum could answer left a whole second empty).
    let calm_per_250 = (0..8u128).map(count).sum::<usize>().max(1) as f64 / 8.0;
    let quarters = ((20.0 / calm_per_250).ceil() as u128).clamp(1, 4);
    let empty: Vec<_> = (0..44u128)
        .filter(|b| b + quarters <= 44)
        .filter(|b| (*b..b + quarters).map(count).sum::<usize>() == 0)
        .collect();
    assert!(
        empty.is_empty(),
        "windows of {quarters} x 250 ms without a number, from: {empty:?}\n{report}"
    );
    // Every second issues at least a fifth of what the first two, before
    // any fault, issued on average (the second a node is paused in
    // included: its first rounds wait out the node's timeout).
    let seconds: Vec<usize> = (0..11u128)
        .map(|s| (4 * s..4 * s + 4).map(count).sum())
        .collect();
    let calm = (seconds[0] + seconds[1]) / 2;
    let slow: Vec<_> = (0..11).filter(|s| seconds[*s] * 5 < calm).collect();
    assert!(
        slow.is_empty(),
        "seconds below a fifth of the calm {calm}: {slow:?}\n{report}"
    );
}
