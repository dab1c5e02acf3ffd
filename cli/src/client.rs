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

/// This host's name and our process id (`host:pid`): what `inspect` shows
/// for the locks we hold, and an election candidate's default value.
pub fn this_process() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "unknown-host".to_owned());
    format!("{host}:{}", std::process::id())
}
