//! `redquorum lock`: run a command while holding a lock, renewed in the
//! background; forward signals to it; terminate it if the lock is lost.

use std::process::ExitCode;
use std::time::Duration;

use redquorum::Redlock;
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::args::LockArgs;
use crate::exit;

/// The signals `lock` forwards to its command. Installed before the first
/// request, so that from then on none of them can kill us with the default
/// action while a lock may be held (which would leave it to its TTL).
struct Forwarded {
    /// SIGINT.
    int: Signal,
    /// SIGTERM.
    term: Signal,
    /// SIGHUP.
    hup: Signal,
}

impl Forwarded {
    fn install() -> std::io::Result<Self> {
        Ok(Self {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// The next signal received.
    async fn recv(&mut self) -> libc::c_int {
        tokio::select! {
            _ = self.int.recv() => libc::SIGINT,
            _ = self.term.recv() => libc::SIGTERM,
            _ = self.hup.recv() => libc::SIGHUP,
        }
    }
}

/// Takes the lock, runs the command, releases the lock.
pub async fn lock_and_run(redlock: Redlock, args: LockArgs) -> ExitCode {
    let mut signals = match Forwarded::install() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("redquorum: cannot install signal handlers: {e}");
            return exit::code(exit::CONFIG);
        }
    };
    let acquired = tokio::select! {
        r = redlock.lock_timeout(&args.resource, args.ttl, args.wait) => r,
        sig = signals.recv() => {
            // Dropping the attempt releases whatever it had set; wait for
            // that to reach the nodes, then die of the signal's status.
            let _ = tokio::time::timeout(Duration::from_secs(1), redlock.settle()).await;
            return exit::code(128 + sig as u8);
        }
    };
    // A signal that arrives from here until the command runs is kept by the
    // handlers and forwarded to the command as soon as it starts.
    let lock = match acquired {
        Ok(lock) => lock,
        Err(e) => {
            eprintln!("redquorum: lock {:?} not acquired: {e}", args.resource);
            // The failed attempt's releases run in the background: let them
            // reach the nodes before we exit, or a stale key of ours would
            // hold the resource for a whole TTL.
            let _ = tokio::time::timeout(Duration::from_secs(1), redlock.settle()).await;
            return exit::code(exit::for_error(&e));
        }
    };
    lock.auto_extend();
    let mut child = match tokio::process::Command::new(&args.command[0])
        .args(&args.command[1..])
        .kill_on_drop(true)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("redquorum: cannot run {:?}: {e}", args.command[0]);
            let _ = lock.release().await;
            return exit::code(exit::CANNOT_RUN);
        }
    };
    let pid = child.id().map(|p| p as libc::pid_t);
    let lost = lock.lost();
    tokio::pin!(lost);
    let status = loop {
        tokio::select! {
            status = child.wait() => break Ok(status),
            () = &mut lost => break Err(()),
            sig = signals.recv() => send(pid, sig),
        }
    };
    match status {
        Ok(status) => {
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
        Err(()) => {
            eprintln!(
                "redquorum: lock {:?} lost while the command ran; terminating it",
                args.resource
            );
            send(pid, libc::SIGTERM);
            if tokio::time::timeout(args.grace, child.wait())
                .await
                .is_err()
            {
                send(pid, libc::SIGKILL);
                let _ = child.wait().await;
            }
            drop(lock);
            let _ = tokio::time::timeout(Duration::from_secs(1), redlock.settle()).await;
            exit::code(exit::LOCK_LOST)
        }
    }
}

/// Sends `sig` to the child.
fn send(pid: Option<libc::pid_t>, sig: libc::c_int) {
    if let Some(pid) = pid {
        // SAFETY: kill(2) has no memory-safety preconditions; the pid is our
        // own child's, which we have not reaped yet.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}
