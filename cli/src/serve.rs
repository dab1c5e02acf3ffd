//! `redquorum status --wait`: waits out, once for every client, the
//! quarantine of nodes that lost data. Such a loss cannot be dated (a
//! process restarted without its data looks the same a second or a week
//! later), so each client keeps the node out for a whole quarantine from
//! its own first look, unless one client watched the quarantine pass and
//! said so in our marker on the node: a command that lives shorter than
//! the quarantine never does.

use std::time::Duration;

use redquorum::{NodeTrust, Redlock, Serving};

/// Waits out the quarantine of each node in one for a loss (see the
/// module docs); one line per such node before and after.
pub async fn serve(redlock: &Redlock) {
    let standing = redlock.node_trust().await;
    // host:port only (a cluster member by its first seed): never a password.
    let addrs: Vec<&str> = redlock.node_addrs().collect();
    let mut longest = Duration::ZERO;
    for (i, t) in standing.iter().enumerate() {
        if let NodeTrust::Quarantined {
            remaining, cause, ..
        } = t
        {
            longest = longest.max(*remaining);
            println!(
                "node {i} ({}): {cause}; waiting out its quarantine ({}s) once for every client",
                addrs[i],
                remaining.as_secs() + 1
            );
        }
    }
    // A check a second after the quarantine's end records it served, and
    // the next one reads that back.
    let served = redlock
        .serve_quarantines(longest + Duration::from_secs(5))
        .await;
    for (i, s) in served.iter().enumerate() {
        let was = matches!(standing[i], NodeTrust::Quarantined { .. });
        let what = match s {
            Serving::Served => "quarantine served: every client counts it at once from now",
            Serving::NotYet => {
                "still in quarantine (our marker could not be written there, or it stopped \
                 answering): each client waits it out on its own"
            }
            _ if was => {
                "not served: its quarantine is for a clock that ran ahead, which each client \
                 judges on its own clock"
            }
            _ => continue,
        };
        println!("node {i} ({}): {what}", addrs[i]);
    }
}
