//! The quorum decision, as pure bookkeeping: which nodes said yes, which
//! refused, which failed, and whether the outcome is known yet.

use crate::error::{Error, NodeError, NodeErrorKind};

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

/// The set holding node `index` alone.
pub(crate) fn node_bit(index: usize) -> NodeSet {
    1u64 << index
}

/// The nodes, by position in `items`, whose item `pick` accepts.
pub(crate) fn nodes_where<T>(items: &[T], pick: impl Fn(&T) -> bool) -> NodeSet {
    items
        .iter()
        .enumerate()
        .filter(|(_, item)| pick(item))
        .fold(0, |set, (i, _)| set | node_bit(i))
}

/// Majority of `n`: the smallest count any two of which overlap.
#[cfg(test)]
pub(crate) fn quorum(n: usize) -> usize {
    quorum_tolerating(n, 0)
}

/// Votes needed of `n` nodes so that any two quorums share more than `f`
/// nodes (`f` members that may lose writes at once): more than
/// `(n + f) / 2`. With `f = 0`, a majority.
pub(crate) fn quorum_tolerating(n: usize, f: usize) -> usize {
    (n + f) / 2 + 1
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
    /// An empty tally for a round that asks `asked` nodes, `needed` of
    /// which must say yes.
    pub(crate) fn new(needed: usize, asked: usize) -> Self {
        Self {
            quorum: needed,
            asked,
            yes: 0,
            no: 0,
            failures: Vec::new(),
        }
    }

    /// Records the vote of node `index` (at `addr`, for error messages).
    pub(crate) fn record(&mut self, index: usize, addr: &str, vote: Vote) {
        match vote {
            Vote::Yes => self.yes |= node_bit(index),
            Vote::No => self.no |= node_bit(index),
            Vote::Failed(kind) => self.failures.push(NodeError {
                index,
                addr: addr.to_owned(),
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

    /// Whether the nodes that refused are enough on their own to make the
    /// quorum unreachable: the resource is held by someone else.
    pub(crate) fn refusals_prevent_quorum(&self) -> bool {
        self.asked.saturating_sub(self.no.count_ones() as usize) < self.quorum
    }

    /// How many nodes have answered or failed so far.
    pub(crate) fn heard(&self) -> usize {
        self.yes_count() + self.no.count_ones() as usize + self.failures.len()
    }

    /// Whether the outcome is decided *and* its cause is known: a quorum
    /// agreed; or it cannot, and [`Tally::loss_explained`].
    pub(crate) fn explained(&self) -> bool {
        match self.decided() {
            Some(true) => true,
            Some(false) => self.loss_explained(),
            None => false,
        }
    }

    /// For a round that cannot win: whether the refusals alone or the
    /// failures alone rule the quorum out, or every node has spoken. A lost
    /// round that stops earlier cannot tell contention from an outage (two
    /// refusals and one dead node of five: the two unheard nodes decide
    /// which it is).
    pub(crate) fn loss_explained(&self) -> bool {
        self.refusals_prevent_quorum()
            || self.failures_prevent_quorum()
            || self.heard() >= self.asked
    }

    /// Whether enough nodes failed (rather than refused) to make the quorum
    /// unreachable whatever the others said: the outcome is then a
    /// connectivity problem, not contention.
    pub(crate) fn failures_prevent_quorum(&self) -> bool {
        self.asked.saturating_sub(self.failures.len()) < self.quorum
    }

    /// The error for a round that did not win, about `key`: a key of
    /// another type met on a node says so; otherwise [`Tally::into_no_quorum`].
    pub(crate) fn into_error(self, resource: &str, key: &str) -> Error {
        let wrong = self
            .failures
            .iter()
            .find(|f| matches!(&f.kind, NodeErrorKind::Redis(e) if e.code() == Some("WRONGTYPE")));
        match wrong {
            Some(node) => Error::WrongType {
                key: key.to_owned(),
                node: node.clone(),
            },
            None => self.into_no_quorum(resource),
        }
    }

    /// The error for a round that did not win: which nodes failed and why,
    /// in node order.
    pub(crate) fn into_no_quorum(mut self, resource: &str) -> Error {
        self.failures.sort_by_key(|f| f.index);
        Error::NoQuorum {
            resource: resource.to_owned(),
            asked: self.asked,
            answered: (self.yes | self.no).count_ones() as usize,
            needed: self.quorum,
            succeeded: self.yes_count(),
            failures: self.failures,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn vote(t: &mut Tally, i: usize, v: Vote) {
        t.record(i, "127.0.0.1:1", v);
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
        let mut t = Tally::new(3, 5);
        vote(&mut t, 0, Vote::Yes);
        vote(&mut t, 1, Vote::Yes);
        assert_eq!(t.decided(), None);
        vote(&mut t, 2, Vote::Yes);
        assert_eq!(t.decided(), Some(true));
    }

    #[test]
    fn decides_at_quorum_impossible() {
        let mut t = Tally::new(3, 5);
        vote(&mut t, 0, Vote::No);
        vote(&mut t, 1, Vote::Failed(NodeErrorKind::UnexpectedReply));
        assert_eq!(t.decided(), None);
        vote(&mut t, 2, Vote::No);
        assert_eq!(t.decided(), Some(false));
        assert!(!t.failures_prevent_quorum());
    }

    #[test]
    fn failures_alone_can_prevent_quorum() {
        let mut t = Tally::new(3, 5);
        for i in 0..3 {
            vote(
                &mut t,
                i,
                Vote::Failed(NodeErrorKind::Timeout(Duration::from_millis(1))),
            );
        }
        assert_eq!(t.decided(), Some(false));
        assert!(t.failures_prevent_quorum());
    }

    #[test]
    fn failures_are_reported_in_node_order() {
        let mut t = Tally::new(3, 5);
        for i in [3, 2, 4] {
            vote(&mut t, i, Vote::Failed(NodeErrorKind::UnexpectedReply));
        }
        let e = t.into_no_quorum("r");
        let order: Vec<usize> = e.node_failures().iter().map(|f| f.index).collect();
        assert_eq!(order, [2, 3, 4]);
    }

    #[test]
    fn a_lost_round_is_explained_once_refusals_or_failures_alone_rule_it_out() {
        let mut t = Tally::new(3, 5);
        vote(&mut t, 0, Vote::Failed(NodeErrorKind::UnexpectedReply));
        vote(&mut t, 1, Vote::No);
        vote(&mut t, 2, Vote::No);
        // Lost, but held elsewhere or an outage? Nodes 3 and 4 decide.
        assert_eq!(t.decided(), Some(false));
        assert!(!t.explained());
        vote(&mut t, 3, Vote::No);
        assert!(t.explained() && t.refusals_prevent_quorum());
        let mut t = Tally::new(3, 5);
        for i in 0..2 {
            vote(&mut t, i, Vote::No);
        }
        for i in 2..5 {
            vote(&mut t, i, Vote::Failed(NodeErrorKind::UnexpectedReply));
        }
        assert!(t.explained() && !t.refusals_prevent_quorum());
    }

    #[test]
    fn subset_round_is_impossible_when_too_few_asked() {
        // Asking 2 of 5 nodes can never win a quorum of 3.
        let t = Tally::new(3, 2);
        assert_eq!(t.decided(), Some(false));
    }
}
