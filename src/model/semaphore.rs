//! The semaphore, model-checked.
//!
//! Time is discrete (1 ms a tick, up to a horizon), node clocks run the
//! drift fast, as in the lock model. A node keeps K slots, each empty or a
//! client's key with an expiry. A client sends its attempt to every node;
//! a node takes its first free slot for it, or refuses (which free slot
//! does not matter to safety: each slot is its own quorum lock; the crate
//! takes the free slot of the attempt's rank). The client counts
//! the replies with the crate's own rule (`semaphore/slots.rs`: a quorum of
//! nodes on the *same* slot wins it; the real [`Tally`]) and holds the
//! permit until the decision plus [`validity`]; a won attempt undoes its
//! other slots on the nodes that did not take the winning one and fills
//! the winning slot there where it is free (`SET NX`, with a TTL from now:
//! it counts for nothing, it only keeps others from taking the slot there),
//! a lost one undoes everything on every node that did not refuse; a holder
//! releases with compare-and-delete. A split whose nodes together are a
//! quorum (the crate's `move_plan`) is followed by a move round: the nodes
//! on other slots move to the slot most took, where it is free or already
//! the client's, and drop its other slot; the permit is won if a quorum
//! then holds that slot, valid as counted from the first round's start. Attempts are delayed and reordered, lost, or
//! their answers lost; clients stop waiting for slow nodes; a node
//! crashes, keeps its slots (AOF) and restarts. Undos and releases reach
//! the nodes that are up at once (they only delete the client's own
//! slots, so delaying them adds no way to a second holder); an attempt
//! still on its way to a node lands after them and keeps its slot until
//! the TTL, which only ever leaves other clients fewer free slots than
//! the real order (undo queued behind it) does.
//!
//! Property: at no real instant do more than K clients hold a valid
//! permit. The weakened rules, each of which the checker must show admits
//! K + 1: a node admits K holders in any slots and a majority of admissions
//! wins (what quorum semaphores elsewhere do); a move sets the slot
//! whoever holds it. (A moved permit's validity counted from the move round
//! instead of the first is also a mutant here, but its counterexample needs
//! a first round slower than the drift allowance, over 6 ms of time: out
//! of reach of this model's budget. `tests/semaphore.rs` catches it on real
//! nodes.) (The fill is not a safety rule: a
//! fill that overwrites whoever holds the slot, tried as a mutant, found
//! no counterexample, since a winner holds its slot on a quorum and so no
//! other client can hold it validly; it fills only free slots so that it
//! never takes a slot from a waiter.)
//!
//! [`Tally`]: crate::quorum::tally::Tally

use stateright::{Model, Property};

use crate::model::semaphore_state::{representative, Action, Heard, Msg, Node, Phase, State};
use crate::model::{insert_sorted, real_ttl, take_one, tally_of, validity_left};
use crate::quorum::tally::{node_bit, quorum, NodeSet};
use crate::semaphore::slots::{finished, move_plan, won};

/// The property.
const AT_MOST_K: &str = "at most K clients hold a valid permit at once";

/// One run's bounds and rules.
#[derive(Clone)]
pub(crate) struct SemaphoreModel {
    /// Nodes.
    pub(crate) nodes: usize,
    /// Clients, one acquisition each.
    pub(crate) clients: usize,
    /// Permits.
    pub(crate) permits: usize,
    /// The TTL, ms.
    pub(crate) ttl: u8,
    /// Node clocks this much fast, and the clients' drift allowance.
    pub(crate) drift_factor: f64,
    /// Last real instant explored.
    pub(crate) horizon: u8,
    /// Messages lost.
    pub(crate) drops: u8,
    /// Times a client stops waiting for a node.
    pub(crate) timeouts: u8,
    /// Node crashes (each keeps its slots: AOF).
    pub(crate) crashes: u8,
    /// Rule, negated: any admission counts, whatever the slot (each node a
    /// capacity of K, a majority of admissions wins; not shipped).
    pub(crate) per_node_capacity: bool,
    /// A split whose nodes together are a quorum is followed by a move
    /// round (as shipped).
    pub(crate) moves: bool,
    /// Rule, negated: a move sets the slot whoever holds it (not shipped;
    /// shipped: only where it is free or already ours).
    pub(crate) move_overwrites: bool,
}

impl SemaphoreModel {
    /// The rules as shipped, no faults: 3 nodes, 3 clients, K = 2, TTL 4
    /// ms (a key lives 3 ms on a node whose clock runs 10 % fast, a permit
    /// is valid 1 ms after its round), 3 ms of time.
    pub(crate) fn shipped() -> Self {
        Self {
            nodes: 3,
            clients: 3,
            permits: 2,
            ttl: 4,
            drift_factor: 0.1,
            horizon: 3,
            drops: 0,
            timeouts: 0,
            crashes: 0,
            per_node_capacity: false,
            moves: true,
            move_overwrites: false,
        }
    }

    /// Every node.
    fn all(&self) -> NodeSet {
        (1 << self.nodes) - 1
    }

    /// Validity left after `elapsed` ms, by the crate's rule.
    fn left(&self, elapsed: u8) -> u8 {
        validity_left(self.ttl, self.drift_factor, elapsed)
    }

    /// Real ms a key lives on a node whose clock runs the drift fast.
    fn real_ttl(&self) -> u8 {
        real_ttl(self.ttl, self.drift_factor)
    }

    /// Client `c`, which won `slot`, sets it on the nodes of `on` that are
    /// up where it is free, with a full TTL from now.
    fn fill(&self, s: &mut State, c: u8, on: NodeSet, slot: usize) {
        let expires = s.now + self.real_ttl();
        for (n, node) in s.nodes.iter_mut().enumerate() {
            if on & node_bit(n) == 0 || !node.up {
                continue;
            }
            if node.slots[slot].is_none() {
                node.slots[slot] = Some((c, expires));
            }
        }
    }

    /// Client `c` heard `what` from node `n`; decides once it can.
    fn hear(&self, s: &mut State, c: u8, n: u8, what: Heard) {
        let now = s.now;
        let Phase::Trying { start, heard } = &mut s.clients[c as usize] else {
            return;
        };
        if heard[n as usize] != Heard::Nothing {
            return;
        }
        heard[n as usize] = what;
        let (mut yes, mut no, mut failed) = (0, 0, 0);
        let mut choices = vec![None; self.nodes];
        for (i, h) in heard.iter().enumerate() {
            match h {
                Heard::Nothing => {}
                Heard::Refused => no |= node_bit(i),
                Heard::Failed => failed |= node_bit(i),
                Heard::Took(slot) => {
                    yes |= node_bit(i);
                    // The weakened rule counts every admission alike.
                    let slot = if self.per_node_capacity { 0 } else { *slot };
                    choices[i] = Some(usize::from(slot));
                }
            }
        }
        let tally = tally_of(self.nodes, quorum(self.nodes), yes, no, failed);
        if !finished(&tally, &choices) {
            return;
        }
        let left = self.left(now - *start);
        let k = self.permits as u8;
        match won(&tally, &choices) {
            Some((slot, holders)) if left > 0 => {
                s.clients[c as usize] = Phase::Holding(now + left);
                let keep = if self.per_node_capacity {
                    k
                } else {
                    slot as u8
                };
                let others = self.all() & !holders;
                undo(s, c, others, keep);
                if !self.per_node_capacity {
                    self.fill(s, c, others, slot);
                }
            }
            None if self.moves && left > 0 => match move_plan(&tally, &choices) {
                Some((slot, holders, movers)) => {
                    s.clients[c as usize] = Phase::Moving {
                        start: *start,
                        slot: slot as u8,
                        yes: holders,
                        pending: movers,
                        refused: tally.no,
                    };
                    for n in 0..self.nodes {
                        if movers & node_bit(n) != 0 {
                            insert_sorted(&mut s.net, Msg(c, n as u8, slot as u8 + 1));
                        }
                    }
                }
                None => {
                    s.clients[c as usize] = Phase::Done;
                    undo(s, c, self.all() & !tally.no, k);
                }
            },
            _ => {
                s.clients[c as usize] = Phase::Done;
                undo(s, c, self.all() & !tally.no, k);
            }
        }
    }

    /// Client `c` heard from node `n` on its move round (`ok`: it holds the
    /// slot there now); decides once it can.
    fn hear_move(&self, s: &mut State, c: u8, n: u8, ok: bool) {
        let now = s.now;
        let Phase::Moving {
            start,
            slot,
            yes,
            pending,
            refused,
        } = &mut s.clients[c as usize]
        else {
            return;
        };
        let bit = node_bit(n.into());
        if *pending & bit == 0 {
            return;
        }
        *pending &= !bit;
        if ok {
            *yes |= bit;
        }
        let (start, slot, yes, pending, refused) = (*start, *slot, *yes, *pending, *refused);
        let q = quorum(self.nodes) as u32;
        let left = self.left(now - start);
        if yes.count_ones() >= q && left > 0 {
            s.clients[c as usize] = Phase::Holding(now + left);
            let others = self.all() & !yes;
            undo(s, c, others, slot);
            self.fill(s, c, others, slot.into());
        } else if yes.count_ones() >= q || (yes | pending).count_ones() < q {
            s.clients[c as usize] = Phase::Done;
            undo(s, c, self.all() & !refused, self.permits as u8);
        }
    }
}

/// Client `c` deletes its slots but `keep` (K: none) on the nodes of `on`
/// that are up.
fn undo(s: &mut State, c: u8, on: NodeSet, keep: u8) {
    for (n, node) in s.nodes.iter_mut().enumerate() {
        if on & node_bit(n) == 0 || !node.up {
            continue;
        }
        for (i, slot) in node.slots.iter_mut().enumerate() {
            if i != usize::from(keep) && slot.is_some_and(|(h, _)| h == c) {
                *slot = None;
            }
        }
    }
}

impl Model for SemaphoreModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let node = Node {
            slots: vec![None; self.permits],
            up: true,
        };
        vec![State {
            now: 0,
            nodes: vec![node; self.nodes],
            clients: vec![Phase::Idle; self.clients],
            net: Vec::new(),
            faults: [self.drops, self.timeouts, self.crashes],
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        if s.now < self.horizon {
            actions.push(Action::Tick);
        }
        for (c, phase) in s.clients.iter().enumerate() {
            let c = c as u8;
            match phase {
                Phase::Idle => actions.push(Action::Start(c)),
                Phase::Trying { heard, .. } if s.faults[1] > 0 => {
                    for (n, h) in heard.iter().enumerate() {
                        if *h == Heard::Nothing {
                            actions.push(Action::Timeout(c, n as u8));
                        }
                    }
                }
                Phase::Moving { pending, .. } if s.faults[1] > 0 => {
                    for n in 0..self.nodes {
                        if pending & node_bit(n) != 0 {
                            actions.push(Action::Timeout(c, n as u8));
                        }
                    }
                }
                Phase::Holding(_) => actions.push(Action::Release(c)),
                _ => {}
            }
        }
        for m in &s.net {
            actions.push(Action::Deliver(m.clone()));
            if s.faults[0] > 0 {
                actions.push(Action::Drop(m.clone()));
            }
        }
        for (n, node) in s.nodes.iter().enumerate() {
            if node.up && s.faults[2] > 0 {
                actions.push(Action::Crash(n as u8));
            }
            if !node.up {
                actions.push(Action::Restart(n as u8));
            }
        }
    }

    fn next_state(&self, s: &State, action: Action) -> Option<State> {
        let mut s = s.clone();
        match action {
            Action::Tick => {
                s.now += 1;
                let now = s.now;
                for node in &mut s.nodes {
                    for slot in &mut node.slots {
                        if slot.is_some_and(|(_, expires)| expires <= now) {
                            *slot = None;
                        }
                    }
                }
            }
            Action::Start(c) => {
                s.clients[c as usize] = Phase::Trying {
                    start: s.now,
                    heard: vec![Heard::Nothing; self.nodes],
                };
                for n in 0..self.nodes as u8 {
                    insert_sorted(&mut s.net, Msg(c, n, 0));
                }
            }
            Action::Deliver(m) => {
                take_one(&mut s.net, &m)?;
                let expires = s.now + self.real_ttl();
                let Msg(c, n, kind) = m;
                let node = &mut s.nodes[n as usize];
                if !node.up {
                    return Some(s);
                }
                if kind > 0 {
                    // A move: to slot `kind - 1` where it is free or ours,
                    // dropping our other slot there.
                    let to = usize::from(kind - 1);
                    let ok = self.move_overwrites
                        || node.slots[to].is_none_or(|(holder, _)| holder == c);
                    if ok {
                        for (i, slot) in node.slots.iter_mut().enumerate() {
                            if i == to {
                                *slot = Some((c, expires));
                            } else if slot.is_some_and(|(h, _)| h == c) {
                                *slot = None;
                            }
                        }
                    }
                    self.hear_move(&mut s, c, n, ok);
                    return Some(s);
                }
                let free = node.slots.iter().position(Option::is_none);
                if let Some(i) = free {
                    node.slots[i] = Some((c, expires));
                }
                let heard = free.map_or(Heard::Refused, |i| Heard::Took(i as u8));
                self.hear(&mut s, c, n, heard);
            }
            Action::Drop(m) => {
                take_one(&mut s.net, &m)?;
                s.faults[0] -= 1;
            }
            Action::Timeout(c, n) => {
                s.faults[1] -= 1;
                self.hear(&mut s, c, n, Heard::Failed);
                self.hear_move(&mut s, c, n, false);
            }
            Action::Release(c) => {
                s.clients[c as usize] = Phase::Done;
                undo(&mut s, c, self.all(), self.permits as u8);
            }
            Action::Crash(n) => {
                s.faults[2] -= 1;
                s.nodes[n as usize].up = false;
            }
            Action::Restart(n) => s.nodes[n as usize].up = true,
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(AT_MOST_K, |m: &Self, s: &State| {
                usize::from(valid_holders(s)) <= m.permits
            }),
            Property::sometimes("K clients held a permit at once", |m: &Self, s: &State| {
                usize::from(valid_holders(s)) == m.permits
            }),
        ]
    }
}

/// Clients holding a permit with validity left now.
fn valid_holders(s: &State) -> u8 {
    s.clients
        .iter()
        .filter(|p| matches!(p, Phase::Holding(until) if s.now < *until))
        .count() as u8
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{check, check_symmetric};

    #[test]
    fn model_semaphore_representative_is_the_least_of_every_renaming() {
        use crate::model::semaphore_state::representative_built_whole;
        let m = SemaphoreModel {
            drops: 1,
            ..SemaphoreModel::shipped()
        };
        let states = crate::model::walked(&m, 1_000, 80);
        assert!(states.len() > 10_000, "{} states", states.len());
        for s in &states {
            assert_eq!(representative(s), representative_built_whole(s), "{s:?}");
        }
    }

    /// Safe: explored to the end, no counterexample, K holders reached.
    fn safe(name: &str, m: SemaphoreModel) {
        let found = check_symmetric(name, m, representative);
        found.assert_safe(name, 1_000, "K clients held a permit at once");
    }

    #[test]
    fn model_semaphore_safe_with_a_lost_message() {
        let m = SemaphoreModel {
            drops: 1,
            ..SemaphoreModel::shipped()
        };
        safe("semaphore: K = 2, 3 clients, a lost message, expiry", m);
    }

    #[test]
    fn model_semaphore_safe_with_a_slow_node() {
        let m = SemaphoreModel {
            timeouts: 1,
            horizon: 2,
            ..SemaphoreModel::shipped()
        };
        safe("semaphore: K = 2, 3 clients, a slow node", m);
    }

    #[test]
    fn model_semaphore_safe_with_a_crash_and_persistence() {
        let m = SemaphoreModel {
            crashes: 1,
            horizon: 2,
            ..SemaphoreModel::shipped()
        };
        safe("semaphore: K = 2, 3 clients, a node crashes (AOF)", m);
    }

    #[test]
    fn model_semaphore_finds_k_plus_one_holders_when_a_move_overwrites() {
        let m = SemaphoreModel {
            move_overwrites: true,
            ..SemaphoreModel::shipped()
        };
        let name = "semaphore, weakened: a move takes a slot another holds";
        check(name, m).assert_violates(name, AT_MOST_K);
    }

    #[test]
    fn model_semaphore_finds_k_plus_one_holders_with_per_node_capacity() {
        let m = SemaphoreModel {
            per_node_capacity: true,
            ..SemaphoreModel::shipped()
        };
        let name = "semaphore, weakened: per-node capacity K, majority";
        check(name, m).assert_violates(name, AT_MOST_K);
    }
}
