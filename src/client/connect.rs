//! Connecting to every member up front (`Redlock::connect`), instead of on
//! a first request: each node's connection opened and checked for lost
//! writes, and for a member that is a Redis Cluster its slot map read and
//! every shard it names connected and checked.

use std::future::poll_fn;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::redlock::Redlock;
use crate::client::trust::NodeTrust;
use crate::error::{Error, NodeError, NodeErrorKind, Result};
use crate::node::connection::request::{failure_of, Request};
use crate::node::Node;

/// How long a member that refused a connection is left before the next
/// try (a link waits as long before it connects again).
const RETRY: Duration = Duration::from_millis(50);

impl Redlock {
    /// Connects to every member now rather than on first use, and waits up
    /// to `limit` for all of them: each node's connection is opened and
    /// checked for lost writes; for a member that is a Redis Cluster, its
    /// slot map is read and every shard it names is connected and checked.
    /// A member that refuses is tried again until `limit` passes.
    ///
    /// Requests connect by themselves, so this is never needed; it keeps
    /// that set-up out of a service's first lock (several round trips, more
    /// on a cluster member, which that round waits for up to the connect
    /// timeout), and finds an unreachable deployment at start-up. The
    /// connections for push notifications still open on first wait.
    ///
    /// Returns each member's standing, as [`Redlock::node_trust`] does
    /// (members not reached are [`NodeTrust::Unknown`]), when at least a
    /// quorum of members was reached; a reached member may still be in
    /// quarantine.
    ///
    /// # Errors
    ///
    /// [`Error::NoQuorum`] (with an empty resource) when fewer than a
    /// quorum of members were reached within `limit`: `failures` names each
    /// member not reached and why (the last error it gave, or
    /// [`NodeErrorKind::Timeout`] for one that never answered).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f() -> redquorum::Result<()> {
    /// use std::time::Duration;
    /// let redlock = redquorum::Redlock::builder()
    ///     .nodes(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])
    ///     .build()?;
    /// redlock.connect(Duration::from_secs(5)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(&self, limit: Duration) -> Result<Vec<NodeTrust>> {
        // A limit past what the clock can count waits as long as needed.
        let far = Duration::from_secs(100 * 365 * 24 * 3600);
        let deadline = Instant::now() + limit.min(far);
        let nodes = self.nodes();
        let each = nodes.nodes.iter().map(|node| async move {
            let mut last = None;
            let outcome = tokio::time::timeout_at(deadline, reach(node, deadline, &mut last)).await;
            // Cut short by the limit: a member that refused every try so far
            // is said to refuse, not to be silent.
            let reached = outcome.unwrap_or_else(|_| match last {
                Some(e) if !matches!(e, NodeErrorKind::Timeout(_)) => Err(e),
                _ => Err(NodeErrorKind::Timeout(limit)),
            });
            reached.err().map(|kind| NodeError {
                index: node.index,
                addr: node.addr.clone(),
                kind,
            })
        });
        let failures: Vec<NodeError> = futures::future::join_all(each)
            .await
            .into_iter()
            .flatten()
            .collect();
        let (asked, needed) = (nodes.nodes.len(), nodes.needed());
        let reached = asked - failures.len();
        if reached < needed {
            return Err(Error::NoQuorum {
                resource: String::new(),
                asked,
                answered: reached,
                needed,
                succeeded: reached,
                failures,
            });
        }
        Ok(self.standing())
    }
}

/// Reaches `node` (every shard of a cluster member), trying again after
/// an error until `deadline`; the last error if it never did (kept in
/// `last` meanwhile, for a caller that stops waiting first).
async fn reach(
    node: &Node,
    deadline: Instant,
    last: &mut Option<NodeErrorKind>,
) -> std::result::Result<(), NodeErrorKind> {
    let ping = Request::plain(redis::cmd("PING"));
    loop {
        match reach_once(node, &ping).await {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() + RETRY < deadline => {
                tracing::debug!(node = node.index, error = %e, "not reached yet");
                *last = Some(e);
                tokio::time::sleep(RETRY).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// One `PING` to `node` (which opens and checks its connection, and reads
/// a cluster member's slot map), then, on a cluster member, one to every
/// shard its map names.
async fn reach_once(node: &Node, ping: &Arc<Request>) -> std::result::Result<(), NodeErrorKind> {
    let mut call = node.call(ping);
    poll_fn(|cx| call.poll_reply(cx))
        .await
        .map_err(|e| failure_of(e, None))?;
    #[cfg(feature = "cluster")]
    if node.is_cluster() {
        let shards = node.current_links().into_iter().map(|link| async move {
            let mut call = crate::node::connection::call::Call::start(&link, ping);
            poll_fn(|cx| call.poll_reply(cx)).await
        });
        for reply in futures::future::join_all(shards).await {
            reply.map_err(|e| failure_of(e, None))?;
        }
    }
    Ok(())
}
