//! The command's guard: a small process that ends the command when the
//! lock can no longer cover it and `redquorum` cannot end it itself,
//! because `redquorum` died (SIGKILL, an OOM kill, a crash) or stopped
//! (SIGSTOP, a debugger, a stall) while the command runs on.
//!
//! The guard is forked before the command. It holds the read end of a pipe
//! whose write end is ours; it ignores the signals a terminal or a shell
//! sends to a job, and leads a process group of its own, so `kill -9 %1`
//! (which signals our group) does not reach it. Three messages come down
//! the pipe, each in one write (so they never interleave):
//!
//! * the group: the command's first process, between fork and exec, writes
//!   its process group id (`group.rs`), so from before the command runs
//!   anything the guard knows what to kill;
//! * a deadline: the instant the lock's validity ends (`deadline.rs`),
//!   sent by us before the command starts and again whenever a renewal
//!   moves it, and at the end the instant we kill the command ourselves;
//!   if it comes without a newer one, the guard sends SIGKILL to the whole
//!   group ([`KILL_LEAD`] before it) and exits. Nothing of ours needs to
//!   run for that: a `redquorum` that is stopped renews nothing, so its lock
//!   lapses and a second holder may take it, but by then its command is
//!   dead;
//! * the stand-down: the group is gone, exit without signalling anything.
//!
//! When the pipe ends without the stand-down, we are dead, and the guard
//! sends SIGKILL to the whole group at once: within milliseconds, while the
//! lock we held is still valid on the nodes. The group's first process also
//! gets SIGKILL from the kernel when we die (`PR_SET_PDEATHSIG`).
//!
//! What it cannot cover: a process of the command that leaves the group
//! (`setsid`, `setpgid`); a SIGKILL that reaches the guard too (one sent to
//! every process of a cgroup or a session also reaches the command); a
//! guard itself stopped or starved of CPU past the deadline (a SIGSTOP to
//! it, or to every process of a cgroup: a frozen cgroup freezes the command
//! too); processes of the command in uninterruptible sleep, which die only
//! when it ends; the command's own effects that are already in flight
//! (a write queued in another machine's buffers). The deadline is ours to
//! count, as the validity is: a machine whose clock runs slow by more than
//! the drift allowance ends the command late.

use std::io::{self, Write as _};
use std::os::fd::{AsRawFd, FromRawFd as _, OwnedFd, RawFd};
use std::time::Duration;

use crate::deadline::{now_ns, Deadline};

/// How much before the deadline it is told the guard sends SIGKILL: the
/// group must be dead by the deadline, and the signal takes effect on each
/// of its processes only as the kernel delivers it, after a timer that may
/// fire late by its slack (50 µs by default). Beyond this margin, a guard
/// too starved of CPU to run in time still has the drift allowance the
/// validity leaves before the nodes' keys expire (2 ms and 1 % of the TTL
/// at least) before a second holder can even be granted the lock.
pub const KILL_LEAD: Duration = Duration::from_millis(2);

/// Message tag: the group's id follows (4 bytes, native order), written by
/// the group's first process between fork and exec.
const GROUP: u8 = b'g';
/// Message tag: a deadline follows (8 bytes, native order: nanoseconds on
/// `CLOCK_BOOTTIME`), written by us; each replaces the one before.
const DEADLINE: u8 = b'd';
/// Message: the group is gone, stand down (no payload).
const STAND_DOWN: u8 = b'x';

/// The message that tells the guard the group `pgid` is the one to guard
/// (written whole, in one `write`, by the group's first process).
/// Async-signal-safe.
pub fn announcement(pgid: libc::pid_t) -> [u8; 5] {
    let id = pgid.to_ne_bytes();
    [GROUP, id[0], id[1], id[2], id[3]]
}

/// A running guard of one process group.
#[derive(Debug)]
pub struct Guard {
    /// Our end of the pipe: closed without a byte (we died, or the guard
    /// is dropped), the guard kills the group.
    pipe: Option<std::fs::File>,
    /// The guard's pid, to reap it after it stood down.
    pid: libc::pid_t,
    /// The last deadline told, if any.
    told: Option<Deadline>,
}

impl Guard {
    /// Forks a guard; the process group it guards is announced on
    /// [`Guard::announce_fd`] by the group's first process (see
    /// [`announcement`]).
    pub fn spawn() -> io::Result<Self> {
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two descriptors into the array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let [read, write] = fds;
        // Our writes never block: a guard that reads nothing (it was
        // stopped too) must not hang us once the pipe is full. The read
        // end, the guard's, is another open file and stays blocking.
        // SAFETY: fcntl on a descriptor we just opened.
        unsafe {
            libc::fcntl(write, libc::F_SETFL, libc::O_NONBLOCK);
        }
        // SAFETY: both descriptors were just opened and belong to nobody
        // else; the write end is ours from here on.
        let pipe = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(write) });
        // SAFETY: the child runs only `watch`, which makes nothing but
        // async-signal-safe calls and never returns (a fork of a threaded
        // process may do no more).
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: in the fresh child, on descriptors it owns.
            unsafe { watch(read, write) }
        }
        let forked = if pid < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        };
        // SAFETY: our copy of the read end; the guard keeps its own.
        unsafe {
            libc::close(read);
        }
        forked.map(|()| Self {
            pipe: Some(pipe),
            pid,
            told: None,
        })
    }

    /// The descriptor the guarded group's first process announces its group
    /// on (closed in it at exec).
    pub fn announce_fd(&self) -> RawFd {
        self.pipe.as_ref().map_or(-1, AsRawFd::as_raw_fd)
    }

    /// Tells the guard to kill the group by `deadline` (SIGKILL
    /// [`KILL_LEAD`] before it) unless told a new one first; it replaces
    /// the deadline told before, later or earlier.
    ///
    /// # Errors
    ///
    /// The pipe's: the guard is gone (it only leaves on its own after
    /// killing the group at a deadline), or reads nothing (it is stopped)
    /// and the pipe is full. Either way the guard keeps the deadline it
    /// had.
    pub fn until(&mut self, deadline: Deadline) -> io::Result<()> {
        let mut msg = [0u8; 9];
        msg[0] = DEADLINE;
        msg[1..].copy_from_slice(&deadline.ns().to_ne_bytes());
        // One write of fewer than PIPE_BUF bytes: never interleaved with
        // the group's announcement.
        self.pipe
            .as_ref()
            .map_or(Ok(()), |mut pipe| pipe.write_all(&msg))?;
        self.told = Some(deadline);
        Ok(())
    }

    /// Whether the guard's kill time for the last deadline told has come:
    /// the group got (or is getting) its SIGKILL from the guard.
    pub fn fired(&self) -> bool {
        self.told.is_some_and(|d| d.earlier_by(KILL_LEAD).passed())
    }

    /// The group is gone: the guard exits without signalling anything, and
    /// is reaped (it exits as soon as it reads the byte).
    pub fn stand_down(mut self) {
        if let Some(mut pipe) = self.pipe.take() {
            // A guard that already left (it killed the group at a deadline)
            // reads nothing: the write fails, and there is nothing to do.
            let _ = pipe.write_all(&[STAND_DOWN]);
        }
        for _ in 0..200 {
            // SAFETY: waitpid on our own child, no status kept.
            let r = unsafe { libc::waitpid(self.pid, std::ptr::null_mut(), libc::WNOHANG) };
            if r != 0 {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

/// What the guard knows: the group, and when to kill it.
struct Watch {
    /// The group's id, once announced (0 before).
    pgid: libc::pid_t,
    /// When to send SIGKILL (the deadline told, less [`KILL_LEAD`]).
    kill_at: Option<Deadline>,
}

/// The guard's whole life, in the forked child: read messages; kill the
/// group when the deadline's kill time comes, or when the pipe ends without
/// the stand-down (we died); exit at the stand-down. Async-signal-safe calls
/// only.
///
/// # Safety
///
/// Only in the child of a fork, with `read` and `write` the pipe's ends.
unsafe fn watch(read: libc::c_int, write: libc::c_int) -> ! {
    // SAFETY: every call below is async-signal-safe (or a bare system call:
    // timerfd, poll) and acts only on this process and its descriptors, then
    // on the group it guards.
    unsafe {
        libc::close(write);
        libc::setpgid(0, 0);
        for sig in [
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGTSTP,
            libc::SIGTTIN,
            libc::SIGTTOU,
            libc::SIGPIPE,
        ] {
            libc::signal(sig, libc::SIG_IGN);
        }
        // Let go of everything else we inherited (node connections, the
        // terminal, pipes somebody reads our output from).
        let read = if read == 0 {
            read
        } else {
            libc::dup2(read, 0);
            libc::close(read);
            0
        };
        if libc::syscall(libc::SYS_close_range, 1, libc::c_uint::MAX, 0) != 0 {
            for fd in 1..4096 {
                libc::close(fd);
            }
        }
        // A timer on the deadline's own clock: a timeout of poll(2) counts
        // on CLOCK_MONOTONIC, which stops while the machine is suspended,
        // and would fire that much late. Without one (-1), poll's timeout
        // does, re-armed at least every second.
        let timer = libc::timerfd_create(libc::CLOCK_BOOTTIME, libc::TFD_CLOEXEC);
        let mut known = Watch {
            pgid: 0,
            kill_at: None,
        };
        // Messages are at most 9 bytes; what is left of one read waits for
        // the rest of its message.
        let mut buf = [0u8; 64];
        let mut have = 0;
        loop {
            have = take_messages(&mut buf, have, &mut known, timer);
            if let Some(at) = known.kill_at {
                if known.pgid > 1 && at.passed() {
                    // Our renewals stopped (we are stopped or stalled): the
                    // lock's validity ends now, and the command with it.
                    // Then leave: the group is dead, and a guard that stayed
                    // on could signal a group id reused after it is reaped.
                    libc::kill(-known.pgid, libc::SIGKILL);
                    libc::_exit(0);
                }
            }
            let mut fds = [
                libc::pollfd {
                    fd: read,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: timer,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let (count, timeout) = if timer >= 0 {
                (2, -1)
            } else {
                (1, poll_timeout(known.kill_at))
            };
            if libc::poll(fds.as_mut_ptr(), count, timeout) < 0 {
                // EINTR (signals are ignored, but a stop and continue may
                // interrupt), or none of the others that two descriptors can
                // cause: look again.
                continue;
            }
            if fds[1].revents != 0 {
                // Drain the expiry count, so the timer is no longer
                // readable; the clock decides above.
                let mut expiries = [0u8; 8];
                libc::read(timer, expiries.as_mut_ptr().cast(), expiries.len());
            }
            if fds[0].revents == 0 {
                continue;
            }
            let n = libc::read(read, buf[have..].as_mut_ptr().cast(), buf.len() - have);
            if n < 0 && *libc::__errno_location() == libc::EINTR {
                continue;
            }
            if n <= 0 {
                // The pipe ended without the stand-down: we died. Kill what
                // the group is, if it was announced.
                if known.pgid > 1 {
                    libc::kill(-known.pgid, libc::SIGKILL);
                }
                libc::_exit(0);
            }
            have += n as usize;
        }
    }
}

/// Acts on the whole messages at the start of `buf[..have]` and returns how
/// many bytes are left (moved to the start: a message not yet whole).
/// Exits at the stand-down. Async-signal-safe.
///
/// # Safety
///
/// Only in the guard (it may exit the process); `timer` a timerfd or -1.
unsafe fn take_messages(
    buf: &mut [u8; 64],
    have: usize,
    known: &mut Watch,
    timer: libc::c_int,
) -> usize {
    let mut used = 0;
    while used < have {
        let rest = &buf[used..have];
        let len = match rest[0] {
            GROUP => 5,
            DEADLINE => 9,
            // The stand-down, and any byte we do not know: none is ever
            // written but those above.
            _ => 1,
        };
        if rest.len() < len {
            break;
        }
        match rest[0] {
            GROUP => known.pgid = libc::pid_t::from_ne_bytes([rest[1], rest[2], rest[3], rest[4]]),
            DEADLINE => {
                let mut ns = [0u8; 8];
                ns.copy_from_slice(&rest[1..9]);
                let at = Deadline::from_ns(u64::from_ne_bytes(ns)).earlier_by(KILL_LEAD);
                known.kill_at = Some(at);
                // SAFETY: the guard's own timer, or nothing for -1.
                unsafe { arm(timer, at) };
            }
            // SAFETY: leaving the guard's process, as the stand-down asks.
            STAND_DOWN => unsafe { libc::_exit(0) },
            _ => {}
        }
        used += len;
    }
    buf.copy_within(used..have, 0);
    have - used
}

/// Sets `timer` (a timerfd on `CLOCK_BOOTTIME`, or -1 for none) to expire
/// at `at`, at once if that is past. Async-signal-safe.
///
/// # Safety
///
/// Only on the guard's own timer.
unsafe fn arm(timer: libc::c_int, at: Deadline) {
    if timer < 0 {
        return;
    }
    // Zero would disarm the timer: the origin's first nanosecond is as
    // past as the origin.
    let ns = at.ns().max(1);
    let spec = libc::itimerspec {
        it_interval: libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
        it_value: libc::timespec {
            tv_sec: (ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (ns % 1_000_000_000) as libc::c_long,
        },
    };
    // SAFETY: timerfd_settime reads one itimerspec and writes none.
    unsafe {
        libc::timerfd_settime(timer, libc::TFD_TIMER_ABSTIME, &spec, std::ptr::null_mut());
    }
}

/// poll(2)'s timeout without a timer: until `kill_at`, rounded up to the
/// millisecond and at most a second (so that a suspend delays the kill by
/// a second at most); forever without a deadline. Async-signal-safe.
fn poll_timeout(kill_at: Option<Deadline>) -> libc::c_int {
    let Some(at) = kill_at else { return -1 };
    let now = now_ns().unwrap_or(u64::MAX);
    let ms = at.ns().saturating_sub(now).div_ceil(1_000_000);
    ms.min(1_000) as libc::c_int
}
