//! `redquorum inspect`: a name's state on the nodes, one line each,
//! without taking anything: as a lock (its holder), and as every other
//! kind the name is in use as (a read-write lock's writer and readers, a
//! semaphore's permits, an election's leader).

use std::process::ExitCode;
use std::time::Duration;

use redquorum::{Leader, LockState, Redlock, Result, RwState};

use crate::args::InspectArgs;
use crate::exit;

/// Reads the name (as a semaphore of `-n K` permits, where given) and
/// prints one line each; exits 0 when it can be taken now (see
/// `exit::inspect_codes`).
pub async fn inspect(redlock: Redlock, args: InspectArgs) -> ExitCode {
    let name = args.resource.as_str();
    let free = match args.permits {
        Some(k) => permits(&redlock, name, usize::from(k), k > 1).await,
        None => every_kind(&redlock, name).await,
    };
    match free {
        Ok(free) => exit::code(if free { 0 } else { exit::NOT_ACQUIRED }),
        Err(e) => {
            eprintln!("redquorum: {e}");
            exit::code(exit::for_error(&e))
        }
    }
}

/// Whether a lock's state shows any use: set somewhere, or waited for.
fn in_use(s: &LockState) -> bool {
    s.held_on > 0 || s.waiting > 0
}

/// The name as every kind: the plain lock's line where it is in use or
/// nothing else is, then each other kind it is in use as; whether every
/// one of them can be taken now.
async fn every_kind(redlock: &Redlock, name: &str) -> Result<bool> {
    let read_write = async { redlock.rw_lock(name)?.inspect().await };
    let election = async {
        redlock
            // Reading a leader uses no TTL; the shortest passes every
            // check (a restart quarantine under 10 s, say).
            .election(name, redlock.shortest_ttl() + Duration::from_millis(1))?
            .leader()
            .await
    };
    let (plain, rw, k, leader) = tokio::try_join!(
        redlock.inspect(name),
        read_write,
        redlock.semaphore_permits(name),
        election,
    )?;
    // A read-write lock's writer is the name's lock (the same key): its
    // lines are the lock's, but where readers hold the name, whose key
    // then holds their mark.
    let mark = plain.holder.as_ref().is_some_and(|h| h.is_readers_mark());
    let rw_used = mark || !rw.readers.is_empty();
    let others = rw_used || k.is_some() || leader.is_some();
    // Permits keep their mark on the name's key too: their lines say who.
    let permits_hold = k.is_some() && plain.holder.as_ref().is_some_and(|h| h.is_permits_mark());
    let mut free = true;
    // A leader holds the name's lock too: its line says who, with the
    // lock's waiters.
    if rw_used || leader.is_some() || permits_hold {
        free &= plain.free_in == Some(Duration::ZERO);
    } else if in_use(&plain) || !others {
        println!("{name}: {}", describe(&plain, redlock.node_count()));
        free &= plain.free_in == Some(Duration::ZERO);
    }
    if rw_used {
        free &= read_write_lines(redlock, name, &rw);
    }
    if let Some(k) = k {
        free &= permits(redlock, name, k, true).await?;
    }
    if let Some(leader) = &leader {
        election_line(name, leader, plain.waiting);
        free = false;
    }
    Ok(free)
}

/// A lock, or (`semaphore`) a semaphore's `k` permits, one line each
/// (`-n 1` is the lock; a semaphore the nodes hold with one permit is a
/// semaphore); whether one can be taken now.
async fn permits(redlock: &Redlock, name: &str, k: usize, semaphore: bool) -> Result<bool> {
    let states = if !semaphore {
        vec![redlock.inspect(name).await?]
    } else {
        redlock.semaphore(name, k)?.inspect().await?
    };
    let nodes = redlock.node_count();
    for (i, state) in states.iter().enumerate() {
        if !semaphore {
            println!("{name}: {}", describe(state, nodes));
        } else {
            println!("{name} permit {i}: {}", describe(state, nodes));
        }
    }
    Ok(states.iter().any(|s| s.free_in == Some(Duration::ZERO)))
}

/// A read-write lock: its writer's line, then its readers'; whether a
/// writer could take it now.
fn read_write_lines(redlock: &Redlock, name: &str, state: &RwState) -> bool {
    let nodes = redlock.node_count();
    let writer = describe(&state.writer, nodes);
    // "free" would say nothing of the readers, which the time it can be
    // taken in counts.
    let writer = match writer.strip_prefix("free") {
        Some(rest) => format!("none{rest}"),
        None => writer,
    };
    println!("{name} (read-write lock) writer: {writer}");
    if state.readers.is_empty() {
        println!("{name} (read-write lock) readers: none");
    }
    for reader in &state.readers {
        let who = reader.label().unwrap_or(&reader.value);
        let left = reader
            .time_left
            .map_or("no TTL".into(), |d| format!("{} left", secs(d)));
        println!("{name} (read-write lock) reader: {who}, {left} unless renewed");
    }
    state.is_free()
}

/// An election's leader and term, and how many wait for the name.
fn election_line(name: &str, leader: &Leader, waiting: usize) {
    println!(
        "{name} (election): led by {}, term {}; {waiting} waiting",
        leader.value, leader.term
    );
}

/// One lock's line, after its name.
fn describe(s: &LockState, nodes: usize) -> String {
    let of = |n: usize| format!("{n} of {nodes} nodes");
    let mut line = match &s.holder {
        Some(h) => {
            let who = if h.is_permits_mark() {
                "its semaphore's permits".to_owned()
            } else {
                h.label()
                    .map_or_else(|| format!("value {}", h.value), |label| label.to_owned())
            };
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
