//! The read-write lock against real redis-server processes: readers share
//! and exclude writers both ways, a reader's lease is its own (extend,
//! check, release, drop), a writer arriving during a continuous stream of
//! readers gets the lock after the reads in progress, the readers behind a
//! writer enter together when it leaves, a crashed reader (its runtime
//! gone, nothing released) keeps a writer out only until its own lease
//! ends, fencing tokens go from writers to readers, a reader waiting for
//! a writer is not woken by other waiters joining the list, one behind a
//! writer that gives up reads at once, and a writer waiting for reads wakes
//! when they end, not at each release.

mod support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redquorum::{Error, Lock, Redlock};
use support::{wait_until, wake_ups, Cluster};
use tokio::task::JoinHandle;
use tokio::time::Instant;

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_and_exclude_writers_both_ways() {
    let c = Cluster::start(3);
    let (a, b) = (c.redlock(), c.redlock());
    let (ra, rb) = (a.rw_lock("rw1").unwrap(), b.rw_lock("rw1").unwrap());
    let r1 = ra.read(ms(10_000)).try_once().await.expect("first reader");
    let r2 = rb.read(ms(10_000)).try_once().await.expect("second reader");
    let err = rb
        .write(ms(10_000))
        .try_once()
        .await
        .expect_err("readers hold");
    assert!(err.is_contended(), "{err}");
    assert!(r1.is_held().await.unwrap() && r2.is_held().await.unwrap());
    r1.extend(ms(20_000))
        .await
        .expect("a reader extends its own lease");
    r1.release().await.expect("release");
    assert!(r2.is_held().await.unwrap(), "the other lease stays");
    drop(r2);
    b.settle().await;
    let w = rb
        .write(ms(10_000))
        .try_once()
        .await
        .expect("no reader left");
    let err = ra
        .read(ms(10_000))
        .try_once()
        .await
        .expect_err("a writer holds");
    assert!(err.is_contended(), "{err}");
    let err = ra
        .write(ms(10_000))
        .try_once()
        .await
        .expect_err("a writer holds");
    assert!(err.is_contended(), "{err}");
    // The plain lock of the same name is the writer's: taken.
    let err = a
        .lock("rw1", ms(1_000))
        .try_once()
        .await
        .expect_err("the name's lock is the writer's");
    assert!(err.is_contended(), "{err}");
    w.release().await.expect("release");
    let r = ra.read(ms(10_000)).try_once().await.expect("free again");
    r.release().await.unwrap();
    assert!(matches!(
        a.rw_lock("redquorum:x"),
        Err(Error::InvalidConfig(_))
    ));
}

/// Readers loop, overlapping, so some read is always in progress, for 6 s;
/// a writer arriving in the middle gets the lock once the reads in progress
/// when it arrived end (each is held 200 ms), not when the stream ends; and
/// the readers that came while it waited enter together when it leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_is_not_starved_by_a_stream_of_readers() {
    let c = Cluster::start(3);
    // A node timeout that a busy machine's pauses do not reach: every
    // release here must succeed (each is awaited and checked).
    let client = || {
        c.builder()
            .node_timeout(ms(1000))
            .wait_cap(ms(10_000))
            .build()
            .unwrap()
    };
    let readers: Vec<_> = (0..2).map(|_| client()).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let reading = Arc::new(AtomicUsize::new(0));
    let writing = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for (i, client) in readers.iter().cycle().take(6).enumerate() {
        let rw = client.rw_lock("rw2").unwrap();
        let (stop, reading, writing) = (
            Arc::clone(&stop),
            Arc::clone(&reading),
            Arc::clone(&writing),
        );
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(ms(35 * i as u64)).await;
            let mut reads = 0;
            while !stop.load(Ordering::SeqCst) {
                let r = rw.read(ms(10_000)).wait(ms(9_000)).await.expect("read");
                assert!(!writing.load(Ordering::SeqCst), "read while writing");
                reading.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(ms(200)).await;
                reading.fetch_sub(1, Ordering::SeqCst);
                r.release().await.expect("release");
                reads += 1;
            }
            reads
        }));
    }
    let writer = client();
    let rw = writer.rw_lock("rw2").unwrap();
    tokio::time::sleep(ms(1_500)).await;
    assert!(reading.load(Ordering::SeqCst) > 0, "reads in progress");
    let asked = Instant::now();
    let w = rw.write(ms(10_000)).wait(ms(9_000)).await.expect("write");
    let waited = asked.elapsed();
    writing.store(true, Ordering::SeqCst);
    assert_eq!(reading.load(Ordering::SeqCst), 0, "a read in progress");
    tokio::time::sleep(ms(100)).await;
    writing.store(false, Ordering::SeqCst);
    let released = Instant::now();
    w.release().await.expect("release");
    assert!(
        wait_until(ms(3_000), || reading.load(Ordering::SeqCst) >= 3).await,
        "readers entered together after the writer"
    );
    let together = released.elapsed();
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        assert!(t.await.expect("reader") > 0);
    }
    assert!(
        waited < ms(1_500),
        "the writer waited {waited:?}: the reads in progress end within 200 ms"
    );
    assert!(together < ms(1_500), "readers entered {together:?} after");
}

/// A reader whose process died (its runtime dropped: nothing released,
/// nothing renewed) keeps a writer out until its own lease ends, while
/// another reader renews and then leaves.
#[test]
fn a_crashed_reader_blocks_a_writer_only_until_its_own_lease_ends() {
    let c = Cluster::start(3);
    let crashed = tokio::runtime::Runtime::new().unwrap();
    let taken = crashed.block_on(async {
        let client = c.redlock();
        let lease = client
            .rw_lock("rw3")
            .unwrap()
            .read(ms(3_000))
            .try_once()
            .await
            .expect("the reader that will crash");
        let taken = Instant::now();
        std::mem::forget(lease);
        taken
    });
    drop(crashed);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let other = c.redlock();
        let rw = other.rw_lock("rw3").unwrap();
        // Its lease (and the leases' key) lasts 10 s: were leases one
        // shared TTL, the crashed reader would hold the writer off that long.
        let live = rw.read(ms(10_000)).await.expect("a live reader");
        let writer = c.builder().wait_cap(ms(10_000)).build().unwrap();
        let wrw = writer.rw_lock("rw3").unwrap();
        let w = tokio::spawn(async move {
            let w = wrw.write(ms(5_000)).wait(ms(9_000)).await.expect("write");
            (Instant::now(), w)
        });
        tokio::time::sleep(ms(1_500)).await;
        live.release().await.expect("the live reader leaves");
        let (at, w) = w.await.unwrap();
        let after = at.saturating_duration_since(taken);
        assert!(
            after >= ms(2_900) && after < ms(4_500),
            "the writer got the lock {after:?} after the crashed reader's 3 s lease began"
        );
        w.release().await.unwrap();
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_learn_the_last_writers_token() {
    let c = Cluster::start(3);
    let r = c.redlock();
    let rw = r.rw_lock("rw4").unwrap();
    let read = rw.read(ms(5_000)).fenced().await.expect("read");
    assert_eq!(read.fencing_token(), Some(0), "no writer yet");
    read.release().await.unwrap();
    let mut last = 0;
    for _ in 0..2 {
        let w = rw.write(ms(5_000)).fenced().await.expect("write");
        let t = w.fencing_token().expect("token");
        assert!(t > last);
        last = t;
        w.release().await.unwrap();
    }
    let read = rw.read(ms(5_000)).fenced().await.expect("read");
    assert_eq!(read.fencing_token(), Some(last), "the last writer's");
    read.release().await.unwrap();
}

/// A reader waiting for a writer to leave hears the writer's key, not the
/// waiting list: another reader joining the list does not wake it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_waiting_for_a_writer_is_not_woken_by_others_joining() {
    let c = Cluster::start(3);
    let rw = c.redlock().rw_lock("rw8").unwrap();
    let w = rw.write(ms(20_000)).try_once().await.expect("write");
    let writer = "rw8".to_owned();
    let (first, reading) = waiting_reader(&c, "rw8", ms(9_000));
    assert!(
        wait_until(ms(5_000), || c.waiting_on(&writer) == 3
            && c.nodes.iter().all(|n| n.tracked_keys() >= 1))
        .await,
        "the reader is listed on every node, and every node tracks the writer's key for it"
    );
    let before = wake_ups(&first);
    let (_second, later) = waiting_reader(&c, "rw8", ms(9_000));
    assert!(
        wait_until(ms(5_000), || c.listed_everywhere(&writer, 2)).await,
        "the second reader is listed on every node"
    );
    // A wake-up follows the change within a round trip or two.
    let woken = wait_until(ms(1_000), || wake_ups(&first) > before).await;
    assert!(
        !woken,
        "the first reader woke when the second joined: {} wake-ups, {before} before",
        wake_ups(&first)
    );
    let released = Instant::now();
    w.release().await.expect("release");
    for task in [reading, later] {
        let (at, read) = task.await.expect("reader");
        let after = at.saturating_duration_since(released);
        assert!(after < ms(2_000), "read {after:?} after the write");
        read.expect("read").release().await.unwrap();
    }
}

/// A reader listed behind a waiting writer, with the writer's key free,
/// hears that writer leave the list without writing (it timed out while
/// another reader held): it reads at once, not at its retry cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_behind_a_writer_that_gives_up_reads_at_once() {
    let c = Cluster::start(3);
    let rw = c.redlock().rw_lock("rw9").unwrap();
    let held = rw.read(ms(20_000)).try_once().await.expect("read");
    let writer = "rw9".to_owned();
    let waiting_writer = c.builder().wait_cap(ms(10_000)).build().expect("client");
    let writing = {
        let lock = waiting_writer.rw_lock("rw9").unwrap();
        tokio::spawn(async move {
            let r = lock.write(ms(10_000)).wait(ms(3_000)).await;
            (Instant::now(), r.map(|_| ()))
        })
    };
    assert!(
        wait_until(ms(5_000), || c.waiting_on(&writer) == 3).await,
        "the writer is listed"
    );
    let (_reader, reading) = waiting_reader(&c, "rw9", ms(9_000));
    assert!(
        wait_until(ms(5_000), || c.listed_everywhere(&writer, 2)).await,
        "the reader is listed behind the writer"
    );
    let (gave_up, r) = writing.await.expect("writer");
    assert!(r.is_err(), "a reader holds: the writer times out");
    let (at, read) = reading.await.expect("reader");
    let after = at.saturating_duration_since(gave_up);
    assert!(after < ms(2_000), "read {after:?} after the writer gave up");
    read.expect("read, once the writer gave up")
        .release()
        .await
        .unwrap();
    held.release().await.unwrap();
}

/// A writer waiting for four reads (each taken by a client that never saw
/// the lock contended, so released without asking about waiters) is not
/// woken while a read remains, and is woken by the nodes (not its retry
/// cap, not a lease's end) when the last one is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_wakes_when_the_reads_end_not_at_each_release() {
    let c = Cluster::start(3);
    let rw = c.redlock().rw_lock("rw10").unwrap();
    let mut reads = Vec::new();
    for _ in 0..4 {
        reads.push(rw.read(ms(60_000)).try_once().await.expect("read"));
    }
    let writer = "rw10".to_owned();
    let waiting_writer = c.builder().wait_cap(ms(10_000)).build().expect("client");
    let writing = {
        let lock = waiting_writer.rw_lock("rw10").unwrap();
        tokio::spawn(async move { lock.write(ms(10_000)).wait(ms(30_000)).await })
    };
    // Under load an attempt may miss a node (its reply late): the next
    // one, a cap (10 s) later, lists and tracks it there.
    assert!(
        wait_until(ms(15_000), || c.waiting_on(&writer) == 3
            && c.nodes.iter().all(|n| n.tracked_keys() >= 2))
        .await,
        "the writer is listed on every node, and every node tracks its keys"
    );
    let before = wake_ups(&waiting_writer);
    let listed = waiting_writer.stats();
    let last = reads.pop().expect("four reads");
    for read in reads {
        read.release().await.expect("release");
        // A wake-up follows a release within a round trip or two.
        let woken = wait_until(ms(500), || wake_ups(&waiting_writer) > before).await;
        assert!(
            !woken,
            "the writer woke while reads remained: {} wake-ups, {before} before",
            wake_ups(&waiting_writer)
        );
    }
    last.release().await.expect("release");
    let w = writing
        .await
        .expect("writer")
        .expect("write, once the reads ended");
    // Since it was listed everywhere, the nodes woke it, not its cap.
    let s = waiting_writer.stats();
    assert_eq!(
        (s.woken_by_cap, s.woken_by_ttl),
        (listed.woken_by_cap, listed.woken_by_ttl),
        "woken by the nodes: {s:?}, {listed:?} once listed"
    );
    assert!(
        s.woken_by_notification > listed.woken_by_notification,
        "{s:?}"
    );
    w.release().await.unwrap();
}

/// A client with a 10 s retry cap, and a task of it that waits up to
/// `wait` to read `name`: when the answer came, and the answer.
fn waiting_reader(
    c: &Cluster,
    name: &str,
    wait: Duration,
) -> (Redlock, JoinHandle<(Instant, redquorum::Result<Lock>)>) {
    let client = c.builder().wait_cap(ms(10_000)).build().expect("client");
    let lock = client.rw_lock(name).unwrap();
    let task = tokio::spawn(async move {
        let read = lock.read(ms(10_000)).wait(wait).await;
        (Instant::now(), read)
    });
    (client, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_read_whose_lease_ended_while_its_token_was_read_is_not_returned() {
    // 150 ms each way, connections made first: a read lease of 500 ms is
    // taken in one round trip of at least 300 ms, so with at most 193 ms of
    // validity left (less the drift), and the token's read takes another
    // 300 ms at least: the lease has always ended by the time the token is
    // in (lower bounds: the proxies delay every write by that much).
    let c = Cluster::start(3);
    let (_proxies, builder) = c.far_builder(150);
    let reader = builder.build().unwrap();
    support::connected(&reader).await;
    let rw = reader.rw_lock("fenced-read-expired").unwrap();
    match rw.read(ms(500)).fenced().wait(ms(1_500)).await {
        Ok(lock) => panic!(
            "a fenced read returned with {:?} of validity (token {:?})",
            lock.validity(),
            lock.fencing_token()
        ),
        Err(e) => assert!(e.is_expired() || e.is_timeout(), "{e}"),
    }
}

/// A name is one lock, whichever way it is taken: readers keep the plain
/// lock of the name out (ours, and a bare `SET NX` as any Redlock client
/// sends), through extensions past their first TTL; the plain lock keeps
/// readers out; a plain lock waiting behind readers is not overtaken by
/// readers that come after it, and takes the lock once the last read ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_names_plain_lock_and_its_readers_exclude_each_other() {
    let c = Cluster::start(3);
    let (a, b) = (c.redlock(), c.redlock());
    let rw = a.rw_lock("one").unwrap();
    let r1 = rw.read(ms(2_000)).try_once().await.expect("reader");
    let err = b
        .lock("one", ms(5_000))
        .try_once()
        .await
        .expect_err("readers hold the name");
    assert!(err.is_contended(), "{err}");
    // Past the reader's first TTL, through an extension.
    r1.extend(ms(10_000)).await.expect("extend");
    tokio::time::sleep(ms(2_500)).await;
    // A node that missed the reader's request (a quorum is enough) may
    // take it; a majority never does.
    let got = c.bare_set_nx("one");
    assert!(
        got < 2,
        "a bare SET NX got the name on {got} of 3 nodes beside a reader"
    );
    let err = b
        .lock("one", ms(5_000))
        .try_once()
        .await
        .expect_err("the reader still holds");
    assert!(err.is_contended(), "{err}");
    // A plain lock waits behind the reader; a reader after it waits too.
    let waiter = c.builder().wait_cap(ms(10_000)).build().expect("client");
    let plain = tokio::spawn(async move {
        let lock = waiter.lock("one", ms(5_000)).wait(ms(30_000)).await;
        (lock, Instant::now())
    });
    assert!(
        wait_until(ms(15_000), || c.waiting_on("one") == 3).await,
        "the plain lock is listed on every node"
    );
    let late = b.rw_lock("one").unwrap();
    let err = late
        .read(ms(5_000))
        .try_once()
        .await
        .expect_err("a reader behind a waiting plain lock");
    assert!(err.is_contended(), "{err}");
    let released = Instant::now();
    r1.release().await.expect("release");
    let (lock, at) = plain.await.unwrap();
    let lock = lock.expect("the plain lock, once the read ended");
    assert!(
        at.duration_since(released) < ms(2_000),
        "taken {:?} after the read ended",
        at.duration_since(released)
    );
    let err = late
        .read(ms(5_000))
        .try_once()
        .await
        .expect_err("the plain lock holds the name");
    assert!(err.is_contended(), "{err}");
    lock.release().await.unwrap();
    let r = late.read(ms(5_000)).try_once().await.expect("free again");
    r.release().await.unwrap();
    b.settle().await;
    let free = a
        .lock("one", ms(1_000))
        .try_once()
        .await
        .expect("no mark left");
    free.release().await.unwrap();
}

/// The name's lock and its writers mint fencing tokens from one counter:
/// they go up whichever way the name is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_names_fenced_lock_and_its_writers_share_one_counter() {
    let c = Cluster::start(3);
    let a = c.redlock();
    let rw = a.rw_lock("fenced-one").unwrap();
    let mut tokens = Vec::new();
    for i in 0..4 {
        let lock = if i % 2 == 0 {
            a.lock("fenced-one", ms(5_000)).fenced().try_once().await
        } else {
            rw.write(ms(5_000)).fenced().try_once().await
        }
        .expect("free");
        tokens.push(lock.fencing_token().expect("fenced"));
        lock.release().await.unwrap();
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
}

/// Reads that end without a release free the name for a plain lock when
/// the last live lease ends, not when the longest lease ever given would
/// have: the readers' mark ends with the last live lease, moved back by a
/// shorter extension and by the release of the longest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_names_plain_lock_gets_it_when_the_last_live_read_ends() {
    let c = Cluster::start(3);
    let a = c.redlock();
    let waiter = c.builder().wait_cap(ms(10_000)).build().expect("client");
    let rw = a.rw_lock("short").unwrap();
    // A 6 s read cut to 800 ms by its extension, then never released.
    let r = rw.read(ms(6_000)).try_once().await.expect("reader");
    r.extend(ms(800)).await.expect("extend");
    let cut = Instant::now();
    std::mem::forget(r);
    let lock = waiter
        .lock("short", ms(5_000))
        .wait(ms(30_000))
        .await
        .expect("the name, once the read ended");
    let took = cut.elapsed();
    assert!(took < ms(3_000), "taken {took:?} after an 800 ms lease");
    lock.release().await.unwrap();
    // A 6 s read released, an 800 ms one left to end by itself.
    let long = rw.read(ms(6_000)).try_once().await.expect("reader");
    let short = rw.read(ms(800)).try_once().await.expect("reader");
    std::mem::forget(short);
    long.release().await.unwrap();
    let released = Instant::now();
    let lock = waiter
        .lock("short", ms(5_000))
        .wait(ms(30_000))
        .await
        .expect("the name, once the short read ended");
    let took = released.elapsed();
    assert!(took < ms(3_000), "taken {took:?} after an 800 ms lease");
    lock.release().await.unwrap();
}
