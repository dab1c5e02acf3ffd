//! Node clocks that misbehave, made with the test harness's clock preload
//! (`tests/support/clockshift.c`) on real `redis-server`s: the node's
//! `TIME` and its key expiry follow the faked wall clock, so a node whose
//! clock steps forward drops at once a key with life left; a client that
//! has read the node's clock before sees the jump in the `TIME` behind its
//! own request and does not count the node for a lock.

mod support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redquorum::Redlock;
use support::clock::ClockFile;
use support::{wait_until, Cluster, Persistence, RedisNode};

/// The node's `TIME`, minus ours, in seconds.
fn offset_secs(node: &RedisNode) -> f64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut node.conn()).unwrap();
    let ours = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    secs as f64 + micros as f64 / 1e6 - ours.as_secs_f64()
}

#[tokio::test]
async fn a_node_whose_clock_steps_forward_drops_a_live_key_at_once() {
    let clock = ClockFile::new();
    let node = RedisNode::start_with_clock(Persistence::Aof, &clock);
    assert!(offset_secs(&node).abs() < 1.0, "no fault yet");
    node.set("k", "v", Duration::from_secs(30));
    assert_eq!(node.get("k").as_deref(), Some("v"));

    clock.wall(60_000_000_000, 1.0);
    assert!(
        wait_until(Duration::from_secs(5), || node.get("k").is_none()).await,
        "the key outlived the node's 60 s step"
    );
    let offset = offset_secs(&node);
    assert!((59.0..61.0).contains(&offset), "TIME is {offset} s ahead");
}

#[tokio::test]
async fn a_node_whose_clock_runs_fast_expires_keys_early() {
    let clock = ClockFile::new();
    let node = RedisNode::start_with_clock(Persistence::Aof, &clock);
    // Ten times as fast: a 20 s key lives about 2 s of real time.
    clock.wall(0, 10.0);
    node.set("fast", "v", Duration::from_secs(20));
    assert!(
        wait_until(Duration::from_secs(15), || node.get("fast").is_none()).await,
        "a 20 s key outlived 15 s on a clock ten times as fast"
    );
}

/// Five nodes, each with a clock a test can move, declared new; and the
/// files that move them.
fn faked_cluster() -> (Cluster, Vec<ClockFile>) {
    let (cluster, clocks) = Cluster::start_with_clocks(5);
    cluster.declare_new();
    (cluster, clocks)
}

/// A client that has used every node for a while (so it has readings of
/// their clocks to compare with: first contact is the drift factor alone).
async fn warmed(c: &Cluster) -> Redlock {
    let redlock = c.builder().build().unwrap();
    for _ in 0..10 {
        let lock = redlock.lock("warm-up", ms(2_000)).await.unwrap();
        lock.release().await.unwrap();
        tokio::time::sleep(ms(50)).await;
    }
    redlock
}

/// A test that runs a scenario [`runs`] times on a multi-threaded runtime.
macro_rules! scenario {
    ($(#[$doc:meta])* $name:ident => $once:ident) => {
        $(#[$doc])*
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            for _ in 0..support::clock::runs() {
                $once().await;
            }
        }
    };
}

/// `first` takes `name` for `ttl` (no renewal); `second` tries every 3 ms
/// until it has it: it must get it, and only once `first` no longer counts
/// its lock valid. Returns how long after `first`'s validity ended.
async fn hand_over(first: &Redlock, second: &Redlock, name: &str, ttl: Duration) -> Duration {
    let lock = first.lock(name, ttl).try_once().await.unwrap();
    let deadline = std::time::Instant::now() + ttl * 4 + Duration::from_secs(10);
    let other = loop {
        if let Ok(taken) = second.lock(name, ttl).try_once().await {
            break taken;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the second client never got the lock"
        );
        tokio::time::sleep(ms(3)).await;
    };
    assert!(!lock.is_valid(), "two valid holders");
    let after = tokio::time::Instant::now().saturating_duration_since(lock.valid_until());
    other.release().await.unwrap();
    let _ = lock.release().await;
    after
}

/// Two clients (quarantine 3 s) that used the nodes until each measured
/// the clocks of `fast` at least `ppm` fast and counts them again (the
/// first readings, judged by the drift factor alone, quarantine them).
async fn measured(c: &Cluster, fast: std::ops::Range<usize>, ppm: i64) -> (Redlock, Redlock) {
    let build = || c.builder().restart_quarantine(ms(3_000)).build().unwrap();
    let (first, second) = (build(), build());
    let done = |client: &Redlock| {
        client.stats().nodes[fast.clone()]
            .iter()
            .all(|n| n.clock_rate_ppm.is_some_and(|p| p >= ppm) && !n.quarantined)
    };
    for _ in 0..200 {
        for client in [&first, &second] {
            if let Ok(lock) = client.lock("warm-up", ms(1_000)).try_once().await {
                lock.release().await.unwrap();
            }
        }
        if done(&first) && done(&second) {
            return (first, second);
        }
        tokio::time::sleep(ms(50)).await;
    }
    panic!(
        "not measured: {:?}\n{:?}",
        first.stats().nodes,
        second.stats().nodes
    );
}

/// After a step under `lock`: `second` tries 30 times, 20 ms apart, and
/// never holds `name` while `lock` is valid; then `lock`'s own client,
/// reading the stepped clock, tells it lost.
async fn no_second_holder(lock: &redquorum::Lock, second: &Redlock, name: &str) {
    for _ in 0..30 {
        if let Ok(other) = second.lock(name, Duration::from_secs(20)).try_once().await {
            let both = lock.is_valid() && other.is_valid();
            other.release().await.unwrap();
            assert!(!both, "two valid holders");
        }
        tokio::time::sleep(ms(20)).await;
    }
    let told = tokio::time::timeout(Duration::from_secs(10), lock.lost()).await;
    assert!(told.is_ok(), "the holder was not told");
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

scenario! {
    /// A lock held on exactly three of five nodes (the other two were taken
    /// by someone else for a moment), then one of the three
    /// steps its clock 30 s forward and drops the key. A second client that
    /// had used that node sees the jump in the `TIME` behind its own `SET`
    /// there and does not count the node's yes: no second holder while the
    /// first is valid.
    a_step_under_a_bare_quorum_gives_no_second_holder => a_step_under_a_bare_quorum_gives_no_second_holder_once
}

async fn a_step_under_a_bare_quorum_gives_no_second_holder_once() {
    let (c, clocks) = faked_cluster();
    let (first, second) = (warmed(&c).await, warmed(&c).await);
    // Nodes 3 and 4 hold the key for someone else for a moment: the first
    // client wins on 0, 1 and 2 only.
    c.nodes[3].set("bare", "someone", ms(3_000));
    c.nodes[4].set("bare", "someone", ms(3_000));
    let lock = first
        .lock("bare", Duration::from_secs(20))
        .try_once()
        .await
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || c
            .values("bare")
            .iter()
            .flatten()
            .all(|v| v != "someone"))
        .await
    );
    assert_eq!(c.set_on("bare"), 3);

    clocks[2].wall(30_000_000_000, 1.0);
    assert!(
        wait_until(Duration::from_secs(5), || c.set_on("bare") == 2).await,
        "the stepped node dropped the key"
    );
    // The holder's own client reads the node's clock too (while a lock is
    // held, at least once a second): its key there lost 30 s of a 20 s
    // life, so the lock is told lost.
    no_second_holder(&lock, &second, "bare").await;
    assert!(!lock.is_valid());
    let node = &second.stats().nodes[2];
    assert!(node.clock_ahead >= 1 && node.quarantined, "{node:?}");
    let err = second
        .lock("bare", Duration::from_secs(20))
        .try_once()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("ran its clock ahead"), "{err}");
    // Only two nodes still hold the key: the release cannot confirm it.
    let _ = lock.release().await;
}

scenario! {
    /// A lock held on exactly three of five nodes by a client that had
    /// measured their clocks (rate 1); then node 0's clock speeds up to 1.5
    /// and a fresh client meets it. The holder counts its key there at the
    /// old rate until its next reading of the node, so the key can expire
    /// while the lock is valid. The fresh client sees a clock running ahead
    /// from its first replies and keeps the node out for its whole restart
    /// quarantine, even once it measured the new rate (which explains what
    /// it saw): it cannot tell this clock from one that always ran fast. No
    /// second holder while the first is valid. (Ended at the new rate's
    /// word, the quarantine let the fresh client in 2 ms after node 0's
    /// key expired, with the holder valid for 230 ms more: 2 runs of 4.)
    a_clock_that_sped_up_under_a_lock_lets_no_fresh_client_in => sped_up_once
}

async fn sped_up_once() {
    let (c, clocks) = faked_cluster();
    let holder = warmed(&c).await;
    let rated = |r: &Redlock, nodes: std::ops::Range<usize>| {
        r.stats().nodes[nodes]
            .iter()
            .all(|n| n.clock_rate_ppm.is_some())
    };
    let start = std::time::Instant::now();
    while !rated(&holder, 0..5) {
        assert!(start.elapsed() < Duration::from_secs(30), "no rates");
        let lock = holder.lock("warm-up", ms(2_000)).await.unwrap();
        lock.release().await.unwrap();
        tokio::time::sleep(ms(100)).await;
    }
    // Nodes 3 and 4 hold the key for someone else for a moment: the holder
    // wins on 0, 1 and 2 only.
    c.nodes[3].set("sped", "someone", ms(300));
    c.nodes[4].set("sped", "someone", ms(300));
    let lock = holder.lock("sped", ms(3_000)).try_once().await.unwrap();
    clocks[0].wall(0, 1.5);
    let fresh = c
        .builder()
        .restart_quarantine(Duration::from_secs(30))
        .build()
        .unwrap();
    // Tries sparse enough to show the clock ahead until node 0's new rate
    // is measured, then every 3 ms, until the holder's TTL is over.
    let end = std::time::Instant::now() + ms(3_500);
    while std::time::Instant::now() < end {
        if let Ok(other) = fresh.lock("sped", ms(3_000)).try_once().await {
            let both = lock.is_valid() && other.is_valid();
            let _ = other.release().await;
            assert!(!both, "two valid holders: {:?}", fresh.stats().nodes);
            break;
        }
        let pause = if rated(&fresh, 0..1) { 3 } else { 200 };
        tokio::time::sleep(ms(pause)).await;
    }
    let _ = lock.release().await;
}

/// A step smaller than the validity left: the holder whose quorum needed
/// the stepped node is not lost, but its validity is cut by the step (the
/// key there expires that much early), seen within about a second though
/// it sends nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_cuts_the_validity_of_a_holder_that_needed_the_node() {
    let (c, clocks) = faked_cluster();
    let client = warmed(&c).await;
    // Past the warm-up's probing: the lock below starts it again.
    tokio::time::sleep(ms(1_500)).await;
    c.nodes[3].set("cut", "someone", ms(60_000));
    c.nodes[4].set("cut", "someone", ms(60_000));
    let lock = client
        .lock("cut", Duration::from_secs(20))
        .try_once()
        .await
        .unwrap();
    let before = lock.valid_until();
    clocks[1].wall(5_000_000_000, 1.0);
    assert!(
        wait_until(Duration::from_secs(10), || lock.valid_until() < before).await,
        "the holder's validity was not cut"
    );
    let cut = before - lock.valid_until();
    assert!(
        (ms(4_800)..=ms(5_000)).contains(&cut),
        "cut by {cut:?} for a 5 s step"
    );
    assert!(lock.is_valid(), "a 5 s step leaves most of a 20 s lock");
    let _ = lock.release().await;
}

scenario! {
    /// Within the allowance nothing changes: a majority of nodes 0.5 % fast
    /// (half the default drift factor) is never quarantined, and the lock
    /// passes from one client to the other as usual.
    clocks_within_the_allowance_change_nothing => clocks_within_the_allowance_change_nothing_once
}

async fn clocks_within_the_allowance_change_nothing_once() {
    let (c, clocks) = faked_cluster();
    for clock in &clocks[..3] {
        clock.wall(0, 1.005);
    }
    let (first, second) = (warmed(&c).await, warmed(&c).await);
    for _ in 0..10 {
        let lock = first.lock("steady", ms(2_000)).await.unwrap();
        lock.release().await.unwrap();
        let lock = second.lock("steady", ms(2_000)).await.unwrap();
        lock.release().await.unwrap();
        tokio::time::sleep(ms(100)).await;
    }
    for client in [&first, &second] {
        for node in client.stats().nodes {
            assert_eq!((node.clock_ahead, node.quarantined), (0, false), "{node:?}");
        }
    }
}

scenario! {
    /// Three of five nodes 5 % fast (five times the drift
    /// factor). Once about a second of replies measured their rate (the first
    /// readings, judged by the drift factor alone, quarantine them for a
    /// while), they count again, at their own rate: a lock's validity is
    /// counted from when their keys really expire, and a second client trying
    /// every few milliseconds never holds it while the first counts it valid.
    a_majority_running_fast_counts_at_its_own_rate => a_majority_running_fast_counts_at_its_own_rate_once
}

async fn a_majority_running_fast_counts_at_its_own_rate_once() {
    let (c, clocks) = faked_cluster();
    for clock in &clocks[..3] {
        clock.wall(0, 1.05);
    }
    let (first, second) = measured(&c, 0..3, 49_000).await;
    let ttl = ms(2_000);
    let lock = first.lock("fast", ttl).try_once().await.unwrap();
    // Counted at 5 % fast, not the drift factor's 1 %.
    assert!(
        lock.validity() <= ttl.mul_f64(0.951),
        "{:?}",
        lock.validity()
    );
    lock.release().await.unwrap();
    for _ in 0..5 {
        let after = hand_over(&first, &second, "fast", ttl).await;
        println!("majority 5 % fast: taken {after:?} after the validity ended");
    }
}

scenario! {
    /// The same +30 s step on three of five nodes, under a lock held on all
    /// five: a second client that had used the nodes counts none of the three
    /// (no quorum of the other two), and the holder's own client cuts its
    /// validity by the step: lost.
    a_step_on_three_of_five_gives_no_second_holder => a_step_on_three_of_five_once
}

async fn a_step_on_three_of_five_once() {
    let (c, clocks) = faked_cluster();
    let (first, second) = (warmed(&c).await, warmed(&c).await);
    let lock = first
        .lock("three", Duration::from_secs(20))
        .try_once()
        .await
        .unwrap();
    assert!(wait_until(Duration::from_secs(5), || c.set_on("three") == 5).await);
    for clock in &clocks[..3] {
        clock.wall(30_000_000_000, 1.0);
    }
    assert!(wait_until(Duration::from_secs(5), || c.set_on("three") == 2).await);
    no_second_holder(&lock, &second, "three").await;
    let quarantined = second.stats().nodes[..3]
        .iter()
        .filter(|n| n.quarantined)
        .count();
    assert_eq!(quarantined, 3, "{:?}", second.stats().nodes);
    let _ = lock.release().await;
}

scenario! {
    /// Clocks that run slow (a node at 0.9, two at 0.95) or stop (one node):
    /// keys there live longer, which costs only liveness. The rates are
    /// measured, none counts as running ahead, and the lock passes from one
    /// client to the other only once the first's validity ended (the stopped
    /// node never expires it: the four others decide).
    slow_and_stopped_clocks_cost_only_waiting => slow_and_stopped_clocks_once
}

async fn slow_and_stopped_clocks_once() {
    let (c, clocks) = faked_cluster();
    clocks[0].wall(0, 0.9);
    clocks[1].wall(0, 0.95);
    clocks[2].wall(0, 0.95);
    clocks[3].wall(0, 1e-9);
    let (first, second) = (warmed(&c).await, warmed(&c).await);
    for _ in 0..3 {
        let after = hand_over(&first, &second, "slow", ms(1_000)).await;
        println!("slow and stopped clocks: taken {after:?} after the validity ended");
    }
    for client in [&first, &second] {
        for node in client.stats().nodes {
            assert_eq!((node.clock_ahead, node.quarantined), (0, false), "{node:?}");
        }
    }
    // 10 % slow, by the rate's upper bound (a busy machine's round trips
    // widen it). A rate is accepted only over two spans whose end readings'
    // round trips are short enough against them: on a busy machine the
    // hand-overs' few readings may not have had such; more come with use.
    for _ in 0..200 {
        if first.stats().nodes[0].clock_rate_ppm.is_some() {
            break;
        }
        let lock = first.lock("slow-more", ms(1_000)).await.unwrap();
        lock.release().await.unwrap();
        tokio::time::sleep(ms(50)).await;
    }
    let rate = first.stats().nodes[0].clock_rate_ppm;
    assert!(
        rate.is_some_and(|ppm| (-100_000..=-95_000).contains(&ppm)),
        "{rate:?}"
    );
}

scenario! {
    /// Rates are relative: a client whose clock runs 5 % slow sees every
    /// node's clock run 1/0.95 as fast as its own, the same as every node
    /// running that much fast against a true client clock, which is what this
    /// makes (the client's own clock is the test process's). Validity is then
    /// counted at that rate on every node, and no second holder overlaps.
    every_node_fast_as_for_a_slow_client_clock => every_node_fast_once
}

async fn every_node_fast_once() {
    let (c, clocks) = faked_cluster();
    for clock in &clocks {
        clock.wall(0, 1.0 / 0.95);
    }
    let (first, second) = measured(&c, 0..5, 52_000).await;
    for _ in 0..3 {
        let after = hand_over(&first, &second, "relative", ms(2_000)).await;
        println!("every node 1/0.95 fast: taken {after:?} after the validity ended");
    }
}

scenario! {
    /// A step back only keeps keys longer: reported, never quarantined.
    a_step_back_is_reported_and_costs_nothing => a_step_back_is_reported_and_costs_nothing_once
}

async fn a_step_back_is_reported_and_costs_nothing_once() {
    let (c, clocks) = faked_cluster();
    let client = warmed(&c).await;
    clocks[0].wall(-30_000_000_000, 1.0);
    tokio::time::sleep(ms(50)).await;
    for _ in 0..5 {
        client
            .lock("back", ms(2_000))
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    let node = &client.stats().nodes[0];
    assert!(node.clock_behind >= 1, "{node:?}");
    assert_eq!((node.clock_ahead, node.quarantined), (0, false), "{node:?}");
}

scenario! {
    /// Every node's clock starts running 10 % fast just after a lock was
    /// taken on them (no step: a rate that changes). The holder's client,
    /// reading the nodes once a second, first sees excesses (cut by them),
    /// then accepts the new rate and sees none; a second client trying
    /// every 3 ms sees each node advance too little between its readings to
    /// call it a jump, so it counts them and takes the lock the moment the
    /// keys expire, 10 s / 1.1 after they were set. The holder counts the
    /// lock's life at the fastest rate it has since accepted for a node
    /// whose yes counted, so it no longer counts it valid by then.
    a_rate_that_grows_under_a_held_lock_shortens_it => a_rate_that_grows_under_a_held_lock_shortens_it_once
}

async fn a_rate_that_grows_under_a_held_lock_shortens_it_once() {
    let (c, clocks) = faked_cluster();
    let build = || c.builder().restart_quarantine(ms(10_000)).build().unwrap();
    let (first, second) = (build(), build());
    for client in [&first, &second] {
        for _ in 0..20 {
            client
                .lock("warm-up", ms(1_000))
                .await
                .unwrap()
                .release()
                .await
                .unwrap();
            tokio::time::sleep(ms(50)).await;
        }
    }
    let lock = first
        .lock("speeds-up", ms(10_000))
        .try_once()
        .await
        .unwrap();
    for clock in &clocks {
        clock.wall(0, 1.1);
    }
    let give_up = std::time::Instant::now() + Duration::from_secs(20);
    let (tried_at, taken) = loop {
        let tried_at = tokio::time::Instant::now();
        if let Ok(taken) = second.lock("speeds-up", ms(2_000)).try_once().await {
            break (tried_at, taken);
        }
        assert!(std::time::Instant::now() < give_up, "never taken");
        tokio::time::sleep(ms(3)).await;
    };
    let ended = lock.valid_until();
    println!(
        "rate grew under a held lock: taken {:?} after the holder's validity ended",
        tried_at.checked_duration_since(ended)
    );
    assert!(
        ended <= tried_at,
        "two valid holders: tried {:?} before the holder's validity ended",
        ended - tried_at
    );
    taken.release().await.unwrap();
    let _ = lock.release().await;
}

/// Each node's offset from our wall clock is told, from the latest reply,
/// with half that reply's round trip as its uncertainty.
#[tokio::test]
async fn each_nodes_offset_is_told() {
    let (c, clocks) = faked_cluster();
    clocks[2].wall(5_000_000_000, 1.0);
    let client = c.redlock();
    assert!(client
        .stats()
        .nodes
        .iter()
        .all(|n| n.clock_offset_us.is_none()));
    client
        .lock("offset", ms(1_000))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // The slowest nodes' replies may come in after the quorum decided.
    let all_read = || {
        client
            .stats()
            .nodes
            .iter()
            .all(|n| n.clock_offset_us.is_some())
    };
    assert!(wait_until(ms(5_000), all_read).await, "every node read");
    for (i, node) in client.stats().nodes.iter().enumerate() {
        let (offset, within) = node.clock_offset_us.unwrap();
        let expected = if i == 2 { 5_000_000 } else { 0 };
        assert!(
            (offset - expected).abs() <= within as i64 + 2_000,
            "node {i}: {offset} µs ± {within}"
        );
    }
}

/// Uses `client` (a try for `name`, released, every 200 ms: sparse
/// enough that a clock 5 % fast shows ahead of the drift factor between
/// two replies) until `done` holds, for at most 50 s: when it got a lock
/// first, if it did, and when `done` held.
async fn used_until(
    client: &Redlock,
    name: &str,
    done: impl Fn(&Redlock) -> bool,
) -> (Option<Duration>, Duration) {
    let start = std::time::Instant::now();
    let mut first = None;
    while !done(client) {
        assert!(
            start.elapsed() < Duration::from_secs(50),
            "not done in 50 s: {:?}",
            client.stats().nodes
        );
        if let Ok(lock) = client.lock(name, ms(2_000)).try_once().await {
            assert!(
                lock.validity() <= ms(2_000).mul_f64(0.99),
                "{:?}",
                lock.validity()
            );
            first = first.or(Some(start.elapsed()));
            lock.release().await.unwrap();
        }
        tokio::time::sleep(ms(200)).await;
    }
    (first, start.elapsed())
}

scenario! {
    /// Three of five nodes 5 % fast, met by a fresh client whose restart
    /// quarantine is 60 s. Its first replies, judged by the drift factor
    /// alone, show those clocks ahead, which quarantines them, and the rate
    /// it measures afterwards (5 %) does not end that quarantine early: a
    /// client cannot tell a clock that always ran fast from one that sped
    /// up just before it arrived, under a lock another client counts there
    /// at the old rate (and may not hear of the change before its key
    /// expires, if it is cut off from that node). Ending it early let a
    /// second client take a lock that a first still held, valid.
    a_fast_majority_met_first_stays_out_for_the_whole_quarantine => a_fast_majority_met_first_once
}

async fn a_fast_majority_met_first_once() {
    let (c, clocks) = faked_cluster();
    for clock in &clocks[..3] {
        clock.wall(0, 1.05);
    }
    let client = c
        .builder()
        .restart_quarantine(Duration::from_secs(60))
        .build()
        .unwrap();
    let measured = |client: &Redlock| {
        client.stats().nodes[..3]
            .iter()
            .all(|n| n.clock_rate_ppm.is_some_and(|p| p >= 45_000))
    };
    // (A lock may be won by the first replies, before any showed a clock
    // ahead: nothing was seen to be wrong yet.)
    let (_, measured_after) = used_until(&client, "first-sight", measured).await;
    println!(
        "three of five 5 % fast, met first: rates measured after {measured_after:?}, still out"
    );
    still_out(&client, "first-sight").await;
}

scenario! {
    /// The same fresh client, true clocks, and three of five nodes step
    /// 0.5 s forward just after its first replies, before it knows any
    /// rate. The rate it measures afterwards (about 1) does not account for
    /// the step: those three stay quarantined for the whole 60 s, not for
    /// the step's half second.
    a_step_met_before_the_rate_keeps_its_whole_quarantine => a_step_met_first_once
}

async fn a_step_met_first_once() {
    let (c, clocks) = faked_cluster();
    let client = c
        .builder()
        .restart_quarantine(Duration::from_secs(60))
        .build()
        .unwrap();
    // First contact: a reply from each of the three (the slowest may come
    // after the quorum decided; a member that is a cluster may need a
    // second request).
    let read = |client: &Redlock| {
        client.stats().nodes[..3]
            .iter()
            .all(|n| n.clock_offset_us.is_some())
    };
    for _ in 0..50 {
        if read(&client) {
            break;
        }
        let lock = client.lock("first-step", ms(2_000)).await.unwrap();
        lock.release().await.unwrap();
        tokio::time::sleep(ms(20)).await;
    }
    assert!(read(&client), "{:?}", client.stats().nodes);
    let rates_known = |n: &redquorum::NodeStats| n.clock_rate_ppm.is_some();
    assert!(
        !client.stats().nodes[..3].iter().any(rates_known),
        "a rate known after the first replies"
    );
    for clock in &clocks[..3] {
        clock.wall(500_000_000, 1.0);
    }
    // Stepped once their `TIME` shows it (a busy node reads its clock file
    // late): a reply before that counts as it should.
    let stepped = || c.nodes[..3].iter().all(|n| offset_secs(n) > 0.4);
    assert!(
        wait_until(Duration::from_secs(5), stepped).await,
        "not stepped"
    );
    let measured = |client: &Redlock| client.stats().nodes[..3].iter().all(rates_known);
    let (first, measured_after) = used_until(&client, "first-step", measured).await;
    assert_eq!(
        first,
        None,
        "a lock counted a stepped node: {:?}",
        client.stats().nodes
    );
    println!("a step before the rate: rates measured after {measured_after:?}, still out");
    still_out(&client, "first-step").await;
}

/// A second later, nodes 0-2 are still quarantined for a clock seen
/// ahead, and a lock on `name` is refused for that.
async fn still_out(client: &Redlock, name: &str) {
    tokio::time::sleep(ms(1_000)).await;
    for node in &client.stats().nodes[..3] {
        assert!(node.clock_ahead >= 1 && node.quarantined, "{node:?}");
    }
    let err = client.lock(name, ms(2_000)).try_once().await.unwrap_err();
    assert!(err.to_string().contains("ran its clock ahead"), "{err}");
}
