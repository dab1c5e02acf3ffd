//! The quorum counter, model-checked.
//!
//! Nodes keep one record and apply [`cas_accepts`]; clients allocate with
//! the plan step ([`PeriodRules::plan`]), count votes in a real [`Tally`] and
//! stop and decide with [`cas_finished`] and [`cas_outcome`], as
//! `counter::allocate` does. The network delivers messages in any order,
//! and may lose and duplicate them; a client may stop waiting for any node
//! that has not answered (it is then "unresponsive" until it answers
//! again); nodes may crash and come back with their data, or restart empty
//! (amnesia). Every fault is bounded per run.
//!
//! Properties: issued ranges never overlap; each client's numbers increase.

use chrono::{DateTime, Utc};
use stateright::{Model, Property};

use crate::counter::{cas_accepts, cas_outcome, counted_finished, Record, Round};
use crate::model::counter_state::{Action, Client, Msg, Node, Phase, State};
use crate::model::detection::{checked, restart_seen_as_loss, Detect, Restart};
use crate::model::{insert_sorted, take_one, tally_of};
use crate::quorum::tally::{node_bit, quorum};
use crate::serial::period::{PeriodRules, ResetPeriod, Zone};

/// A node's acceptance rule: `(current, expected, new)`.
type Accepts = fn(&Record, &Record, &Record) -> bool;

/// One run's bounds and rules.
#[derive(Clone)]
pub(crate) struct CounterModel {
    /// Nodes.
    pub(crate) nodes: usize,
    /// Each client's wall clock (its length is the number of clients).
    pub(crate) clocks: Vec<DateTime<Utc>>,
    /// Allocations each client makes.
    pub(crate) allocations: u8,
    /// Compare-and-set rounds per allocation.
    pub(crate) attempts: u8,
    /// Numbers per allocation.
    pub(crate) k: u64,
    /// Crashes (the node comes back with its data).
    pub(crate) crashes: u8,
    /// Restarts that lose the data.
    pub(crate) amnesia: u8,
    /// Amnesia only while no message is in flight and no allocation runs
    /// (else at any time).
    pub(crate) amnesia_quiescent: bool,
    /// Amnesia only while every other node is up.
    pub(crate) amnesia_others_up: bool,
    /// Whether clients may still stop waiting for a node after a node
    /// restarted empty (if not, everyone answers from then on).
    pub(crate) timeouts_after_amnesia: bool,
    /// Messages lost.
    pub(crate) drops: u8,
    /// Messages delivered twice.
    pub(crate) duplicates: u8,
    /// Times a client stops waiting for a node that has not answered (it
    /// is then unresponsive to that client until it answers again).
    pub(crate) timeouts: u8,
    /// The nodes' rule.
    pub(crate) accepts: Accepts,
    /// Votes a round needs, for `n` nodes.
    pub(crate) quorum: fn(usize) -> usize,
    /// Whether a refusal from any node makes the round stale (the rule as
    /// shipped); if not, a quorum of acceptances wins whatever others say.
    pub(crate) any_refusal_is_stale: bool,
    /// Whether a node that restarted empty is suspect and counts only once
    /// repaired (as shipped); if not, its acceptance counts at once.
    pub(crate) repair: bool,
    /// How a node that loses its record comes back (what its connection
    /// check sees).
    pub(crate) amnesia_as: Restart,
    /// The detection step: whether that check finds the loss, and so makes
    /// the node suspect (the crate's table, as shipped).
    pub(crate) detect: Detect,
}

impl CounterModel {
    /// The rules as shipped, 3 nodes, 2 clients on the same day, one
    /// allocation of 1 number each (two compare-and-set rounds at most: a
    /// fresh client's first round starts from nothing and learns the high
    /// water mark from refusals), two timeouts, no other faults.
    pub(crate) fn shipped() -> Self {
        let at = |s: &str| {
            DateTime::parse_from_rfc3339(s)
                .map(|d| d.with_timezone(&Utc))
                .unwrap_or_default()
        };
        Self {
            nodes: 3,
            clocks: vec![at("2026-11-23T00:00:01Z"); 2],
            allocations: 1,
            attempts: 2,
            k: 1,
            crashes: 0,
            amnesia: 0,
            amnesia_quiescent: true,
            amnesia_others_up: true,
            timeouts_after_amnesia: true,
            drops: 0,
            duplicates: 0,
            timeouts: 2,
            accepts: |current, expected, _| cas_accepts(current, expected),
            quorum,
            any_refusal_is_stale: true,
            repair: true,
            amnesia_as: Restart::Empty,
            detect: checked,
        }
    }

    /// The plan step every client runs.
    fn rules(&self) -> PeriodRules {
        PeriodRules {
            zone: Zone::Named(chrono_tz::UTC),
            period: ResetPeriod::Day,
            tolerance: std::time::Duration::from_secs(5),
            max: 9,
        }
    }
}

impl Model for CounterModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let node = Node {
            rec: Record::default(),
            up: true,
            epoch: 0,
            suspect: false,
            stamp: None,
        };
        let client = Client {
            phase: Phase::Idle,
            hint: Record::default(),
            done: 0,
            unresponsive: 0,
            won: None,
        };
        vec![State {
            nodes: vec![node; self.nodes],
            clients: vec![client; self.clocks.len()],
            net: Vec::new(),
            issued: Vec::new(),
            faults: [
                self.crashes,
                self.amnesia,
                self.drops,
                self.duplicates,
                self.timeouts,
            ],
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        for (c, client) in s.clients.iter().enumerate() {
            match &client.phase {
                Phase::Idle if client.done < self.allocations => actions.push(Action::Start(c)),
                Phase::Round {
                    yes, no, failed, ..
                } if s.faults[4] > 0
                    && (self.timeouts_after_amnesia || s.faults[1] == self.amnesia) =>
                {
                    for node in 0..self.nodes {
                        if (yes | no | failed) & node_bit(node) == 0 {
                            actions.push(Action::Timeout(c, node));
                        }
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
            if s.faults[2] > 0 {
                actions.push(Action::Drop(m.clone()));
                actions.push(Action::Unheard(m.clone()));
            }
            if s.faults[3] > 0 {
                actions.push(Action::Duplicate(m.clone()));
            }
        }
        let quiescent = s.net.is_empty() && s.clients.iter().all(|c| c.phase == Phase::Idle);
        for (i, node) in s.nodes.iter().enumerate() {
            if node.up && s.faults[0] > 0 {
                actions.push(Action::Crash(i));
            }
            if !node.up {
                actions.push(Action::Recover(i));
            }
            let others_up = s.nodes.iter().enumerate().all(|(j, n)| j == i || n.up);
            if s.faults[1] > 0
                && (quiescent || !self.amnesia_quiescent)
                && (others_up || !self.amnesia_others_up)
            {
                actions.push(Action::Amnesia(i));
            }
        }
    }

    fn next_state(&self, s: &State, action: Action) -> Option<State> {
        let mut s = s.clone();
        match action {
            Action::Start(c) => self.start(&mut s, c, 1),
            Action::Deliver(m) => {
                take_one(&mut s.net, &m)?;
                self.deliver(&mut s, m, true);
            }
            Action::Unheard(m) => {
                take_one(&mut s.net, &m)?;
                s.faults[2] -= 1;
                self.deliver(&mut s, m, false);
            }
            Action::Drop(m) => {
                take_one(&mut s.net, &m)?;
                s.faults[2] -= 1;
            }
            Action::Duplicate(m) => {
                s.faults[3] -= 1;
                self.deliver(&mut s, m, false);
            }
            Action::Timeout(c, node) => {
                s.faults[4] -= 1;
                s.clients[c].unresponsive |= node_bit(node);
                if let Phase::Round { failed, .. } = &mut s.clients[c].phase {
                    *failed |= node_bit(node);
                }
                self.decide(&mut s, c);
            }
            Action::Crash(i) => {
                s.faults[0] -= 1;
                s.nodes[i].up = false;
            }
            Action::Recover(i) => s.nodes[i].up = true,
            Action::Amnesia(i) => {
                s.faults[1] -= 1;
                s.nodes[i] = Node {
                    rec: Record::default(),
                    up: true,
                    epoch: s.nodes[i].epoch + 1,
                    suspect: self.repair && restart_seen_as_loss(self.detect, self.amnesia_as, 1),
                    stamp: None,
                };
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("ranges never overlap", |_, s: &State| {
                s.issued.iter().enumerate().all(|(i, a)| {
                    s.issued[i + 1..]
                        .iter()
                        .all(|b| a.1 != b.1 || a.3 < b.2 || b.3 < a.2)
                })
            }),
            Property::always("each client's numbers increase", |_, s: &State| {
                s.issued.iter().enumerate().all(|(i, a)| {
                    s.issued[i + 1..]
                        .iter()
                        .filter(|b| b.0 == a.0)
                        .all(|b| (a.1.as_str(), a.3) < (b.1.as_str(), b.2))
                })
            }),
            Property::sometimes("every client issued", |m: &Self, s: &State| {
                (0..m.clocks.len()).all(|c| s.issued.iter().any(|r| r.0 == c))
            }),
        ]
    }
}

impl CounterModel {
    /// Client `c` plans a proposal from what it knows and sends it to every
    /// node (as round `attempt`); a plan that fails ends the allocation.
    fn start(&self, s: &mut State, c: usize, attempt: u8) {
        let rules = self.rules();
        let now = self.clocks[c];
        let client = &mut s.clients[c];
        let expected = client.hint.clone();
        let Ok(new) = rules.plan("M", now, &rules.stamp(now), &expected, self.k) else {
            client.done += 1;
            client.phase = Phase::Idle;
            return;
        };
        for node in 0..self.nodes {
            insert_sorted(
                &mut s.net,
                Msg {
                    client: c,
                    node,
                    attempt,
                    expected: expected.clone(),
                    new: new.clone(),
                    stamp: None,
                },
            );
        }
        client.phase = Phase::Round {
            attempt,
            expected,
            new,
            yes: 0,
            no: 0,
            failed: 0,
            highest: None,
            untrusted: 0,
            epochs: vec![0; self.nodes],
        };
    }

    /// A proposal arrives at its node, which applies the rule; if `heard`,
    /// the client reads the answer: a vote if the round is still counting,
    /// a sign of life if it was won (the real client carries a won round's
    /// calls to the end, and drops those of a stale or failed round).
    fn deliver(&self, s: &mut State, m: Msg, heard: bool) {
        let Msg {
            client: c,
            node,
            attempt: answered,
            expected,
            new,
            stamp,
        } = m;
        let n = &mut s.nodes[node];
        if !n.up {
            return;
        }
        if let Some(epoch) = stamp {
            // COUNTER_STAMP: only the process it was meant for, only if
            // the record is still what the won round left.
            if n.epoch == epoch && n.rec == new {
                n.stamp = Some(epoch);
            }
            return;
        }
        let rec = n.rec.clone();
        let trusted = !n.suspect || n.stamp == Some(n.epoch);
        let epoch = n.epoch;
        let accepted = (self.accepts)(&rec, &expected, &new);
        if accepted {
            n.rec = new;
        }
        let client = &mut s.clients[c];
        if !heard {
            return;
        }
        if client.won == Some(answered) {
            client.unresponsive &= !node_bit(node);
            return;
        }
        let Phase::Round {
            attempt,
            yes,
            no,
            failed,
            highest,
            untrusted,
            epochs,
            ..
        } = &mut client.phase
        else {
            return;
        };
        if *attempt != answered || (*yes | *no | *failed) & node_bit(node) != 0 {
            return;
        }
        client.unresponsive &= !node_bit(node);
        if accepted {
            *yes |= node_bit(node);
            if !trusted {
                *untrusted |= node_bit(node);
                epochs[node] = epoch;
            }
        } else {
            *no |= node_bit(node);
            *highest = highest.take().max(Some(rec));
        }
        self.decide(s, c);
    }

    /// After a vote: if client `c`'s round may stop, act on its outcome.
    fn decide(&self, s: &mut State, c: usize) {
        let client = &mut s.clients[c];
        let Phase::Round {
            attempt,
            expected,
            new,
            yes,
            no,
            failed,
            highest,
            untrusted,
            epochs,
        } = client.phase.clone()
        else {
            return;
        };
        let tally = tally_of(self.nodes, (self.quorum)(self.nodes), yes, no, failed);
        let pending = !(yes | no | failed) & ((1 << self.nodes) - 1);
        let owed_by_healthy = pending & !client.unresponsive != 0;
        let (finished, outcome) = if self.any_refusal_is_stale {
            let finished = counted_finished(&tally, untrusted, owed_by_healthy);
            (finished, cas_outcome(&tally, untrusted, highest))
        } else {
            // Weakened: a quorum of acceptances wins whatever the others
            // said; refusals matter only once a quorum refused.
            let won = tally.yes_count() >= tally.quorum;
            let lost = tally.decided() == Some(false);
            let outcome = if won {
                Some(Round::Won)
            } else {
                highest.map(Round::Stale)
            };
            (won || lost, outcome)
        };
        if !finished {
            return;
        }
        match outcome {
            Some(Round::Won) => {
                for (node, epoch) in epochs.iter().enumerate() {
                    if untrusted & node_bit(node) != 0 {
                        insert_sorted(
                            &mut s.net,
                            Msg {
                                client: c,
                                node,
                                attempt,
                                expected: new.clone(),
                                new: new.clone(),
                                stamp: Some(*epoch),
                            },
                        );
                    }
                }
                let first = new.n + 1 - self.k;
                s.issued.push((c, new.period.clone(), first, new.n));
                let client = &mut s.clients[c];
                client.hint = new;
                client.done += 1;
                client.phase = Phase::Idle;
                client.won = Some(attempt);
            }
            Some(Round::Stale(max)) if attempt < self.attempts => {
                client.hint = expected.max(max);
                self.start(s, c, attempt + 1);
            }
            _ => {
                client.done += 1;
                client.phase = Phase::Idle;
                client.won = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::counter_state::{nodes_alike, nodes_and_clients_alike};
    use crate::model::{check, check_symmetric};

    #[test]
    fn model_counter_representative_is_the_least_of_every_renaming() {
        use crate::model::counter_state::alike_built_whole;
        let states = crate::model::walked(&amnesia_not_waited_for(), 1_000, 80);
        assert!(states.len() > 10_000, "{} states", states.len());
        for s in &states {
            assert_eq!(nodes_and_clients_alike(s), alike_built_whole(s), "{s:?}");
        }
    }

    /// Safe: every check must explore its whole space, find no
    /// counterexample, and see every client issue numbers.
    fn safe(name: &str, m: CounterModel) {
        let alike = m.clocks.iter().all(|c| *c == m.clocks[0]);
        let representative = if alike {
            nodes_and_clients_alike
        } else {
            nodes_alike
        };
        check_symmetric(name, m, representative).assert_safe(name, 10_000, "every client issued");
    }

    /// Unsafe: the checker must find a counterexample to non-overlap.
    fn unsafe_(name: &str, m: CounterModel) {
        check(name, m).assert_violates(name, "ranges never overlap");
    }

    /// A node restarts empty while nothing is in flight and every other
    /// node is up; before it, a proposal may have been lost (a node lags)
    /// and clients may have stopped waiting for slow nodes; everyone
    /// answers after it.
    fn quiet_amnesia() -> CounterModel {
        CounterModel {
            amnesia: 1,
            drops: 1,
            timeouts_after_amnesia: false,
            ..CounterModel::shipped()
        }
    }

    #[test]
    fn model_counter_safe_with_slow_nodes_and_stale_rounds() {
        safe(
            "counter: slow nodes, stale rounds retried",
            CounterModel::shipped(),
        );
    }

    #[test]
    fn model_counter_safe_with_a_clock_behind_across_midnight() {
        let mut m = CounterModel::shipped();
        // 3 s behind the other, on the previous day: within tolerance, it
        // issues in the newer period, never in an earlier one.
        m.clocks[1] -= chrono::Duration::seconds(3);
        safe("counter: a clock 3 s behind across midnight", m);
    }

    #[test]
    fn model_counter_safe_with_a_crash() {
        let m = CounterModel {
            crashes: 1,
            ..CounterModel::shipped()
        };
        safe("counter: a node crashes and recovers with its data", m);
    }

    #[test]
    fn model_counter_safe_with_a_lost_message() {
        let m = CounterModel {
            drops: 1,
            ..CounterModel::shipped()
        };
        safe("counter: a proposal or its answer lost", m);
    }

    #[test]
    fn model_counter_safe_with_a_duplicated_message() {
        let m = CounterModel {
            duplicates: 1,
            ..CounterModel::shipped()
        };
        safe("counter: a proposal applied twice", m);
    }

    #[test]
    fn model_counter_safe_with_amnesia_when_everyone_answers() {
        safe(
            "counter: amnesia, everyone answering after",
            quiet_amnesia(),
        );
    }

    /// Amnesia while another node is down and clients stop waiting for
    /// nodes after it.
    fn amnesia_another_down() -> CounterModel {
        CounterModel {
            crashes: 1,
            timeouts: 2,
            drops: 0,
            amnesia_others_up: false,
            timeouts_after_amnesia: true,
            ..quiet_amnesia()
        }
    }

    #[test]
    fn model_counter_finds_overlap_when_durable_settings_are_trusted() {
        // A durable node comes back wiped, or from a backup taken before
        // the numbers were issued, while another is down: the rule before
        // the table trusted it, and a stale proposal got through.
        for amnesia_as in [Restart::Wiped, Restart::OldBackup] {
            let m = CounterModel {
                amnesia_as,
                detect: crate::model::detection::trusts_durable_settings,
                ..amnesia_another_down()
            };
            unsafe_(
                &format!("counter, weakened: durable settings trusted, {amnesia_as:?}"),
                m,
            );
            // The table finds both losses, so the shipped model's
            // suspect node (checked safe above) is what the code decides.
            assert!(restart_seen_as_loss(checked, amnesia_as, 1));
        }
    }

    /// Amnesia, and a node not waited for after it.
    fn amnesia_not_waited_for() -> CounterModel {
        CounterModel {
            timeouts_after_amnesia: true,
            ..quiet_amnesia()
        }
    }

    /// Amnesia at any step, also while an allocation is in flight.
    fn amnesia_in_flight() -> CounterModel {
        CounterModel {
            amnesia_quiescent: false,
            drops: 0,
            ..quiet_amnesia()
        }
    }

    /// Without repair: a node that restarted empty counts at once.
    fn without_repair(m: CounterModel) -> CounterModel {
        CounterModel { repair: false, ..m }
    }

    #[test]
    fn model_counter_safe_with_repair_when_amnesia_meets_a_node_down() {
        safe(
            "counter: amnesia while another node is down, repaired",
            amnesia_another_down(),
        );
    }

    #[test]
    fn model_counter_finds_overlap_without_repair_when_amnesia_meets_a_node_down() {
        unsafe_(
            "counter, weakened: amnesia while another node is down, no repair",
            without_repair(amnesia_another_down()),
        );
    }

    #[test]
    fn model_counter_safe_with_repair_when_a_node_is_not_waited_for() {
        safe(
            "counter: amnesia, a node not waited for after, repaired",
            amnesia_not_waited_for(),
        );
    }

    #[test]
    fn model_counter_finds_overlap_without_repair_when_a_node_is_not_waited_for() {
        unsafe_(
            "counter, weakened: amnesia, a node not waited for after, no repair",
            without_repair(amnesia_not_waited_for()),
        );
    }

    #[test]
    fn model_counter_safe_with_repair_and_amnesia_in_flight() {
        safe(
            "counter: amnesia while an allocation is in flight, repaired",
            amnesia_in_flight(),
        );
    }

    #[test]
    fn model_counter_finds_overlap_without_repair_and_amnesia_in_flight() {
        unsafe_(
            "counter, weakened: amnesia while an allocation is in flight, no repair",
            without_repair(amnesia_in_flight()),
        );
    }

    #[test]
    fn model_counter_finds_overlap_when_cas_accepts_up_to_new() {
        let m = CounterModel {
            accepts: |current, _, new| current <= new,
            ..CounterModel::shipped()
        };
        unsafe_("counter, weakened: accept current <= new", m);
    }

    #[test]
    fn model_counter_finds_overlap_with_a_quorum_of_half() {
        let m = CounterModel {
            quorum: |n| n / 2,
            // With everyone answering, one refusal still stops a round; a
            // smaller quorum shows once clients stop waiting for nodes.
            timeouts: 4,
            ..CounterModel::shipped()
        };
        unsafe_("counter, weakened: quorum n/2", m);
    }

    #[test]
    fn model_counter_finds_overlap_when_a_minority_refusal_is_ignored() {
        let m = CounterModel {
            any_refusal_is_stale: false,
            ..quiet_amnesia()
        };
        unsafe_("counter, weakened: refusals of a minority ignored", m);
    }
}
