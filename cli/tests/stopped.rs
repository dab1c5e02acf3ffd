//! A `redquorum` stopped (SIGSTOP, a debugger, a stall) while its command
//! runs renews nothing: its lock lapses, and a second holder takes it. The
//! guard kills the first command at the lock's deadline, so the two
//! commands never run at once: for `lock`, `lock -n K`, `lock --shared`
//! against `--exclusive`, a lock on several resources and `elect`. Only
//! `redquorum` is stopped: its command runs in a process group of its own.

mod bin;
#[path = "../../tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use bin::cli;
use support::{wait_until, Cluster};

/// The first holder's command: writes its pid (its group's id), then a line
/// every 20 ms until it is killed.
const FIRST: &str = "echo $$ > @PID; while :; do echo tick >> @LINES; sleep 0.02; done";

/// The second holder's command, at once: every process of the first
/// command's group, as `/proc` shows it (`stat` line, then its pending
/// signals), and how many lines the first command had written.
const SECOND: &str = r#"p=$(cat @PID)
for d in /proc/[0-9]*; do
  read -r l < $d/stat 2>/dev/null || continue
  set -- ${l##*\)}
  [ "$3" = "$p" ] || continue
  echo "$l|$(grep -h -e ^ShdPnd -e ^SigPnd $d/status 2>/dev/null | tr '\n' ' ')"
done > @SNAP
wc -l < @LINES > @COUNT"#;

/// Sends `sig` to process `pid`.
fn kill(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) has no memory-safety preconditions.
    assert_eq!(
        unsafe { libc::kill(pid as i32, sig) },
        0,
        "kill({pid}, {sig})"
    );
}

/// The state letter of process `pid`, if it exists.
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')').next()?.trim_start().chars().next()
}

/// A `redquorum` we stop: continued and killed if the test ends early.
struct Stoppable(Option<Child>);

impl Drop for Stoppable {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            // SAFETY: kill(2) on our own child, which is not reaped yet.
            unsafe { libc::kill(child.id() as i32, libc::SIGCONT) };
            let _ = child.wait();
        }
    }
}

/// Whether `line` (a process's `stat` line, `|`, its pending signal masks)
/// shows a process that can run no more: a zombie, or SIGKILL pending (it
/// dies before it runs again).
fn cannot_run(line: &str) -> bool {
    let (stat, pending) = line.split_once('|').unwrap_or((line, ""));
    let state = stat.rsplit(')').next().unwrap_or("").trim_start();
    let sigkill = pending.split_whitespace().any(|w| {
        u64::from_str_radix(w, 16).is_ok_and(|mask| mask & (1 << (libc::SIGKILL - 1)) != 0)
    });
    state.starts_with('Z') || state.starts_with('X') || sigkill
}

/// The first holder runs `first` with [`FIRST`] and is stopped; the second
/// runs `second` (with `--wait`) and [`SECOND`] once it holds what the first
/// held. Every process of the first command can run no more when the second
/// command starts, the first writes nothing after that, and the first
/// `redquorum`, continued, exits 76 (lost). `other`, if some, holds what
/// the first must not be able to fall back on (a semaphore's other permit)
/// for the whole test.
async fn never_together(first: &[&str], second: &[&str], other: Option<&[&str]>) {
    let c = Cluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let at = |name: &str| {
        dir.path()
            .join(name.trim_start_matches('@'))
            .display()
            .to_string()
    };
    let fill = |script: &str| {
        ["@PID", "@LINES", "@SNAP", "@COUNT", "@OTHER"]
            .iter()
            .fold(script.to_owned(), |s, name| s.replace(name, &at(name)))
    };
    let _other = other.map(|args| {
        let holder = cli(&c)
            .args(args)
            .args(["--", "sh", "-c", &fill("echo > @OTHER; exec sleep 60")])
            .spawn()
            .unwrap();
        Stoppable(Some(holder))
    });
    if other.is_some() {
        let taken = || Path::new(&at("@OTHER")).exists();
        assert!(
            wait_until(Duration::from_secs(20), taken).await,
            "{first:?}"
        );
    }
    let mut a = Stoppable(Some(
        cli(&c)
            .args(first)
            .args(["--", "sh", "-c", &fill(FIRST)])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ));
    let lines = || {
        std::fs::read_to_string(at("@LINES"))
            .map(|l| l.lines().count())
            .unwrap_or(0)
    };
    assert!(
        wait_until(Duration::from_secs(20), || lines() >= 2).await,
        "{first:?}: the first command did not start"
    );
    let wrapper = a.0.as_ref().unwrap().id();
    kill(wrapper, libc::SIGSTOP);
    assert!(
        wait_until(Duration::from_secs(10), || state(wrapper) == Some('T')).await,
        "{first:?}: redquorum did not stop"
    );
    let b = cli(&c)
        .args(second)
        .args(["--wait", "30s", "--", "sh", "-c", &fill(SECOND)])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let b = tokio::task::spawn_blocking(move || b.wait_with_output().unwrap())
        .await
        .unwrap();
    assert_eq!(b.status.code(), Some(0), "{second:?}: {b:?}");
    let snap = std::fs::read_to_string(at("@SNAP")).unwrap();
    // pid, name, state, parent, group; pending signals.
    let running: Vec<String> = snap
        .lines()
        .filter(|l| !cannot_run(l))
        .map(|l| {
            let (stat, pending) = l.split_once('|').unwrap_or((l, ""));
            let head: Vec<&str> = stat.split_whitespace().take(5).collect();
            format!("{} | {}", head.join(" "), pending.trim())
        })
        .collect();
    let count: usize = std::fs::read_to_string(at("@COUNT"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The first command, if alive, writes a line every 20 ms: give it the
    // time to show it, then let its redquorum go on.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let written_after = lines().saturating_sub(count);
    let child = a.0.take().unwrap();
    kill(wrapper, libc::SIGCONT);
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let written_after = written_after.max(lines().saturating_sub(count));
    assert!(
        running.is_empty(),
        "{first:?}: the first command still ran when {second:?} started its own \
         (and wrote {written_after} lines after): {running:#?}"
    );
    assert_eq!(
        written_after, 0,
        "{first:?}: the first command wrote {written_after} lines after {second:?} started its own"
    );
    assert_eq!(out.status.code(), Some(76), "{first:?}: {out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("lost while the command ran"),
        "{first:?}: {err}"
    );
}

#[tokio::test]
async fn a_stopped_lock_holder_command_dies_before_the_next_holder_runs() {
    let args = ["lock", "stop_lock", "--ttl", "1s"];
    never_together(&args, &args, None).await;
}

#[tokio::test]
async fn a_stopped_permit_holder_command_dies_before_the_next_holder_runs() {
    let args = ["lock", "-n", "2", "stop_sem", "--ttl", "1s"];
    never_together(&args, &args, Some(&args)).await;
}

#[tokio::test]
async fn a_stopped_shared_holder_command_dies_before_an_exclusive_one_runs() {
    let first = ["lock", "--shared", "stop_rw", "--ttl", "1s"];
    let second = ["lock", "--exclusive", "stop_rw", "--ttl", "1s"];
    never_together(&first, &second, None).await;
}

#[tokio::test]
async fn a_stopped_multi_lock_holder_command_dies_before_the_next_holder_runs() {
    let args = ["lock", "stop_m1", "stop_m2", "--ttl", "1s"];
    never_together(&args, &args, None).await;
}

#[tokio::test]
async fn a_stopped_leader_command_dies_before_the_next_leader_runs() {
    let args = ["elect", "stop_elect", "--ttl", "1s"];
    never_together(&args, &args, None).await;
}
