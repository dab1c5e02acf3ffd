//! The `redquorum` binary, ready to run against a test cluster, and a
//! pseudo-terminal to run it on (shared by the CLI's test files).

#![allow(dead_code)]

use std::io::{Read as _, Write as _};
use std::os::fd::{FromRawFd as _, OwnedFd};
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use crate::support::Cluster;

/// `redquorum` pointed at `c`'s nodes, with no `RUST_LOG` and no stdin.
pub fn cli(c: &Cluster) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_redquorum"));
    cmd.env("REDQUORUM_NODES", c.urls().join(","))
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    cmd
}

/// A pseudo-terminal: the master side to type into and read from, and the
/// slave side for the process under test.
pub fn openpty() -> (OwnedFd, OwnedFd) {
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty writes two fds into the given ints; no name, termios or
    // window size is passed.
    let r = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(r, 0, "openpty: {}", std::io::Error::last_os_error());
    // Close-on-exec, so that a terminal opened by one test is not inherited
    // by the shell another test starts meanwhile (tests run as threads of
    // one process): a child gets only the side given as its stdio.
    for fd in [master, slave] {
        // SAFETY: fcntl on an fd just opened here.
        let set = unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        assert_eq!(set, 0, "fcntl: {}", std::io::Error::last_os_error());
    }
    // SAFETY: both fds were just opened and are owned by nobody else.
    unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) }
}

/// What a process on a pseudo-terminal printed, and the keyboard.
pub struct Terminal {
    /// The master side, written as typing.
    typing: std::fs::File,
    /// Everything the terminal showed so far.
    seen: Arc<Mutex<String>>,
}

impl Terminal {
    /// Types `text`.
    pub fn type_(&mut self, text: &str) {
        self.typing.write_all(text.as_bytes()).unwrap();
    }

    /// What the terminal showed so far.
    pub fn printed(&self) -> String {
        self.seen.lock().unwrap().clone()
    }
}

/// Spawns `cmd` on a new pseudo-terminal, as the leader of a session whose
/// controlling terminal it is (as a login shell's session has one).
pub fn spawn_on_pty(cmd: &mut Command) -> (Child, Terminal) {
    let (master, slave) = openpty();
    cmd.stdin(slave.try_clone().unwrap())
        .stdout(slave.try_clone().unwrap())
        .stderr(slave);
    // SAFETY: setsid and ioctl are async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().unwrap();
    let seen = Arc::new(Mutex::new(String::new()));
    let mut reader = std::fs::File::from(master.try_clone().unwrap());
    let sink = Arc::clone(&seen);
    std::thread::spawn(move || {
        let mut buf = [0u8; 256];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    let terminal = Terminal {
        typing: std::fs::File::from(master),
        seen,
    };
    (child, terminal)
}
