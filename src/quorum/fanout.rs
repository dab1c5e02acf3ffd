//! One request in flight to a set of nodes: replies in the order they
//! arrive, and every node that has not answered by the round's deadline
//! turned into a timeout, so one hung node never adds latency once the
//! others have decided the outcome.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use redis::{RedisResult, Value};
use tokio::time::{Instant, Sleep};

use crate::error::NodeErrorKind;
use crate::node::connection::call::Call;
use crate::node::connection::link::Link;
use crate::node::connection::request::{failure_of, Request};
use crate::node::Node;
use crate::quorum::background::Background;
use crate::quorum::tally::{node_bit, NodeSet};
use crate::telemetry::Telemetry;

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
    /// When the requests were handed to their nodes.
    started: Instant,
    /// The request (its script, if any, is named in a permission error).
    req: Arc<Request>,
}

impl<'a> Fanout<'a> {
    /// Sends `req` to every node of `nodes` in `targets` at once (each
    /// request counted in `telemetry`); nodes that have not answered within
    /// `timeout` count as timed out. A round that opens a node's first
    /// connection waits as long as that may take (the connect timeout): its
    /// set-up takes several round trips, the per-node timeout one. Time
    /// spent is still time spent (a lock's validity counts it); only a
    /// first round that would have failed on set-up alone gains.
    pub(crate) fn start(
        nodes: &'a [Node],
        background: &'a Arc<Background>,
        telemetry: &Telemetry,
        timeout: Duration,
        req: &Arc<Request>,
        targets: NodeSet,
    ) -> Self {
        let mut calls = Vec::with_capacity(targets.count_ones() as usize);
        let mut waiting = 0;
        let asked = || nodes.iter().filter(|n| targets & node_bit(n.index) != 0);
        let first = asked().filter_map(Node::first_contact).max();
        let timeout = first.map_or(timeout, |setup| setup.max(timeout));
        for node in asked() {
            calls.push((node.index, node.call(req)));
            telemetry.node_sent(node.index);
            waiting |= node_bit(node.index);
        }
        Self {
            nodes,
            background,
            calls,
            waiting,
            deadline: Box::pin(tokio::time::sleep_until(Instant::now() + timeout)),
            timeout,
            expired: false,
            started: Instant::now(),
            req: Arc::clone(req),
        }
    }

    /// The end of node `i`'s quarantine, if the node (the shard, on a
    /// member that is a Redis Cluster) its request went to is in one at
    /// `now`.
    pub(crate) fn quarantined(
        &self,
        i: usize,
        now: std::time::Instant,
    ) -> Option<std::time::Instant> {
        self.node(i)?.quarantined_via(self.via(i), now)
    }

    /// The process that may have lost writes where node `i`'s request went
    /// (see [`Node::suspect_run_id_via`]); `None` if it is trusted.
    pub(crate) fn suspect_run_id(&self, i: usize) -> Option<String> {
        self.node(i)?.suspect_run_id_via(self.via(i))
    }

    /// How errors name node `i` (a cluster member: with the shard its
    /// request went to).
    pub(crate) fn addr(&self, i: usize) -> Option<String> {
        Some(self.node(i)?.addr_via(self.via(i)))
    }

    /// Node `i`.
    fn node(&self, i: usize) -> Option<&Node> {
        self.nodes.iter().find(|n| n.index == i)
    }

    /// The link node `i`'s request went to, if known.
    fn via(&self, i: usize) -> Option<&Arc<Link>> {
        self.calls
            .iter()
            .find(|(j, _)| *j == i)
            .and_then(|(_, call)| call.link())
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
                    self.waiting &= !node_bit(i);
                    return Some((i, r.map_err(|e| failure_of(e, self.req.script))));
                }
                None => self.expired = true,
            }
        }
        let i = self.waiting.trailing_zeros() as usize;
        self.waiting &= !node_bit(i);
        if let Some((_, call)) = self.calls.iter().find(|(j, _)| *j == i) {
            call.unresponsive();
        }
        Some((i, Err(NodeErrorKind::Timeout(self.timeout))))
    }

    /// When the requests were handed to their nodes.
    pub(crate) fn started(&self) -> Instant {
        self.started
    }

    /// Whether the round's deadline passed with nodes silent.
    pub(crate) fn expired(&self) -> bool {
        self.expired
    }

    /// Whether a node asked has not been accounted for yet.
    pub(crate) fn unanswered(&self) -> bool {
        self.waiting != 0
    }

    /// Whether a node that has not answered yet is healthy (not known to
    /// be unresponsive): rounds that want to hear from every live node wait
    /// for it.
    pub(crate) fn owed_by_healthy(&self) -> bool {
        self.nodes
            .iter()
            .any(|n| self.waiting & node_bit(n.index) != 0 && n.is_healthy())
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
                        waiting &= !node_bit(i);
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
        if waiting & node_bit(*i) != 0 {
            if let Poll::Ready(reply) = call.poll_reply(cx) {
                return Poll::Ready((*i, reply));
            }
        }
    }
    Poll::Pending
}
