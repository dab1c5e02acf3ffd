//! Running a command under a held lock (a lock, a semaphore's permit, a
//! leadership), shared by `lock` and `elect`: forward signals to the
//! command's process group; end the whole group if the lock is lost, no
//! later than the lock's validity; keep the guard's deadline on the lock's
//! validity (so that the group dies with the lock also while we are stopped);
//! release when the command is done.

use std::future::Future;
use std::os::unix::process::ExitStatusExt as _;
use std::process::{ExitCode, ExitStatus};
use std::time::Duration;

use redquorum::{Lock, Redlock};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::time::Instant;

use crate::deadline::Deadline;
use crate::exit;
use crate::group::Group;

/// How often a job sent to the background (`bg`) checks whether `fg`
/// brought it back, to hand the terminal to the command.
const FOREGROUND_CHECK: Duration = Duration::from_millis(100);
/// The shortest and longest time between two looks at the lock's validity,
/// to tell the guard a renewal's new deadline. In between, a tenth of the
/// first validity: a renewal starts a third of the TTL after the one
/// before and leaves about two thirds of it before the old deadline, so the
/// guard hears of it long before it would act on the old one.
const FOLLOW: (Duration, Duration) = (Duration::from_millis(10), Duration::from_secs(1));

/// The signals `lock` and `elect` forward to its command. Installed before the first
/// request, so that from then on none of them can kill us with the default
/// action while a lock may be held (which would leave it to its TTL).
pub struct Forwarded {
    /// SIGINT.
    int: Signal,
    /// SIGTERM.
    term: Signal,
    /// SIGHUP.
    hup: Signal,
}

impl Forwarded {
    pub fn install() -> std::io::Result<Self> {
        Ok(Self {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// The next signal received.
    pub async fn recv(&mut self) -> libc::c_int {
        tokio::select! {
            _ = self.int.recv() => libc::SIGINT,
            _ = self.term.recv() => libc::SIGTERM,
            _ = self.hup.recv() => libc::SIGHUP,
        }
    }
}

/// How the command is ended when the lock is lost.
#[derive(Clone, Copy, Debug)]
pub struct Ending {
    /// After SIGTERM, wait at most this long before SIGKILL.
    pub grace: Duration,
    /// Give the whole grace even past the lock's validity.
    pub grace_past_lock: bool,
}

/// Waits for `attempt`, unless a signal comes first (then the attempt is
/// dropped, what it set is released, and the exit code is the signal's).
/// `what` names the lock in the error message; `conflict` is the exit code
/// for a lock held elsewhere until the wait ran out.
pub async fn acquire<F>(
    redlock: &Redlock,
    signals: &mut Forwarded,
    (what, conflict): (&str, u8),
    attempt: F,
) -> Result<Lock, ExitCode>
where
    F: Future<Output = redquorum::Result<Lock>>,
{
    let acquired = tokio::select! {
        r = attempt => r,
        sig = signals.recv() => {
            // Dropping the attempt releases whatever it had set; wait for
            // that to reach the nodes, then die of the signal's status.
            let _ = tokio::time::timeout(Duration::from_secs(1), redlock.settle()).await;
            return Err(exit::code(128 + sig as u8));
        }
    };
    // A signal that arrives from here until the command runs is kept by the
    // handlers and forwarded to the command as soon as it starts.
    acquired.map_err(|e| {
        eprintln!("redquorum: {what} not acquired: {e}");
        match exit::for_error(&e) {
            exit::NOT_ACQUIRED => exit::code(conflict),
            other => exit::code(other),
        }
    })
}

/// Where the job stopped, stops us with it (see `Group::stop_with_job`);
/// once continued (fg, bg), whether the lock lapsed meanwhile (it was not
/// renewed while we were stopped): the command then does not go on.
fn stopped_and_lapsed(group: &mut Group, lock: &Lock) -> bool {
    if !group.job_stopped() {
        return false;
    }
    group.stop_with_job();
    if !lock.is_valid() {
        return true;
    }
    group.continue_job();
    false
}

/// Runs `command` with `env` while holding `lock` (renewed in the
/// background), then releases it; `what` names the lock in messages.
pub async fn run_under(
    redlock: &Redlock,
    lock: Lock,
    signals: &mut Forwarded,
    (command, env): (&[String], &[(String, String)]),
    what: &str,
    ending: Ending,
) -> ExitCode {
    lock.auto_extend();
    // What the guard is told, read before it is told: a renewal landing
    // meanwhile is told at the next look. The validity is read after the
    // clock (see `Deadline::after`): the guard's deadline is never later
    // than the lock's.
    let mut told = lock.valid_until();
    // A child's stop or exit: under a shell's job control, ^Z stops the
    // command's group, and we stop with it (see `Group::stop_with_job`).
    // Listened for before the command starts: a listener hears only what
    // comes after it, and a ^Z may come the moment the command runs.
    let mut children = signal(SignalKind::child()).ok();
    let mut continued = signal(SignalKind::from_raw(libc::SIGCONT)).ok();
    let spawned =
        Deadline::after(|| lock.validity()).and_then(|until| Group::spawn(command, env, until));
    let mut group = match spawned {
        Ok(g) => g,
        Err(e) => {
            eprintln!("redquorum: cannot run {:?}: {e}", command[0]);
            let _ = lock.release().await;
            redlock.settle().await;
            return exit::code(exit::cannot_run(&e));
        }
    };
    let lost = lock.lost();
    tokio::pin!(lost);
    // `fg` on the job running in the background (after `bg`) gives our
    // group the terminal and sends nothing: while backgrounded, we look.
    let mut look = tokio::time::interval(FOREGROUND_CHECK);
    let mut stops = tokio::time::interval(FOREGROUND_CHECK);
    // Stopped for an hour, we look once when continued, not 36,000 times.
    stops.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    // The library renews the lock in the background and says nothing when a
    // renewal lands: we look at its validity's end, and tell the guard when
    // it moved.
    let mut follow = tokio::time::interval((lock.validity() / 10).clamp(FOLLOW.0, FOLLOW.1));
    follow.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The library tries failed renewals again until the validity runs out;
    // the command is told (SIGTERM) while it still has time to end inside
    // the lock: when the validity left falls below the grace, or below a
    // third of the TTL (a healthy lock renewed every third of its TTL never
    // does).
    let notice = ending.grace.min(lock.validity() / 3);
    let mut unrenewed = false;
    let status = loop {
        tokio::select! {
            status = group.wait() => {
                // SIGKILL from the guard at the deadline: we were too late to
                // renew (stopped, stalled), and the lock ended under the
                // command as a loss does.
                if killed(&status) && group.guard_fired() {
                    break None;
                }
                break Some(status);
            }
            () = &mut lost => break None,
            _ = follow.tick() => {
                if lock.is_valid() && lock.validity() < notice {
                    unrenewed = true;
                    break None;
                }
                let until = lock.valid_until();
                // A lock already lost is left to the loss's own kill time.
                if until != told && lock.is_valid() {
                    if let Ok(deadline) = Deadline::after(|| lock.validity()) {
                        group.guard_until(deadline);
                        told = until;
                    }
                }
            }
            sig = signals.recv() => {
                // A stopped command gets it too.
                group.signal(sig);
                group.signal(libc::SIGCONT);
            }
            Some(()) = next(&mut children) => {
                if stopped_and_lapsed(&mut group, &lock) {
                    break None;
                }
            }
            // A stop no SIGCHLD tells of (a child stopped between its fork
            // and exec: see `Group::job_stopped`), looked for as often.
            _ = stops.tick(), if group.interactive() => {
                if stopped_and_lapsed(&mut group, &lock) {
                    break None;
                }
            }
            Some(()) = next(&mut continued) => group.continue_job(),
            _ = look.tick(), if group.backgrounded() => group.reclaim_terminal(),
        }
    };
    match status {
        Some(status) => {
            // The first process is done; what it left running in its group
            // (background jobs) ends now, while the lock is still ours.
            group.end_rest(kill_at(&lock, ending)).await;
            if let Err(e) = lock.release().await {
                eprintln!("redquorum: release: {e}");
            }
            // Let the release reach the slower nodes before we exit.
            redlock.settle().await;
            match status {
                Ok(s) => exit::of_status(s),
                Err(e) => {
                    eprintln!("redquorum: waiting for the command: {e}");
                    exit::code(exit::CANNOT_RUN)
                }
            }
        }
        None => {
            // After the guard's SIGKILL nothing is left to give a grace to.
            let at = if group.guard_fired() {
                Instant::now()
            } else {
                kill_at(&lock, ending)
            };
            let cause = match lock.lost_reason() {
                Some(e) => format!(": {e}"),
                // A moment before the library counts it lost.
                None if group.guard_fired() => ": its validity ended before a renewal".to_owned(),
                None if unrenewed => format!(
                    ": no renewal has landed and its validity ends in {}",
                    rounded(lock.validity())
                ),
                None => String::new(),
            };
            let left = at.saturating_duration_since(Instant::now());
            if left.is_zero() {
                eprintln!(
                    "redquorum: {what} lost while the command ran{cause}; SIGKILL to the command"
                );
            } else {
                eprintln!(
                    "redquorum: {what} lost while the command ran{cause}; SIGTERM to the command, \
                     SIGKILL in {} at the latest",
                    rounded(left),
                );
            }
            let _ = group.end(at).await;
            drop(lock);
            let _ = tokio::time::timeout(Duration::from_secs(1), redlock.settle()).await;
            exit::code(exit::LOCK_LOST)
        }
    }
}

/// Whether the command's first process died of SIGKILL.
fn killed(status: &std::io::Result<ExitStatus>) -> bool {
    status
        .as_ref()
        .is_ok_and(|s| s.signal() == Some(libc::SIGKILL))
}

/// The next SIGCHLD, or never without a handler.
async fn next(children: &mut Option<Signal>) -> Option<()> {
    match children {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}

/// When whatever is left of the command gets SIGKILL: `--grace` from now,
/// but no later than the end of the lock's validity unless
/// `--grace-past-lock` says otherwise.
fn kill_at(lock: &Lock, ending: Ending) -> Instant {
    let grace = Instant::now() + ending.grace;
    if ending.grace_past_lock {
        grace
    } else {
        grace.min(lock.valid_until())
    }
}

/// A duration for a message: `950ms`, `4.2s`.
fn rounded(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}
