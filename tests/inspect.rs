//! Reading a lock's state without taking it, on real nodes: the holder a
//! quorum agree on (with its label), how long it keeps the lock at least,
//! a key set on a minority only, a key without TTL, the waiters, a
//! semaphore's permits, nodes down, and names refused before any node is
//! asked.

mod support;

use std::time::Duration;

use redquorum::{Error, Redlock};
use support::{wait_until, Cluster};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn labelled(c: &Cluster, label: &str) -> Redlock {
    c.builder().holder_label(label).build().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_shows_its_holder_time_left_and_waiters_and_frees_on_release() {
    let c = Cluster::start(5);
    let (holder, reader) = (labelled(&c, "host-a:42"), c.redlock());
    let state = reader.inspect("report").await.unwrap();
    assert_eq!((state.holder.clone(), state.held_on), (None, 0));
    assert_eq!(state.free_in, Some(Duration::ZERO));
    assert_eq!(state.answered, 5);

    let lock = holder.lock("report", secs(20)).try_once().await.unwrap();
    // Won on a quorum; the other nodes' SETs land a moment later.
    assert!(wait_until(secs(20), || c.set_on("report") == 5).await);
    let state = reader.inspect("report").await.unwrap();
    let h = state.holder.clone().expect("held on a quorum");
    assert_eq!(h.label(), Some("host-a:42"));
    assert_eq!(c.holding("report", &h.value), 5, "the value the nodes hold");
    assert_eq!(state.held_on, 5);
    let left = h.time_left.expect("a TTL");
    assert!(left <= secs(20) && left > secs(15), "{left:?}");
    let free_in = state.free_in.expect("frees by TTL");
    assert!(free_in >= left && free_in <= secs(20), "{free_in:?}");
    assert_eq!(state.waiting, 0);

    // A waiter of another client is counted while it waits.
    let waiter = c.redlock();
    let waiting = tokio::spawn(async move {
        let lock = waiter.lock("report", secs(20)).wait(secs(60)).await?;
        lock.release().await
    });
    let mut last = 0;
    for _ in 0..400 {
        last = reader.inspect("report").await.unwrap().waiting;
        if last == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(last, 1, "the waiter is listed");

    lock.release().await.unwrap();
    waiting.await.unwrap().unwrap();
    assert!(
        wait_until(secs(20), || c.set_on("report") == 0).await,
        "released"
    );
    let state = reader.inspect("report").await.unwrap();
    assert_eq!((state.holder, state.held_on), (None, 0));
    assert_eq!(state.free_in, Some(Duration::ZERO));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minority_is_no_holder_and_a_key_without_ttl_never_frees() {
    let c = Cluster::start(3);
    let reader = c.redlock();
    c.nodes[0].set("half", "someone", secs(30));
    let state = reader.inspect("half").await.unwrap();
    assert_eq!((state.holder, state.held_on), (None, 1));
    assert_eq!(state.free_in, Some(Duration::ZERO), "a quorum is free");

    c.nodes[1].set("half", "someone", secs(30));
    let state = reader.inspect("half").await.unwrap();
    let holder = state.holder.expect("two of three");
    assert_eq!((holder.value.as_str(), holder.label()), ("someone", None));
    assert!(state.free_in.unwrap() > secs(25));

    for n in &c.nodes {
        let _: () = redis::cmd("SET")
            .arg("forever")
            .arg("x")
            .query(&mut n.conn())
            .unwrap();
    }
    let state = reader.inspect("forever").await.unwrap();
    assert_eq!(state.free_in, None);
    assert_eq!(state.holder.map(|h| h.time_left), Some(None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_shows_each_permit() {
    let c = Cluster::start(3);
    let holder = labelled(&c, "worker-7");
    let gpus = holder.semaphore("gpu", 3).unwrap();
    let (a, b) = (
        gpus.acquire(secs(20)).try_once().await.unwrap(),
        gpus.acquire(secs(20)).try_once().await.unwrap(),
    );
    let states = c
        .redlock()
        .semaphore("gpu", 3)
        .unwrap()
        .inspect()
        .await
        .unwrap();
    assert_eq!(states.len(), 3);
    let held: Vec<_> = states.iter().filter_map(|s| s.holder.clone()).collect();
    assert_eq!(held.len(), 2, "{states:?}");
    assert!(held.iter().all(|h| h.label() == Some("worker-7")));
    let free = states.iter().filter(|s| s.free_in == Some(Duration::ZERO));
    assert_eq!(free.count(), 1);
    a.release().await.unwrap();
    b.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_down_are_counted_and_too_many_fail_the_read() {
    let mut c = Cluster::start(5);
    let reader = c
        .builder()
        .node_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    c.nodes[0].kill();
    let state = reader.inspect("r").await.unwrap();
    assert_eq!(state.answered, 4);
    c.nodes[1].kill();
    c.nodes[2].kill();
    let err = reader.inspect("r").await.unwrap_err();
    assert!(matches!(err, Error::NoQuorum { .. }), "{err}");
}

#[tokio::test]
async fn bad_names_and_labels_are_refused_before_any_node_is_asked() {
    let c = Cluster::start(3);
    let before = c.nodes[0].script_calls();
    let reader = c.redlock();
    for name in ["", "redquorum:x"] {
        let err = reader.inspect(name).await.unwrap_err();
        assert!(matches!(err, Error::InvalidConfig(_)), "{err}");
    }
    assert_eq!(c.nodes[0].script_calls(), before);
    for label in ["a/b", "line\nbreak", &"x".repeat(201)] {
        let err = c.builder().holder_label(label).build().unwrap_err();
        assert!(err.to_string().contains("holder label"), "{err}");
    }
}

/// A read-write lock read without taking it: its readers on a quorum, its
/// writer free; and a semaphore's number of permits read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_write_lock_and_a_semaphore_are_read_as_what_they_are() {
    let c = Cluster::start(3);
    let a = c.builder().retry_count(0).build().unwrap();
    let rw = a.rw_lock("i_rw").unwrap();
    assert!(rw.inspect().await.unwrap().is_free());
    let (r1, r2) = (
        rw.read(Duration::from_secs(10)).try_once().await.unwrap(),
        rw.read(Duration::from_secs(10)).try_once().await.unwrap(),
    );
    let b = c.builder().build().unwrap();
    let state = b.rw_lock("i_rw").unwrap().inspect().await.unwrap();
    assert!(!state.is_free());
    assert_eq!(state.writer.holder, None);
    assert_eq!(state.readers.len(), 2, "{state:?}");
    assert_ne!(state.readers[0].value, state.readers[1].value);
    assert!(state
        .readers
        .iter()
        .all(|h| h.time_left > Some(Duration::from_secs(5))));
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    assert!(b
        .rw_lock("i_rw")
        .unwrap()
        .inspect()
        .await
        .unwrap()
        .is_free());

    assert_eq!(b.semaphore_permits("i_pool").await.unwrap(), None);
    let permit = a
        .semaphore("i_pool", 4)
        .unwrap()
        .acquire(Duration::from_secs(10))
        .try_once()
        .await
        .unwrap();
    assert_eq!(b.semaphore_permits("i_pool").await.unwrap(), Some(4));
    permit.release().await.unwrap();
}

/// A reader's lease left on one node of three (a reader that lost its
/// quorum) with another node down: no reader holds it, and yet a writer
/// cannot take it until that lease ends (it needs two free nodes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stray_lease_keeps_a_writer_out_while_a_node_is_down() {
    let mut c = Cluster::start(3);
    let b = c.builder().build().unwrap();
    let readers = support::internal_key("rw-readers", "i_stray");
    let mut conn = c.nodes[0].conn();
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut conn).unwrap();
    let ends = secs * 1000 + micros / 1000 + 20_000;
    let _: () = redis::cmd("ZADD")
        .arg(&readers)
        .arg(ends)
        .arg("stray-reader")
        .query(&mut conn)
        .unwrap();
    c.nodes[2].kill();
    let state = b.rw_lock("i_stray").unwrap().inspect().await.unwrap();
    assert!(state.readers.is_empty(), "{state:?}");
    assert!(!state.is_free(), "{state:?}");
    assert!(
        state.writer.free_in > Some(Duration::from_secs(10)),
        "{state:?}"
    );
}
