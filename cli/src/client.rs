//! The library client, made from the command line's node list.

use std::process::ExitCode;
use std::time::Duration;

use redquorum::Redlock;

use crate::exit;

/// Makes the client, reporting configuration errors (exit code
/// [`exit::CONFIG`]).
pub fn build(
    nodes: &[String],
    (node_timeout, restart_quarantine): (Duration, Duration),
    prefix: &str,
) -> Result<Redlock, ExitCode> {
    Redlock::builder()
        .nodes(nodes)
        .node_timeout(node_timeout)
        .restart_quarantine(restart_quarantine)
        .key_prefix(prefix)
        .holder_label(this_process())
        .build()
        .map_err(|e| {
            eprintln!("redquorum: {e}");
            exit::code(exit::CONFIG)
        })
}

/// Refuses, before anything is sent, a `--ttl` too short for a command to
/// be run under: one that a round taking the whole node timeout leaves no
/// validity of ([`Redlock::shortest_ttl`]).
pub fn check_ttl(redlock: &Redlock, ttl: Duration) -> Result<(), ExitCode> {
    let shortest = redlock.shortest_ttl();
    if ttl > shortest {
        return Ok(());
    }
    eprintln!(
        "redquorum: --ttl {} is too short: a round may take up to --node-timeout, and with the \
         clock-drift allowance that leaves it no validity; give more than {} ms (the default \
         is 30s)",
        humantime(ttl),
        shortest.as_millis()
    );
    Err(exit::code(exit::CONFIG))
}

/// `d` as the command line writes it (`3ms`, `1500ms`).
fn humantime(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

/// This host's name and our process id (`host:pid`): what `inspect` shows
/// for the locks we hold, and an election candidate's default value.
pub fn this_process() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "unknown-host".to_owned());
    format!("{host}:{}", std::process::id())
}
