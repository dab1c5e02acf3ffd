//! Errors that say what happened, on real redis-server processes: an outage
//! is never reported as contention, long durations never panic, and a
//! password never shows.

mod support;

use std::time::Duration;

use redquorum::{Error, Redlock};
use support::Cluster;

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A foreign key on 2 of 5 nodes and the other 3 out: that is an outage,
/// not contention (it used to be `Contended` with no node failures, so the
/// README's `is_contended()` branch swallowed it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_outage_is_never_reported_as_contention() {
    let mut c = Cluster::start(5);
    let key = "outage_not_contention";
    for node in &c.nodes[..2] {
        node.set(key, "foreign", Duration::from_secs(30));
    }
    // A client that met the nodes before the outage (one that meets only
    // two of five cannot tell whose writes they hold: `node/trust/tags.rs`).
    let redlock = c.builder().node_timeout(ms(100)).build().unwrap();
    support::connected(&redlock).await;
    for node in &mut c.nodes[2..] {
        node.pause();
    }
    let paused = redlock.lock(key, ms(5000)).wait(ms(500)).await.unwrap_err();
    c.resume_all();
    for node in &mut c.nodes[2..] {
        node.kill();
    }
    let refused = redlock.lock(key, ms(5000)).wait(ms(500)).await.unwrap_err();
    for err in [&paused, &refused] {
        assert!(!err.is_contended(), "{err}");
        let failed: Vec<usize> = err.node_failures().iter().map(|f| f.index).collect();
        assert_eq!(failed, [2, 3, 4], "{err}");
    }
    // Where the refusals came in before the outage was clear, the message
    // says both: the failed nodes, and that two refused.
    assert!(paused.to_string().contains("2 refused"), "{paused}");
}

/// Contention with a minority of nodes down is still contention: the
/// attempt hears the live nodes out before it says which it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contention_with_a_node_down_is_contention() {
    let mut c = Cluster::start(5);
    let key = "contended_one_down";
    c.nodes[0].kill();
    for node in &c.nodes[1..] {
        node.set(key, "foreign", Duration::from_secs(30));
    }
    let redlock = c.builder().retry_count(0).build().unwrap();
    for _ in 0..5 {
        let err = redlock.lock(key, ms(5000)).try_once().await.unwrap_err();
        assert!(err.is_contended(), "{err}");
    }
}

/// `Duration::MAX` is a natural "wait forever" or a typo; neither panics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_durations_never_panic() {
    let c = Cluster::start(3);
    let redlock = c.redlock();
    redlock
        .lock("forever_free", ms(1000))
        .wait(Duration::MAX)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // Held, then released: the wait with a far deadline ends at the release.
    let held = redlock
        .lock("forever_held", ms(10_000))
        .try_once()
        .await
        .unwrap();
    let other = c.redlock();
    let waiter = tokio::spawn(async move {
        other
            .lock("forever_held", ms(1000))
            .wait(Duration::MAX)
            .await
            .map(|l| l.validity())
    });
    tokio::time::sleep(ms(200)).await;
    held.release().await.unwrap();
    let waited = tokio::time::timeout(Duration::from_secs(5), waiter).await;
    assert!(matches!(waited, Ok(Ok(Ok(_)))), "{waited:?}");
    // Retry settings at MAX: `lock()` computes its patience without overflow.
    let patient = c
        .builder()
        .retry_delay(Duration::MAX)
        .retry_jitter(Duration::MAX)
        .build()
        .unwrap();
    patient
        .lock("max_retry", ms(1000))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // Settings that would overflow the deadlines built from them are refused.
    for b in [
        c.builder().node_timeout(Duration::MAX),
        c.builder().wait_cap(Duration::MAX),
    ] {
        let err = b.build().unwrap_err();
        assert!(matches!(err, Error::InvalidConfig(_)), "{err:?}");
    }
}

/// A URL without a scheme keeps its password out of the error and the hint.
#[test]
fn a_password_never_appears_in_an_error() {
    for url in [
        ":s3cretpw@127.0.0.1:7605",
        "user:s3cretpw@localhost:7605",
        "redis://:s3cretpw@127.0.0.1:notaport",
    ] {
        let err = Redlock::builder().nodes([url]).build().unwrap_err();
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains("s3cretpw"), "{shown}");
    }
    let err = Redlock::builder()
        .nodes([":s3cretpw@127.0.0.1:7605"])
        .build()
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidUrl { hint: Some(h), .. } if h == "redis://***@127.0.0.1:7605"),
        "{err:?}"
    );
}
