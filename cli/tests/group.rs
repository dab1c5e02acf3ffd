//! `redquorum lock` guards the whole command: its process group gets every
//! signal, nothing of it outlives the lock or `redquorum`, a Ctrl-C reaches
//! it once, a terminal stays usable, and it learns what it holds.

mod bin;
#[path = "../../tests/support/mod.rs"]
mod support;

use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use bin::{cli, spawn_on_pty};
use support::{wait_until, Cluster};

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

fn kill(pid: i32, sig: libc::c_int) {
    // SAFETY: kill(2) has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0, "kill({pid}, {sig})");
}

/// The pids a command wrote to `file`, one per line.
fn pids_in(file: &Path) -> Vec<i32> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Whether `pid` is a live `sleep` (not a zombie, not a reused pid).
fn sleep_alive(pid: i32) -> bool {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit(')').next().unwrap_or("").trim_start();
    cmdline.starts_with(b"sleep") && !state.starts_with('Z') && !state.is_empty()
}

/// Both processes of [`two_sleeps`] wrote their pid and are running
/// `sleep` (the inner shell writes its pid before it execs `sleep`).
fn both_sleeping(pids: &Path) -> bool {
    let p = pids_in(pids);
    p.len() == 2 && p.into_iter().all(sleep_alive)
}

async fn wait_output(child: Child) -> Output {
    tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap()
}

/// A shell command that starts a background `sleep`, then a foreground one,
/// writing both pids to `pids` (the shape from the issue: `sleep & wait;
/// sleep`, but both alive at once).
fn two_sleeps(pids: &Path) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        format!(
            "sleep 31 & echo $! >> {p}; sh -c 'echo $$ >> {p}; exec sleep 32'",
            p = pids.display()
        ),
    ]
}

#[tokio::test]
async fn nothing_of_the_command_survives_lock_loss() {
    let mut c = Cluster::start(5);
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let child = cli(&c)
        .args([
            "--node-timeout",
            "50ms",
            "lock",
            "grp_lost",
            "--ttl",
            "900ms",
        ])
        .args(["--grace", "30s", "--"])
        .args(two_sleeps(&pids))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(5), || both_sleeping(&pids)).await);
    let t = Instant::now();
    for i in 0..3 {
        c.nodes[i].pause();
    }
    let out = wait_output(child).await;
    c.resume_all();
    assert_eq!(code(&out), 76, "{out:?}");
    // --grace is 30 s, the TTL 900 ms: SIGKILL came with the validity's end,
    // not after the grace (sleep ignores nothing, but the rule is timed).
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t.elapsed()
    );
    for pid in pids_in(&pids) {
        assert!(!sleep_alive(pid), "sleep {pid} outlived the lock: {out:?}");
    }
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("lost while").count(), 1, "said once: {err}");
    // Besides the library's one warning for the first failed renewal.
    let other = err
        .lines()
        .filter(|l| !l.starts_with("redquorum: warning: renewal failed"))
        .count();
    assert_eq!(other, 1, "one line: {err}");
}

#[tokio::test]
async fn sigkill_comes_when_validity_ends_not_after_the_grace() {
    let mut c = Cluster::start(5);
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    // The command ignores SIGTERM: only SIGKILL ends it.
    let script = format!(
        "trap '' TERM; echo $$ >> {p}; while :; do sleep 0.05; done",
        p = pids.display()
    );
    let child = cli(&c)
        .args([
            "--node-timeout",
            "50ms",
            "lock",
            "grp_kill",
            "--ttl",
            "1500ms",
        ])
        .args(["--grace", "60s", "--", "sh", "-c", &script])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(5), || pids_in(&pids).len() == 1).await);
    let t = Instant::now();
    for i in 0..3 {
        c.nodes[i].pause();
    }
    let out = wait_output(child).await;
    c.resume_all();
    assert_eq!(code(&out), 76, "{out:?}");
    // At most one TTL of validity was left when the nodes stopped.
    assert!(
        t.elapsed() < Duration::from_millis(1500 + 1000),
        "took {:?}: {out:?}",
        t.elapsed()
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("SIGKILL"), "{err}");
}

/// Nodes that stop answering while a renewal waits for them (a long
/// `--node-timeout`, 900 ms, just under the TTL: a renewal sent a third of
/// the way waits past the validity's end): the validity runs out with the
/// renewal in flight. The
/// guard's SIGKILL, a moment before the deadline, races our own count of
/// the loss; either way redquorum says the lock was lost and exits 76, not
/// with the killed command's 137.
#[tokio::test]
async fn the_guards_kill_at_the_deadline_counts_as_the_lock_lost() {
    let mut c = Cluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let child = cli(&c)
        .args(["--node-timeout", "900ms", "lock", "grp_late", "--ttl", "1s"])
        .args(["--grace", "30s", "--"])
        .args(two_sleeps(&pids))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(10), || both_sleeping(&pids)).await);
    for i in 0..3 {
        c.nodes[i].pause();
    }
    let out = wait_output(child).await;
    c.resume_all();
    assert_eq!(code(&out), 76, "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("lost while the command ran"), "{err}");
    for pid in pids_in(&pids) {
        assert!(!sleep_alive(pid), "sleep {pid} outlived the lock: {out:?}");
    }
}

#[tokio::test]
async fn nothing_of_the_command_survives_a_sigterm_to_redquorum() {
    let c = Cluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let child = cli(&c)
        .args(["lock", "grp_term", "--ttl", "30s", "--"])
        .args(two_sleeps(&pids))
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(5), || both_sleeping(&pids)).await);
    kill(child.id() as i32, libc::SIGTERM);
    let out = wait_output(child).await;
    assert_eq!(code(&out), 128 + 15, "{out:?}");
    for pid in pids_in(&pids) {
        assert!(!sleep_alive(pid), "sleep {pid} outlived redquorum");
    }
    assert_eq!(c.values("grp_term"), vec![None; 3], "released");
}

#[tokio::test]
async fn background_jobs_end_before_the_lock_is_released() {
    let c = Cluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    // The background job lets go of stdout, so that nothing but the group's
    // end can end the wait for redquorum's output.
    let script = format!(
        "sleep 33 >/dev/null 2>&1 & echo $! >> {}; echo started",
        pids.display()
    );
    let out = cli(&c)
        .args(["lock", "grp_bg", "--", "sh", "-c", &script])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "started\n");
    let pids = pids_in(&pids);
    assert_eq!(pids.len(), 1);
    assert!(
        !sleep_alive(pids[0]),
        "the background sleep outlived the lock"
    );
    assert_eq!(c.values("grp_bg"), vec![None; 3]);
}

/// The process group of `pid` (field 5 of `/proc/PID/stat`).
fn pgrp(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = stat.rsplit(')').next().unwrap();
    after.split_whitespace().nth(2).unwrap().parse().unwrap()
}

/// A command that prints a line per SIGINT and ends when `stop` exists.
fn counts_sigints(stop: &Path) -> String {
    format!(
        "n=0; trap 'n=$((n+1)); echo INT$n' INT; echo ready; \
         while [ ! -e {s} ]; do sleep 0.05; done; echo done",
        s = stop.display()
    )
}

#[tokio::test]
async fn a_process_group_ctrl_c_reaches_the_command_once() {
    let c = Cluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let stop = dir.path().join("stop");
    let out_file = dir.path().join("out");
    // redquorum in a group of its own, as a shell runs a foreground job; a
    // terminal's Ctrl-C signals that whole group.
    let pid_file = dir.path().join("pid");
    let script = format!(
        "echo $$ > {}; {}",
        pid_file.display(),
        counts_sigints(&stop)
    );
    let child = cli(&c)
        .args(["lock", "grp_int", "--", "bash", "-c", &script])
        .stdout(std::fs::File::create(&out_file).unwrap())
        .process_group(0)
        .spawn()
        .unwrap();
    let printed = || std::fs::read_to_string(&out_file).unwrap_or_default();
    assert!(wait_until(Duration::from_secs(5), || printed().contains("ready")).await);
    // Two SIGINTs sent at once may merge into one, so counting alone cannot
    // tell: the command must not be in the group the terminal signals.
    let command = pids_in(&pid_file)[0];
    assert_ne!(
        pgrp(command),
        child.id() as i32,
        "the command shares our group"
    );
    assert_eq!(
        pgrp(command),
        command,
        "the command leads a group of its own"
    );
    kill(-(child.id() as i32), libc::SIGINT);
    assert!(wait_until(Duration::from_secs(5), || printed().contains("INT1")).await);
    std::fs::write(&stop, "").unwrap();
    let out = wait_output(child).await;
    assert_eq!(code(&out), 0, "{out:?}");
    assert_eq!(printed(), "ready\nINT1\ndone\n", "exactly one SIGINT");
}

#[tokio::test]
async fn an_interactive_command_reads_the_terminal_and_gets_one_ctrl_c() {
    let c = Cluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let stop = dir.path().join("stop");
    let script = format!("read line; echo \"got:$line\"; {}", counts_sigints(&stop));
    let mut cmd = cli(&c);
    cmd.args(["lock", "grp_tty", "--", "bash", "-c", &script]);
    let (mut child, mut tty) = spawn_on_pty(&mut cmd);
    drop(cmd);
    tty.type_("hello\n");
    assert!(
        wait_until(Duration::from_secs(5), || tty
            .printed()
            .contains("got:hello"))
        .await,
        "the command could not read the terminal: {}",
        tty.printed()
    );
    assert!(wait_until(Duration::from_secs(5), || tty.printed().contains("ready")).await);
    tty.type_("\x03"); // Ctrl-C, from the terminal itself
    assert!(wait_until(Duration::from_secs(5), || tty.printed().contains("INT1")).await);
    std::fs::write(&stop, "").unwrap();
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert_eq!(status.code(), Some(0), "{}", tty.printed());
    assert!(wait_until(Duration::from_secs(2), || tty.printed().contains("done")).await);
    let text = tty.printed();
    assert!(!text.contains("INT2"), "two SIGINTs: {text}");
    assert_eq!(c.values("grp_tty"), vec![None; 3]);
}

#[test]
fn the_command_learns_what_it_holds() {
    let c = Cluster::start(3);
    let env = "echo \"$REDQUORUM_RESOURCE $REDQUORUM_KEY $REDQUORUM_TTL_MS \
               $REDQUORUM_FENCING_TOKEN $REDQUORUM_VALID_UNTIL_MS\"";
    let run = |fenced: bool| {
        let mut cmd = cli(&c);
        cmd.args(["lock", "grp_env", "--key-prefix", "app:", "--ttl", "7s"]);
        if fenced {
            cmd.arg("--fenced");
        }
        let out = cmd.args(["--", "sh", "-c", env]).output().unwrap();
        assert_eq!(code(&out), 0, "{out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let plain = run(false);
    let fields: Vec<&str> = plain.split(' ').collect();
    assert_eq!(fields[..3], ["grp_env", "app:grp_env", "7000"], "{plain}");
    assert_eq!(fields[3], "", "no token without --fenced: {plain}");
    let until: u128 = fields[4].parse().unwrap();
    assert!(until > now_ms && until <= now_ms + 7000 + 5000, "{plain}");
    let first: u64 = run(true).split(' ').nth(3).unwrap().parse().unwrap();
    let second: u64 = run(true).split(' ').nth(3).unwrap().parse().unwrap();
    assert!(second > first, "{first} then {second}");
}

/// A shell command that prints `alive PID` for each of `pids` still running
/// (not a zombie), then `checked`.
fn report_alive(pids: &[i32]) -> Vec<String> {
    let list: Vec<String> = pids.iter().map(ToString::to_string).collect();
    vec![
        "sh".into(),
        "-c".into(),
        format!(
            "for p in {}; do if [ -e /proc/$p/status ] && ! grep -q '^State:.*[ZX]' /proc/$p/status \
             && [ \"$(head -c 5 /proc/$p/cmdline 2>/dev/null)\" = sleep ]; \
             then echo alive $p; fi; done; echo checked",
            list.join(" ")
        ),
    ]
}

/// SIGKILL to `redquorum` (as `kill -9`, an OOM kill or a crash would end
/// it) during `lock`, `lock -n K` and `elect`: nothing of the command
/// survives, and the next holder, which gets the lock once its TTL ran out
/// (nothing released it), finds none of the command's processes running.
/// (Before the guard, the command's sleeps ran on beside the next holder.)
#[tokio::test]
async fn nothing_of_the_command_survives_a_sigkill_to_redquorum() {
    let c = Cluster::start(3);
    let ttl = "2s";
    let cases: [(&str, Vec<&str>); 3] = [
        ("lock", vec!["lock", "grp_kill9", "--ttl", ttl]),
        (
            "lock -n 2",
            vec!["lock", "grp_kill9n", "-n", "2", "--ttl", ttl],
        ),
        ("elect", vec!["elect", "grp_kill9e", "--ttl", ttl]),
    ];
    for (what, args) in cases {
        let dir = tempfile::tempdir().unwrap();
        let pids = dir.path().join("pids");
        // With 2 permits, another holder keeps one: the next can only have
        // the one the killed holder left.
        let started = dir.path().join("other");
        let other = (what == "lock -n 2").then(|| {
            let script = format!("echo > {}; exec sleep 60", started.display());
            cli(&c)
                .args(&args)
                .args(["--", "sh", "-c", &script])
                .spawn()
                .unwrap()
        });
        if other.is_some() {
            let taken = || started.exists();
            assert!(wait_until(Duration::from_secs(10), taken).await, "{what}");
        }
        let mut victim = cli(&c)
            .args(&args)
            .arg("--")
            .args(two_sleeps(&pids))
            .process_group(0)
            .spawn()
            .unwrap();
        assert!(
            wait_until(Duration::from_secs(10), || both_sleeping(&pids)).await,
            "{what}: the command did not start"
        );
        // `kill -9 %1` signals the job's whole group: the elect case does.
        let target = victim.id() as i32;
        kill(
            if what == "elect" { -target } else { target },
            libc::SIGKILL,
        );
        let _ = victim.wait();
        let first = pids_in(&pids);
        let next = cli(&c)
            .args(&args)
            .args(["--wait", "30s", "--"])
            .args(report_alive(&first))
            .output()
            .unwrap();
        assert_eq!(code(&next), 0, "{what}: {next:?}");
        assert_eq!(
            String::from_utf8_lossy(&next.stdout),
            "checked\n",
            "{what}: the next holder ran beside the killed one's command"
        );
        for pid in first {
            assert!(!sleep_alive(pid), "{what}: sleep {pid} outlived redquorum");
        }
        if let Some(mut other) = other {
            kill(other.id() as i32, libc::SIGTERM);
            let _ = other.wait();
        }
    }
}
