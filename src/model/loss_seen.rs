//! A loss found while connected, as a held lock sees it, model-checked on
//! the crate's own `Trust` (`node/trust/mod.rs`): every order, up to a
//! bound, of the events that change what a node's trust says about a loss,
//! replayed on a real `Trust`, with a held lock looking between them.
//!
//! Events: a connection check of the process the client knew (it finds
//! nothing new), of a new process (a restart: a loss), a drop found while
//! connected (an eviction or a flush a reply showed, as `vigil.rs` reports
//! it), and a look by a lock held since before all of them, which asks
//! the node's trust when it last found a loss (`node/mod.rs` cuts and
//! tells a held lock whose nodes lost keys after it was taken).
//!
//! Property: a look after a loss was found (the held locks were told)
//! sees it. The weakened rule, which the checker must show loses it: the
//! loss is seen only while the node is suspect (the gate before: a check
//! that finds nothing new clears "suspect", the quarantine stays on, and a
//! held lock that looked only then was never cut).

use std::sync::Arc;

use stateright::{Model, Property};

use crate::node::trust::amnesia::{assess, Cause};
use crate::node::trust::evidence::Probe;
use crate::node::trust::panel::Panel;
use crate::node::trust::Trust;

/// The property.
const SEEN: &str = "a held lock that looks after a loss was found sees it";

/// Not vacuous: a look after a check that cleared "suspect".
const CLEARED: &str = "a look after a loss and a check that found nothing new";

/// The quarantine, seconds.
const QUARANTINE: u64 = 60;

/// When a held lock's nodes last lost keys, as the rule reads it.
type Gate = fn(&Trust) -> Option<tokio::time::Instant>;

/// One run's bounds and rule.
#[derive(Clone)]
pub(crate) struct LossSeenModel {
    /// Events after the first connection check.
    pub(crate) events: usize,
    /// The rule.
    pub(crate) gate: Gate,
}

/// What happens next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Event {
    /// A connection check of process `0` or `1` (the first check is of
    /// process 0).
    Check(u8),
    /// Keys dropped while connected, found from a reply.
    Drop,
    /// The held lock looks.
    Look,
}

/// A process's probe: `run` long up (500 s for the first, 1 s for a new
/// one), marked by us, no loss recorded.
fn probe(run: u8) -> Probe {
    let id = format!("r{run}");
    Probe::sample(&id, if run == 0 { 500 } else { 1 }, Some((&id, None)))
}

/// What a replay found: whether every look after a loss saw one, and
/// whether some look came after a check that found nothing new.
fn replay(events: &[Event], gate: Gate) -> (bool, bool) {
    let news = Arc::new(tokio::sync::watch::channel(0).0);
    let trust = Trust::telling(&news, &Arc::new(Panel::new(1, String::new())));
    let since = crate::clock::now();
    // 0: no loss yet; 1: a loss found; 2: and a check found nothing new.
    let (mut seen, mut cleared, mut phase) = (true, false, 0);
    for event in std::iter::once(&Event::Check(0)).chain(events) {
        let at = std::time::Instant::now();
        match *event {
            Event::Check(run) => {
                let p = probe(run);
                let verdict = assess(&p, &trust.memory(), QUARANTINE);
                trust.record(&p, &verdict, at, true);
                phase = match (phase, verdict.cause) {
                    (_, Some(_)) => 1,
                    (0, None) => 0,
                    (_, None) => 2,
                };
            }
            Event::Drop => {
                trust.dropped_while_connected(
                    at,
                    std::time::Duration::from_secs(QUARANTINE),
                    Cause::Dropped,
                );
                phase = 1;
            }
            Event::Look => {
                let told = *news.borrow() > 0;
                seen &= !told || gate(&trust).is_some_and(|found| found >= since);
                cleared |= phase == 2;
            }
        }
    }
    (seen, cleared)
}

impl Model for LossSeenModel {
    type State = Vec<Event>;
    type Action = Event;

    fn init_states(&self) -> Vec<Vec<Event>> {
        vec![Vec::new()]
    }

    fn actions(&self, s: &Vec<Event>, actions: &mut Vec<Event>) {
        if s.len() < self.events {
            actions.extend([Event::Check(0), Event::Check(1), Event::Drop, Event::Look]);
        }
    }

    fn next_state(&self, s: &Vec<Event>, e: Event) -> Option<Vec<Event>> {
        let mut next = s.clone();
        next.push(e);
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(SEEN, |m: &Self, s: &Vec<Event>| replay(s, m.gate).0),
            Property::sometimes(CLEARED, |m: &Self, s: &Vec<Event>| replay(s, m.gate).1),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::check;

    #[test]
    fn model_loss_seen_by_every_later_look() {
        let name = "loss seen: a held lock's look after a loss found";
        let m = LossSeenModel {
            events: 5,
            gate: Trust::lost_at,
        };
        check(name, m).assert_safe(name, 1_000, CLEARED);
    }

    #[test]
    fn model_loss_seen_finds_a_look_that_misses_it_when_gated_on_suspect() {
        let name = "loss seen, weakened: only while the node is suspect";
        let m = LossSeenModel {
            events: 5,
            gate: Trust::lost_at_while_suspect,
        };
        check(name, m).assert_violates(name, SEEN);
    }
}
