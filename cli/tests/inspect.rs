//! `redquorum inspect` against real nodes: the holder of a `redquorum lock`
//! named by host and process id, exit 75 while held and 0 once free, a
//! semaphore's permits one line each, and every kind read as what it is.

mod bin;
#[path = "../../tests/support/mod.rs"]
mod support;

use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use bin::cli;
use support::{wait_until, Cluster};

/// `redquorum inspect ARGS...`: its exit code and stdout.
fn inspect(c: &Cluster, args: &[&str]) -> (i32, String) {
    let o: Output = cli(c).arg("inspect").args(args).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.stderr.is_empty(), "{o:?}");
    (o.status.code().unwrap_or(-1), out)
}

/// `redquorum lock ARGS...` with no command, once it printed `held`.
async fn hold(c: &Cluster, args: &[&str]) -> Child {
    hold_as(cli(c).arg("lock").args(args)).await
}

/// `lock` as `cmd` says, with no command, once it printed `held`.
async fn hold_as(cmd: &mut Command) -> Child {
    use std::io::BufRead as _;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    tokio::task::spawn_blocking(move || {
        let mut lines = std::io::BufReader::new(stdout).lines();
        assert!(lines.any(|l| l.unwrap() == "held"), "never held");
    })
    .await
    .unwrap();
    child
}

/// Ends a [`hold`] by closing its stdin, and waits until it exited.
async fn end(mut child: Child) {
    drop(child.stdin.take());
    let ended = wait_until(Duration::from_secs(10), || {
        child.try_wait().unwrap().is_some()
    })
    .await;
    if !ended {
        let _ = child.kill();
    }
    assert!(ended, "the hold did not end");
}

#[tokio::test]
async fn inspect_names_the_holder_and_exits_0_only_when_free() {
    let c = Cluster::start(3);
    assert_eq!(
        inspect(&c, &["cli_seen"]),
        (0, "cli_seen: free; 0 waiting\n".to_owned())
    );
    let holder = hold(&c, &["cli_seen", "--ttl", "20s"]).await;
    // Held on a quorum; the last node's SET lands a moment later.
    assert!(wait_until(Duration::from_secs(20), || c.set_on("cli_seen") == 3).await);
    let (code, out) = inspect(&c, &["cli_seen"]);
    assert_eq!(code, 75, "{out}");
    let by = format!("held by {}:{} on 3 of 3 nodes, ", hostname(), holder.id());
    assert!(out.starts_with(&format!("cli_seen: {by}")), "{out}");
    assert!(
        out.contains("left unless renewed; can be taken in "),
        "{out}"
    );
    end(holder).await;
    assert!(wait_until(Duration::from_secs(5), || c.set_on("cli_seen") == 0).await);
    assert_eq!(inspect(&c, &["cli_seen"]).0, 0);

    let permit = hold(&c, &["-n", "2", "cli_gpu"]).await;
    let (code, out) = inspect(&c, &["-n", "2", "cli_gpu"]);
    assert_eq!(code, 0, "one permit is free: {out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert_eq!(
        lines.iter().filter(|l| l.contains(": held by ")).count(),
        1,
        "{out}"
    );
    assert!(
        lines.contains(&"cli_gpu permit 0: free; 0 waiting")
            || lines.contains(&"cli_gpu permit 1: free; 0 waiting"),
        "{out}"
    );
    end(permit).await;
}

/// REDQUORUM_KEY_PREFIX (or --key-prefix, anywhere on the line) reaches
/// every command that touches keys; `status` accepts it too.
#[tokio::test]
async fn the_key_prefix_reaches_every_command() {
    let c = Cluster::start(3);
    let holder = hold_as(
        cli(&c)
            .env("REDQUORUM_KEY_PREFIX", "app:")
            .args(["lock", "cli_pre"]),
    )
    .await;
    assert!(wait_until(Duration::from_secs(20), || c.set_on("app:cli_pre") == 3).await);
    assert_eq!(c.set_on("cli_pre"), 0);
    let prefixed = cli(&c)
        .env("REDQUORUM_KEY_PREFIX", "app:")
        .args(["inspect", "cli_pre"])
        .output()
        .unwrap();
    assert_eq!(prefixed.status.code(), Some(75), "{prefixed:?}");
    assert_eq!(inspect(&c, &["--key-prefix", "app:", "cli_pre"]).0, 75);
    assert_eq!(inspect(&c, &["cli_pre"]).0, 0, "another key without it");
    let status = cli(&c)
        .args(["status", "--key-prefix", "app:"])
        .output()
        .unwrap();
    assert_eq!(status.status.code(), Some(0), "{status:?}");
    end(holder).await;
}

/// `inspect NAME` reads the name as the nodes say it is: a read-write
/// lock's readers and its waiting writer, a semaphore's permits without
/// `-n`, an election's leader and term (each read as "free" before).
#[tokio::test]
async fn inspect_sees_every_kind() {
    let c = Cluster::start(3);
    let r1 = hold(&c, &["--shared", "cli_cat", "--ttl", "20s"]).await;
    let r2 = hold(&c, &["--shared", "cli_cat", "--ttl", "20s"]).await;
    let mut writer = cli(&c)
        .args(["lock", "--exclusive", "cli_cat", "--", "true"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let waiting = wait_until(Duration::from_secs(20), || {
        inspect(&c, &["cli_cat"]).1.contains("; 1 waiting")
    })
    .await;
    let (code, out) = inspect(&c, &["cli_cat"]);
    assert!(waiting, "{out}");
    assert_eq!(code, 75, "{out}");
    for reader in [&r1, &r2] {
        let line = format!(
            "cli_cat (read-write lock) reader: {}:{}, ",
            hostname(),
            reader.id()
        );
        assert!(out.contains(&line), "{out}");
    }
    assert!(
        out.starts_with("cli_cat (read-write lock) writer: none; can be taken in ")
            && out.lines().next().unwrap().ends_with("; 1 waiting"),
        "{out}"
    );
    end(r1).await;
    end(r2).await;
    assert!(writer.wait().unwrap().success());
    assert_eq!(inspect(&c, &["cli_cat"]).0, 0, "free again");

    let permit = hold(&c, &["-n", "2", "cli_pool"]).await;
    // The permit holds the name's lock too (75: `lock cli_pool` would
    // wait), and its line says so, not a line for the lock's key.
    let (code, out) = inspect(&c, &["cli_pool"]);
    assert_eq!((code, out.lines().count()), (75, 2), "{out}");
    assert_eq!(out.matches(": held by ").count(), 1, "{out}");
    assert!(!out.contains("redquorum:permits"), "{out}");
    assert_eq!(
        inspect(&c, &["-n", "2", "cli_pool"]).0,
        0,
        "a permit is free"
    );
    end(permit).await;

    let mut leader = cli(&c)
        .args(["elect", "cli_lead", "--value", "boss", "--", "sleep", "30"])
        .spawn()
        .unwrap();
    let led = wait_until(Duration::from_secs(20), || {
        inspect(&c, &["cli_lead"])
            .1
            .starts_with("cli_lead (election): led by boss, term ")
    })
    .await;
    let (code, out) = inspect(&c, &["cli_lead"]);
    assert!(led, "{out}");
    assert_eq!(code, 75, "{out}");
    // The leader holds the name's lock: one line says so, not two.
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.trim_end().ends_with("; 0 waiting"), "{out}");
    leader.kill().unwrap();
    leader.wait().unwrap();

    // A semaphore of one permit (the library's) is read as one, not as
    // the plain lock of that name (free).
    let one = c
        .redlock()
        .semaphore("cli_one", 1)
        .unwrap()
        .acquire(Duration::from_secs(20))
        .try_once()
        .await
        .unwrap();
    let (code, out) = inspect(&c, &["cli_one"]);
    assert_eq!(code, 75, "{out}");
    assert!(out.starts_with("cli_one permit 0: held by "), "{out}");
    assert_eq!(out.lines().count(), 1, "the permit's line only: {out}");
    // The name's lock is held by the permit: `-n 1` reads the lock.
    let (code, out) = inspect(&c, &["-n", "1", "cli_one"]);
    assert_eq!(code, 75, "{out}");
    assert!(
        out.starts_with("cli_one: held by its semaphore's permits on "),
        "{out}"
    );
    one.release().await.unwrap();
}

#[test]
fn inspect_refuses_a_reserved_name_with_78() {
    let c = Cluster::start(1);
    let o = cli(&c).args(["inspect", "redquorum:x"]).output().unwrap();
    assert_eq!(o.status.code(), Some(78), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("reserved"),
        "{o:?}"
    );
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_owned()
}
