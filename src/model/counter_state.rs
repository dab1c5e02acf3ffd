//! The state of the counter model: nodes, clients, proposals in flight,
//! and what can happen next (see `counter.rs`).

use crate::counter::Record;
use crate::model::{least_renaming, moved, permutations, renamed_set, unchanged};
use crate::quorum::tally::NodeSet;

/// A node.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Node {
    /// Its record.
    pub(crate) rec: Record,
    /// Running.
    pub(crate) up: bool,
    /// Its process (each restart that loses data makes a new one).
    pub(crate) epoch: u8,
    /// Whether clients see it may have lost data (the connection check):
    /// for as long as this process lives.
    pub(crate) suspect: bool,
    /// The process its record was stamped repaired under.
    pub(crate) stamp: Option<u8>,
}

/// Where a client is.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Phase {
    /// Between allocations.
    Idle,
    /// Counting the votes of one compare-and-set round.
    Round {
        /// Which round of this allocation (replies to older ones are late).
        attempt: u8,
        /// The proposal's start.
        expected: Record,
        /// The proposal's end.
        new: Record,
        /// Nodes that accepted.
        yes: NodeSet,
        /// Nodes that refused.
        no: NodeSet,
        /// Nodes given up on.
        failed: NodeSet,
        /// The highest record a refusal carried.
        highest: Option<Record>,
        /// Acceptances (in `yes`) by suspect nodes not repaired, which do
        /// not count toward the quorum.
        untrusted: NodeSet,
        /// The process each node answered from (to stamp).
        epochs: Vec<u8>,
    },
}

/// A client.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Client {
    /// Where it is.
    pub(crate) phase: Phase,
    /// The highest record it knows of.
    pub(crate) hint: Record,
    /// Allocations finished (issued or given up).
    pub(crate) done: u8,
    /// Nodes it does not wait for (they timed out and have not answered
    /// since).
    pub(crate) unresponsive: NodeSet,
    /// The last round it won, whose late replies still count as signs of
    /// life (the real client carries a won round's calls to the end; those
    /// of a stale or failed round are dropped, their replies never read).
    pub(crate) won: Option<u8>,
}

/// A client's proposal in flight to a node. A node's reply is counted by
/// the client when the node applies the proposal ([`Action::Deliver`]), or
/// lost ([`Action::Unheard`]): a reply only decides when the client counts
/// a vote, and a round's outcome depends on the set of votes, not their
/// order (a refusal ends it; a quorum of acceptances wins once every
/// healthy node answered).
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Msg {
    /// Sender.
    pub(crate) client: usize,
    /// Receiver.
    pub(crate) node: usize,
    /// The round.
    pub(crate) attempt: u8,
    /// Start.
    pub(crate) expected: Record,
    /// End.
    pub(crate) new: Record,
    /// A stamp after a won round, for the node's process `epoch`, rather
    /// than a proposal.
    pub(crate) stamp: Option<u8>,
}

/// The whole system.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct State {
    /// The nodes.
    pub(crate) nodes: Vec<Node>,
    /// The clients.
    pub(crate) clients: Vec<Client>,
    /// Messages in flight, sorted (a multiset).
    pub(crate) net: Vec<Msg>,
    /// Ranges issued, in order: client, period, first and last number.
    pub(crate) issued: Vec<(usize, String, u64, u64)>,
    /// Faults left: crashes, amnesia, losses, duplicates, timeouts.
    pub(crate) faults: [u8; 5],
}

/// What can happen next.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Action {
    /// A client starts its next allocation.
    Start(usize),
    /// A proposal arrives, and the client hears the node's answer.
    Deliver(Msg),
    /// A proposal arrives, and the answer is lost.
    Unheard(Msg),
    /// A proposal is lost.
    Drop(Msg),
    /// A proposal arrives twice: applied now, unheard, and again later
    /// (our connection layer resends a batch after a reconnect).
    Duplicate(Msg),
    /// A client stops waiting for a node.
    Timeout(usize, usize),
    /// A node crashes (keeps its data).
    Crash(usize),
    /// A crashed node comes back.
    Recover(usize),
    /// A node restarts empty (and, with repair on, is suspect from then).
    Amnesia(usize),
}

/// The least of the states equal to `s` but for the names of its nodes
/// (all alike): symmetry reduction.
pub(crate) fn nodes_alike(s: &State) -> State {
    least(s, false)
}

/// The least of the states equal to `s` but for the names of its nodes and
/// of its clients (all alike when their clocks agree).
pub(crate) fn nodes_and_clients_alike(s: &State) -> State {
    least(s, true)
}

/// [`nodes_and_clients_alike`] with every renaming built whole (what it
/// must give).
#[cfg(test)]
pub(crate) fn alike_built_whole(s: &State) -> State {
    let (nodes, clients) = (permutations(s.nodes.len()), permutations(s.clients.len()));
    crate::model::least_built_whole(s, nodes, clients, renamed)
}

/// The least renaming of `s`.
fn least(s: &State, clients_alike: bool) -> State {
    let same = unchanged(s.clients.len());
    let clients = if clients_alike {
        permutations(s.clients.len())
    } else {
        &same
    };
    least_renaming(
        s,
        permutations(s.nodes.len()),
        clients,
        renamed_nodes,
        renamed,
    )
}

/// The nodes of `s` renamed (node `i` is `nodes[i]`): the renamed state's
/// leading field (renaming clients leaves the nodes alone).
fn renamed_nodes<'s>(s: &'s State, nodes: &[usize], _: &[usize]) -> Vec<&'s Node> {
    moved(&s.nodes, nodes, |node| node)
}

/// `s` with node `i` renamed `nodes[i]` and client `c` renamed `clients[c]`.
fn renamed(s: &State, nodes: &[usize], clients: &[usize]) -> State {
    let set = |old: NodeSet| renamed_set(old, nodes);
    let mut r = s.clone();
    for (i, node) in s.nodes.iter().enumerate() {
        r.nodes[nodes[i]] = node.clone();
    }
    for (c, client) in s.clients.iter().enumerate() {
        let mut client = client.clone();
        client.unresponsive = set(client.unresponsive);
        if let Phase::Round {
            yes,
            no,
            failed,
            untrusted,
            epochs,
            ..
        } = &mut client.phase
        {
            *yes = set(*yes);
            *no = set(*no);
            *failed = set(*failed);
            *untrusted = set(*untrusted);
            let old = epochs.clone();
            for (i, e) in old.into_iter().enumerate() {
                epochs[nodes[i]] = e;
            }
        }
        r.clients[clients[c]] = client;
    }
    r.net = s
        .net
        .iter()
        .map(|m| Msg {
            client: clients[m.client],
            node: nodes[m.node],
            ..m.clone()
        })
        .collect();
    r.net.sort();
    for issued in &mut r.issued {
        issued.0 = clients[issued.0];
    }
    r
}
