//! What the connection checks found about each node: trusted, in
//! quarantine (and until when, and why), or suspect for the counter. For
//! `redquorum status` and for operators' own checks; and the operator's
//! word that nodes are new (`redquorum init`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::redlock::Redlock;
use crate::lua::Script;
use crate::node::connection::request::Request;
use crate::quorum::tally::node_bit;

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

/// Declares a node new (`redquorum init`): writes our marker for the
/// process the client probed, with no loss and our tag (see
/// `node/trust/tags.rs`), only if that process still runs and holds nothing but,
/// at most, a marker that a client's first probe wrote there finding no
/// other evidence (`why` = `unmarked`): a node in use is never declared
/// new. KEYS: marker. ARGV: run id, damage count, replication id, slots
/// served (`-`: not a cluster's shard), our tag. Returns `new`, `marked`,
/// `not-empty` or `restarted`.
pub(crate) static INIT_NEW: Script<1> = Script::new(concat!(
    crate::node::trust::marker::with_tag!(),
    r#"if not string.find(redis.call("INFO", "server"), "run_id:" .. ARGV[1], 1, true) then
  return "restarted"
end
local m = redis.call("HMGET", KEYS[1], "run", "why", "tags")
local keys = 0
if m[1] then
  if m[1] ~= ARGV[1] or m[2] ~= "unmarked" then return "marked" end
  keys = 1
end
if redis.call("DBSIZE") ~= keys then return "not-empty" end
redis.call("HSET", KEYS[1], "run", ARGV[1], "loss", "-", "seen", ARGV[2], "repl", ARGV[3],
  "why", "declared new", "slots", ARGV[4], "served", "-", "tags", with_tag(m[3], ARGV[5]))
return "new""#
));

/// What [`Redlock::init_new_nodes`] did on one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeInit {
    /// Declared new: our marker now names its process, and it counts
    /// toward every quorum at once.
    Declared,
    /// Carries our marker already: a node in use, left as it is.
    InUse,
    /// Holds keys: not a new node, left as it is.
    NotEmpty,
    /// Did not answer, restarted meanwhile, or the connection check is off
    /// (a restart quarantine of zero): nothing done.
    NotReached,
}

/// What [`Redlock::serve_quarantines`] did for one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Serving {
    /// No loss to serve: the node was trusted, declared new, in quarantine
    /// only for a clock that ran ahead, or not reached.
    Nothing,
    /// Its loss's quarantine passed while this client watched, and our
    /// marker now says so: every client counts the node at once.
    Served,
    /// Not served within the limit (its quarantine still on here, or our
    /// marker could not be written: an ACL without `+hset`, a node that
    /// stopped answering).
    NotYet,
}

/// The worse of two shards' outcomes, for their member.
fn worse(a: NodeInit, b: NodeInit) -> NodeInit {
    let rank = |o: NodeInit| match o {
        NodeInit::Declared => 0,
        NodeInit::InUse => 1,
        NodeInit::NotEmpty => 2,
        NodeInit::NotReached => 3,
    };
    if rank(b) > rank(a) {
        b
    } else {
        a
    }
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
        self.standing()
    }

    /// Each node's standing now, in configured order (see
    /// [`Redlock::node_trust`]), asking no node.
    pub(crate) fn standing(&self) -> Vec<NodeTrust> {
        let now = Instant::now();
        self.nodes()
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

    /// Declares nodes new, as an operator does once for a deployment whose
    /// nodes were just started empty (`redquorum init`). A node that
    /// started recently with none of our marks looks exactly like one whose
    /// data directory was wiped, so the client keeps it out of lock
    /// quorums for the restart quarantine (and suspect for counters) unless
    /// told otherwise. Each node that answers, carries no marker of ours
    /// and holds no key at all is marked as having lost nothing; nodes in
    /// use are never touched. Returns what was done, in configured order.
    ///
    /// Never run it on nodes that may have held locks: declaring a wiped
    /// node new lets a lock it forgot be taken twice.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f() -> redquorum::Result<()> {
    /// let redlock = redquorum::Redlock::builder()
    ///     .nodes(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])
    ///     .build()?;
    /// for (i, done) in redlock.init_new_nodes().await.iter().enumerate() {
    ///     println!("node {i}: {done:?}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn init_new_nodes(&self) -> Vec<NodeInit> {
        // Runs the connection checks where no connection is open yet (and
        // reads the slot map of a member that is a Redis Cluster).
        let _ = self.node_trust().await;
        let nodes = self.nodes();
        let declare = nodes.nodes.iter().map(|node| async move {
            // A member that is a Redis Cluster: each shard, each with its
            // own marker; the member is what its worst shard is.
            let mut outcome: Option<NodeInit> = None;
            for marker in node.markers() {
                let shard = self.declare_at(node, &marker).await;
                outcome = Some(outcome.map_or(shard, |o| worse(o, shard)));
            }
            outcome.unwrap_or(NodeInit::NotReached)
        });
        futures::future::join_all(declare).await
    }

    /// Watches every node whose quarantine is for a loss until that
    /// quarantine has passed on this client's clock, so that our marker on
    /// it says the loss was served and every client counts the node at once
    /// from then (`redquorum init --wait`). A loss that cannot be dated (a
    /// process restarted without its data, swapped in, or found with our
    /// marker missing) keeps each client out for a whole quarantine from
    /// its own first look unless one client watched it pass: a client that
    /// lives shorter than that (the CLI, a cron job) never counts the node
    /// otherwise. Reads each such node about once a second until none is
    /// left to serve, or until `limit` has passed; returns what became of
    /// each node, in configured order.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f() -> redquorum::Result<()> {
    /// use std::time::Duration;
    /// let redlock = redquorum::Redlock::builder()
    ///     .nodes(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])
    ///     .build()?;
    /// for (i, s) in redlock.serve_quarantines(Duration::from_secs(120)).await.iter().enumerate() {
    ///     println!("node {i}: {s:?}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn serve_quarantines(&self, limit: Duration) -> Vec<Serving> {
        let end = crate::clock::now() + limit;
        let nodes = self.nodes();
        let mut had = vec![false; nodes.nodes.len()];
        loop {
            let _ = self.node_trust().await;
            let unserved: Vec<bool> = nodes
                .nodes
                .iter()
                .map(|node| {
                    node.markers()
                        .iter()
                        .any(|m| node.trust_at(m).is_some_and(|t| t.loss_unserved()))
                })
                .collect();
            for (had, now) in had.iter_mut().zip(&unserved) {
                *had |= now;
            }
            if !unserved.contains(&true) || crate::clock::now() >= end {
                return had
                    .iter()
                    .zip(&unserved)
                    .map(|(had, now)| match (had, now) {
                        (false, _) => Serving::Nothing,
                        (true, false) => Serving::Served,
                        (true, true) => Serving::NotYet,
                    })
                    .collect();
            }
            // A node's whole check runs again behind the first request a
            // second after its last: the one that finds the quarantine over
            // writes `served`.
            tokio::time::sleep(crate::node::trust::vigil::RECHECK + Duration::from_millis(100))
                .await;
        }
    }

    /// [`Redlock::init_new_nodes`] for the node of `member` whose marker
    /// lives at `marker`.
    async fn declare_at(&self, member: &crate::node::Node, marker: &str) -> NodeInit {
        let nodes = self.nodes();
        let i = member.index;
        if member.trust_at(marker).is_none_or(|t| t.last.is_none()) {
            // A shard not reached yet: a read of the marker opens its
            // connection, and so runs its check.
            let req = Request::plain(redis::cmd("EXISTS").arg(marker).to_owned());
            let mut fan = nodes.fanout(&req, node_bit(i));
            while fan.next().await.is_some() {}
        }
        let Some(probe) = member.trust_at(marker).and_then(|t| t.last) else {
            return NodeInit::NotReached;
        };
        // The tag the members carry, or this client's own (`node/trust/tags.rs`).
        let tag = member.tag().unwrap_or_default();
        let req: Arc<Request> = Request::script(&INIT_NEW, [marker], |cmd| {
            cmd.arg(&probe.run_id)
                .arg(probe.seen().unwrap_or(0))
                .arg(&probe.replid)
                .arg(probe.slots.as_deref().unwrap_or("-"))
                .arg(&tag);
        });
        let mut fan = nodes.fanout(&req, node_bit(i));
        let reply = fan.next().await.and_then(|(_, r)| r.ok());
        match reply
            .and_then(|v| redis::from_redis_value::<String>(v).ok())
            .as_deref()
        {
            Some("new") => {
                member.declared_new_at(marker, &probe.run_id, probe.seen().unwrap_or(0));
                NodeInit::Declared
            }
            Some("marked") => NodeInit::InUse,
            Some("not-empty") => NodeInit::NotEmpty,
            _ => NodeInit::NotReached,
        }
    }
}
