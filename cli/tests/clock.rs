//! The client's own clock: a machine suspended for longer than a lock's
//! validity (its boot-time clock moves ahead of the monotonic one, which
//! stops while suspended) wakes up with the lock lost and the command
//! ended, instead of believing the lock valid for the rest of its count.
//! The suspend is faked by a preload on the `redquorum` process.

mod bin;
#[path = "../../tests/support/mod.rs"]
mod support;

use std::process::Stdio;
use std::time::Duration;

use bin::cli;
use support::clock::ClockFile;
use support::{wait_until, Cluster};

#[tokio::test]
async fn a_suspend_longer_than_the_validity_ends_the_command_with_76() {
    let c = Cluster::start(3);
    let clock = ClockFile::new();
    let mut child = cli(&c)
        .envs(clock.env())
        .args(["lock", "clk_susp", "--ttl", "3s", "--", "sleep", "60"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(20), || c.set_on("clk_susp") == 3).await);
    // The preload alone changes nothing: renewed past its TTL, still running.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        child.try_wait().unwrap().is_none(),
        "ended without a suspend"
    );
    assert_eq!(c.set_on("clk_susp"), 3);

    clock.suspend(Duration::from_secs(10));
    let ended = wait_until(Duration::from_secs(20), || {
        child.try_wait().unwrap().is_some()
    })
    .await;
    if !ended {
        let _ = child.kill();
    }
    assert!(
        ended,
        "still running, its lock believed valid, after a 10 s suspend"
    );
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(76), "{err}");
    assert!(err.contains("lost"), "{err}");
}

/// `status` watches each node's clock for a second: a node whose clock runs
/// 5 % fast shows its rate, and a warning names it; the others show none.
#[tokio::test]
async fn status_shows_a_clock_running_fast() {
    let (c, clocks) = Cluster::start_with_clocks(3);
    clocks[1].wall(0, 1.05);
    let o = cli(&c).arg("status").output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    let row = |n: usize| {
        out.lines()
            .find(|l| l.starts_with(&format!("{n} ")))
            .unwrap_or_default()
            .to_owned()
    };
    // The cell is the rate's upper bound: 5 % and what the round trips
    // leave unknown (more on a busy machine).
    let percent = row(1)
        .split_whitespace()
        .find_map(|w| w.strip_prefix('+')?.strip_suffix('%')?.parse::<f64>().ok());
    assert!(percent.is_some_and(|p| (4.99..7.0).contains(&p)), "{out}");
    assert!(
        row(0).contains(" 0.00%") && row(2).contains(" 0.00%"),
        "{out}"
    );
    assert!(
        err.contains("warning: node 1: clock runs +") && err.contains("beyond the default drift"),
        "{err}"
    );
}
