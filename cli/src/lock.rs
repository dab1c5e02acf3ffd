//! `redquorum lock`: run a command while holding a lock (or, with `-n K`,
//! one of K permits of a semaphore), renewed in the background; see
//! `hold.rs` for how the command runs, and `keep.rs` for a lock held with
//! no command.

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redquorum::{Acquirable, Acquire, Lock, Redlock};

use crate::args::LockArgs;
use crate::exit;
use crate::hold::{self, Ending, Forwarded};
use crate::keep;

/// Takes the lock (or a permit), runs the command, releases it.
pub async fn lock_and_run(redlock: Redlock, args: LockArgs) -> ExitCode {
    let mut signals = match Forwarded::install() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("redquorum: cannot install signal handlers: {e}");
            return exit::code(exit::CONFIG);
        }
    };
    if let Err(code) = crate::client::check_ttl(&redlock, args.ttl) {
        return code;
    }
    let names: Vec<&str> = args.resources.iter().map(String::as_str).collect();
    if names.len() > 1 && args.permits > 1 {
        eprintln!(
            "redquorum: -n {} takes one semaphore name, and {} resources were given; \
             name one, or drop -n to take them all at once",
            args.permits,
            names.len()
        );
        return exit::code(exit::CONFIG);
    }
    let side = args.shared || args.exclusive;
    if side && (names.len() > 1 || args.permits > 1) {
        eprintln!(
            "redquorum: --shared and --exclusive take one read-write lock: give one name and \
             no -n"
        );
        return exit::code(exit::CONFIG);
    }
    let resource = names.join("+");
    let rw = match side.then(|| redlock.rw_lock(&resource)).transpose() {
        Ok(rw) => rw,
        Err(e) => {
            eprintln!("redquorum: {e}");
            return exit::code(exit::CONFIG);
        }
    };
    let semaphore = match args.permits {
        1 => None,
        k => match redlock.semaphore(&resource, usize::from(k)) {
            Ok(s) => Some(s),
            Err(e) => {
                eprintln!("redquorum: {e}");
                return exit::code(exit::CONFIG);
            }
        },
    };
    let (ttl, wait) = (args.ttl, args.wait);
    let mut slot = None;
    let attempt = async {
        if let Some(rw) = &rw {
            let side = if args.shared {
                rw.read(ttl)
            } else {
                rw.write(ttl)
            };
            return shaped(side, args.fenced, wait).await;
        }
        if let Some(s) = &semaphore {
            let permit = shaped(s.acquire(ttl), args.fenced, wait).await;
            return permit.map(|p| {
                slot = Some(p.slot());
                p.into_lock()
            });
        }
        if names.len() > 1 {
            return shaped(redlock.lock_all(&names, ttl), args.fenced, wait).await;
        }
        shaped(redlock.lock(&resource, ttl), args.fenced, wait).await
    };
    let what = match (args.permits, names.len()) {
        _ if args.shared => format!("shared lock {resource:?}"),
        _ if args.exclusive => format!("exclusive lock {resource:?}"),
        (1, 1) => format!("lock {resource:?}"),
        (1, _) => format!("lock on {names:?} (all at once)"),
        (k, _) => format!("permit of {resource:?} (at most {k} at once)"),
    };
    let conflict = args.conflict_exit_code.unwrap_or(exit::NOT_ACQUIRED);
    let lock = match hold::acquire(&redlock, &mut signals, (&what, conflict), attempt).await {
        Ok(lock) => lock,
        Err(code) => {
            // The failed attempt's releases run in the background: let them
            // reach the nodes before we exit, or a stale key of ours would
            // hold the resource for a whole TTL.
            let _ = tokio::time::timeout(Duration::from_secs(1), redlock.settle()).await;
            return code;
        }
    };
    let env = environment(&redlock, &args, &lock, slot);
    if args.command.is_empty() {
        return keep::keep(&redlock, lock, &mut signals, &env, &what).await;
    }
    let ending = Ending {
        grace: args.grace,
        grace_past_lock: args.grace_past_lock,
    };
    let run = (args.command.as_slice(), env.as_slice());
    hold::run_under(&redlock, lock, &mut signals, run, &what, ending).await
}

/// What the command learns about the lock it runs under (documented in
/// `redquorum lock --help`).
fn environment(
    redlock: &Redlock,
    args: &LockArgs,
    lock: &Lock,
    slot: Option<usize>,
) -> Vec<(String, String)> {
    let unix_ms = |left: Duration| {
        (SystemTime::now() + left)
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    };
    let held = lock.resources();
    let mut env = vec![
        ("REDQUORUM_RESOURCE".to_owned(), held.join("+")),
        ("REDQUORUM_RESOURCES".to_owned(), held.join(" ")),
    ];
    // A permit's key is one of K slots' (REDQUORUM_PERMIT_SLOT says which).
    if slot.is_none() && held.len() == 1 && !args.shared && !args.exclusive {
        env.push(("REDQUORUM_KEY".to_owned(), redlock.key_for(held[0])));
    }
    env.push((
        "REDQUORUM_TTL_MS".to_owned(),
        args.ttl.as_millis().to_string(),
    ));
    env.push((
        "REDQUORUM_VALID_UNTIL_MS".to_owned(),
        unix_ms(lock.validity()).to_string(),
    ));
    if let Some(slot) = slot {
        env.push(("REDQUORUM_PERMITS".to_owned(), args.permits.to_string()));
        env.push(("REDQUORUM_PERMIT_SLOT".to_owned(), slot.to_string()));
    }
    if let Some(token) = lock.fencing_token() {
        env.push(("REDQUORUM_FENCING_TOKEN".to_owned(), token.to_string()));
        let tokens: Vec<String> = held
            .iter()
            .filter_map(|r| lock.fencing_token_for(r).map(|t| t.to_string()))
            .collect();
        env.push(("REDQUORUM_FENCING_TOKENS".to_owned(), tokens.join(" ")));
    }
    env
}

/// `acquisition`, waiting at most `wait`, fenced if asked.
fn shaped<'a, T: Acquirable<'a>>(
    acquisition: Acquire<'a, T>,
    fenced: bool,
    wait: Duration,
) -> Acquire<'a, T> {
    let acquisition = acquisition.wait(wait);
    if fenced {
        acquisition.fenced()
    } else {
        acquisition
    }
}
