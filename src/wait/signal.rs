//! News for the waiter at the front of one resource's line in this
//! client: the nodes that reported a change of its keys, this client's own
//! releases, what its notification reads found, and which rounds' changes
//! count.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::sync::Notify;

use crate::quorum::tally::{node_bit, NodeSet};

/// News for the waiter at the front of one resource's line.
#[derive(Debug, Default)]
pub(crate) struct Signal {
    /// Nodes that said the lock key changed since the last [`Signal::reset`].
    dirty: AtomicU64,
    /// This client released the lock since the last reset.
    poked: AtomicBool,
    /// The front waiter's last attempt found someone ahead of it on a
    /// quorum of nodes: this client's own release is no reason to try then.
    behind: AtomicBool,
    /// Nodes whose notification read (this round's) found no key.
    armed_free: AtomicU64,
    /// Nodes whose notification read (this round's) failed: no news there.
    unarmed: AtomicU64,
    /// Counts resets, so a late read of an earlier round is not news.
    round: AtomicU64,
    /// Wakes the front waiter (a stored permit if it is not waiting yet).
    notify: Notify,
    /// The line's last front waiter had to wait for news before it won:
    /// the next one waits for news too before its first attempt.
    crowded: AtomicBool,
    /// A node named one of our waiters (see [`Signal::node_named`]).
    named: AtomicBool,
    /// Which rounds' key changes are news (see [`Signal::keys_heard`]): 0
    /// every round's, else only that round's.
    keys_round: AtomicU64,
}

/// [`Signal::keys_heard`]'s "no round": rounds never get this far.
const NO_ROUND: u64 = u64::MAX;

impl Signal {
    /// Forgets the news so far (called right before the lock is read again,
    /// so nothing that happens after that read is missed).
    /// Returns the new round's number, for [`Signal::armed`].
    pub(crate) fn reset(&self) -> u64 {
        self.dirty.store(0, Ordering::Release);
        self.poked.store(false, Ordering::Release);
        self.armed_free.store(0, Ordering::Release);
        self.unarmed.store(0, Ordering::Release);
        self.round.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// The current round's number (see [`Signal::reset`]).
    pub(crate) fn round(&self) -> u64 {
        self.round.load(Ordering::Acquire)
    }

    /// The notification read of round `round` on `node` found `pttl` (-2:
    /// no key).
    pub(crate) fn armed(&self, round: u64, node: usize, pttl: i64) {
        if pttl == -2 && self.round.load(Ordering::Acquire) == round {
            self.armed_free.fetch_or(node_bit(node), Ordering::AcqRel);
            self.notify.notify_one();
        }
    }

    /// The notification reads of round `round` on `node` found the lock
    /// free and nobody listed ahead of us any more (the one that was
    /// ahead came and went): news.
    pub(crate) fn let_in(&self, round: u64, node: usize) {
        if self.round.load(Ordering::Acquire) == round {
            self.node_changed(node);
        }
    }

    /// The notification read of round `round` on `node` failed.
    pub(crate) fn unarmed(&self, round: u64, node: usize) {
        if self.round.load(Ordering::Acquire) == round {
            self.unarmed.fetch_or(node_bit(node), Ordering::AcqRel);
            self.notify.notify_one();
        }
    }

    /// Nodes whose notification read this round failed.
    pub(crate) fn unarmed_nodes(&self) -> NodeSet {
        self.unarmed.load(Ordering::Acquire)
    }

    /// Nodes whose notification read this round found no key.
    pub(crate) fn armed_free(&self) -> NodeSet {
        self.armed_free.load(Ordering::Acquire)
    }

    /// Nodes that reported a change since the reset.
    pub(crate) fn dirty(&self) -> NodeSet {
        self.dirty.load(Ordering::Acquire)
    }

    /// Whether this client released the lock since the reset.
    pub(crate) fn poked(&self) -> bool {
        self.poked.load(Ordering::Acquire)
    }

    /// Waits for the next piece of news (returns at once if some arrived
    /// since the last wait).
    pub(crate) async fn news(&self) {
        self.notify.notified().await;
    }

    /// Node `node` says the key changed.
    pub(crate) fn node_changed(&self, node: usize) {
        self.dirty.fetch_or(node_bit(node), Ordering::AcqRel);
        self.notify.notify_one();
    }

    /// Node `node` named one of our waiters (a release let it in): news,
    /// and remembered until [`Signal::take_named`] (a reset keeps it).
    pub(crate) fn node_named(&self, node: usize) {
        self.named.store(true, Ordering::Release);
        self.node_changed(node);
    }

    /// Whether a node named one of our waiters since the last call.
    pub(crate) fn take_named(&self) -> bool {
        self.named.swap(false, Ordering::AcqRel)
    }

    /// Which changes of the watched keys are news from now on: every
    /// round's (`Keys::Always`, as for a lock's key), only those of round
    /// `round` (`Keys::Round`: the keys were read this round and the next
    /// change is wanted once), or none (`Keys::Never`: a channel names the
    /// waiters). A key read with tracking stays tracked after the round
    /// that read it; its later changes (other waiters' takes) would wake
    /// the waiter for nothing.
    pub(crate) fn keys_heard(&self, keys: Keys) {
        let round = match keys {
            Keys::Always => 0,
            Keys::Round(round) => round,
            Keys::Never => NO_ROUND,
        };
        self.keys_round.store(round, Ordering::Release);
    }

    /// Node `node` says a watched key changed: news if this round hears
    /// keys (see [`Signal::keys_heard`]).
    pub(crate) fn key_changed(&self, node: usize) {
        let heard = self.keys_round.load(Ordering::Acquire);
        if heard == 0 || heard == self.round.load(Ordering::Acquire) {
            self.node_changed(node);
        }
    }

    /// Whether the front waiter's last attempt found someone ahead of it
    /// (then this client's releases do not wake it; the nodes' news does).
    pub(crate) fn set_behind(&self, behind: bool) {
        self.behind.store(behind, Ordering::Release);
    }

    /// Whether the line's last front waiter had to wait before it won.
    pub(crate) fn crowded(&self) -> bool {
        self.crowded.load(Ordering::Acquire)
    }

    /// The front waiter won, after waiting (`waited`) or at once.
    pub(crate) fn set_crowded(&self, waited: bool) {
        self.crowded.store(waited, Ordering::Release);
    }

    /// This client released the key: the front waiter may go, unless
    /// somebody else is first in line (its attempt would reach the nodes
    /// ahead of theirs and only be refused).
    pub(crate) fn poke(&self) {
        if !self.behind.load(Ordering::Acquire) {
            self.poked.store(true, Ordering::Release);
            self.notify.notify_one();
        }
    }
}

/// Which changes of a line's watched keys are news (see
/// [`Signal::keys_heard`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Keys {
    /// Every round's.
    Always,
    /// Only this round's.
    Round(u64),
    /// None.
    Never,
}
