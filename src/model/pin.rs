//! A serial prefix's pinned configuration, model-checked.
//!
//! Nodes apply [`node_pins`] (keep a pin forever once set); clients, each
//! with a configuration, ask every node, count votes in a real [`Tally`],
//! stop with [`cas_finished`] and decide with [`pin_outcome`], as
//! `pin::pin` does, and retry once after a round that did not
//! decide. The network delivers in any order and may lose a message; a
//! client may stop waiting for a node that has not answered; a node may
//! restart empty (amnesia). Every fault is bounded per run.
//!
//! Property: two different configurations are never both allowed to issue
//! (else one prefix could print the same number twice).

use stateright::{Model, Property};

use crate::counter::cas_finished;
use crate::model::{insert_sorted, take_one, tally_of};
use crate::pin::{node_pins, pin_outcome};
use crate::quorum::tally::{node_bit, quorum, NodeSet};

/// A configuration, by index into [`CONFIGS`].
type Config = usize;

/// The configurations the clients use.
const CONFIGS: [&str; 2] = ["day/4", "hour/2"];

/// A node's rule: what it holds after a request for `proposed`.
type Pins = fn(Option<&str>, &str) -> String;

/// A round's outcome from the tally and the number of other pins heard.
type Outcome = fn(&crate::quorum::tally::Tally, usize) -> Option<bool>;

/// One run's bounds and rules.
#[derive(Clone)]
pub(crate) struct PinModel {
    /// Nodes.
    pub(crate) nodes: usize,
    /// Each client's configuration.
    pub(crate) clients: Vec<Config>,
    /// Rounds per client.
    pub(crate) attempts: u8,
    /// Messages lost.
    pub(crate) drops: u8,
    /// Times a client stops waiting for a node.
    pub(crate) timeouts: u8,
    /// Restarts that lose the data.
    pub(crate) amnesia: u8,
    /// Whether clients may still stop waiting after a node restarted empty.
    pub(crate) timeouts_after_amnesia: bool,
    /// Amnesia only while no message is in flight and no round runs (else
    /// at any time).
    pub(crate) amnesia_quiescent: bool,
    /// The nodes' rule.
    pub(crate) pins: Pins,
    /// The clients' decision.
    pub(crate) outcome: Outcome,
}

/// A message in flight.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Msg {
    /// Client `c`'s round `round` asks node `n`.
    Ask { c: usize, round: u8, n: usize },
    /// Node `n` holds `held` (in answer to round `round` of client `c`).
    Held {
        c: usize,
        round: u8,
        n: usize,
        held: Config,
    },
}

/// Where a client is.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Not started.
    Idle,
    /// Counting round `round`: yes, no, given up on.
    Counting {
        round: u8,
        yes: NodeSet,
        no: NodeSet,
        failed: NodeSet,
    },
    /// Allowed to issue, or gave up.
    Done(bool),
}

/// The whole system.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct State {
    /// Each node's pin.
    pub(crate) pins: Vec<Option<Config>>,
    /// Each client's phase.
    pub(crate) phases: Vec<Phase>,
    /// Messages in flight, sorted (a multiset).
    pub(crate) net: Vec<Msg>,
    /// Faults left: drops, timeouts, amnesia.
    pub(crate) faults: [u8; 3],
    /// Whether a node restarted empty.
    pub(crate) forgot: bool,
}

/// What can happen next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// A client starts a round.
    Start(usize),
    /// A message arrives.
    Deliver(Msg),
    /// A message is lost.
    Drop(Msg),
    /// Client `c` stops waiting for node `n`.
    GiveUp(usize, usize),
    /// A node restarts empty.
    Forget(usize),
}

impl PinModel {
    /// The rules as shipped: 3 nodes, two clients with different
    /// configurations starting on a fresh prefix, two rounds each, a lost
    /// message and two timeouts.
    pub(crate) fn shipped() -> Self {
        Self {
            nodes: 3,
            clients: vec![0, 1],
            attempts: 2,
            drops: 1,
            timeouts: 2,
            amnesia: 0,
            timeouts_after_amnesia: true,
            amnesia_quiescent: true,
            pins: node_pins,
            outcome: pin_outcome,
        }
    }

    /// Sends round `round` of client `c` to every node.
    fn start(&self, s: &mut State, c: usize, round: u8) {
        for n in 0..self.nodes {
            insert_sorted(&mut s.net, Msg::Ask { c, round, n });
        }
        s.phases[c] = Phase::Counting {
            round,
            yes: 0,
            no: 0,
            failed: 0,
        };
    }

    /// Decides client `c`'s round if it is finished.
    fn settle(&self, s: &mut State, c: usize) {
        let Phase::Counting {
            round,
            yes,
            no,
            failed,
        } = s.phases[c].clone()
        else {
            return;
        };
        let n = self.nodes;
        let tally = tally_of(n, quorum(n), yes, no, failed);
        let heard = yes | no | failed;
        let owed = (0..n).any(|i| heard & node_bit(i) == 0);
        if !cas_finished(&tally, owed) {
            return;
        }
        match (self.outcome)(&tally, no.count_ones() as usize) {
            Some(won) => s.phases[c] = Phase::Done(won),
            None if round < self.attempts => self.start(s, c, round + 1),
            None => s.phases[c] = Phase::Done(false),
        }
    }
}

impl Model for PinModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            pins: vec![None; self.nodes],
            phases: vec![Phase::Idle; self.clients.len()],
            net: Vec::new(),
            faults: [self.drops, self.timeouts, self.amnesia],
            forgot: false,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        for (c, phase) in s.phases.iter().enumerate() {
            match phase {
                Phase::Idle => actions.push(Action::Start(c)),
                Phase::Counting {
                    yes, no, failed, ..
                } if s.faults[1] > 0 && (self.timeouts_after_amnesia || !s.forgot) => {
                    let heard = yes | no | failed;
                    for n in (0..self.nodes).filter(|n| heard & node_bit(*n) == 0) {
                        actions.push(Action::GiveUp(c, n));
                    }
                }
                _ => {}
            }
        }
        let mut last = None;
        for m in &s.net {
            if last == Some(m) {
                continue;
            }
            last = Some(m);
            actions.push(Action::Deliver(m.clone()));
            if s.faults[0] > 0 {
                actions.push(Action::Drop(m.clone()));
            }
        }
        let quiet =
            s.net.is_empty() && !s.phases.iter().any(|p| matches!(p, Phase::Counting { .. }));
        if s.faults[2] > 0 && (quiet || !self.amnesia_quiescent) {
            for n in (0..self.nodes).filter(|n| s.pins[*n].is_some()) {
                actions.push(Action::Forget(n));
            }
        }
    }

    fn next_state(&self, s: &State, action: Action) -> Option<State> {
        let mut s = s.clone();
        match action {
            Action::Start(c) => self.start(&mut s, c, 1),
            Action::Drop(m) => {
                take_one(&mut s.net, &m)?;
                s.faults[0] -= 1;
            }
            Action::GiveUp(c, n) => {
                if let Phase::Counting { failed, .. } = &mut s.phases[c] {
                    *failed |= node_bit(n);
                }
                s.faults[1] -= 1;
                self.settle(&mut s, c);
            }
            Action::Forget(n) => {
                s.pins[n] = None;
                s.faults[2] -= 1;
                s.forgot = true;
            }
            Action::Deliver(m) => {
                take_one(&mut s.net, &m)?;
                match m {
                    Msg::Ask { c, round, n } => {
                        let stored = s.pins[n].map(|p| CONFIGS[p]);
                        let after = (self.pins)(stored, CONFIGS[self.clients[c]]);
                        let held = CONFIGS.iter().position(|x| *x == after)?;
                        s.pins[n] = Some(held);
                        insert_sorted(&mut s.net, Msg::Held { c, round, n, held });
                    }
                    Msg::Held { c, round, n, held } => {
                        let ours = self.clients[c];
                        if let Phase::Counting {
                            round: r,
                            yes,
                            no,
                            failed,
                        } = &mut s.phases[c]
                        {
                            let heard = *yes | *no | *failed;
                            if *r == round && heard & node_bit(n) == 0 {
                                if held == ours {
                                    *yes |= node_bit(n);
                                } else {
                                    *no |= node_bit(n);
                                }
                                self.settle(&mut s, c);
                            }
                        }
                    }
                }
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("one configuration per prefix", |m: &PinModel, s: &State| {
                let allowed: Vec<Config> = s
                    .phases
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| **p == Phase::Done(true))
                    .map(|(c, _)| m.clients[c])
                    .collect();
                allowed.windows(2).all(|w| w[0] == w[1])
            }),
            Property::sometimes("a configuration is pinned", |_, s: &State| {
                s.phases.contains(&Phase::Done(true))
            }),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{check, check_symmetric};

    fn safe(name: &str, m: PinModel) {
        check(name, m).assert_safe(name, 1_000, "a configuration is pinned");
    }

    fn unsafe_(name: &str, m: PinModel) {
        // Depth-first: a counterexample, not necessarily a shortest one,
        // found long before the whole space is explored.
        let found = check_symmetric(name, m, State::clone);
        found.assert_violates(name, "one configuration per prefix");
    }

    /// A node restarts empty between rounds; clients stop waiting for slow
    /// nodes only before that (after it, everyone answers), as for the
    /// counter.
    fn amnesia() -> PinModel {
        PinModel {
            amnesia: 1,
            timeouts_after_amnesia: false,
            ..PinModel::shipped()
        }
    }

    #[test]
    fn model_pin_safe_with_a_race_lost_messages_and_slow_nodes() {
        safe("pin: two configurations race", PinModel::shipped());
    }

    #[test]
    fn model_pin_safe_with_amnesia_when_everyone_answers() {
        safe("pin: a node restarts empty", amnesia());
    }

    #[test]
    fn model_pin_finds_two_configurations_if_a_node_replaces_its_pin() {
        let m = PinModel {
            pins: |_, proposed| proposed.to_owned(),
            ..PinModel::shipped()
        };
        unsafe_("pin: nodes overwrite (mutant)", m);
    }

    #[test]
    fn model_pin_finds_two_configurations_if_other_pins_are_ignored() {
        let m = PinModel {
            outcome: |tally, _| (tally.yes_count() >= tally.quorum).then_some(true),
            ..amnesia()
        };
        unsafe_("pin: a quorum wins whatever others hold (mutant)", m);
    }

    #[test]
    fn model_pin_finds_two_configurations_with_amnesia_while_a_node_is_slow() {
        let m = PinModel {
            timeouts_after_amnesia: true,
            amnesia_quiescent: false,
            ..amnesia()
        };
        unsafe_("pin: amnesia during a round, a client stops waiting", m);
    }
}
