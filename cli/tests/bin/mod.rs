//! The `redquorum` binary, ready to run against a test cluster (shared by
//! the CLI's test files).

use std::process::{Command, Stdio};

use crate::support::Cluster;

/// `redquorum` pointed at `c`'s nodes, with no `RUST_LOG` and no stdin.
pub fn cli(c: &Cluster) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_redquorum"));
    cmd.env("REDQUORUM_NODES", c.urls().join(","))
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    cmd
}
