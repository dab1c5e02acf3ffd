//! The node set and the one place that decides "did a quorum agree".
//!
//! [`Quorum`] owns the nodes, the per-node timeout and the rounds left to
//! finish in the background. A vote round sends one request to every node at
//! once ([`fanout`]), turns each reply into a vote and counts it ([`tally`])
//! until the outcome is known: a quorum won, or so many nodes refused or
//! failed that a quorum is impossible. The lock and the counter both build
//! on it; they differ only in what they send and how a reply votes.

pub(crate) mod background;
pub(crate) mod fanout;
pub(crate) mod probe;
pub(crate) mod tally;

use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use tokio::sync::watch;
use tracing::{debug, trace};

use crate::error::NodeErrorKind;
use crate::node::clock::clockwatch::ClockNews;
use crate::node::connection::request::Request;
use crate::node::Node;
use crate::quorum::background::Background;
use crate::quorum::fanout::Fanout;
use crate::quorum::tally::{all_nodes, node_bit, NodeSet, Tally, Vote};
use crate::telemetry::labels::Decided;
use crate::telemetry::Telemetry;

/// Whose yes counts in a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Counts {
    /// Every node's: the round's own rule makes a forgetful node harmless
    /// (the counter, releases, reads).
    All,
    /// Only nodes out of quarantine: lock acquisitions and extensions, whose
    /// safety rests on a node remembering the locks it holds.
    Trusted,
}

/// The independent nodes a client agrees through.
#[derive(Debug)]
pub(crate) struct Quorum {
    /// The nodes, in configured order (index = position).
    pub(crate) nodes: Vec<Node>,
    /// Nodes that must agree.
    needed: usize,
    /// How long one node may take to answer one request.
    pub(crate) node_timeout: Duration,
    /// Rounds finishing in the background (stragglers of a release...).
    pub(crate) background: Arc<Background>,
    /// What the client counts and reports.
    pub(crate) telemetry: Arc<Telemetry>,
    /// Told whenever a node's clock ran ahead (its held locks look).
    clock_news: ClockNews,
    /// While this client holds anything, its clocks are read even where
    /// nothing else is sent ([`Quorum::probe_while_held`]).
    probing: probe::Probing,
}

impl Quorum {
    /// The set of `nodes` of which `needed` must agree, each request
    /// bounded by `node_timeout`.
    /// Each round's node replies and decision go to `telemetry`; the
    /// nodes' clock watches tell `clock_news` of a jump ahead.
    pub(crate) fn new(
        nodes: Vec<Node>,
        needed: usize,
        node_timeout: Duration,
        telemetry: Arc<Telemetry>,
        clock_news: ClockNews,
    ) -> Self {
        Self {
            nodes,
            needed,
            node_timeout,
            background: Arc::default(),
            telemetry,
            clock_news,
            probing: probe::Probing::default(),
        }
    }

    /// A receiver that changes whenever a node's clock ran ahead.
    pub(crate) fn clock_news(&self) -> watch::Receiver<u64> {
        self.clock_news.subscribe()
    }

    /// How much faster than ours the fastest clock among the nodes in
    /// `held` was measured running (zero if none is).
    pub(crate) fn rate_excess(&self, held: NodeSet) -> f64 {
        self.nodes
            .iter()
            .filter(|n| held & node_bit(n.index) != 0)
            .map(Node::rate_excess)
            .fold(0.0, f64::max)
    }

    /// How much keys set at or after `since` on the nodes in `held` may
    /// have lost of their life to clocks that ran ahead: the most any one
    /// of them lost (a lock counted on all of them, each quorum-needed).
    pub(crate) fn ran_ahead_since(&self, held: NodeSet, since: tokio::time::Instant) -> Duration {
        self.nodes
            .iter()
            .filter(|n| held & node_bit(n.index) != 0)
            .map(|n| n.ran_ahead_since(since))
            .max()
            .unwrap_or_default()
    }

    /// How many nodes were seen running their clocks ahead of ours after
    /// `since`. Where a quorum of them did, the odd clock is ours (it
    /// stalled, or runs slow beyond the allowance): no validity is kept on
    /// it (`lock/shared.rs`).
    pub(crate) fn ran_ahead_after(&self, since: tokio::time::Instant) -> usize {
        self.nodes
            .iter()
            .filter(|n| !n.ran_ahead_since(since).is_zero())
            .count()
    }

    /// The nodes among `held` where a loss that may have taken keys set
    /// before was found after `since`.
    pub(crate) fn lost_since(&self, held: NodeSet, since: tokio::time::Instant) -> NodeSet {
        self.nodes
            .iter()
            .filter(|n| held & node_bit(n.index) != 0 && n.lost_since(since))
            .fold(0, |set, n| set | node_bit(n.index))
    }

    /// Nodes whose last request was answered in time.
    pub(crate) fn nodes_up(&self) -> usize {
        self.nodes.iter().filter(|n| n.is_healthy()).count()
    }

    /// The nodes whose last request was answered in time, as a set.
    pub(crate) fn healthy(&self) -> NodeSet {
        self.nodes
            .iter()
            .filter(|n| n.is_healthy())
            .fold(0, |set, n| set | node_bit(n.index))
    }

    /// Nodes that must agree: `nodes / 2 + 1`, or more with an amnesia
    /// tolerance.
    pub(crate) fn needed(&self) -> usize {
        self.needed
    }

    /// Whether every node answered its last request and enough are out of
    /// quarantine to win a lock quorum: a lock attempt is then decided in
    /// about a round trip (with a node that hangs, attempts that split
    /// wait for its timeout).
    pub(crate) fn lock_quorum_prompt(&self) -> bool {
        let now = std::time::Instant::now();
        let trusted = self.nodes.iter().filter(|n| n.quarantined(now).is_none());
        self.nodes.iter().all(|n| n.is_healthy()) && trusted.count() >= self.needed
    }

    /// Every node.
    pub(crate) fn all(&self) -> NodeSet {
        all_nodes(self.nodes.len())
    }

    /// Sends `req` to the nodes in `targets` at once.
    pub(crate) fn fanout(&self, req: &Arc<Request>, targets: NodeSet) -> Fanout<'_> {
        Fanout::start(
            &self.nodes,
            &self.background,
            &self.telemetry,
            self.node_timeout,
            req,
            targets,
        )
    }

    /// Sends `req` to `targets` and returns without waiting for replies: each
    /// request is handed to its node (or queued, in order) here, ahead of our
    /// next request there, and the calls are carried to the end in the
    /// background.
    pub(crate) fn send_quietly(&self, req: &Arc<Request>, targets: NodeSet) {
        if targets != 0 {
            self.fanout(req, targets).finish_in_background();
        }
    }

    /// The nodes whose connection was (re)made after `since`.
    pub(crate) fn reconnected_after(&self, since: std::time::Instant) -> NodeSet {
        self.nodes
            .iter()
            .filter(|n| n.reconnected_after(since))
            .fold(0, |set, n| set | tally::node_bit(n.index))
    }

    /// Waits until the rounds left to finish in the background are done.
    pub(crate) async fn settled(&self) {
        self.background.settled().await;
    }

    /// Sends `req` to all nodes and counts votes until the outcome is
    /// decided. `classify` maps node `i`'s reply to yes (`Some(true)`), no
    /// (`Some(false)`) or unexpected (`None`). Returns the tally and the calls
    /// still in flight, for the caller to drop or to finish in the background.
    pub(crate) async fn vote_round(
        &self,
        req: &Arc<Request>,
        what: &'static str,
        counts: Counts,
        classify: impl FnMut(usize, &Value) -> Option<bool>,
    ) -> (Tally, Fanout<'_>) {
        self.vote_until(req, what, counts, classify, |tally, _| {
            tally.decided().is_some()
        })
        .await
    }

    /// [`Quorum::vote_round`] with the caller's own rule for when to stop
    /// counting: `done` sees the tally and the calls still in flight after
    /// each vote.
    pub(crate) async fn vote_until(
        &self,
        req: &Arc<Request>,
        what: &'static str,
        counts: Counts,
        classify: impl FnMut(usize, &Value) -> Option<bool>,
        done: impl Fn(&Tally, &Fanout<'_>) -> bool,
    ) -> (Tally, Fanout<'_>) {
        self.count(self.fanout(req, self.all()), what, counts, classify, done)
            .await
    }

    /// [`Quorum::vote_until`] whose `classify` also sees the fan-out (to
    /// ask where a reply came from).
    pub(crate) async fn vote_until_via(
        &self,
        req: &Arc<Request>,
        what: &'static str,
        counts: Counts,
        classify: impl FnMut(usize, &Value, &Fanout<'_>) -> Option<bool>,
        done: impl Fn(&Tally, &Fanout<'_>) -> bool,
    ) -> (Tally, Fanout<'_>) {
        self.count_via(self.fanout(req, self.all()), what, counts, classify, done)
            .await
    }

    /// Counts the votes of a fan-out to every node already started (see
    /// [`Quorum::vote_until`]).
    pub(crate) async fn count<'a>(
        &'a self,
        fan: Fanout<'a>,
        what: &'static str,
        counts: Counts,
        mut classify: impl FnMut(usize, &Value) -> Option<bool>,
        done: impl Fn(&Tally, &Fanout<'_>) -> bool,
    ) -> (Tally, Fanout<'a>) {
        self.count_via(fan, what, counts, |i, v, _| classify(i, v), done)
            .await
    }

    /// [`Quorum::count`] whose `classify` also sees the fan-out.
    pub(crate) async fn count_via<'a>(
        &'a self,
        mut fan: Fanout<'a>,
        what: &'static str,
        counts: Counts,
        mut classify: impl FnMut(usize, &Value, &Fanout<'_>) -> Option<bool>,
        done: impl Fn(&Tally, &Fanout<'_>) -> bool,
    ) -> (Tally, Fanout<'a>) {
        let n = self.nodes.len();
        let mut tally = Tally::new(self.needed, n);
        let started = fan.started();
        let mut summary = NodeSummary::for_current_span(n);
        while let Some((i, reply)) = fan.next().await {
            let vote = match reply.map(|v| classify(i, &v, &fan)) {
                Ok(Some(true)) => Vote::Yes,
                Ok(Some(false)) => Vote::No,
                Ok(None) => Vote::Failed(NodeErrorKind::UnexpectedReply),
                Err(kind) => Vote::Failed(kind),
            };
            let node = &self.nodes[i];
            let vote = match vote {
                Vote::Yes if counts == Counts::Trusted => trusted_yes(node, &fan, i),
                vote => vote,
            };
            log_vote(node, what, &vote);
            let error = match &vote {
                Vote::Failed(kind) => Some(kind),
                _ => None,
            };
            self.telemetry.node_reply(i, started.elapsed(), error);
            summary.note(i, &vote);
            match &vote {
                Vote::Failed(_) => {
                    let addr = fan.addr(i).unwrap_or_else(|| node.addr.clone());
                    tally.record(i, &addr, vote);
                }
                _ => tally.record(i, &node.addr, vote),
            }
            if done(&tally, &fan) {
                break;
            }
        }
        let decided = if fan.expired() {
            Decided::Timeout
        } else if fan.unanswered() {
            Decided::Early
        } else {
            Decided::All
        };
        summary.record();
        self.telemetry
            .round(what, decided, started.elapsed(), || self.nodes_up());
        (tally, fan)
    }
}

/// The per-node results of a round, for the `nodes` field of the span
/// around it (an acquisition, an extension, a release, an allocation):
/// one letter per node, `y` yes, `n` no, `x` failed, `.` not heard. Built
/// only when the current span has that field.
struct NodeSummary(Option<Vec<u8>>);

impl NodeSummary {
    /// A summary of `n` nodes, if the current span records one.
    fn for_current_span(n: usize) -> Self {
        let span = tracing::Span::current();
        let wanted = !span.is_disabled() && span.has_field("nodes");
        Self(wanted.then(|| vec![b'.'; n]))
    }

    /// Node `i` voted `vote`.
    fn note(&mut self, i: usize, vote: &Vote) {
        if let Some(letter) = self.0.as_mut().and_then(|s| s.get_mut(i)) {
            *letter = match vote {
                Vote::Yes => b'y',
                Vote::No => b'n',
                Vote::Failed(_) => b'x',
            };
        }
    }

    /// Records the summary on the current span.
    fn record(self) {
        if let Some(letters) = self.0 {
            let text = String::from_utf8_lossy(&letters).into_owned();
            tracing::Span::current().record("nodes", text.as_str());
        }
    }
}

/// A lock round's yes from `node` (number `i` of `fan`): a failure while
/// the node (the shard the request went to, on a cluster) is quarantined.
fn trusted_yes(node: &Node, fan: &Fanout<'_>, i: usize) -> Vote {
    let now = std::time::Instant::now();
    match fan.quarantined(i, now) {
        None => Vote::Yes,
        Some(until) => Vote::Failed(NodeErrorKind::Quarantined {
            remaining: until.saturating_duration_since(now),
            cause: node.loss_cause(),
        }),
    }
}

/// Per-node outcome at `debug!`; failures a quorum survived show up at `warn!`
/// only once, in the caller's error (and a failure only an operator can fix
/// once per node, from the node's link).
fn log_vote(node: &Node, what: &'static str, vote: &Vote) {
    match vote {
        Vote::Failed(kind) => {
            debug!(node = node.index, addr = %node.addr, op = what, ?kind, "node failed")
        }
        _ => trace!(node = node.index, op = what, ?vote, "node replied"),
    }
}
