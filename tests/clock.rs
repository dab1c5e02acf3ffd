//! Node clocks that misbehave, made with the test harness's clock preload
//! (`tests/support/clockshift.c`) on a real `redis-server`: the node's
//! `TIME` and its key expiry follow the faked wall clock, so a node whose
//! clock steps forward drops at once a key with life left (the hazard a
//! client can only see from the node's clock; see the guarantees page).

mod support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use support::clock::ClockFile;
use support::{wait_until, Persistence, RedisNode};

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
