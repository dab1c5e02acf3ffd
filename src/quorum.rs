//! Fan a request out to all nodes at once and decide at the earliest moment.
//!
//! [`Fanout`] yields replies in the order they arrive and turns every node that
//! has not answered by the round's deadline into a timeout, so one hung node
//! never adds latency once the others have decided the outcome. [`Tally`]
//! counts votes and says when the outcome is known: a quorum won, or so many
//! nodes refused or failed that a quorum is impossible.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use redis::{RedisResult, Value};
use tokio::time::{Instant, Sleep};

use crate::error::{NodeError, NodeErrorKind};
use crate::lock::Inner;
use crate::node::{Call, Node, Request};

/// Tracks rounds still finishing in the background, so a short-lived program
/// can wait for them before it exits ([`crate::Redlock::settle`]).
#[derive(Debug, Default)]
pub(crate) struct Background {
    /// Rounds in flight.
    pending: std::sync::atomic::AtomicUsize,
    /// Woken when `pending` drops to zero.
    idle: tokio::sync::Notify,
}

/// Held by one background round; its drop marks the round done.
pub(crate) struct BackgroundToken(Arc<Background>);

impl Background {
    /// Registers one background round.
    pub(crate) fn enter(this: &Arc<Self>) -> BackgroundToken {
        this.pending
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        BackgroundToken(Arc::clone(this))
    }

    /// Waits until no round is pending.
    pub(crate) async fn settled(&self) {
        loop {
            let idle = self.idle.notified();
            if self.pending.load(std::sync::atomic::Ordering::Acquire) == 0 {
                return;
            }
            idle.await;
        }
    }
}

impl Drop for BackgroundToken {
    fn drop(&mut self) {
        if self
            .0
            .pending
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel)
            == 1
        {
            self.0.idle.notify_waiters();
        }
    }
}

/// Bit set of node indexes (a quorum of more than 64 nodes is not a thing).
pub(crate) type NodeSet = u64;

/// The largest number of nodes a [`NodeSet`] can hold.
pub(crate) const MAX_NODES: usize = 64;

/// The set holding nodes `0..n`.
pub(crate) fn all_nodes(n: usize) -> NodeSet {
    if n >= MAX_NODES {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

/// Majority of `n`: the smallest count any two of which overlap.
pub(crate) fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// What one node's reply means for the decision.
#[derive(Debug)]
pub(crate) enum Vote {
    /// The node did what we asked.
    Yes,
    /// The node answered, and refused (the key is someone else's).
    No,
    /// The node could not take part.
    Failed(NodeErrorKind),
}

/// Counts votes and knows when the outcome is decided.
#[derive(Debug)]
pub(crate) struct Tally {
    /// Votes needed to win.
    pub(crate) quorum: usize,
    /// Nodes asked.
    pub(crate) asked: usize,
    /// Nodes that said yes.
    pub(crate) yes: NodeSet,
    /// Nodes that answered no.
    pub(crate) no: NodeSet,
    /// Nodes that failed, and why.
    pub(crate) failures: Vec<NodeError>,
}

impl Tally {
    /// An empty tally for a round that asks `asked` nodes out of `n`.
    pub(crate) fn new(n: usize, asked: usize) -> Self {
        Self {
            quorum: quorum(n),
            asked,
            yes: 0,
            no: 0,
            failures: Vec::new(),
        }
    }

    /// Records one node's vote.
    pub(crate) fn record(&mut self, node: &Node, vote: Vote) {
        let bit = 1u64 << node.index;
        match vote {
            Vote::Yes => self.yes |= bit,
            Vote::No => self.no |= bit,
            Vote::Failed(kind) => self.failures.push(NodeError {
                index: node.index,
                addr: node.addr.clone(),
                kind,
            }),
        }
    }

    /// Number of yes votes.
    pub(crate) fn yes_count(&self) -> usize {
        self.yes.count_ones() as usize
    }

    /// `Some(true)` once a quorum said yes, `Some(false)` once a quorum can no
    /// longer be reached, `None` while it could still go either way.
    pub(crate) fn decided(&self) -> Option<bool> {
        let yes = self.yes_count();
        let lost = self.no.count_ones() as usize + self.failures.len();
        if yes >= self.quorum {
            Some(true)
        } else if yes + (self.asked - yes - lost) < self.quorum {
            Some(false)
        } else {
            None
        }
    }

    /// Whether enough nodes failed (rather than refused) to make the quorum
    /// unreachable whatever the others said: the outcome is then a
    /// connectivity problem, not contention.
    pub(crate) fn failures_prevent_quorum(&self) -> bool {
        self.asked.saturating_sub(self.failures.len()) < self.quorum
    }
}

/// One request in flight to a set of nodes.
pub(crate) struct Fanout<'a> {
    /// The nodes, to record their health.
    nodes: &'a [Node],
    /// Counts rounds left to finish in the background.
    background: &'a Arc<Background>,
    /// One call per node asked, with the node's index. Rounds are small (a
    /// handful of nodes), so every unanswered call is polled on each wake-up:
    /// one allocation per round instead of one per call.
    calls: Vec<(usize, Call)>,
    /// Nodes asked that have not answered yet.
    waiting: NodeSet,
    /// When unanswered nodes count as timed out.
    deadline: Pin<Box<Sleep>>,
    /// The per-node timeout, reported in timeout errors.
    timeout: Duration,
    /// Set once the deadline has passed.
    expired: bool,
}

impl<'a> Fanout<'a> {
    /// Sends `req` to every node in `targets` at once.
    pub(crate) fn start(inner: &'a Inner, req: &Arc<Request>, targets: NodeSet) -> Self {
        let nodes = &inner.nodes;
        let timeout = inner.config.node_timeout;
        let mut calls = Vec::with_capacity(targets.count_ones() as usize);
        let mut waiting = 0;
        for node in nodes.iter().filter(|n| targets & (1u64 << n.index) != 0) {
            calls.push((node.index, node.call(req)));
            waiting |= 1u64 << node.index;
        }
        Self {
            nodes,
            background: &inner.background,
            calls,
            waiting,
            deadline: Box::pin(tokio::time::sleep_until(Instant::now() + timeout)),
            timeout,
            expired: false,
        }
    }

    /// The next reply, or a timeout for a node that missed the deadline, or
    /// `None` when every node asked has been accounted for.
    pub(crate) async fn next(&mut self) -> Option<(usize, Result<Value, NodeErrorKind>)> {
        if self.waiting == 0 {
            return None;
        }
        if !self.expired {
            let (calls, waiting, deadline) = (&mut self.calls, self.waiting, &mut self.deadline);
            let polled = poll_fn(|cx| {
                // Replies first: one that is in counts even at the deadline.
                if let Poll::Ready(reply) = poll_calls(calls, waiting, cx) {
                    return Poll::Ready(Some(reply));
                }
                deadline.as_mut().poll(cx).map(|()| None)
            })
            .await;
            match polled {
                Some((i, r)) => {
                    self.waiting &= !(1u64 << i);
                    return Some((i, r.map_err(NodeErrorKind::Redis)));
                }
                None => self.expired = true,
            }
        }
        let i = self.waiting.trailing_zeros() as usize;
        self.waiting &= !(1u64 << i);
        self.nodes[i].mark_unresponsive();
        Some((i, Err(NodeErrorKind::Timeout(self.timeout))))
    }

    /// Nodes asked that have not answered yet.
    pub(crate) fn waiting(&self) -> NodeSet {
        self.waiting
    }

    /// Lets calls still in flight finish on their own (bounded by the round's
    /// deadline), so requests such as a release reach slow nodes even though
    /// the caller has moved on. Cheap when nothing is pending.
    pub(crate) fn finish_in_background(self) {
        // Every request was handed to its connection or queued in order when
        // the call was made. Carrying the calls (bounded by the round's
        // deadline) keeps queued SETs wanted, so they still go out and the
        // lock lands on every healthy node, and lets late replies mark
        // nodes healthy. (Releases go out even if dropped.)
        if self.waiting == 0 || self.expired {
            return;
        }
        let Fanout {
            mut calls,
            mut waiting,
            deadline,
            background,
            ..
        } = self;
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let token = Background::enter(background);
            handle.spawn(async move {
                let drain = poll_fn(|cx| {
                    while let Poll::Ready((i, _)) = poll_calls(&mut calls, waiting, cx) {
                        waiting &= !(1u64 << i);
                    }
                    if waiting == 0 {
                        Poll::Ready(())
                    } else {
                        Poll::Pending
                    }
                });
                tokio::select! {
                    () = drain => {}
                    () = deadline => {}
                }
                drop(token);
            });
        }
    }
}

/// Polls the calls of the nodes in `waiting`; returns the first reply found.
fn poll_calls(
    calls: &mut [(usize, Call)],
    waiting: NodeSet,
    cx: &mut Context<'_>,
) -> Poll<(usize, RedisResult<Value>)> {
    for (i, call) in calls.iter_mut() {
        if waiting & (1u64 << *i) != 0 {
            if let Poll::Ready(reply) = call.poll_reply(cx) {
                return Poll::Ready((*i, reply));
            }
        }
    }
    Poll::Pending
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(i: usize) -> Node {
        Node::new(
            i,
            redis::Client::open(format!("redis://127.0.0.1:{}", 1000 + i)).expect("url"),
            Duration::from_secs(1),
        )
    }

    #[test]
    fn quorum_sizes() {
        assert_eq!(quorum(1), 1);
        assert_eq!(quorum(3), 2);
        assert_eq!(quorum(4), 3);
        assert_eq!(quorum(5), 3);
        assert_eq!(all_nodes(5), 0b11111);
        assert_eq!(all_nodes(64), u64::MAX);
    }

    #[test]
    fn decides_at_quorum_won() {
        let nodes: Vec<Node> = (0..5).map(node).collect();
        let mut t = Tally::new(5, 5);
        t.record(&nodes[0], Vote::Yes);
        t.record(&nodes[1], Vote::Yes);
        assert_eq!(t.decided(), None);
        t.record(&nodes[2], Vote::Yes);
        assert_eq!(t.decided(), Some(true));
    }

    #[test]
    fn decides_at_quorum_impossible() {
        let nodes: Vec<Node> = (0..5).map(node).collect();
        let mut t = Tally::new(5, 5);
        t.record(&nodes[0], Vote::No);
        t.record(&nodes[1], Vote::Failed(NodeErrorKind::UnexpectedReply));
        assert_eq!(t.decided(), None);
        t.record(&nodes[2], Vote::No);
        assert_eq!(t.decided(), Some(false));
        assert!(!t.failures_prevent_quorum());
    }

    #[test]
    fn failures_alone_can_prevent_quorum() {
        let nodes: Vec<Node> = (0..5).map(node).collect();
        let mut t = Tally::new(5, 5);
        for n in &nodes[..3] {
            t.record(
                n,
                Vote::Failed(NodeErrorKind::Timeout(Duration::from_millis(1))),
            );
        }
        assert_eq!(t.decided(), Some(false));
        assert!(t.failures_prevent_quorum());
    }

    #[test]
    fn subset_round_is_impossible_when_too_few_asked() {
        // Asking 2 of 5 nodes can never win a quorum of 3.
        let t = Tally::new(5, 2);
        assert_eq!(t.decided(), Some(false));
    }
}
