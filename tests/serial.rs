//! Serial numbers and fencing tokens against real redis-server processes.

mod support;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use redquorum::{Error, Redlock, ResetPeriod, SerialGenerator};
use support::{Cluster, Persistence};

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

/// A clock the test moves by hand.
#[derive(Clone)]
struct TestClock(Arc<Mutex<DateTime<Utc>>>);

impl TestClock {
    fn new(at: &str) -> Self {
        Self(Arc::new(Mutex::new(utc(at))))
    }
    fn set(&self, at: &str) {
        *self.0.lock().unwrap() = utc(at);
    }
    fn generator(&self, redlock: Redlock, width: u8) -> SerialGenerator {
        let c = self.0.clone();
        SerialGenerator::builder(redlock)
            .time_zone(chrono_tz::UTC)
            .width(width)
            .clock(move || *c.lock().unwrap())
            .build()
            .unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_concurrent_callers_get_distinct_numbers() {
    let c = Cluster::start(5);
    let serials = SerialGenerator::builder(c.redlock())
        .width(6)
        .build()
        .unwrap();
    let barrier = Arc::new(tokio::sync::Barrier::new(100));
    let mut joins = Vec::new();
    for _ in 0..100 {
        let (s, b) = (serials.clone(), barrier.clone());
        joins.push(tokio::spawn(async move {
            b.wait().await;
            s.next("ORDER").await.unwrap().to_string()
        }));
    }
    let mut seen = HashSet::new();
    for j in joins {
        let s = j.await.unwrap();
        assert!(s.starts_with("ORDER") && s.len() == 5 + 8 + 6, "{s}");
        assert!(seen.insert(s.clone()), "duplicate {s}");
    }
    assert_eq!(seen.len(), 100);
    // Group commit: numbers are dense 1..=100.
    let mut numbers: Vec<u64> = seen.iter().map(|s| s[13..].parse().unwrap()).collect();
    numbers.sort();
    assert_eq!(numbers, (1..=100).collect::<Vec<_>>());
}

#[tokio::test]
async fn steady_state_is_one_round_trip_per_batch() {
    let c = Cluster::start(5);
    let serials = SerialGenerator::builder(c.redlock()).build().unwrap();
    serials.next("RT").await.unwrap(); // warm: first round learns the record
    let before: Vec<u64> = c
        .nodes
        .iter()
        .map(support::RedisNode::script_calls)
        .collect();
    // (The warm-up pinned the prefix's configuration with one SET.)
    let sets: Vec<u64> = c.nodes.iter().map(|n| n.command_calls("set")).collect();
    for _ in 0..50 {
        serials.next("RT").await.unwrap();
    }
    // Every node saw exactly one compare-and-set per batch: no separate reads
    // (a refused CAS carries the record), no locks.
    for (i, n) in c.nodes.iter().enumerate() {
        let calls = n.script_calls() - before[i];
        assert_eq!(calls, 50, "node {i}");
        assert_eq!(n.command_calls("set"), sets[i], "node {i} saw a lock");
    }
}

#[tokio::test]
async fn day_rollover_and_clock_behind() {
    let c = Cluster::start(5);
    let clock = TestClock::new("2026-11-22T23:59:59Z");
    let serials = clock.generator(c.redlock(), 4);
    assert_eq!(
        serials.next("ORDER").await.unwrap().to_string(),
        "ORDER202611220001"
    );
    assert_eq!(
        serials.next("ORDER").await.unwrap().to_string(),
        "ORDER202611220002"
    );
    clock.set("2026-11-23T00:00:00Z");
    let first = serials.next("ORDER").await.unwrap();
    assert_eq!(first.to_string(), "ORDER202611230001");
    assert_eq!(first.date(), chrono::NaiveDate::from_ymd_opt(2026, 11, 23));

    // A client a day behind gets ClockBehind and issues nothing.
    let behind = TestClock::new("2026-11-22T12:00:00Z");
    let behind_gen = behind.generator(c.redlock(), 4);
    match behind_gen.next("ORDER").await {
        Err(Error::ClockBehind { local, issued, .. }) => {
            assert_eq!((local.as_str(), issued.as_str()), ("20261122", "20261123"));
        }
        other => panic!("expected ClockBehind, got {other:?}"),
    }
    assert_eq!(
        serials.next("ORDER").await.unwrap().to_string(),
        "ORDER202611230002"
    );

    // Two seconds behind midnight is within the 5 s tolerance: it issues in
    // the later period, never in the earlier one.
    behind.set("2026-11-22T23:59:58Z");
    assert_eq!(
        behind_gen.next("ORDER").await.unwrap().to_string(),
        "ORDER202611230003"
    );
    assert_eq!(
        serials.next("ORDER").await.unwrap().to_string(),
        "ORDER202611230004"
    );
}

#[tokio::test]
async fn overflow_is_exhausted_then_next_period_restarts() {
    let c = Cluster::start(3);
    let clock = TestClock::new("2026-11-22T10:00:00Z");
    let serials = clock.generator(c.redlock(), 2);
    let batch = serials.next_batch("X", 98).await.unwrap();
    assert_eq!(batch.last().unwrap().to_string(), "X2026112298");
    assert_eq!(serials.next("X").await.unwrap().to_string(), "X2026112299");
    match serials.next("X").await {
        Err(Error::Exhausted { max, period, .. }) => {
            assert_eq!((max, period.as_str()), (99, "20261122"))
        }
        other => panic!("expected Exhausted, got {other:?}"),
    }
    assert!(serials.next("X").await.is_err(), "never wraps");
    clock.set("2026-11-23T00:00:01Z");
    assert_eq!(serials.next("X").await.unwrap().to_string(), "X2026112301");
}

#[tokio::test]
async fn other_periods_and_numeric_ids() {
    let c = Cluster::start(3);
    let clock = TestClock::new("2026-11-22T10:11:12Z");
    let c2 = clock.0.clone();
    let never = SerialGenerator::builder(c.redlock())
        .reset_period(ResetPeriod::Never)
        .width(6)
        .clock(move || *c2.lock().unwrap())
        .build()
        .unwrap();
    assert_eq!(never.next("INV").await.unwrap().to_string(), "INV000001");
    clock.set("2027-01-01T00:00:00Z");
    assert_eq!(never.next("INV").await.unwrap().to_string(), "INV000002");
    let c3 = clock.0.clone();
    let seconds = SerialGenerator::builder(c.redlock())
        .time_zone(chrono_tz::UTC)
        .reset_period(ResetPeriod::Second)
        .width(3)
        .clock(move || *c3.lock().unwrap())
        .build()
        .unwrap();
    let id = seconds.next("").await.unwrap();
    assert_eq!(id.to_string(), "20270101000000001");
    assert_eq!(id.as_u64(), Some(20270101000000001));
}

#[tokio::test]
async fn bad_serial_input() {
    let c = Cluster::start(3);
    let r = c.redlock();
    for w in [0u8, 19] {
        assert!(matches!(
            SerialGenerator::builder(r.clone()).width(w).build(),
            Err(Error::InvalidConfig(_))
        ));
    }
    let s = SerialGenerator::builder(r).build().unwrap();
    for bad in ["ORDER 1", "a/b", &"P".repeat(65), "A1", "9"] {
        assert!(
            matches!(s.next(bad).await, Err(Error::InvalidConfig(_))),
            "{bad}"
        );
    }
    assert!(matches!(
        s.next_batch("OK", 0).await,
        Err(Error::InvalidConfig(_))
    ));
    // The limit named is the one that refused: the width's.
    match s.next_batch("OK", 5_000_000).await {
        Err(Error::InvalidConfig(why)) => assert!(
            why.contains("count 5000000 is outside 1..=9999: a width of 4 digits"),
            "{why}"
        ),
        other => panic!("{other:?}"),
    }
    // A count the width allows, but too many to hand back at once: refused
    // before any node is asked (no record, no pin for the prefix).
    let wide = SerialGenerator::builder(c.redlock())
        .width(18)
        .build()
        .unwrap();
    assert!(matches!(
        wide.next_batch("HUGE", redquorum::MAX_BATCH + 1).await,
        Err(Error::InvalidConfig(_))
    ));
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*HUGE*")
        .query(&mut c.nodes[0].conn())
        .unwrap();
    assert!(keys.is_empty(), "{keys:?}");
    assert_eq!(s.next("").await.unwrap().prefix(), "");
    assert_eq!(s.next("A1-").await.unwrap().prefix(), "A1-");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_never_duplicates() {
    let mut c = Cluster::start_with(5, Persistence::Aof);
    let redlock = c
        .builder()
        .node_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    let serials = SerialGenerator::builder(redlock).width(9).build().unwrap();
    let issued = Arc::new(Mutex::new(Vec::<String>::new()));

    // Issue in the background through every fault below.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for _ in 0..4 {
        let (s, out, stop) = (serials.clone(), issued.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            let mut errors = 0usize;
            for _ in 0..5_000 {
                if stop.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                match s.next("FO").await {
                    Ok(n) => out.lock().unwrap().push(n.to_string()),
                    Err(_) => {
                        errors += 1;
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
            }
            errors
        }));
    }
    let count = || issued.lock().unwrap().len();
    let grows = |from: usize| {
        let issued = issued.clone();
        async move {
            support::wait_until(Duration::from_secs(10), || {
                issued.lock().unwrap().len() >= from + 50
            })
            .await
        }
    };
    assert!(grows(0).await);
    c.nodes[0].kill();
    c.nodes[0].restart(Persistence::Aof);
    assert!(grows(count()).await, "after kill -9 + AOF restart");
    c.nodes[1].pause();
    assert!(grows(count()).await, "with a paused node");
    c.nodes[1].resume();
    c.nodes[2].stop();
    c.nodes[3].stop();
    assert!(grows(count()).await, "with two nodes stopped\n{}", c.logs());
    c.nodes[4].stop();
    // Three of five down: no quorum, nothing issued.
    // Same configuration as the workers: a different one may be refused
    // for its pin (seen on the two live nodes) before quorum is counted.
    let direct = SerialGenerator::builder(c.redlock())
        .width(9)
        .build()
        .unwrap();
    let err = direct.next("FO").await.unwrap_err();
    assert!(matches!(err, Error::NoQuorum { .. }), "{err:?}");
    c.nodes[2].restart(Persistence::Aof);
    c.nodes[3].restart(Persistence::Aof);
    c.nodes[4].restart(Persistence::Aof);
    assert!(grows(count()).await, "after the nodes came back");
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for w in workers {
        w.await.unwrap();
    }
    let all = issued.lock().unwrap().clone();
    let distinct: HashSet<&String> = all.iter().collect();
    assert_eq!(
        distinct.len(),
        all.len(),
        "duplicates among {} numbers",
        all.len()
    );
}

#[tokio::test]
async fn node_restarted_empty_causes_no_duplicate() {
    let mut c = Cluster::start_with(5, Persistence::Aof);
    let a = SerialGenerator::builder(c.redlock())
        .width(9)
        .build()
        .unwrap();
    let b = SerialGenerator::builder(c.redlock())
        .width(9)
        .build()
        .unwrap();
    let mut seen = HashSet::new();
    for round in 0..6 {
        for _ in 0..20 {
            assert!(seen.insert(a.next("EMPTY").await.unwrap().to_string()));
            assert!(seen.insert(b.next("EMPTY").await.unwrap().to_string()));
        }
        // One node forgets everything (restart without AOF) while the other
        // four stay up; a different one each round.
        c.nodes[round % 5].restart(Persistence::None);
    }
    assert_eq!(seen.len(), 240);
}

#[tokio::test]
async fn fencing_tokens_strictly_increase() {
    let c = Cluster::start(5);
    let clients: Vec<Redlock> = (0..3)
        .map(|_| {
            c.builder()
                .retry_delay(Duration::from_millis(5))
                .build()
                .unwrap()
        })
        .collect();
    let mut last = 0u64;
    for round in 0..5 {
        for (i, client) in clients.iter().enumerate() {
            let lock = client
                .lock("fenced", Duration::from_millis(300))
                .fenced()
                .await
                .unwrap();
            let token = lock.fencing_token().expect("fenced lock has a token");
            assert!(token > last, "round {round} client {i}: {token} <= {last}");
            last = token;
            if i == 1 {
                // Let this one expire without release: the next holder still
                // gets a larger token.
                let lost = lock.lost();
                std::mem::forget(lock);
                lost.await;
            } else {
                lock.release().await.unwrap();
            }
        }
    }
    let plain = clients[0]
        .lock("fenced", Duration::from_millis(300))
        .await
        .unwrap();
    assert_eq!(plain.fencing_token(), None);
    plain.release().await.unwrap();
}

/// One prefix, two configurations that print the same strings (day/width 4
/// and hour/width 2 both give `COL202611230201`): the second is refused, on
/// every call, and never issues.
#[tokio::test]
async fn a_prefix_keeps_the_period_and_width_it_started_with() {
    let c = Cluster::start(3);
    let clock = TestClock::new("2026-11-23T02:30:00Z");
    let by_day = clock.generator(c.redlock(), 4);
    let c2 = clock.0.clone();
    let by_hour = SerialGenerator::builder(c.redlock())
        .time_zone(chrono_tz::UTC)
        .reset_period(ResetPeriod::Hour)
        .width(2)
        .clock(move || *c2.lock().unwrap())
        .build()
        .unwrap();
    let issued = by_day.next_batch("COL", 201).await.unwrap();
    assert_eq!(issued[200].to_string(), "COL202611230201");
    for _ in 0..2 {
        match by_hour.next("COL").await {
            Err(e @ Error::SerialConfigConflict { .. }) => {
                let text = e.to_string();
                assert!(text.contains("period day, width 4"), "{text}");
                assert!(text.contains("period hour, width 2"), "{text}");
            }
            other => panic!("expected SerialConfigConflict, got {other:?}"),
        }
    }
    // Another generator with the same configuration goes on; another
    // prefix is free to use any.
    let again = clock.generator(c.redlock(), 4);
    assert_eq!(
        again.next("COL").await.unwrap().to_string(),
        "COL202611230202"
    );
    assert_eq!(
        by_hour.next("COLH").await.unwrap().to_string(),
        "COLH202611230201"
    );
}

/// A generator a time zone behind the one that issued today's numbers is
/// told so, not only that its clock is behind.
#[tokio::test]
async fn a_clock_behind_because_of_the_time_zone_says_so() {
    let c = Cluster::start(3);
    let ahead = SerialGenerator::builder(c.redlock())
        .time_zone(chrono_tz::Pacific::Kiritimati) // UTC+14
        .build()
        .unwrap();
    let behind = SerialGenerator::builder(c.redlock())
        .time_zone(chrono_tz::Pacific::Pago_Pago) // UTC-11: a day behind
        .build()
        .unwrap();
    ahead.next("TZ").await.unwrap();
    let err = behind.next("TZ").await.unwrap_err();
    assert!(matches!(err, Error::ClockBehind { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("another time zone"), "{text}");
    assert!(text.contains("Pacific/Pago_Pago"), "{text}");
}

/// Two of three nodes hang for a moment (a pause, a restart): the round
/// that finds too few of them is tried again after a retry pause, within
/// `lock()`'s patience, instead of failing the caller with `NoQuorum`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_short_of_a_quorum_is_tried_again_within_the_patience() {
    let mut c = Cluster::start(3);
    let redlock = c.redlock();
    let serials = SerialGenerator::builder(redlock.clone()).build().unwrap();
    let first = serials.next("RETRY").await.unwrap();
    c.nodes[1].pause();
    c.nodes[2].pause();
    let next = tokio::spawn(async move { serials.next("RETRY").await });
    // A round timed out on the paused nodes (100 ms node timeout) ...
    let failed_round = support::wait_until(Duration::from_secs(2), || {
        redlock.stats().nodes[1].timeouts >= 1
    })
    .await;
    c.resume_all();
    assert!(failed_round, "no round reached the paused nodes");
    // ... and the caller still gets a number, a later one (the failed
    // round may have raised the record on the node that answered, which
    // leaves a gap, never a repeat).
    let second = next.await.unwrap().unwrap();
    assert!(second.number() > first.number(), "{first} then {second}");
}

/// A counter's turn lock left held by an allocator that stalled (its key on
/// every node, far longer than a caller waits): numbers keep coming (the
/// lock only spaces allocators out), and no caller hears "held by another
/// owner" for a lock it never asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_lock_held_elsewhere_never_stops_the_numbers() {
    let c = Cluster::start(3);
    let make = || SerialGenerator::builder(c.redlock()).build().unwrap();
    let (a, b) = (make(), make());
    let key = support::internal_key("serial-lock", "serial:day:TL");
    for node in &c.nodes {
        node.set(&key, "stalled-allocator", Duration::from_secs(60));
    }
    let mut seen = HashSet::new();
    // Each finds the other allocated in between, so both take turns with
    // the lock from their second number on.
    for _ in 0..3 {
        for g in [&a, &b] {
            let n = g
                .next("TL")
                .await
                .expect("a number, not the lock's contention");
            assert!(seen.insert(n.to_string()), "duplicate {n}");
        }
    }
    assert_eq!(seen.len(), 6);
}
