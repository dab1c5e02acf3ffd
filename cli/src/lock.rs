//! `redquorum lock`: run a command while holding a lock, renewed in the
//! background; forward signals to the command's process group; end the
//! whole group if the lock is lost, no later than the lock's validity.

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redquorum::{Lock, Redlock};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::time::Instant;

use crate::args::LockArgs;
use crate::exit;
use crate::group::Group;

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
    let attempt = async {
        if args.fenced {
            redlock
                .lock_fenced_timeout(&args.resource, args.ttl, args.wait)
                .await
        } else {
            redlock
                .lock_timeout(&args.resource, args.ttl, args.wait)
                .await
        }
    };
    let acquired = tokio::select! {
        r = attempt => r,
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
    let env = environment(&redlock, &args, &lock);
    let mut group = match Group::spawn(&args.command, &env) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("redquorum: cannot run {:?}: {e}", args.command[0]);
            let _ = lock.release().await;
            redlock.settle().await;
            return exit::code(exit::cannot_run(&e));
        }
    };
    let lost = lock.lost();
    tokio::pin!(lost);
    let status = loop {
        tokio::select! {
            status = group.wait() => break Some(status),
            () = &mut lost => break None,
            sig = signals.recv() => group.signal(sig),
        }
    };
    match status {
        Some(status) => {
            // The first process is done; what it left running in its group
            // (background jobs) ends now, while the lock is still ours.
            group.end_rest(kill_at(&lock, &args)).await;
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
            let at = kill_at(&lock, &args);
            let cause = lock
                .lost_reason()
                .map(|e| format!(": {e}"))
                .unwrap_or_default();
            eprintln!(
                "redquorum: lock {:?} lost while the command ran{cause}; SIGTERM to the command, \
                 SIGKILL in {} at the latest",
                args.resource,
                rounded(at.saturating_duration_since(Instant::now())),
            );
            let _ = group.end(at).await;
            drop(lock);
            let _ = tokio::time::timeout(Duration::from_secs(1), redlock.settle()).await;
            exit::code(exit::LOCK_LOST)
        }
    }
}

/// When whatever is left of the command gets SIGKILL: `--grace` from now,
/// but no later than the end of the lock's validity unless
/// `--grace-past-lock` says otherwise.
fn kill_at(lock: &Lock, args: &LockArgs) -> Instant {
    let grace = Instant::now() + args.grace;
    if args.grace_past_lock {
        grace
    } else {
        grace.min(lock.valid_until())
    }
}

/// What the command learns about the lock it runs under (documented in
/// `redquorum lock --help`).
fn environment(redlock: &Redlock, args: &LockArgs, lock: &Lock) -> Vec<(String, String)> {
    let unix_ms = |left: Duration| {
        (SystemTime::now() + left)
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    };
    let mut env = vec![
        ("REDQUORUM_RESOURCE".to_owned(), args.resource.clone()),
        ("REDQUORUM_KEY".to_owned(), redlock.key_for(&args.resource)),
        (
            "REDQUORUM_TTL_MS".to_owned(),
            args.ttl.as_millis().to_string(),
        ),
        (
            "REDQUORUM_VALID_UNTIL_MS".to_owned(),
            unix_ms(lock.validity()).to_string(),
        ),
    ];
    if let Some(token) = lock.fencing_token() {
        env.push(("REDQUORUM_FENCING_TOKEN".to_owned(), token.to_string()));
    }
    env
}

/// A duration for a message: `950ms`, `4.2s`.
fn rounded(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}
