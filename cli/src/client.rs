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
        .build()
        .map_err(|e| {
            eprintln!("redquorum: {e}");
            exit::code(exit::CONFIG)
        })
}
