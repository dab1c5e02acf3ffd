//! A client whose own clock runs fast does not end a quarantine early: a
//! client process whose monotonic, boot-time and wall clocks all run twice
//! as fast as real time (the test harness's clock preload,
//! `tests/support/clockshift.c`) meets a node that restarted empty under a
//! held lock. Its quarantine (8 s, the longest TTL) would end after 4 s of
//! real time on its clock alone, while the holder's lock, whose key the
//! node forgot, is still valid; it ends only once the node's clock shows it
//! too, and the fast client never holds the lock while the first holder
//! counts it valid. Nor when the node's clock misbehaves too: a step seen
//! in the `TIME` behind a reply is a loss of its own, counted anew from
//! then; steps between two of the fast client's sparse readings, which
//! its fast clock lets pass unseen, and a node clock running fast are
//! outvoted by the other members' clocks, a majority of which must show
//! the quarantine over as well.
//!
//! The fast client is this test binary run again with the preload, in the
//! role `REDQUORUM_TEST_FAST_CLIENT` names (the nodes' URLs); it tells the
//! test, on its stdout, the real instant it took the lock at. Real
//! instants are `CLOCK_MONOTONIC` read by the system call itself, which the
//! preload does not change.

mod support;

use std::io::{BufRead as _, BufReader, Write as _};
use std::time::Duration;

use redquorum::{Lock, Redlock};
use support::clock::{real_ns, run_preloaded, ClockFile};
use support::{Cluster, Persistence, Proxy, ProxyMode, RedisNode};

/// The fast client's clocks run at this rate.
const RATE: f64 = 2.0;
/// The role's environment variable.
const ROLE: &str = "REDQUORUM_TEST_FAST_CLIENT";
/// The restart quarantine, and the lock's TTL (long enough for a
/// restart of a one-shard cluster member, 2-3 s, to leave a fast clock's
/// half of it to be tried).
const TTL: Duration = Duration::from_secs(8);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_whose_clock_runs_fast_does_not_end_a_quarantine_early() {
    role_or(once).await;
}

/// The holder, from `builder`, connected: a drift allowance of 5 %, so
/// that its validity ends 200 ms before its keys expire.
async fn holder(builder: redquorum::RedlockBuilder) -> Redlock {
    let holder = builder
        .restart_quarantine(TTL)
        .drift_factor(0.05)
        .node_timeout(ms(500))
        .build()
        .unwrap();
    support::connected(&holder).await;
    holder
}

/// The fast client's role where this process is it; otherwise the test,
/// `once`, as many times as asked.
async fn role_or<F: std::future::Future<Output = ()>>(once: fn() -> F) {
    if let Ok(spec) = std::env::var(ROLE) {
        let (urls, rest) = spec.split_once(';').unwrap();
        let urls = urls.split(',').map(str::to_owned).collect();
        if let Some((pause, run)) = rest.split_once(';') {
            return for_a_while(urls, ms(pause.parse().unwrap()), ms(run.parse().unwrap())).await;
        }
        return fast_client(urls, ms(rest.parse().unwrap())).await;
    }
    for _ in 0..support::clock::runs() {
        once().await;
    }
}

/// Asserts the fast client took the lock (at real instant `took`) no
/// sooner than the holder's validity `ended`; prints by how much.
fn assert_after(took: Option<i128>, ended: i128, what: &str) {
    let took = took.expect("the fast client took the lock");
    let after = (took - ended) as f64 / 1e6;
    println!("{what}: took the lock {after:.1} ms after the holder's validity ended");
    assert!(
        took >= ended,
        "two valid holders: the fast client took the lock {:.1} ms before the holder's \
         validity ended",
        -after
    );
}

/// The test: five nodes; a holder here takes `R` on nodes 0-2 only (3 and
/// 4 hold another's key for a moment); node 0 restarts empty; the fast
/// client, in a process of its own, tries `R` every few milliseconds.
async fn once() {
    let mut c = Cluster::start(5);
    // A wide drift allowance: its lock's validity ends 200 ms before its
    // keys expire, so a lock taken on nodes 1-4 once they expired is never
    // one taken while it counts its own valid.
    let holder = holder(c.builder()).await;
    let key = holder.key_for("R");
    for node in &c.nodes[3..] {
        node.set(&key, "another", ms(300));
    }
    let lock = holder.lock("R", TTL).try_once().await.unwrap();
    assert_eq!(c.holding(&key, &c.values(&key)[0].clone().unwrap()), 3);
    let valid_until = real_ns() + lock.validity().as_nanos() as i128;
    let (mut child, took, _) = restart_and_spawn(
        &mut c,
        &lock,
        (
            "a_client_whose_clock_runs_fast_does_not_end_a_quarantine_early",
            5,
        ),
        RATE,
    );
    let took = took.await.unwrap();
    assert!(child.wait().unwrap().success(), "the fast client failed");
    assert_after(took, valid_until, "fast client clock");
    let _ = lock.release().await;
}

/// The fast client's role: try `R` every `pause` of real time (at most
/// 8,000 times) and report the real instant it took it at.
async fn fast_client(urls: Vec<String>, pause: Duration) {
    let client = Redlock::builder()
        .nodes(urls)
        .restart_quarantine(TTL)
        .node_timeout(ms(500))
        .build()
        .unwrap();
    for _ in 0..8_000 {
        let at = real_ns();
        let tried = client.lock("R", TTL).try_once().await;
        if let Ok(lock) = tried {
            println!("took {at}");
            std::io::stdout().flush().unwrap();
            lock.release().await.unwrap();
            return;
        }
        println!("tried");
        std::io::stdout().flush().unwrap();
        // In real time (a timer's wait is not: the thread sleeps by the
        // system's clock).
        let end = real_ns() + pause.as_nanos() as i128;
        while real_ns() < end {
            tokio::time::sleep(ms(1)).await;
        }
    }
    panic!("never took R: {:?}", client.stats().nodes);
}

/// Another role: take `R` and release it, every `pause` of real time, for
/// `run` of real time.
async fn for_a_while(urls: Vec<String>, pause: Duration, run: Duration) {
    let client = Redlock::builder()
        .nodes(urls)
        .restart_quarantine(TTL)
        .node_timeout(ms(500))
        .build()
        .unwrap();
    let end = real_ns() + run.as_nanos() as i128;
    while real_ns() < end {
        if let Ok(lock) = client.lock("R", TTL).try_once().await {
            let _ = lock.release().await;
        }
        let next = real_ns() + pause.as_nanos() as i128;
        while real_ns() < next {
            tokio::time::sleep(ms(1)).await;
        }
    }
}

/// What [`restart_and_spawn`] returns: the fast client's process, the real
/// instant it took the lock at once it has, and where its first try is
/// told.
type Spawned = (
    std::process::Child,
    tokio::task::JoinHandle<Option<i128>>,
    std::sync::mpsc::Receiver<()>,
);

/// Restarts node 0 of `c` empty under `lock` (which must have 5 s left
/// after it), then starts the fast client (this binary, test `test`,
/// clocks at `rate`, `pause` ms between tries) on the nodes.
fn restart_and_spawn(
    c: &mut Cluster,
    lock: &redquorum::Lock,
    (test, pause): (&str, u64),
    rate: f64,
) -> Spawned {
    c.nodes[0].restart(Persistence::None);
    assert!(
        lock.validity() > ms(5_000),
        "too slow a start: {:?} left",
        lock.validity()
    );
    let clock = ClockFile::new();
    clock.wall(0, rate);
    let spec = format!("{};{pause}", c.urls().join(","));
    let mut child = run_preloaded(test, (ROLE, &spec), &clock, rate);
    let stdout = child.stdout.take().unwrap();
    let (tried, first) = std::sync::mpsc::channel();
    let took = tokio::task::spawn_blocking(move || {
        // The file must outlive the child's reads of it.
        let _clock = clock;
        // Read to the end: the child writes on after its report.
        let mut took = None;
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            // libtest's "test <name> ... " may come first on the line.
            if line.ends_with("tried") {
                let _ = tried.send(());
            } else if let Some(at) = line.find("took ") {
                took = took.or(line[at + 5..].trim().parse::<i128>().ok());
            }
        }
        took
    });
    (child, took, first)
}

/// The fast client's clocks run at this rate in the test of a step.
const STEP_RATE: f64 = 4.0;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_clock_stepped_forward_in_a_quarantine_does_not_end_it_for_a_fast_client() {
    role_or(|| {
        misbehaving_node(
            "a_node_clock_stepped_forward_in_a_quarantine_does_not_end_it_for_a_fast_client",
            5,
            NodeClock::Steps(1_000, 0, 20_000, 1),
            None,
        )
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_clock_steps_between_a_fast_client_sparse_readings_do_not_end_a_quarantine() {
    // A try every 0.5 s (2 s of its clock), a step of 1.5 s every 0.5 s:
    // each reading pair shows 2 s on both clocks, no jump.
    role_or(|| {
        misbehaving_node(
            "node_clock_steps_between_a_fast_client_sparse_readings_do_not_end_a_quarantine",
            500,
            NodeClock::Steps(200, 500, 1_500, 6),
            None,
        )
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_clock_running_fast_does_not_end_a_quarantine_for_a_fast_client() {
    // The node's clock at twice real time looks, to a client at four
    // times, like one running at half: never ahead.
    role_or(|| {
        misbehaving_node(
            "a_node_clock_running_fast_does_not_end_a_quarantine_for_a_fast_client",
            5,
            NodeClock::Rate(2.0),
            None,
        )
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_refusing_time_does_not_help_a_fast_node_clock_end_a_quarantine() {
    // Node 2 refuses `TIME`: counted as showing the quarantine over, it
    // and node 0's clock, three times fast, would make a majority without
    // node 1's sound clock.
    role_or(|| {
        misbehaving_node(
            "a_member_refusing_time_does_not_help_a_fast_node_clock_end_a_quarantine",
            5,
            NodeClock::Rate(3.0),
            Some(2),
        )
    })
    .await;
}

/// What the restarted node's clock does while the fast client tries.
#[derive(Clone, Copy)]
enum NodeClock {
    /// Steps forward: `.0` ms after the fast client's first try, then every
    /// `.1` ms, by `.2` ms, `.3` times.
    Steps(u64, u64, i64, u32),
    /// Runs this many times as fast as real time from the restart.
    Rate(f64),
}

/// A holder reaches `c`'s nodes through proxies and takes `R` on the nodes
/// of `held` (the others hold another's key for a moment), then never
/// hears from node 0 again (its proxy refuses), so it keeps counting its
/// lock valid. Returns the proxies (to be kept), the holder, its lock and
/// the real instant its validity ends.
async fn held_then_cut(c: &Cluster, held: &[usize]) -> (Vec<Proxy>, Redlock, Lock, i128) {
    let proxies: Vec<Proxy> = c.nodes.iter().map(|n| Proxy::start(n.port)).collect();
    let holder = holder(Redlock::builder().nodes(proxies.iter().map(Proxy::url))).await;
    let key = holder.key_for("R");
    for (i, node) in c.nodes.iter().enumerate() {
        if !held.contains(&i) {
            node.set(&key, "another", ms(300));
        }
    }
    let lock = holder.lock("R", TTL).try_once().await.unwrap();
    let value = c.values(&key)[0].clone().unwrap();
    assert_eq!(c.holding(&key, &value), held.len(), "the lock on {held:?}");
    let valid_until = real_ns() + lock.validity().as_nanos() as i128;
    proxies[0].set_mode(ProxyMode::Refuse);
    proxies[0].cut();
    (proxies, holder, lock, valid_until)
}

/// Three plain nodes, node 0's clock under the preload; the holder takes
/// `R` on nodes 0 and 1 and is cut from node 0 ([`held_then_cut`]); node
/// 0 restarts empty; the fast client (four times fast, `pause` ms between
/// tries) tries `R` while node 0's clock does as `node` says, and node
/// `refused` (if any) refuses `TIME` to everyone.
async fn misbehaving_node(test: &'static str, pause: u64, node: NodeClock, refused: Option<usize>) {
    let node_clock = ClockFile::new();
    let mut c = Cluster {
        nodes: vec![
            RedisNode::start_with_clock(Persistence::Aof, &node_clock),
            RedisNode::start(Persistence::Aof),
            RedisNode::start(Persistence::Aof),
        ],
    };
    c.declare_new();
    if let Some(i) = refused {
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg("default")
            .arg("-time")
            .query::<()>(&mut c.nodes[i].conn())
            .unwrap();
    }
    let (_proxies, _holder, lock, valid_until) = held_then_cut(&c, &[0, 1]).await;
    // Where the holder is told of a loss, its validity ends then.
    let lost = lock.lost();
    let lost_at = tokio::spawn(async move {
        lost.await;
        real_ns()
    });
    let (mut child, took, first) = restart_and_spawn(&mut c, &lock, (test, pause), STEP_RATE);
    match node {
        NodeClock::Rate(rate) => node_clock.wall(0, rate),
        NodeClock::Steps(first_after, every, by, times) => {
            // From its first try on.
            tokio::task::spawn_blocking(move || first.recv())
                .await
                .unwrap()
                .unwrap();
            tokio::time::sleep(ms(first_after)).await;
            for n in 1..=i64::from(times) {
                node_clock.wall(n * by * 1_000_000, 1.0);
                tokio::time::sleep(ms(every)).await;
            }
        }
    }
    let took = took.await.unwrap();
    assert!(child.wait().unwrap().success(), "the fast client failed");
    let ended = if lost_at.is_finished() {
        lost_at.await.unwrap().min(valid_until)
    } else {
        lost_at.abort();
        valid_until
    };
    assert_after(took, ended, test);
    let _ = lock.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_reads_one_clock_does_not_vouch_that_a_quarantine_is_over() {
    // Three nodes, node 0's clock fast; nodes 1 and 2 refuse `TIME` to
    // everyone: the other client (of the same node list) reads node 0's
    // clock alone, which ends its own quarantine early on the clocks it
    // reads, but vouches for no one.
    role_or(|| {
        vouching(
            "a_client_that_reads_one_clock_does_not_vouch_that_a_quarantine_is_over",
            3,
            (&[0], &[0, 1, 2], &[1, 2]),
        )
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_of_another_node_list_does_not_vouch_that_a_quarantine_is_over() {
    // Five nodes, two clocks fast (a minority): the other client's two
    // members' clocks agree with it, so it vouches, for its own list only.
    role_or(|| {
        vouching(
            "a_client_of_another_node_list_does_not_vouch_that_a_quarantine_is_over",
            5,
            (&[0, 1], &[0, 1], &[]),
        )
    })
    .await;
}

/// The nodes (by index) whose clocks run fast, the other client's members,
/// and the nodes that refuse `TIME`.
type Vouching<'a> = (&'a [usize], &'a [usize], &'a [usize]);

/// `n` plain nodes, those of `fast` with clocks under the preload, those
/// of `refused` refusing `TIME` to everyone; the holder takes `R` on a
/// bare majority with node 0 and without node 1, and is cut from node 0
/// ([`held_then_cut`]); node 0 restarts empty and the clocks of `fast`
/// run three times fast; a client eight times fast whose members are
/// `members` takes and releases `R` for 3.5 s (on the clocks it reads, the
/// quarantine is soon over, and its connection checks behind its requests
/// could write our marker's `served`); then a client with a true clock, on
/// all `n` nodes, tries `R` every 5 ms.
async fn vouching(test: &'static str, n: usize, (fast, members, refused): Vouching<'_>) {
    let clocks: Vec<ClockFile> = fast.iter().map(|_| ClockFile::new()).collect();
    let mut c = Cluster {
        nodes: (0..n)
            .map(|i| match fast.iter().position(|o| *o == i) {
                Some(k) => RedisNode::start_with_clock(Persistence::Aof, &clocks[k]),
                None => RedisNode::start(Persistence::Aof),
            })
            .collect(),
    };
    c.declare_new();
    for i in refused {
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg("default")
            .arg("-time")
            .query::<()>(&mut c.nodes[*i].conn())
            .unwrap();
    }
    let held: Vec<usize> = std::iter::once(0).chain(2..=n / 2 + 1).collect();
    let (_proxies, _holder, lock, valid_until) = held_then_cut(&c, &held).await;
    c.nodes[0].restart(Persistence::None);
    for clock in &clocks {
        clock.wall(0, 3.0);
    }
    let fast_from = std::time::Instant::now();
    let own = ClockFile::new();
    own.wall(0, 8.0);
    let urls: Vec<String> = members.iter().map(|i| c.urls()[*i].clone()).collect();
    let spec = format!("{};20;3500", urls.join(","));
    let mut alone = run_preloaded(test, (ROLE, &spec), &own, 8.0);
    let waited = tokio::task::spawn_blocking(move || alone.wait())
        .await
        .unwrap();
    assert!(waited.unwrap().success(), "the other client failed");
    // The fast clocks on at the true rate, as far ahead as they got.
    let ahead = fast_from.elapsed().as_nanos() as i64 * 2;
    for clock in &clocks {
        clock.wall(ahead, 1.0);
    }
    let client = Redlock::builder()
        .nodes(c.urls())
        .restart_quarantine(TTL)
        .node_timeout(ms(500))
        .build()
        .unwrap();
    let took = loop {
        let at = real_ns();
        if let Ok(got) = client.lock("R", TTL).try_once().await {
            let _ = got.release().await;
            break at;
        }
        assert!(at < valid_until + 10_000_000_000, "never took R");
        tokio::time::sleep(ms(5)).await;
    };
    assert_after(Some(took), valid_until, test);
    let _ = lock.release().await;
}
