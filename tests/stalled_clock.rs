//! The client's own clock stalls: a client process whose monotonic,
//! boot-time and wall clocks run at a thousandth of real time (a virtual
//! machine whose clock source stops; the test harness's clock preload,
//! `tests/support/clockshift.c`), meeting five true nodes for the first
//! time, takes a lock, a one-permit semaphore, a read lease (the true
//! client then writes) or a leadership for 2 s and never renews it by
//! hand; or meets them and takes it with a true clock, which then stalls.
//! Two seconds of real time later a client with a true clock takes it; the
//! stalled one must have counted it lost before.
//!
//! No timer of the stalled client fires (its renewal, its validity's end,
//! its clock probe): what tells it is a timer kept by a node's clock
//! (`WAIT` on a connection of its own), after which every node's clock is
//! read, a quorum of them ran ahead of ours, and no validity is kept.
//!
//! The stalled client is this test binary run again with the preload, in
//! the role `REDQUORUM_TEST_STALLED_CLIENT` names; it reports on its stdout
//! its validity every 2 ms of real time (read past the preload).

mod support;

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Command, Stdio};
use std::time::Duration;

use redquorum::{LockHandle, Redlock};
use support::clock::{own_clocks, real_ns, ClockFile};
use support::Cluster;

/// What begins each of the stalled client's reports.
const MARK: &str = "@stalled ";
/// The role's environment variable: `kind name url,url,...`.
const ROLE: &str = "REDQUORUM_TEST_STALLED_CLIENT";
/// The stalled client's clocks run at this rate.
const RATE: f64 = 0.001;
/// What every holder takes.
const TTL: Duration = Duration::from_millis(2_000);
/// Clients stalled from their start tried per kind and run: one may find
/// the nodes ahead of it at once and be refused (also right; the next is
/// asked).
const FIRST_CONTACTS: usize = 3;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_whose_clock_stalls_counts_its_lock_lost_before_anyone_takes_it() {
    if let Ok(role) = std::env::var(ROLE) {
        return stalled_client(&role).await;
    }
    let c = Cluster::start(5);
    let true_client = c.redlock();
    for run in 0..support::clock::runs() {
        for kind in ["semaphore", "read", "election", "lock"] {
            // Stalled from its start, meeting the nodes for the first time:
            // refused where its first readings show the nodes ahead (also
            // right), else it holds and must count it lost in time.
            for child in 0..FIRST_CONTACTS {
                let name = format!("stall-{kind}-{run}-first-{child}");
                if hand_over(&c, &true_client, kind, &name, Mode::Stalled).await {
                    break;
                }
            }
            // Stalled while it holds (it met the nodes and took the lock
            // with a true clock): it always holds.
            let name = format!("stall-{kind}-{run}-held");
            assert!(
                hand_over(&c, &true_client, kind, &name, Mode::StallsWhileHeld).await,
                "{kind}: a client with a true clock was refused"
            );
        }
    }
}

/// When the stalled client's clock stalls.
#[derive(Clone, Copy, Debug)]
enum Mode {
    /// From its start.
    Stalled,
    /// Right after it took what it holds.
    StallsWhileHeld,
}

/// One hand-over of `name` (of `kind`) from a client whose clock stalls
/// as `mode` says to a true one; false where the stalled client was
/// refused.
async fn hand_over(c: &Cluster, true_client: &Redlock, kind: &str, name: &str, mode: Mode) -> bool {
    let clock = ClockFile::new();
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "a_client_whose_clock_stalls_counts_its_lock_lost_before_anyone_takes_it",
            "--exact",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(
            ROLE,
            format!("{kind} {name} {mode:?} {}", c.urls().join(",")),
        )
        .envs(clock.env())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if let Mode::Stalled = mode {
        command.env("REDQUORUM_TEST_MONOTONIC_RATE", RATE.to_string());
    }
    let mut stalled = command.spawn().unwrap();
    let (tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
    let stdout = stalled.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            // libtest's "test <name> ... " may come first on a line.
            if let Some(at) = line.find(MARK) {
                if tx.send(line[at + MARK.len()..].to_owned()).is_err() {
                    break;
                }
            }
        }
    });
    let first = tokio::time::timeout(Duration::from_secs(60), lines.recv())
        .await
        .expect("the stalled client reports within 60 s")
        .expect("the stalled client ended early");
    if first.starts_with("refused") {
        println!("{kind} ({mode:?}): the stalled client was refused: {first}");
        assert!(stalled.wait().unwrap().success());
        return false;
    }
    assert!(first.starts_with("holding"), "{first}");
    let give_up = std::time::Instant::now() + Duration::from_secs(20);
    let tried_at = loop {
        let tried_at = real_ns();
        if take(true_client, kind, name).await {
            break tried_at;
        }
        assert!(std::time::Instant::now() < give_up, "{kind}: never taken");
        tokio::time::sleep(ms(3)).await;
    };
    let mut lost_at = None;
    while let Ok(Some(line)) = tokio::time::timeout(Duration::from_secs(60), lines.recv()).await {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f[0] {
            "valid" => {
                let (at, left) = (f[1].parse::<i128>().unwrap(), f[2].parse::<u128>().unwrap());
                assert!(
                    left == 0 || at < tried_at,
                    "{kind} ({mode:?}): two valid holders: the stalled client counted {} ms \
                     left {:.1} ms after the true client began the attempt that took it",
                    left / 1_000_000,
                    (at - tried_at) as f64 / 1e6
                );
            }
            "lost" => lost_at = Some(f[1].parse::<i128>().unwrap()),
            other => panic!("{kind} ({mode:?}): {other}: {line}"),
        }
    }
    assert!(
        stalled.wait().unwrap().success(),
        "the stalled client failed"
    );
    let lost_at = lost_at.unwrap_or_else(|| panic!("{kind}: the stalled client never lost it"));
    println!(
        "{kind} ({mode:?}): the stalled client counted it lost {:.0} ms before the true client \
         took it",
        (tried_at - lost_at) as f64 / 1e6
    );
    true
}

/// One attempt of the true client at `name`; the holding is kept until its
/// TTL ends (nothing else takes it).
async fn take(client: &Redlock, kind: &str, name: &str) -> bool {
    match kind {
        "semaphore" => {
            let sem = client.semaphore(name, 1).unwrap();
            sem.acquire(TTL)
                .try_once()
                .await
                .map(std::mem::forget)
                .is_ok()
        }
        "read" => {
            let rw = client.rw_lock(name).unwrap();
            rw.write(TTL).try_once().await.map(std::mem::forget).is_ok()
        }
        "election" => {
            let e = client.election(name, TTL).unwrap();
            e.campaign("true")
                .wait(ms(1))
                .await
                .map(std::mem::forget)
                .is_ok()
        }
        _ => client
            .lock(name, TTL)
            .try_once()
            .await
            .map(std::mem::forget)
            .is_ok(),
    }
}

/// The stalled client's role: take the one thing its role names, then
/// report its validity every 2 ms of real time until it is gone (at most
/// 30 s).
async fn stalled_client(role: &str) {
    let mut parts = role.split(' ');
    let (kind, name) = (parts.next().unwrap(), parts.next().unwrap());
    let stalls_while_held = parts.next() == Some("StallsWhileHeld");
    let urls: Vec<String> = parts
        .next()
        .unwrap()
        .split(',')
        .map(str::to_owned)
        .collect();
    // The harness's allowance for members under load (a stalled clock
    // never counts it out anyway).
    let client = Redlock::builder()
        .nodes(urls)
        .node_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    // With a true clock (it stalls once it holds) nothing should refuse it
    // for long: a loaded machine's slow first round is tried again.
    let tries = if stalls_while_held { 20 } else { 1 };
    let mut held = take_held(&client, kind, name).await;
    for _ in 1..tries {
        if held.is_ok() {
            break;
        }
        tokio::time::sleep(ms(100)).await;
        held = take_held(&client, kind, name).await;
    }
    let (guard, handle) = match held {
        Ok(held) => held,
        Err(e) => {
            println!("@stalled refused {e}");
            return;
        }
    };
    if stalls_while_held {
        // From 5 ms on (the preload reads its file again every 2 ms): no
        // reading of the old file comes after the new one's start.
        let path = std::env::var_os("REDQUORUM_TEST_CLOCK").unwrap();
        own_clocks(std::path::Path::new(&path), RATE, real_ns() + 5_000_000);
    }
    println!("@stalled holding {}", real_ns());
    std::io::stdout().flush().unwrap();
    let report = move |h: LockHandle| {
        let start = real_ns();
        loop {
            let at = real_ns();
            let left = h.validity();
            println!("@stalled valid {at} {}", left.as_nanos());
            if left.is_zero() {
                println!("@stalled lost {at}");
                return;
            }
            if at - start > 30_000_000_000 {
                println!("@stalled still valid after 30 s");
                return;
            }
            std::io::stdout().flush().unwrap();
            // A real sleep: `nanosleep` is not the preloaded clock.
            std::thread::sleep(ms(2));
        }
    };
    tokio::task::spawn_blocking(move || report(handle))
        .await
        .unwrap();
    std::io::stdout().flush().unwrap();
    // Never released: its keys expire on the nodes.
    std::mem::forget(guard);
}

/// The stalled client's one attempt at `name` (of `kind`): what keeps it
/// held, and a handle that reads its validity.
async fn take_held(
    client: &Redlock,
    kind: &str,
    name: &str,
) -> redquorum::Result<(Box<dyn std::any::Any + Send>, LockHandle)> {
    let boxed = |l: redquorum::Lock| {
        let h = l.handle();
        (Box::new(l) as Box<dyn std::any::Any + Send>, h)
    };
    match kind {
        "semaphore" => {
            let sem = client.semaphore(name, 1)?;
            Ok(boxed(sem.acquire(TTL).try_once().await?.into_lock()))
        }
        "read" => Ok(boxed(client.rw_lock(name)?.read(TTL).try_once().await?)),
        "election" => {
            let e = client.election(name, TTL)?;
            Ok(boxed(e.campaign("stalled").wait(ms(1)).await?.into_lock()))
        }
        _ => Ok(boxed(client.lock(name, TTL).try_once().await?)),
    }
}
