//! The state of the cluster-member model: clients, member 0's links, what
//! can happen next (see `shards.rs`).

use crate::quorum::tally::NodeSet;

/// Member 0's links.
pub(crate) const LINKS: usize = 3;

/// Where a client is.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Not started.
    Idle,
    /// Counting votes of an attempt started at `start`.
    Trying {
        /// Start, ms.
        start: u8,
        /// Members that set the key.
        yes: NodeSet,
        /// Members that refused.
        no: NodeSet,
        /// Members that failed (or whose yes did not count).
        failed: NodeSet,
    },
    /// Holds the lock, valid until this real instant (exclusive).
    Holding(u8),
    /// Failed.
    Done,
}

/// A client.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct Client {
    /// Its attempt.
    pub(crate) phase: Phase,
    /// The link its slot map names for the slot (`None`: no map yet).
    pub(crate) map: Option<u8>,
    /// Until when (real ms) it holds each link quarantined (0: not).
    pub(crate) quarantined: [u8; LINKS],
    /// The links it has a checked connection to.
    pub(crate) checked: [bool; LINKS],
    /// Its request to member 0 was made before it had a slot map: it waits
    /// there until the member's first map is read.
    pub(crate) queued: bool,
}

/// A request to member 0, or its answer.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Msg {
    /// The client.
    pub(crate) client: u8,
    /// The link it went to.
    pub(crate) link: u8,
    /// `None`: the request; `Some(reply)`: the answer (`Some(set)`, or
    /// `None` for `MOVED`).
    pub(crate) reply: Option<Option<bool>>,
    /// The client knows which link the request went to (not where it was
    /// made before the client had a slot map, and sent by the member once
    /// the map was read).
    pub(crate) known: bool,
}

/// What happens next.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Action {
    /// One ms passes.
    Tick,
    /// A client reads the slot map.
    Refresh(u8),
    /// A client starts its attempt.
    Start(u8),
    /// Member 0 reads its first slot map for a client's request made
    /// before it had one, opens (and checks) a connection to the link it
    /// names, and sends the request there.
    Route(u8),
    /// A request to member 0 arrives, or its answer.
    Deliver(Msg),
    /// Member 1 or 2 gets a client's `SET NX` and answers at once.
    Other(u8, u8),
    /// Member 0's yes (over link 1) to a client's request for a resource
    /// in shard B's slots is counted, or not.
    Elsewhere(u8),
    /// Shard A's replica (link 2) is promoted, without the key; or,
    /// where the model says, shard A restarts without its data.
    Failover,
    /// The slot moves to shard B (link 1), with its key.
    Reshard,
}

/// The model's state.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct State {
    /// Real time, ms.
    pub(crate) now: u8,
    /// Member 0's links: the key each holds (holder, real expiry).
    pub(crate) keys: [Option<(u8, u8)>; LINKS],
    /// Link 1's move shows on it: its epoch grew, or a key was restored
    /// into it.
    pub(crate) imported: bool,
    /// When shard A restarted without its data (real ms), if it did.
    pub(crate) restarted: Option<u8>,
    /// The link serving the slot on member 0.
    pub(crate) serving: u8,
    /// Shard A failed over.
    pub(crate) failed_over: bool,
    /// The slot moved.
    pub(crate) moved: bool,
    /// Members 1 and 2: their key.
    pub(crate) others: [Option<(u8, u8)>; 2],
    /// Which of members 1 and 2 each client's request has not reached.
    pub(crate) unsent: [[bool; 2]; 2],
    /// The clients.
    pub(crate) clients: [Client; 2],
    /// Messages to and from member 0, sorted.
    pub(crate) net: Vec<Msg>,
    /// Member 0's yes over link 1 counted while link 2 was quarantined.
    pub(crate) per_shard: bool,
}

/// `SET NX` of `client`'s key, valid until `until`, on a node holding
/// `key` at `now`: whether it was set.
pub(crate) fn set_nx(key: &mut Option<(u8, u8)>, client: u8, now: u8, until: u8) -> bool {
    if key.is_some_and(|(_, expires)| expires > now) {
        return false;
    }
    *key = Some((client, until));
    true
}
