//! The guarded command as a whole: it runs in a process group of its own,
//! every signal we send goes to that group, and nothing of it is left
//! running when we return.
//!
//! Why a group: a shell script's background jobs and pipelines are the
//! command's work too; signalling only the first process would leave them
//! running after the lock is gone. Why not our group: a terminal's Ctrl-C
//! goes to the foreground group, and if the command shared ours it would get
//! the terminal's SIGINT and then the one we forward, two in all.
//!
//! When we run in the foreground of a terminal, the command's group is made
//! the terminal's foreground group while it runs (as a job-control shell
//! does), so an interactive command can read the terminal and a Ctrl-C
//! reaches it exactly once, from the terminal; we take the terminal back
//! afterwards. We become a child subreaper, so the command's orphaned
//! processes are re-parented to us and can be reaped and counted.
//!
//! If we die without ending the group (SIGKILL, a crash), the group dies
//! with us: its first process by the kernel's parent-death signal, and the
//! whole group by the guard (`guard.rs`), which stands down only once we saw
//! the group empty. If we stop or stall instead, the guard kills the group
//! at the deadline we last told it (the lock's validity, or the kill time
//! once we end the group), which we tell it before the command starts.

use std::io;
use std::os::unix::process::CommandExt as _;
use std::process::ExitStatus;
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::deadline::Deadline;
use crate::guard::{self, Guard};

/// How often the group is checked for members while we wait for it to
/// empty (only while ending it).
const POLL: Duration = Duration::from_millis(10);
/// How long processes that got SIGKILL may take to vanish before we stop
/// waiting for them (one in uninterruptible sleep cannot be hurried).
const AFTER_KILL: Duration = Duration::from_secs(2);

/// A command running in its own process group.
pub struct Group {
    /// The group's first process.
    leader: Child,
    /// The process group id (the leader's pid).
    pgid: libc::pid_t,
    /// Whether the group was given the terminal (and we must take it back).
    terminal: bool,
    /// Whether we started in the terminal's foreground: a shell with job
    /// control runs us, and ^Z stops the whole job.
    interactive: bool,
    /// Kills the group if we die first; stood down once the group is gone.
    guard: Option<Guard>,
}

impl Group {
    /// Starts `argv` with the extra environment `env` in a new process
    /// group, in the terminal's foreground if we are, guarded until `until`
    /// (see [`Group::guard_until`]).
    pub fn spawn(argv: &[String], env: &[(String, String)], until: Deadline) -> io::Result<Self> {
        // SAFETY: prctl(PR_SET_CHILD_SUBREAPER) only sets a flag on this
        // process.
        unsafe {
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        }
        let terminal = in_terminal_foreground();
        let parent = std::process::id() as libc::pid_t;
        // The guard exists before the command does, and learns its group
        // from the command itself before the command runs anything.
        let cannot = |e: io::Error| {
            io::Error::new(
                e.kind(),
                format!("cannot start the guard that ends the command if redquorum dies: {e}"),
            )
        };
        let mut guard = Guard::spawn().map_err(cannot)?;
        // The deadline before the command: from its first instruction it
        // cannot outlive the lock, whatever becomes of us.
        if let Err(e) = guard.until(until) {
            guard.stand_down();
            return Err(cannot(e));
        }
        let announce = guard.announce_fd();
        let mut cmd = std::process::Command::new(&argv[0]);
        cmd.args(&argv[1..]).envs(env.iter().map(|(k, v)| (k, v)));
        // SAFETY: the closure calls only async-signal-safe functions
        // (prctl, getppid, setpgid, getpid, write, sigprocmask, tcsetpgrp)
        // between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                // SIGKILL when the thread that forked us ends: the runtime's
                // main thread (our `block_on`), which ends only with us. If we
                // died before this call, the parent is another already.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
                if libc::getppid() != parent {
                    libc::_exit(128 + libc::SIGKILL);
                }
                if libc::setpgid(0, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                // Our group is our pid: the guard kills it if redquorum dies
                // or misses the deadline from here on. Unguarded, nothing
                // runs.
                let msg = guard::announcement(libc::getpid());
                if libc::write(announce, msg.as_ptr().cast(), msg.len()) != msg.len() as isize {
                    return Err(io::Error::last_os_error());
                }
                if terminal {
                    // From a background group tcsetpgrp raises SIGTTOU
                    // unless it is blocked; the mask is restored before exec.
                    foreground(libc::getpid());
                }
                Ok(())
            });
        }
        let leader = match Command::from(cmd).kill_on_drop(true).spawn() {
            Ok(leader) => leader,
            Err(e) => {
                guard.stand_down();
                return Err(e);
            }
        };
        let pgid = leader.id().map_or(0, |p| p as libc::pid_t);
        // Both sides set the group (as shells do), so that whichever runs
        // first, the group exists before we signal it.
        // SAFETY: setpgid on our own, not yet reaped child.
        unsafe {
            libc::setpgid(pgid, pgid);
        }
        if terminal {
            foreground(pgid);
        }
        Ok(Self {
            leader,
            pgid,
            terminal,
            interactive: terminal,
            guard: Some(guard),
        })
    }

    /// Tells the guard to kill the group by `until` unless told again first
    /// (a renewal moved the lock's validity). A guard that is gone is not
    /// told: it left only after killing the group.
    pub fn guard_until(&mut self, until: Deadline) {
        if let Some(guard) = &mut self.guard {
            let _ = guard.until(until);
        }
    }

    /// Whether the guard's kill time for the deadline last told has come:
    /// the group got its SIGKILL from the guard, not from the command's
    /// own doing or ours.
    pub fn guard_fired(&self) -> bool {
        self.guard.as_ref().is_some_and(Guard::fired)
    }

    /// Tells the guard our own kill time, `kill_at`: from here we end the
    /// group, by then, and the renewals no longer move its deadline.
    fn guard_until_instant(&mut self, kill_at: Instant) {
        let left = || kill_at.saturating_duration_since(Instant::now());
        if let Ok(until) = Deadline::after(left) {
            self.guard_until(until);
        }
    }

    /// Sends `sig` to every process of the group.
    pub fn signal(&self, sig: libc::c_int) {
        if self.pgid > 0 {
            // SAFETY: kill(2) has no memory-safety preconditions; a negative
            // pid names our child's process group.
            unsafe {
                libc::kill(-self.pgid, sig);
            }
        }
    }

    /// SIGTERM to the group, and SIGCONT so that stopped members get it.
    fn terminate(&self) {
        self.signal(libc::SIGTERM);
        self.signal(libc::SIGCONT);
    }

    /// Waits for the group's first process to exit.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        let status = self.leader.wait().await;
        self.take_terminal_back();
        status
    }

    /// Ends the group: SIGTERM to every process still in it, SIGKILL to
    /// whatever is left at `kill_at`, and returns once it is empty (or
    /// [`AFTER_KILL`] after the SIGKILL) with the first process's status.
    pub async fn end(&mut self, kill_at: Instant) -> io::Result<ExitStatus> {
        self.guard_until_instant(kill_at);
        if Instant::now() >= kill_at {
            // No time left: SIGKILL at once, and no SIGCONT that would let a
            // stopped command run on for a moment without the lock.
            self.signal(libc::SIGKILL);
        } else {
            self.terminate();
        }
        let status = match tokio::time::timeout_at(kill_at, self.leader.wait()).await {
            Ok(status) => status,
            Err(_) => {
                self.signal(libc::SIGKILL);
                self.leader.wait().await
            }
        };
        self.take_terminal_back();
        self.drain(kill_at).await;
        self.stand_down_if_gone();
        status
    }

    /// After the first process exited: ends what is left of the group (the
    /// command's background jobs) as [`Group::end`] does.
    pub async fn end_rest(&mut self, kill_at: Instant) {
        self.guard_until_instant(kill_at);
        if self.reap_and_count() {
            self.terminate();
            self.drain(kill_at).await;
        }
        self.stand_down_if_gone();
    }

    /// Whether the job stopped: we run under a shell's job control and the
    /// command's first process is stopped (^Z, or SIGTTIN in the
    /// background), or held by a stop it cannot take: a ^Z that comes
    /// while it forks stops the child before its exec, and a first process
    /// that forked with `vfork` (dash does) then waits for that child with
    /// the stop pending, and no SIGCHLD reaches us.
    pub fn job_stopped(&self) -> bool {
        self.interactive && (is_stopped(self.pgid) || member_stopped(self.pgid))
    }

    /// Whether we run under a shell's job control.
    pub fn interactive(&self) -> bool {
        self.interactive
    }

    /// Stops us with the stopped command, as one job: takes the terminal
    /// back and stops this process, so the shell sees the job stopped;
    /// returns when the shell continues us (`fg`, `bg`). Nothing of ours
    /// runs meanwhile: the lock is not renewed.
    pub fn stop_with_job(&mut self) {
        self.take_terminal_back();
        // SAFETY: raise(2) stops this process until a SIGCONT.
        unsafe {
            libc::raise(libc::SIGSTOP);
        }
    }

    /// Whether the job runs in the background of a shell with job control
    /// (after `bg`): the command does not have the terminal.
    pub fn backgrounded(&self) -> bool {
        self.interactive && !self.terminal
    }

    /// Continues the command after we were continued: in the terminal's
    /// foreground if `fg` gave it to us, in the background after `bg`.
    pub fn continue_job(&mut self) {
        if self.interactive {
            self.reclaim_terminal();
            self.signal(libc::SIGCONT);
        }
    }

    /// Hands the terminal to the command's group if `fg` gave it to us.
    pub fn reclaim_terminal(&mut self) {
        if self.interactive && !self.terminal && in_terminal_foreground() {
            foreground(self.pgid);
            self.terminal = true;
        }
    }

    /// Stands the guard down if nothing of the group is left.
    fn stand_down_if_gone(&mut self) {
        if !self.reap_and_count() {
            if let Some(guard) = self.guard.take() {
                guard.stand_down();
            }
        }
    }

    /// Waits for the group to empty, with SIGKILL at `kill_at`.
    async fn drain(&mut self, kill_at: Instant) {
        let mut killed = false;
        let mut give_up = kill_at + AFTER_KILL;
        while self.reap_and_count() {
            let now = Instant::now();
            if !killed && now >= kill_at {
                self.signal(libc::SIGKILL);
                killed = true;
                give_up = now + AFTER_KILL;
            } else if now >= give_up {
                eprintln!(
                    "redquorum: processes of group {} survive SIGKILL; not waiting for them",
                    self.pgid
                );
                return;
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Reaps the group's exited processes (ours as subreaper) and says
    /// whether any process of the group is still alive. Called only once the
    /// leader has been reaped, so it never takes the leader's status.
    fn reap_and_count(&self) -> bool {
        if self.pgid <= 0 {
            return false;
        }
        loop {
            // SAFETY: waitpid on our own process group, no status pointer
            // kept.
            let r = unsafe { libc::waitpid(-self.pgid, std::ptr::null_mut(), libc::WNOHANG) };
            if r <= 0 {
                break;
            }
        }
        // SAFETY: signal 0 only checks that the group has a member.
        unsafe { libc::kill(-self.pgid, 0) == 0 }
    }

    /// Makes our own group the terminal's foreground group again.
    fn take_terminal_back(&mut self) {
        if std::mem::take(&mut self.terminal) {
            // SAFETY: getpgrp has no preconditions.
            foreground(unsafe { libc::getpgrp() });
        }
    }
}

/// Whether process `pid` is stopped (state `T` in `/proc/PID/stat`).
fn is_stopped(pid: libc::pid_t) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit(')').next().unwrap_or("").trim_start();
    state.starts_with('T')
}

/// Whether the group's first process `pgid` is held by a stop it cannot
/// take: a stop signal (SIGTSTP, SIGTTIN, SIGTTOU) pending for it, and a
/// child of it in the same group stopped (`/proc/PGID/task/PGID/children`):
/// the child a `vfork` waits for, stopped before its exec. A child the
/// command stopped itself, or one in a job of a shell run as the command
/// (its own group), is none of this.
fn member_stopped(pgid: libc::pid_t) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pgid}/status")).unwrap_or_default();
    // Bits of SIGTSTP (20), SIGTTIN (21) and SIGTTOU (22), counted from 1.
    let stops: u64 = 0b111 << 19;
    let pending = status
        .lines()
        .filter(|l| l.starts_with("SigPnd:") || l.starts_with("ShdPnd:"))
        .filter_map(|l| u64::from_str_radix(l.split_whitespace().nth(1)?, 16).ok())
        .any(|mask| mask & stops != 0);
    pending
        && std::fs::read_to_string(format!("/proc/{pgid}/task/{pgid}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|pid| pid.parse().ok())
            .any(|pid| stopped_in(pid, pgid))
}

/// Whether process `pid` is stopped (state `T`) in group `pgid`.
fn stopped_in(pid: libc::pid_t, pgid: libc::pid_t) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the name: state, ppid, pgrp.
    let mut fields = stat.rsplit(')').next().unwrap_or("").split_whitespace();
    let state = fields.next().unwrap_or("");
    let pgrp = fields.nth(1).and_then(|p| p.parse::<libc::pid_t>().ok());
    state.starts_with('T') && pgrp == Some(pgid)
}

/// Whether standard input is a terminal whose foreground group is ours.
fn in_terminal_foreground() -> bool {
    // SAFETY: isatty, tcgetpgrp and getpgrp only read process state.
    unsafe { libc::isatty(0) == 1 && libc::tcgetpgrp(0) == libc::getpgrp() }
}

/// Makes `pgid` the foreground group of the terminal on standard input,
/// with SIGTTOU blocked in the calling thread meanwhile (async-signal-safe:
/// also used between fork and exec).
fn foreground(pgid: libc::pid_t) {
    // SAFETY: sigset operations on local values; the mask is restored.
    unsafe {
        let mut block: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut block);
        libc::sigaddset(&mut block, libc::SIGTTOU);
        libc::pthread_sigmask(libc::SIG_BLOCK, &block, &mut old);
        libc::tcsetpgrp(0, pgid);
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
}
