//! The read-write lock model's state (`model/rwlock.rs`): its nodes, its
//! clients and where each is, and the steps between states.

use crate::quorum::tally::NodeSet;

/// Nodes; clients, readers first, the writer last.
pub(crate) const NODES: usize = 3;
pub(crate) const CLIENTS: usize = 3;

/// One node.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Default)]
pub(crate) struct Node {
    /// The writer's key: who, and the real instant it expires.
    pub(crate) writer: Option<(u8, u8)>,
    /// Per client, its lease's end (0: none); with one shared expiry, a
    /// mark that it is a member.
    pub(crate) readers: [u8; CLIENTS],
    /// The shared expiry (the weakened rule only).
    pub(crate) shared: u8,
    /// Listed waiters.
    pub(crate) listed: u8,
    /// Its votes count from this instant on (a restart's quarantine).
    pub(crate) trusted_from: u8,
    /// Per client, the end of the lease it last took here (what its own
    /// lease is, for the property).
    pub(crate) own: [u8; CLIENTS],
    /// The readers' mark on the writer's key (which then holds no writer):
    /// the real instant it expires (0: none).
    pub(crate) mark: u8,
}

/// Where a client is.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Phase {
    /// Not started.
    Idle,
    /// An attempt out.
    Round {
        /// When it started.
        start: u8,
        /// Nodes it still waits for.
        pending: NodeSet,
        /// Counted yes, no, failed.
        yes: NodeSet,
        no: NodeSet,
        failed: NodeSet,
        /// A reader's round that started while the writer, ahead of it,
        /// waited listed on a quorum.
        behind: bool,
    },
    /// Lost a round; listed; may try again.
    Waiting,
    /// Holds until this instant; `behind` as its round's.
    Holding { until: u8, behind: bool },
    /// Released.
    Done,
}

/// A client.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Client {
    /// Its place in the lists; where it is; attempts it stopped waiting
    /// for, still on their way; rounds so far.
    pub(crate) ticket: u8,
    pub(crate) phase: Phase,
    pub(crate) late: NodeSet,
    pub(crate) rounds: u8,
}

/// The whole system.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct State {
    pub(crate) now: u8,
    pub(crate) nodes: [Node; NODES],
    pub(crate) clients: [Client; CLIENTS],
    pub(crate) started: u8,
    pub(crate) drops: u8,
    pub(crate) timeouts: u8,
    pub(crate) restarts: u8,
}

/// A step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    Start(usize),
    Retry(usize),
    Deliver(usize, usize),
    Late(usize, usize),
    Drop(usize, usize),
    Timeout(usize, usize),
    Release(usize),
    Restart(usize),
    Tick,
}
