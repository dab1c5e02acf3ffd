//! The state of the semaphore model: nodes and their slots, clients,
//! requests in flight, what can happen next, and the symmetry between
//! alike nodes and clients (see `semaphore.rs`).

use crate::model::{least_renaming, moved, permutations, renamed_set};
use crate::quorum::tally::NodeSet;

/// A node.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Node {
    /// Per slot: the holder and the real instant it expires.
    pub(crate) slots: Vec<Option<(u8, u8)>>,
    /// Running.
    pub(crate) up: bool,
}

/// Where a client is.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Phase {
    /// Not started.
    Idle,
    /// Counting the replies of an attempt started at `start`.
    Trying {
        /// Start, ms.
        start: u8,
        /// Per node: not heard, refused, failed, or the slot it took.
        heard: Vec<Heard>,
    },
    /// Counting the replies of a move round to `slot`, after a first round
    /// that started at `start` split.
    Moving {
        /// The first round's start, ms.
        start: u8,
        /// The slot moved to.
        slot: u8,
        /// The nodes that hold it for us.
        yes: NodeSet,
        /// Nodes asked to move and not heard yet.
        pending: NodeSet,
        /// Nodes that refused the first round: nothing of ours is there.
        refused: NodeSet,
    },
    /// Holds a permit (a slot), valid until this real instant.
    Holding(u8),
    /// Released, or failed.
    Done,
}

/// What a client heard from a node.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Heard {
    /// Nothing yet.
    Nothing,
    /// Refused: no free slot.
    Refused,
    /// Given up on.
    Failed,
    /// Took this slot.
    Took(u8),
}

/// A request in flight from client `.0` to node `.1`: take the first free
/// slot (`.2` = 0), or move to slot `.2 - 1`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Msg(pub(crate) u8, pub(crate) u8, pub(crate) u8);

/// The whole system.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct State {
    /// Real time, ms.
    pub(crate) now: u8,
    /// The nodes.
    pub(crate) nodes: Vec<Node>,
    /// The clients.
    pub(crate) clients: Vec<Phase>,
    /// Messages in flight, sorted.
    pub(crate) net: Vec<Msg>,
    /// Faults left: drops, timeouts, crashes.
    pub(crate) faults: [u8; 3],
}

/// What can happen next.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) enum Action {
    /// One millisecond passes.
    Tick,
    /// A client starts its attempt.
    Start(u8),
    /// A message arrives.
    Deliver(Msg),
    /// A message is lost.
    Drop(Msg),
    /// A client stops waiting for a node.
    Timeout(u8, u8),
    /// A holder releases.
    Release(u8),
    /// A node crashes.
    Crash(u8),
    /// A crashed node restarts, with its slots.
    Restart(u8),
}

/// The least of the states equal to `s` but for the names of its nodes and
/// clients (all alike): symmetry reduction.
pub(crate) fn representative(s: &State) -> State {
    let (nodes, clients) = (permutations(s.nodes.len()), permutations(s.clients.len()));
    least_renaming(s, nodes, clients, renamed_nodes, renamed)
}

/// [`representative`] with every renaming built whole (what it must give).
#[cfg(test)]
pub(crate) fn representative_built_whole(s: &State) -> State {
    let (nodes, clients) = (permutations(s.nodes.len()), permutations(s.clients.len()));
    crate::model::least_built_whole(s, nodes, clients, renamed)
}

/// The nodes of `s` renamed: node `i` is `nodes[i]`, its slots held by
/// client `clients[c]` where `c` held them. They are the renamed state's
/// leading field (its time is the same under every renaming).
fn renamed_nodes(s: &State, nodes: &[usize], clients: &[usize]) -> Vec<Node> {
    moved(&s.nodes, nodes, |node| Node {
        slots: node
            .slots
            .iter()
            .map(|slot| slot.map(|(c, e)| (clients[c as usize] as u8, e)))
            .collect(),
        up: node.up,
    })
}

/// `s` with node `i` renamed `nodes[i]` and client `c` renamed `clients[c]`.
fn renamed(s: &State, nodes: &[usize], clients: &[usize]) -> State {
    let client = |c: u8| clients[c as usize] as u8;
    let mut r = s.clone();
    r.nodes = renamed_nodes(s, nodes, clients);
    for (c, phase) in s.clients.iter().enumerate() {
        r.clients[clients[c]] = match phase {
            Phase::Trying { start, heard } => {
                let mut moved = heard.clone();
                for (i, h) in heard.iter().enumerate() {
                    moved[nodes[i]] = *h;
                }
                Phase::Trying {
                    start: *start,
                    heard: moved,
                }
            }
            Phase::Moving {
                start,
                slot,
                yes,
                pending,
                refused,
            } => Phase::Moving {
                start: *start,
                slot: *slot,
                yes: renamed_set(*yes, nodes),
                pending: renamed_set(*pending, nodes),
                refused: renamed_set(*refused, nodes),
            },
            other => other.clone(),
        };
    }
    r.net = s
        .net
        .iter()
        .map(|Msg(c, n, k)| Msg(client(*c), nodes[*n as usize] as u8, *k))
        .collect();
    r.net.sort();
    r
}
