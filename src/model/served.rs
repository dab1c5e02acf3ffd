//! A loss handed from one client to the next through our marker,
//! model-checked: the rule that a client writes `served` only once it
//! watched the loss's whole quarantine pass (`node/trust/check.rs`, [`serves`]).
//!
//! Time is discrete (1 ms a tick, up to a horizon). One node, in use
//! (declared, our marker naming its process), loses its data once, at a
//! moment the checker picks: another process answers, empty, with no
//! marker (a restart without its data). A lock it held may stay valid for
//! one quarantine (the longest TTL) after that. Clients were connected
//! before (all but one, which starts later and never saw the node); the
//! restart breaks their connections, so each client counts the
//! node again only after a connection check of its own (at any later
//! moment the checker picks, and again at any moment after: the re-check
//! behind a request). Each check builds the probe the node shows, judges it
//! with the crate's table ([`assess`]), keeps the quarantine from its own
//! first sight of the loss (`Trust::record`), writes our marker where it
//! did not name the process (`check.rs`) and `served` where [`serves`]
//! says so; a later check that finds `served` counts the node at once.
//!
//! One client may be odd ([`Odd`]): its clocks twice as fast, beside a
//! node whose clock runs fast too, its quarantine ends in half the time on
//! the clocks it reads. Reading the node's clock alone, it must not vouch
//! for the others (`Panel::vouches`: two members' clocks at least); of
//! another deployment (another node list), what it writes must not count
//! for them (`served` names the writer's deployment: `panel.rs`).
//!
//! Property: no other client counts the node within one quarantine after
//! its loss. And, so that it is not vacuous: some client counts the node from
//! a served marker before its own quarantine from its own first sight
//! would have ended.

use stateright::{Model, Property};

use crate::node::trust::amnesia::{assess, Assessment, Memory};
use crate::node::trust::check::serves;
use crate::node::trust::evidence::{Marker, Probe};
use crate::node::trust::marker::marker_is;

/// Whether a check writes `served`: [`serves`], or a mutant.
type Serves = fn(&Assessment, bool, bool, bool) -> bool;

/// One run's bounds and rules.
#[derive(Clone)]
pub(crate) struct ServedModel {
    /// Clients.
    pub(crate) clients: usize,
    /// The restart quarantine, ms (one TTL).
    pub(crate) quarantine: u8,
    /// Last real instant (ms) explored.
    pub(crate) horizon: u8,
    /// The rule that writes `served`.
    pub(crate) serves: Serves,
    /// Client 0, if it is the odd one (see [`Odd`]).
    pub(crate) odd: Odd,
    /// Rule: a served marker counts only where a client of the reader's
    /// deployment wrote it (`evidence.rs`, `panel.rs`). Off: any does.
    pub(crate) own_deployment: bool,
}

/// Client 0's clocks run twice as fast beside the node's, which runs fast
/// too: on the clocks it reads, its quarantine ends in half the time. Its
/// own locks are outside the assumptions, so the property judges the
/// others; what it writes must not let them count the node early.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Odd {
    /// No odd client.
    No,
    /// Of the others' deployment, it reads the node's clock alone (its
    /// other members refuse `TIME`): it does not vouch (`Panel::vouches`).
    Alone,
    /// Of another deployment (another node list, whose clocks agree with
    /// it): it vouches, under its own deployment's name.
    Foreign,
}

/// Our marker on the node.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct Mark {
    /// The process it names (0 before the loss, 1 after).
    pub(crate) process: u8,
    /// The loss it records (the uptime at which a client found it).
    pub(crate) loss: Option<u64>,
    /// The deployment (0 or 1) of the client that recorded that loss as
    /// served, if one did.
    pub(crate) served: Option<u8>,
}

/// A client.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct Client {
    /// Its connection was made and checked after the node's last restart.
    pub(crate) checked: bool,
    /// What its checks remember ([`Memory`]): the process seen last,
    /// whether our marker named it, and the loss found.
    pub(crate) seen: Option<u8>,
    /// Whether our marker named that process.
    pub(crate) marked: bool,
    /// The loss its last check found.
    pub(crate) loss: Option<u64>,
    /// The end of its quarantine for that loss, counted from its first
    /// sight of it.
    pub(crate) until: Option<u8>,
    /// Its last check found the loss served (counts at once).
    pub(crate) told: bool,
}

/// The whole system.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct State {
    /// Real time, ms.
    pub(crate) now: u8,
    /// The process answering (0, then 1 after the loss).
    pub(crate) process: u8,
    /// When the loss happened.
    pub(crate) lost_at: Option<u8>,
    /// Our marker.
    pub(crate) mark: Option<Mark>,
    /// The clients.
    pub(crate) clients: Vec<Client>,
    /// A client counted the node from a served marker before its own
    /// quarantine would have ended.
    pub(crate) counted_early_by_served: bool,
}

/// What can happen next.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) enum Action {
    /// One millisecond passes.
    Tick,
    /// The node restarts without its data.
    Lose,
    /// A client's connection check runs.
    Check(usize),
}

impl ServedModel {
    /// The rule as shipped: 3 clients (the last one starts after the
    /// loss), quarantine 3 ms, 8 ms of time.
    pub(crate) fn shipped() -> Self {
        Self {
            clients: 3,
            quarantine: 3,
            horizon: 8,
            serves,
            odd: Odd::Alone,
            own_deployment: true,
        }
    }

    /// Whether client `c` counts the node for locks now.
    fn counts(s: &State, c: &Client) -> bool {
        c.checked && (c.told || c.until.is_none_or(|u| s.now >= u))
    }

    /// Client `i`'s deployment.
    fn deployment(&self, i: usize) -> u8 {
        u8::from(self.odd == Odd::Foreign && i == 0)
    }

    /// The probe client `i`'s check reads now (`served` as the crate reads
    /// it: by a client of its deployment).
    fn probe(&self, s: &State, i: usize) -> Probe {
        let name = |p: u8| format!("p{p}");
        Probe {
            run_id: name(s.process),
            uptime: u64::from(s.now - s.lost_at.unwrap_or(0)),
            damage: Some(0),
            epoch: 0,
            promoted: false,
            replid: "h".into(),
            durable: Some(false),
            evicted: Some(0),
            commands: None,
            times: None,
            evicts: false,
            slots: None,
            marker: s.mark.as_ref().map(|m| Marker::Found {
                run: name(m.process),
                loss: m.loss,
                seen: Some(0),
                repl: Some("h".into()),
                slots: None,
                served: m
                    .served
                    .is_some_and(|d| !self.own_deployment || d == self.deployment(i)),
                why: None,
                tags: None,
            }),
        }
    }

    /// Client `i`'s check, as `check.rs` runs it.
    fn check(&self, s: &mut State, i: usize) {
        let probe = self.probe(s, i);
        let c = &s.clients[i];
        let memory = Memory {
            run_id: c.seen.map(|p| format!("p{p}")).unwrap_or_default(),
            marked: c.marked,
            loss: c.loss,
        };
        let verdict = assess(&probe, &memory, u64::from(self.quarantine));
        let marked = marker_is(probe.marker.as_ref(), &probe, verdict.loss, None);
        let now = s.now;
        let same_process = c.seen == Some(s.process);
        let c = &mut s.clients[i];
        // The quarantine counts from the first sight of this loss in this
        // process; a later check that finds the same loss keeps its end.
        let kept = same_process && c.loss == verdict.loss;
        if !kept {
            c.until = None;
        }
        let alone = self.odd != Odd::No && i == 0;
        if verdict.loss.is_some() && verdict.remaining > 0 && c.until.is_none() {
            let left = if alone {
                verdict.remaining.div_ceil(2)
            } else {
                verdict.remaining
            };
            c.until = Some(now.saturating_add(left as u8));
        }
        let watched = c.until.is_some_and(|u| u <= now);
        let was_counting = Self::counts(s, &s.clients[i]);
        let c = &mut s.clients[i];
        c.told = verdict.loss.is_some() && verdict.remaining == 0;
        if c.told && !was_counting && c.until.is_some_and(|u| now < u) {
            s.counted_early_by_served = true;
        }
        let c = &mut s.clients[i];
        c.checked = true;
        c.seen = Some(s.process);
        c.loss = verdict.loss;
        // What its members' clocks let it vouch for: one member's clock
        // never does (`Panel::vouches`).
        let vouched = !(self.odd == Odd::Alone && i == 0);
        if (self.serves)(&verdict, marked, watched, vouched) {
            let by = self.deployment(i);
            if let Some(m) = s.mark.as_mut() {
                m.served = Some(by);
            }
        }
        if !marked {
            // Written over the marker as found: ours now names the
            // process and the loss, not served.
            s.mark = Some(Mark {
                process: s.process,
                loss: verdict.loss,
                served: None,
            });
        }
        s.clients[i].marked = true;
    }
}

impl Model for ServedModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let client = Client {
            checked: true,
            seen: Some(0),
            marked: true,
            loss: None,
            until: None,
            told: false,
        };
        vec![State {
            now: 0,
            process: 0,
            lost_at: None,
            mark: Some(Mark {
                process: 0,
                loss: None,
                served: None,
            }),
            // The last one never saw the node before (it starts later).
            clients: (0..self.clients)
                .map(|i| match i + 1 == self.clients {
                    true => Client {
                        checked: false,
                        seen: None,
                        marked: false,
                        ..client.clone()
                    },
                    false => client.clone(),
                })
                .collect(),
            counted_early_by_served: false,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        if s.now < self.horizon {
            actions.push(Action::Tick);
        }
        if s.lost_at.is_none() {
            actions.push(Action::Lose);
        }
        for i in 0..s.clients.len() {
            if s.lost_at.is_some() {
                actions.push(Action::Check(i));
            }
        }
    }

    fn next_state(&self, s: &State, action: Action) -> Option<State> {
        let mut s = s.clone();
        match action {
            Action::Tick => s.now += 1,
            Action::Lose => {
                s.process = 1;
                s.lost_at = Some(s.now);
                s.mark = None;
                for c in &mut s.clients {
                    c.checked = false;
                }
            }
            Action::Check(i) => self.check(&mut s, i),
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "no client counts a node within a quarantine of its loss",
                |m: &ServedModel, s: &State| {
                    let judged = usize::from(m.odd != Odd::No);
                    s.lost_at.is_none_or(|l| {
                        s.now >= l.saturating_add(m.quarantine)
                            || s.clients[judged..].iter().all(|c| !Self::counts(s, c))
                    })
                },
            ),
            Property::sometimes(
                "a client counted the node from a served marker",
                |_, s: &State| s.counted_early_by_served,
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::check;

    #[test]
    fn model_served_never_lets_a_node_count_within_its_quarantine() {
        let name = "served: a loss handed on through our marker";
        check(name, ServedModel::shipped()).assert_safe(
            name,
            100,
            "a client counted the node from a served marker",
        );
    }

    #[test]
    fn model_served_finds_a_node_counted_early_when_served_is_written_at_first_sight() {
        let name = "served, weakened: written by the first check that finds the loss";
        let m = ServedModel {
            serves: |v, marked, _, _| marked && v.remaining > 0 && v.loss.is_some(),
            ..ServedModel::shipped()
        };
        check(name, m).assert_violates(
            name,
            "no client counts a node within a quarantine of its loss",
        );
    }

    #[test]
    fn model_served_never_lets_another_deployment_vouch() {
        let name = "served: a client of another deployment writes it early";
        let m = ServedModel {
            odd: Odd::Foreign,
            ..ServedModel::shipped()
        };
        check(name, m).assert_safe(name, 100, "a client counted the node from a served marker");
    }

    #[test]
    fn model_served_finds_a_node_counted_early_when_any_deployment_vouches() {
        let name = "served, weakened: written by any deployment, read by all";
        let m = ServedModel {
            odd: Odd::Foreign,
            own_deployment: false,
            ..ServedModel::shipped()
        };
        check(name, m).assert_violates(
            name,
            "no client counts a node within a quarantine of its loss",
        );
    }

    #[test]
    fn model_served_finds_a_node_counted_early_when_a_client_of_one_member_vouches() {
        let name = "served, weakened: written on one member's clock";
        let m = ServedModel {
            serves: |v, marked, watched, _| {
                marked && v.remaining > 0 && v.loss.is_some() && watched
            },
            ..ServedModel::shipped()
        };
        check(name, m).assert_violates(
            name,
            "no client counts a node within a quarantine of its loss",
        );
    }
}
