//! The `metrics` feature on real nodes: each documented metric is emitted,
//! with the labels the README's table gives it, in the situation it
//! describes. Each test runs its client on one thread with its own
//! recording recorder, so tests running side by side never see each
//! other's metrics.

#![cfg(feature = "metrics")]

mod support;

use std::future::Future;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::CompositeKey;
use support::Cluster;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// What a recorder saw: each series' name, labels and value.
struct Seen(Vec<(CompositeKey, DebugValue)>);

/// Runs `work` on a one-thread runtime with a recorder of its own.
fn recorded<F: Future<Output = ()>>(work: impl FnOnce() -> F) -> Seen {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(work());
    });
    let all = snapshotter.snapshot().into_vec();
    Seen(all.into_iter().map(|(k, _, _, v)| (k, v)).collect())
}

impl Seen {
    /// The series of `name` whose labels include all of `labels`.
    fn find(&self, name: &str, labels: &[(&str, &str)]) -> Vec<&DebugValue> {
        self.0
            .iter()
            .filter(|(k, _)| k.key().name() == name)
            .filter(|(k, _)| {
                labels
                    .iter()
                    .all(|(lk, lv)| k.key().labels().any(|l| l.key() == *lk && l.value() == *lv))
            })
            .map(|(_, v)| v)
            .collect()
    }

    /// The samples of the histograms of `name` with `labels`, all series
    /// together; panics (listing what was seen) if there is none.
    fn histogram(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        let found = self.find(name, labels);
        let samples: Vec<f64> = found
            .iter()
            .flat_map(|v| match v {
                DebugValue::Histogram(s) => s.iter().map(|x| x.into_inner()).collect(),
                _ => Vec::new(),
            })
            .collect();
        assert!(
            !samples.is_empty(),
            "no {name} {labels:?} in {}",
            self.names()
        );
        samples
    }

    /// The sum of the counters of `name` with `labels`.
    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.find(name, labels)
            .iter()
            .map(|v| match v {
                DebugValue::Counter(n) => *n,
                _ => 0,
            })
            .sum()
    }

    /// The value of the gauge of `name` with `labels`.
    fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.find(name, labels).iter().find_map(|v| match v {
            DebugValue::Gauge(g) => Some(g.into_inner()),
            _ => None,
        })
    }

    /// Every series seen, for failure messages.
    fn names(&self) -> String {
        let names: Vec<String> = self
            .0
            .iter()
            .map(|(k, _)| format!("{:?}", k.key()))
            .collect();
        names.join("\n")
    }

    /// Whether any label of any series has the value `value`.
    fn any_label_is(&self, value: &str) -> bool {
        self.0
            .iter()
            .any(|(k, _)| k.key().labels().any(|l| l.value() == value))
    }
}

#[test]
fn acquisitions_are_timed_by_outcome_and_mode_without_resource_names() {
    let c = Cluster::start(3);
    let seen = recorded(|| async {
        let a = c.redlock();
        let b = c.builder().retry_count(0).build().unwrap();
        let lock = a.lock("invoice-1", ms(5_000)).try_once().await.unwrap();
        assert!(b
            .lock("invoice-1", ms(5_000))
            .try_once()
            .await
            .unwrap_err()
            .is_contended());
        let late = b.lock("invoice-1", ms(5_000)).wait(ms(100)).await;
        assert!(matches!(late, Err(redquorum::Error::Timeout { .. })));
        lock.release().await.unwrap();
        b.lock("invoice-1", ms(5_000))
            .fenced()
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    });
    let name = "redquorum.lock.acquire.duration";
    let try_ok = [
        ("primitive", "lock"),
        ("mode", "try"),
        ("outcome", "acquired"),
    ];
    assert_eq!(seen.histogram(name, &try_ok).len(), 1);
    assert_eq!(
        seen.histogram("redquorum.lock.acquire.rounds", &try_ok),
        [1.0]
    );
    seen.histogram(name, &[("mode", "try"), ("outcome", "contended")]);
    let timed_out = seen.histogram(name, &[("mode", "wait"), ("outcome", "timeout")]);
    assert!(
        timed_out[0] >= 0.1,
        "waited {timed_out:?} s, asked for 0.1 s"
    );
    let rounds = seen.histogram("redquorum.lock.acquire.rounds", &[("outcome", "timeout")]);
    assert!(
        rounds[0] >= 2.0,
        "a wait that timed out attempted {rounds:?} times"
    );
    seen.histogram(name, &[("mode", "fenced"), ("outcome", "acquired")]);
    assert!(
        !seen.any_label_is("invoice-1") && seen.find(name, &[("class", "invoice")]).is_empty(),
        "a resource name or class became a label without a mapping:\n{}",
        seen.names()
    );
}

#[test]
fn a_class_mapping_labels_by_class() {
    let c = Cluster::start(3);
    let seen = recorded(|| async {
        let a = c
            .builder()
            .metric_class(|r| r.split('-').next().unwrap_or_default().to_owned())
            .build()
            .unwrap();
        let lock = a.lock("invoice-7", ms(5_000)).await.unwrap();
        lock.release().await.unwrap();
    });
    let class = [
        ("class", "invoice"),
        ("mode", "wait"),
        ("outcome", "acquired"),
    ];
    seen.histogram("redquorum.lock.acquire.duration", &class);
    seen.histogram("redquorum.lock.hold.duration", &[("class", "invoice")]);
    assert!(!seen.any_label_is("invoice-7"), "{}", seen.names());
}

#[test]
fn waits_are_timed_by_what_woke_the_waiter() {
    let c = Cluster::start(3);
    let seen = recorded(|| async {
        // Another client releases: the nodes' notification wakes us.
        let (a, b) = (c.redlock(), c.redlock());
        let held = a.lock("r", ms(10_000)).await.unwrap();
        let waiter = tokio::spawn(async move { b.lock("r", ms(5_000)).await });
        let queued = support::wait_until(ms(5_000), || c.waiting_on("r") == 3).await;
        assert!(queued, "the waiter never registered");
        held.release().await.unwrap();
        waiter.await.unwrap().unwrap().release().await.unwrap();

        // This client releases: its own release wakes its waiter.
        let own = a.lock("own", ms(10_000)).await.unwrap();
        let a2 = a.clone();
        let waiter = tokio::spawn(async move { a2.lock("own", ms(5_000)).await });
        let queued = support::wait_until(ms(5_000), || c.waiting_on("own") == 3).await;
        assert!(queued, "the second caller never registered");
        own.release().await.unwrap();
        waiter.await.unwrap().unwrap().release().await.unwrap();

        // No notifications: the holder's TTL, then (a longer TTL) the cap.
        let quiet = |cap| {
            let builder = c.builder().notifications(false).wait_cap(cap);
            builder.build().unwrap()
        };
        let _expiring = a.lock("ttl", ms(300)).await.unwrap();
        let ttl = quiet(ms(5_000)).lock("ttl", ms(5_000)).await.unwrap();
        ttl.release().await.unwrap();
        let _long = a.lock("cap", ms(10_000)).await.unwrap();
        // The first sleep ends at the cap (30..60 ms), long before the TTL
        // and the 200 ms patience.
        let late = quiet(ms(60)).lock("cap", ms(5_000)).wait(ms(200)).await;
        assert!(late.is_err());
        // A cap (2.5..5 s) and a TTL far beyond a 150 ms patience: the
        // deadline ends the first sleep.
        let late = quiet(ms(5_000)).lock("cap", ms(5_000)).wait(ms(150)).await;
        assert!(late.is_err());
    });
    let wait = "redquorum.lock.wait.duration";
    for woken_by in ["notification", "own_release", "ttl", "cap", "deadline"] {
        seen.histogram(wait, &[("woken_by", woken_by)]);
    }
    let ttl = seen.histogram(wait, &[("woken_by", "ttl")]);
    assert!(
        ttl.iter().any(|s| *s >= 0.1),
        "TTL wake-ups after {ttl:?} s, TTL 0.3 s"
    );
}

#[test]
fn holding_releasing_and_losing_are_recorded() {
    let c = Cluster::start(3);
    let seen = recorded(|| async {
        let a = c.redlock();
        let lock = a.lock("held", ms(5_000)).await.unwrap();
        tokio::time::sleep(ms(50)).await; // the hold being measured
        lock.extend(ms(5_000)).await.unwrap();
        lock.release().await.unwrap();

        // Released after it expired: lost while held, no validity left.
        let short = a.lock("short", ms(100)).await.unwrap();
        assert!(support::wait_until(ms(2_000), || !short.is_valid()).await);
        let _ = short.release().await;

        // Its key taken from it: the automatic extension fails.
        support::lose_to_another_owner(&c, &a, "stolen").await;
    });
    let hold = seen.histogram("redquorum.lock.hold.duration", &[("primitive", "lock")]);
    assert!(
        hold.iter().any(|h| *h >= 0.05),
        "holds {hold:?} s, one of 50 ms"
    );
    let validity = seen.histogram("redquorum.lock.release.validity", &[("primitive", "lock")]);
    assert!(
        validity.iter().any(|v| *v > 4.0),
        "validity left {validity:?}"
    );
    assert!(
        validity.contains(&0.0),
        "the expired lock's release: {validity:?}"
    );
    let lost = "redquorum.lock.lost";
    assert_eq!(seen.counter(lost, &[("reason", "expired_while_held")]), 1);
    assert_eq!(seen.counter(lost, &[("reason", "extend_failed")]), 1);
    seen.histogram("redquorum.lock.extend.duration", &[("outcome", "ok")]);
    seen.histogram("redquorum.lock.extend.duration", &[("outcome", "failed")]);
    let held = seen.gauge("redquorum.lock.held", &[("primitive", "lock")]);
    assert_eq!(held, Some(0.0), "every lock was released or lost");
}

#[test]
fn what_is_held_now_is_a_gauge_per_primitive() {
    let c = Cluster::start(3);
    let seen = recorded(|| async {
        let a = c.redlock();
        let semaphore = a.semaphore("pool", 2).unwrap();
        let election = a.election("sched", ms(2_000)).unwrap();
        let _lock = a.lock("l", ms(5_000)).await.unwrap();
        let _permit = semaphore.acquire(ms(5_000)).await.unwrap();
        let leadership = election.campaign("me").await.unwrap();
        leadership.resign().await.unwrap();
        let _again = election.campaign("me").await.unwrap();
        std::mem::forget(_lock); // still held at the snapshot
        std::mem::forget(_permit);
        std::mem::forget(_again);
    });
    let held = "redquorum.lock.held";
    assert_eq!(seen.gauge(held, &[("primitive", "lock")]), Some(1.0));
    assert_eq!(seen.gauge(held, &[("primitive", "semaphore")]), Some(1.0));
    assert_eq!(seen.gauge(held, &[("primitive", "election")]), Some(1.0));
    assert_eq!(seen.gauge("redquorum.election.leader", &[]), Some(1.0));
    let transitions = "redquorum.election.transitions";
    assert_eq!(seen.counter(transitions, &[("to", "leader")]), 2);
    assert_eq!(seen.counter(transitions, &[("to", "follower")]), 1);
    let permit = [
        ("primitive", "semaphore"),
        ("mode", "wait"),
        ("outcome", "acquired"),
    ];
    seen.histogram("redquorum.lock.acquire.duration", &permit);
    let term = [
        ("primitive", "election"),
        ("mode", "fenced"),
        ("outcome", "acquired"),
    ];
    seen.histogram("redquorum.lock.acquire.duration", &term);
}

#[test]
fn nodes_and_rounds_are_timed_and_failures_counted_by_kind() {
    let mut c = Cluster::start(3);
    c.nodes[2].pause();
    let seen = recorded(|| async {
        let a = c.builder().node_timeout(ms(100)).build().unwrap();
        // Two of three answer: decided before the paused one times out.
        support::locked_once(&a, "r").await;
    });
    c.nodes[2].resume();
    c.nodes[1].kill();
    c.nodes[2].pause();
    let outage = recorded(|| async {
        // Every node trusted at once: node 0, marked by the client above,
        // is not held back to learn its deployment's tags from members
        // that are down or silent (a fresh client waits for a majority to
        // tell them), so each node fails in its own kind.
        let a = c
            .builder()
            .node_timeout(ms(100))
            .restart_quarantine(Duration::ZERO)
            .build()
            .unwrap();
        // One answers, one refuses the connection, one is silent: no
        // quorum, known only at the timeout.
        assert!(a.lock("r", ms(5_000)).try_once().await.is_err());
    });
    c.nodes[2].resume();
    let request = "redquorum.node.request.duration";
    for node in ["0", "1"] {
        seen.histogram(request, &[("node", node)]);
    }
    let round = "redquorum.quorum.round.duration";
    let early = seen.histogram(round, &[("op", "set"), ("decided", "early")]);
    assert!(
        early[0] < 0.1,
        "decided after {early:?} s: the silent node added latency"
    );
    let errors = "redquorum.node.errors";
    assert_eq!(
        seen.counter(errors, &[]),
        0,
        "a round decided without node 2 failed nothing"
    );

    let timed_out = outage.histogram(round, &[("decided", "timeout")]);
    assert!(
        timed_out[0] >= 0.1,
        "a round that timed out took {timed_out:?} s"
    );
    assert!(
        outage.counter(
            "redquorum.node.errors",
            &[("node", "1"), ("kind", "connection")]
        ) >= 1
    );
    assert_eq!(
        outage.counter(
            "redquorum.node.errors",
            &[("node", "2"), ("kind", "timeout")]
        ),
        1
    );
    assert_eq!(outage.gauge("redquorum.nodes.up", &[]), Some(1.0));
}

#[test]
fn a_round_that_hears_every_node_is_decided_by_all() {
    let c = Cluster::start(1);
    let seen = recorded(|| async {
        support::locked_once(&c.redlock(), "r").await;
    });
    seen.histogram(
        "redquorum.quorum.round.duration",
        &[("op", "set"), ("decided", "all")],
    );
}

#[test]
fn counter_allocations_are_timed_and_conflicts_counted() {
    let c = Cluster::start(3);
    let seen = recorded(|| async {
        let (a, b) = (c.redlock(), c.redlock());
        support::fenced_once(&a, "f").await;
        // b's first compare-and-set expects the counter where b last saw
        // it (nowhere): it loses to a's allocation once, then wins.
        support::fenced_once(&b, "f").await;
    });
    let allocation = seen.histogram(
        "redquorum.counter.allocation.duration",
        &[("outcome", "ok")],
    );
    assert_eq!(allocation.len(), 2);
    assert_eq!(seen.counter("redquorum.counter.conflicts", &[]), 1);
}

/// An automatic extension confirmed after a shorter one was sent behind it
/// leaves the lock no longer valid than the shorter one allows (either may
/// be the last to land on a node); when that instant is already past, the
/// lock is lost with `validity_ran_out`.
#[test]
fn validity_running_out_behind_a_confirmed_extension_is_recorded() {
    let c = Cluster::start(3);
    let scripts = || c.nodes[0].command_calls("evalsha") + c.nodes[0].command_calls("eval");
    let seen = recorded(|| async {
        // 300 ms each way: the automatic extension's reply comes 300 ms
        // after node 0 ran it.
        let (_proxies, builder) = c.far_builder(300);
        let a = builder.node_timeout(ms(3_000)).build().unwrap();
        // Connections opened (and checked) first: each step is a round trip.
        a.lock("warm", ms(10_000))
            .try_once()
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
        let lock = a.lock("behind", ms(3_000)).await.unwrap();
        let before = scripts();
        lock.auto_extend();
        assert!(support::wait_until(ms(5_000), || scripts() > before).await);
        // A 20 ms extension sent while the automatic one's reply is on its
        // way: it fails (its round takes 600 ms), and bounds the lock to
        // 20 ms from its start, before that reply comes.
        assert!(lock.extend(ms(20)).await.is_err());
        assert!(!lock.is_valid());
        let _ = lock.release().await;
    });
    let lost = "redquorum.lock.lost";
    assert_eq!(seen.counter(lost, &[("reason", "validity_ran_out")]), 1);
    assert_eq!(seen.counter(lost, &[("reason", "extend_failed")]), 0);
}
