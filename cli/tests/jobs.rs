//! Job control on a real pseudo-terminal, through an interactive `bash`:
//! ^Z stops the whole job (redquorum and its command), the lock is not
//! renewed while it is stopped, `fg` and `bg` resume it, a command whose
//! lock lapsed meanwhile is killed instead of resumed, and ^C works after
//! a resume.

mod bin;
#[path = "../../tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use bin::{spawn_on_pty, Terminal};
use support::{wait_until, Cluster};

/// An interactive bash on its own pty, with `redquorum` on its PATH and
/// pointed at a cluster.
struct Shell {
    terminal: Terminal,
    child: Child,
}

impl Shell {
    fn start(c: &Cluster) -> Self {
        let exe = Path::new(env!("CARGO_BIN_EXE_redquorum"));
        let path = format!(
            "{}:{}",
            exe.parent().unwrap().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut cmd = Command::new("bash");
        cmd.args(["--norc", "--noprofile", "-i"])
            .env("PS1", "$ ")
            .env("PATH", path)
            .env("REDQUORUM_NODES", c.urls().join(","))
            .env_remove("RUST_LOG");
        let (child, terminal) = spawn_on_pty(&mut cmd);
        Self { terminal, child }
    }

    fn type_(&mut self, text: &str) {
        self.terminal.type_(text);
    }

    fn printed(&self) -> String {
        self.terminal.printed()
    }

    /// Waits until the terminal shows `text` `times` times in all.
    async fn shows(&self, text: &str, times: usize) -> bool {
        wait_until(Duration::from_secs(20), || {
            self.printed().matches(text).count() >= times
        })
        .await
    }
}

impl Drop for Shell {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The state letter of process `pid` (`R`, `S`, `T`, ...), if it exists.
fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')').next()?.trim_start().chars().next()
}

/// Whether the command's shell `pid` is held: stopped, or waiting in a
/// `vfork` (state `D`) for a child the ^Z stopped before its exec.
fn held(pid: i32) -> bool {
    matches!(state(pid), Some('T' | 'D'))
}

/// The parent of process `pid`.
fn parent(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = stat.rsplit(')').next().unwrap();
    after.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// The foreground process group of `pid`'s terminal (`tpgid`).
fn foreground_of(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    after
        .split_whitespace()
        .nth(5)
        .and_then(|f| f.parse().ok())
        .unwrap_or(0)
}

/// A command that writes its pid to `pid`, prints `ready`, then counts
/// ticks into `ticks` until it is killed.
fn ticking(pid: &Path, ticks: &Path) -> String {
    format!(
        "sh -c 'echo $$ > {p}; echo re\"\"ady; n=0; while :; do n=$((n+1)); echo $n > {t}; sleep 0.05; done'",
        p = pid.display(),
        t = ticks.display()
    )
}

fn read_pid(file: &Path) -> i32 {
    std::fs::read_to_string(file)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// ^Z stops redquorum with its command (the shell reports the job
/// stopped); nothing renews the lock, which lapses; `fg` then finds it
/// lapsed and kills the command instead of resuming it (exit 76).
#[tokio::test]
async fn ctrl_z_stops_the_job_and_a_lapsed_lock_is_not_resumed() {
    let c = Cluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let (pid_file, ticks) = (dir.path().join("pid"), dir.path().join("ticks"));
    let mut sh = Shell::start(&c);
    sh.type_(&format!(
        "redquorum lock jobs_lapse --ttl 2s -- {}\n",
        ticking(&pid_file, &ticks)
    ));
    assert!(sh.shows("ready", 1).await, "{}", sh.printed());
    let command = read_pid(&pid_file);
    let ours = parent(command);
    sh.type_("\x1a"); // ^Z
    assert!(sh.shows("Stopped", 1).await, "{}", sh.printed());
    assert!(
        wait_until(Duration::from_secs(10), || held(command)
            && state(ours) == Some('T'))
        .await,
        "command {:?}, redquorum {:?}",
        state(command),
        state(ours)
    );
    // Not renewed while stopped: the nodes expire the lock.
    assert!(
        wait_until(Duration::from_secs(20), || c.set_on("jobs_lapse") == 0).await,
        "the lock was renewed while the job was stopped"
    );
    // None yet where the ^Z came before its first tick.
    let ticked = std::fs::read_to_string(&ticks).unwrap_or_default();
    sh.type_("fg\n");
    sh.type_("echo rc=$?\n");
    assert!(sh.shows("rc=76", 1).await, "{}", sh.printed());
    assert!(
        matches!(state(command), None | Some('Z')),
        "the command outlived its lock"
    );
    assert_eq!(
        std::fs::read_to_string(&ticks).unwrap_or_default(),
        ticked,
        "the command ran on after its lock lapsed"
    );
}

/// ^Z, then `bg`: the job runs on in the background and the lock is
/// renewed past its TTL; `fg` brings it back, and ^C reaches the command
/// (which ends, and redquorum with its status).
#[tokio::test]
async fn bg_and_fg_resume_the_job_with_its_lock() {
    let c = Cluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let (pid_file, ticks) = (dir.path().join("pid"), dir.path().join("ticks"));
    let mut sh = Shell::start(&c);
    sh.type_(&format!(
        "redquorum lock jobs_bg --ttl 1500ms -- {}\n",
        ticking(&pid_file, &ticks)
    ));
    assert!(sh.shows("ready", 1).await, "{}", sh.printed());
    let command = read_pid(&pid_file);
    sh.type_("\x1a");
    assert!(sh.shows("Stopped", 1).await, "{}", sh.printed());
    assert!(wait_until(Duration::from_secs(10), || held(command)).await);
    sh.type_("bg\n");
    let count = || {
        std::fs::read_to_string(&ticks)
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    let at_bg = count();
    assert!(
        wait_until(Duration::from_secs(10), || count() > at_bg + 2).await,
        "the command did not go on after bg"
    );
    // Renewed while it runs in the background: held past two TTLs.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(c.set_on("jobs_bg"), 3, "{}", sh.printed());
    assert_ne!(foreground_of(command), command, "bg gave it the terminal");
    sh.type_("fg\n");
    // In the foreground again: the command's group has the terminal, and
    // the terminal's ^C reaches it.
    assert!(
        wait_until(Duration::from_secs(10), || foreground_of(command)
            == command)
        .await,
        "{}",
        sh.printed()
    );
    sh.type_("\x03");
    sh.type_("echo rc=$?\n");
    assert!(sh.shows("rc=130", 1).await, "{}", sh.printed());
    assert!(matches!(state(command), None | Some('Z')));
    assert!(
        wait_until(Duration::from_secs(10), || c.set_on("jobs_bg") == 0).await,
        "released"
    );
}

/// A child the command stopped itself is no ^Z: the job is not stopped,
/// and the command runs to its end.
#[tokio::test]
async fn a_child_the_command_stops_itself_does_not_stop_the_job() {
    let c = Cluster::start(3);
    let mut sh = Shell::start(&c);
    sh.type_(
        "redquorum lock jobs_own --ttl 2s -- sh -c 'sleep 30 & kill -STOP $!; sleep 1; \
         echo fini\"\"shed; kill -KILL $!'\n",
    );
    // Typed ahead: its echo must not read as its output.
    sh.type_("echo r\"\"c=$?\n");
    assert!(sh.shows("rc=", 1).await, "{}", sh.printed());
    let printed = sh.printed();
    assert!(
        printed.contains("finished\r\n")
            && printed.contains("rc=0")
            && !printed.contains("Stopped"),
        "{printed}"
    );
}
