//! What the connection checks found about each node: trusted, in
//! quarantine (and until when, and why), or suspect for the counter. For
//! `redquorum status` and for operators' own checks.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::lock::redlock::Redlock;
use crate::node::request::Request;

/// One node's standing with this client (see
/// [`RedlockBuilder::restart_quarantine`](crate::RedlockBuilder::restart_quarantine)).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeTrust {
    /// No connection check has completed: the node did not answer, or the
    /// check is off (a restart quarantine of zero).
    Unknown,
    /// Counts toward every quorum.
    Trusted,
    /// May have lost writes recently: its yes does not count toward a lock
    /// quorum until `until`.
    Quarantined {
        /// When it counts again, on this process's monotonic clock.
        until: Instant,
        /// How long that is from when this was read.
        remaining: Duration,
        /// Why it may have lost writes.
        cause: &'static str,
    },
    /// May have lost writes, longer ago than the quarantine: it counts for
    /// locks, and for each counter once that counter's record there was
    /// repaired (time does not heal a counter).
    Suspect {
        /// Why it may have lost writes.
        cause: &'static str,
    },
}

impl Redlock {
    /// Each node's standing, in configured order, after one `PING` to every
    /// node (which opens connections, and so runs their checks, where none
    /// is open). A node that does not answer within the node timeout is
    /// [`NodeTrust::Unknown`] if it was never checked.
    pub async fn node_trust(&self) -> Vec<NodeTrust> {
        let nodes = self.nodes();
        let req: Arc<Request> = Request::plain(redis::cmd("PING"));
        let mut fan = nodes.fanout(&req, nodes.all());
        while fan.next().await.is_some() {}
        let now = Instant::now();
        nodes
            .nodes
            .iter()
            .map(|node| {
                let trust = node.trust();
                let cause = node.loss_cause();
                match (trust.probed, node.quarantined(now), trust.cause) {
                    (false, _, _) => NodeTrust::Unknown,
                    (true, Some(until), _) => NodeTrust::Quarantined {
                        until,
                        remaining: until.saturating_duration_since(now),
                        cause,
                    },
                    (true, None, Some(_)) => NodeTrust::Suspect { cause },
                    (true, None, None) => NodeTrust::Trusted,
                }
            })
            .collect()
    }
}
