//! The symmetry of the lock model's state: alike nodes and clients, and
//! the one representative of each class of states that differ only in
//! their names (see `lock_state.rs`).

use crate::model::lock_state::{Ext, Hold, Msg, Node, Phase, State};
use crate::model::{least_renaming, moved, permutations, renamed_set, unchanged};
use crate::quorum::tally::NodeSet;

/// The least of the states equal to `s` but for the names of its nodes
/// (all alike) and of its clients (all alike): symmetry reduction.
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

/// The symmetry reduction for a model whose nodes and clients are all
/// alike; with `fast_node`, one node differs (a fast clock): clients only
/// are renamed; with `fast_client`, one client does: nodes only.
pub(crate) fn representative_for(fast_node: bool, fast_client: bool) -> fn(&State) -> State {
    match (fast_node, fast_client) {
        (false, false) => representative,
        (true, false) => representative_clients,
        (false, true) => representative_nodes,
        (true, true) => State::clone,
    }
}

/// The least of the states equal to `s` but for the names of its nodes.
fn representative_nodes(s: &State) -> State {
    let clients = unchanged(s.clients.len());
    least_renaming(
        s,
        permutations(s.nodes.len()),
        &clients,
        renamed_nodes,
        renamed,
    )
}

/// The least of the states equal to `s` but for the names of its clients.
fn representative_clients(s: &State) -> State {
    let nodes = unchanged(s.nodes.len());
    least_renaming(
        s,
        &nodes,
        permutations(s.clients.len()),
        renamed_nodes,
        renamed,
    )
}

/// The nodes of `s` renamed: node `i` is `nodes[i]`, holding its key for
/// client `clients[c]` where it held it for `c`. They are the renamed
/// state's leading field (its time is the same under every renaming).
fn renamed_nodes(s: &State, nodes: &[usize], clients: &[usize]) -> Vec<Node> {
    moved(&s.nodes, nodes, |node| Node {
        key: node.key.map(|(c, e)| (clients[c as usize] as u8, e)),
        ..node.clone()
    })
}

/// `s` with node `i` renamed `nodes[i]` and client `c` renamed `clients[c]`.
fn renamed(s: &State, nodes: &[usize], clients: &[usize]) -> State {
    let set = |old: NodeSet| renamed_set(old, nodes);
    let mut r = s.clone();
    r.nodes = renamed_nodes(s, nodes, clients);
    for (c, phase) in s.clients.iter().enumerate() {
        r.clients[clients[c]] = match phase {
            Phase::Trying {
                start,
                yes,
                no,
                failed,
            } => Phase::Trying {
                start: *start,
                yes: set(*yes),
                no: set(*no),
                failed: set(*failed),
            },
            Phase::Holding(h) => Phase::Holding(Hold {
                held: set(h.held),
                ahead: set(h.ahead),
                exts: h
                    .exts
                    .iter()
                    .map(|e| Ext {
                        yes: set(e.yes),
                        no: set(e.no),
                        failed: set(e.failed),
                        ..e.clone()
                    })
                    .collect(),
                ..h.clone()
            }),
            other => other.clone(),
        };
    }
    for (c, token) in s.premint.iter().enumerate() {
        r.premint[clients[c]] = *token;
        for n in 0..s.nodes.len() {
            r.readings[clients[c]][nodes[n]] = s.readings[c][n];
            r.clock_q[clients[c]][nodes[n]] = s.clock_q[c][n];
            r.evictions_read[clients[c]][nodes[n]] = s.evictions_read[c][n];
            r.marks[clients[c]][nodes[n]] = s.marks[c][n];
        }
    }
    r.net = s
        .net
        .iter()
        .map(|m| Msg {
            client: clients[m.client as usize] as u8,
            node: nodes[m.node as usize] as u8,
            kind: m.kind,
        })
        .collect();
    r.net.sort();
    r
}
