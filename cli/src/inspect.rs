//! `redquorum inspect`: a lock's (or a semaphore's permits') state on the
//! nodes, one line each, without taking anything.

use std::process::ExitCode;
use std::time::Duration;

use redquorum::{LockState, Redlock};

use crate::args::InspectArgs;
use crate::exit;

/// Reads the lock (or the permits) and prints one line each; exits 0 when
/// one can be taken now (see `exit::inspect_codes`).
pub async fn inspect(redlock: Redlock, args: InspectArgs) -> ExitCode {
    let read = if args.permits == 1 {
        redlock.inspect(&args.resource).await.map(|s| vec![s])
    } else {
        match redlock.semaphore(&args.resource, usize::from(args.permits)) {
            Ok(semaphore) => semaphore.inspect().await,
            Err(e) => Err(e),
        }
    };
    let states = match read {
        Ok(states) => states,
        Err(e) => {
            eprintln!("redquorum: {e}");
            return exit::code(exit::for_error(&e));
        }
    };
    let nodes = redlock.node_count();
    for (i, state) in states.iter().enumerate() {
        let name = if args.permits == 1 {
            args.resource.clone()
        } else {
            format!("{} permit {i}", args.resource)
        };
        println!("{name}: {}", describe(state, nodes));
    }
    let free = states.iter().any(|s| s.free_in == Some(Duration::ZERO));
    exit::code(if free { 0 } else { exit::NOT_ACQUIRED })
}

/// One lock's line, after its name.
fn describe(s: &LockState, nodes: usize) -> String {
    let of = |n: usize| format!("{n} of {nodes} nodes");
    let mut line = match &s.holder {
        Some(h) => {
            let who = h
                .label()
                .map_or_else(|| format!("value {}", h.value), |label| label.to_owned());
            let left = h
                .time_left
                .map_or("no TTL".to_owned(), |d| format!("{} left", secs(d)));
            format!("held by {who} on {}, {left} unless renewed", of(s.held_on))
        }
        None if s.held_on == 0 => "free".to_owned(),
        None => format!(
            "no holder on a quorum, but set on {} (an attempt that lost, or a holder that lost \
             its quorum)",
            of(s.held_on)
        ),
    };
    match s.free_in {
        Some(d) if d.is_zero() => {}
        Some(d) => line.push_str(&format!("; can be taken in {}", secs(d))),
        None => line.push_str("; never frees by itself (a key without TTL)"),
    }
    line.push_str(&format!("; {} waiting", s.waiting));
    if s.answered < nodes {
        line.push_str(&format!(" ({} answered)", of(s.answered)));
    }
    line
}

/// `12.3s`.
fn secs(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}
