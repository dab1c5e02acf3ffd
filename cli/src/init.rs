//! `redquorum init`: the operator's word that the nodes were just started
//! empty, so that clients count them at once instead of waiting out the
//! restart quarantine (a fresh node looks exactly like a wiped one).

use std::process::ExitCode;

use redquorum::{NodeInit, Redlock};

use crate::exit;

/// Declares every new node new; prints one line per node. Exits 0 when
/// every node is declared or already in use, 69 when one was not reached,
/// 78 when one holds keys (not a new node: nothing was done there).
pub async fn init(redlock: Redlock) -> ExitCode {
    let done = redlock.init_new_nodes().await;
    let mut code = 0;
    // host:port only (a cluster member by its first seed): never a password.
    for (i, (d, addr)) in done.iter().zip(redlock.node_addrs()).enumerate() {
        let what = match d {
            NodeInit::Declared => "declared new: counts at once",
            NodeInit::InUse => "in use already (our marker is there): left as it is",
            NodeInit::NotEmpty => {
                code = code.max(exit::CONFIG);
                "holds keys, so it is not new: left as it is (it counts once a client \
                 has watched it for the restart quarantine)"
            }
            _ => {
                code = code.max(exit::UNAVAILABLE);
                "not reached: nothing done (run init again when it answers)"
            }
        };
        println!("node {i} ({addr}): {what}");
    }
    exit::code(code)
}
