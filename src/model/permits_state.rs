//! The state of the model of a name's permits and its plain lock: nodes
//! with their slots and the name's key, clients, requests in flight, what
//! can happen next, and the symmetry between alike nodes and between the
//! two permit clients (see `permits_name.rs`).

use crate::model::{least_renaming, permutations, renamed_set};
use crate::quorum::tally::NodeSet;

/// Nodes.
pub(crate) const NODES: usize = 3;
/// Permits (slots per node).
pub(crate) const SLOTS: usize = 2;

/// What the name's lock key holds on a node.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Name {
    /// Nothing.
    Free,
    /// The permits' mark, expiring at this real instant.
    Permits(u8),
    /// The plain lock's value, expiring at this real instant.
    Lock(u8),
}

/// A node: its slots (holder, real expiry) and the name's key.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Node {
    /// The slots.
    pub(crate) slots: [Option<(u8, u8)>; SLOTS],
    /// The name's lock key.
    pub(crate) name: Name,
}

/// Where a client is.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Phase {
    /// Not started.
    Idle,
    /// Counting a take's (or the lock's `SET NX`) replies: per node, not
    /// heard, refused, or the slot it took (the lock: slot 0).
    Trying {
        /// Start, ms.
        start: u8,
        /// Per node.
        heard: [Heard; NODES],
    },
    /// Holds, valid until this real instant, slot `slot` (the lock: 0);
    /// whether it may still extend.
    Holding {
        /// Valid until.
        until: u8,
        /// The slot.
        slot: u8,
        /// An extension is left.
        may_extend: bool,
    },
    /// Extending from `start`: the nodes that said yes, and those heard.
    Extending {
        /// Start, ms.
        start: u8,
        /// Valid until (the last validity, while the extension runs).
        until: u8,
        /// The slot.
        slot: u8,
        /// Yes.
        yes: NodeSet,
        /// Heard.
        heard: NodeSet,
    },
    /// Released or failed.
    Done,
}

/// What a client heard from a node.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Heard {
    /// Nothing yet.
    Nothing,
    /// Refused.
    Refused,
    /// Took this slot.
    Took(u8),
}

/// A request in flight: client, node, and whether it is an extension.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Msg(pub(crate) u8, pub(crate) u8, pub(crate) bool);

/// The whole system.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct State {
    /// Real time, ms.
    pub(crate) now: u8,
    /// The nodes.
    pub(crate) nodes: [Node; NODES],
    /// The clients (two permits, then the lock).
    pub(crate) clients: [Phase; 3],
    /// Messages in flight, sorted.
    pub(crate) net: Vec<Msg>,
}

/// What can happen next.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) enum Action {
    /// A millisecond passes.
    Tick,
    /// A client starts.
    Start(u8),
    /// A message arrives.
    Deliver(Msg),
    /// A holder extends.
    Extend(u8),
    /// A holder releases.
    Release(u8),
}

/// The least of the states equal to `s` but for the names of its nodes
/// (all alike) and of its two permit clients: symmetry reduction.
pub(crate) fn representative(s: &State) -> State {
    let clients = [vec![0, 1, 2], vec![1, 0, 2]];
    least_renaming(s, permutations(NODES), &clients, renamed, renamed)
}

/// `s` with node `i` renamed `nodes[i]` and client `c` renamed `clients[c]`.
fn renamed(s: &State, nodes: &[usize], clients: &[usize]) -> State {
    let client = |c: u8| clients[usize::from(c)] as u8;
    let mut r = s.clone();
    for (i, node) in s.nodes.iter().enumerate() {
        let mut moved = node.clone();
        for slot in moved.slots.iter_mut().flatten() {
            slot.0 = client(slot.0);
        }
        r.nodes[nodes[i]] = moved;
    }
    for (c, phase) in s.clients.iter().enumerate() {
        r.clients[clients[c]] = match phase {
            Phase::Trying { start, heard } => {
                let mut moved = *heard;
                for (i, h) in heard.iter().enumerate() {
                    moved[nodes[i]] = *h;
                }
                Phase::Trying {
                    start: *start,
                    heard: moved,
                }
            }
            Phase::Extending {
                start,
                until,
                slot,
                yes,
                heard,
            } => Phase::Extending {
                start: *start,
                until: *until,
                slot: *slot,
                yes: renamed_set(*yes, nodes),
                heard: renamed_set(*heard, nodes),
            },
            other => other.clone(),
        };
    }
    r.net = s
        .net
        .iter()
        .map(|Msg(c, n, e)| Msg(client(*c), nodes[usize::from(*n)] as u8, *e))
        .collect();
    r.net.sort();
    r
}
