//! The command's guard: a small process that outlives `redquorum` by a
//! moment, so that nothing of the command outlives the lock, however
//! `redquorum` ends (SIGKILL, an OOM kill, a crash).
//!
//! The guard is forked before the command. It holds the read end of a pipe
//! whose write end is ours; it ignores the signals a terminal or a shell
//! sends to a job, and leads a process group of its own, so `kill -9 %1`
//! (which signals our group) does not reach it. The command's first
//! process, between fork and exec, writes its process group id into the
//! pipe (`group.rs`): from before the command runs anything, the guard knows
//! what to kill. When the pipe ends without the byte that means "the group
//! is gone, stand down", we are dead, and the guard sends SIGKILL to the
//! whole command group at once: within milliseconds, while the lock we held
//! is still valid on the nodes (so no second holder can have started). The
//! group's first process also gets SIGKILL from the kernel when we die
//! (`PR_SET_PDEATHSIG`).
//!
//! What it cannot cover: a process of the command that leaves the group
//! (`setsid`, `setpgid`), and a SIGKILL that reaches the guard too (one sent
//! to every process of a cgroup or a session also reaches the command).

use std::io::{self, Write as _};
use std::os::fd::{AsRawFd, FromRawFd as _, OwnedFd, RawFd};

/// A running guard of one process group.
#[derive(Debug)]
pub struct Guard {
    /// Our end of the pipe: closed without a byte (we died, or the guard
    /// is dropped), the guard kills the group.
    pipe: Option<OwnedFd>,
    /// The guard's pid, to reap it after it stood down.
    pid: libc::pid_t,
}

impl Guard {
    /// Forks a guard; the process group it guards is written into
    /// [`Guard::announce_fd`] (4 bytes, native order) by the group's first
    /// process.
    pub fn spawn() -> io::Result<Self> {
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two descriptors into the array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let [read, write] = fds;
        // SAFETY: both descriptors were just opened and belong to nobody
        // else; the write end is ours from here on.
        let pipe = unsafe { OwnedFd::from_raw_fd(write) };
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
        })
    }

    /// The descriptor the guarded group's first process writes its group id
    /// into (closed in it at exec).
    pub fn announce_fd(&self) -> RawFd {
        self.pipe.as_ref().map_or(-1, AsRawFd::as_raw_fd)
    }

    /// The group is gone: the guard exits without signalling anything, and
    /// is reaped (it exits as soon as it reads the byte).
    pub fn stand_down(mut self) {
        if let Some(fd) = self.pipe.take() {
            let _ = std::fs::File::from(fd).write_all(b"x");
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

/// The guard's whole life, in the forked child: learn the group, wait until
/// the pipe ends; without the stand-down byte, kill the group. Async-signal-
/// safe calls only.
///
/// # Safety
///
/// Only in the child of a fork, with `read` and `write` the pipe's ends.
unsafe fn watch(read: libc::c_int, write: libc::c_int) -> ! {
    // SAFETY: every call below is async-signal-safe and acts only on this
    // process and its descriptors, then on the group it guards.
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
        // The group id (4 bytes), then the stand-down byte or the end.
        let mut buf = [0u8; 5];
        let mut got = 0;
        while got < buf.len() {
            let n = libc::read(read, buf[got..].as_mut_ptr().cast(), buf.len() - got);
            if n < 0 && *libc::__errno_location() == libc::EINTR {
                continue;
            }
            if n <= 0 {
                break;
            }
            got += n as usize;
        }
        let pgid = libc::pid_t::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]);
        // Ended after the group id and before the stand-down: we died.
        if got == 4 && pgid > 1 {
            libc::kill(-pgid, libc::SIGKILL);
        }
        libc::_exit(0)
    }
}
