//! A node's clock as a client first sees it, model-checked: the crate's
//! own rule for each reply (`Track::take`: the verdict against the reply
//! before, the jumps kept before a rate is known, the rate from two
//! agreeing spans, and whether the first rate accounts for those jumps),
//! with the quarantine it begins and ends kept in the crate's own
//! `TrustState`.
//!
//! One node, one holder, one client. The holder took the lock at 0 with a
//! TTL of `ttl` ticks (a tick is [`TICK`] of real time) and counts its
//! key on the node valid until the TTL less the drift factor, at the
//! node's rate: clients count a node at its measured rate (the lock model
//! has the rest; a holder that counted a node before any reading showed
//! its rate is the limit `docs/guarantees.md` names). The client read the
//! node's clock at 0 too (a step before its first reply it cannot see)
//! and reads it again at ticks the checker picks, each reading a reply
//! whose vote it would count. The node's clock either runs fast from the
//! start ([`Clock::Fast`]) or, at a tick the checker picks, steps ahead
//! ([`Clock::Step`]), dropping the holder's key early.
//!
//! The property: the client never counts the node's vote while the key
//! is gone there and the holder still counts its lock valid (it would take
//! the lock beside the holder). And, so the model is not vacuous: the step
//! is seen, and a clock that runs fast counts again well before a step's
//! whole quarantine would have ended. The mutant: every jump seen before
//! the rate taken for the rate's doing (no judging again at the rate).

use std::time::{Duration, Instant};

use stateright::{Model, Property};

use crate::node::clock::clockrate::{Rate, Reading};
use crate::node::clock::clockwatch::{explained, Explains, Track, Verdict};
use crate::node::clock::firstsight::Unexplained;
use crate::node::trust::truststate::TrustState;

/// Real time per tick: two ticks are a rate's shortest span (`HALF`).
const TICK: Duration = Duration::from_millis(250);

/// How the node's clock misbehaves.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Clock {
    /// It runs this many times as fast as real time, from the start.
    Fast(f64),
    /// At real rate, and steps this many ticks ahead once.
    Step(u8),
}

/// The model.
#[derive(Clone)]
pub(crate) struct FirstSightModel {
    /// The node's clock.
    pub(crate) clock: Clock,
    /// The holder's TTL, and the client's restart quarantine, in ticks.
    pub(crate) ttl: u8,
    /// The drift factor.
    pub(crate) drift: f64,
    /// Last tick explored.
    pub(crate) horizon: u8,
    /// Most readings the client takes (the one at 0 included).
    pub(crate) reads: u32,
    /// Rule: whether a rate accounts for a jump (as shipped:
    /// [`explained`]).
    pub(crate) explains: Explains,
}

impl FirstSightModel {
    /// As shipped, with the node's clock `clock`: a TTL and a quarantine
    /// of 3 s, six readings in 3 s.
    pub(crate) fn shipped(clock: Clock) -> Self {
        Self {
            clock,
            ttl: 12,
            drift: 0.01,
            horizon: 12,
            reads: 6,
            explains: explained,
        }
    }

    /// The node's clock at real tick `t` (in ticks), with the step taken at
    /// `stepped` if it was.
    fn node_clock(&self, t: u8, stepped: Option<u8>) -> f64 {
        match self.clock {
            Clock::Fast(rate) => f64::from(t) * rate,
            Clock::Step(by) => {
                let jumped = stepped.is_some_and(|at| at <= t);
                f64::from(t) + if jumped { f64::from(by) } else { 0.0 }
            }
        }
    }

    /// The node's rate, which the holder counts its key at.
    fn rate(&self) -> f64 {
        match self.clock {
            Clock::Fast(rate) => rate,
            Clock::Step(_) => 1.0,
        }
    }

    /// When the holder's lock stops being valid on its count (real ticks).
    fn holder_until(&self) -> f64 {
        f64::from(self.ttl) * (1.0 - self.drift) / self.rate()
    }

    /// The client's view after each of its readings so far (up to tick
    /// `s.t`): for each, the tick, whether the node was still
    /// quarantined once that reply was in, and whether any jump was seen
    /// by then.
    fn view(&self, s: &State) -> Vec<(u8, bool, bool)> {
        let base = Instant::now();
        let at = |t: u8| base + TICK * u32::from(t);
        let mut track = Track::default();
        let mut st = TrustState::default();
        let quarantine = TICK * u32::from(self.ttl);
        let mut seen = false;
        let mut out = Vec::new();
        for t in (0..=s.t).filter(|t| s.reads & (1 << t) != 0) {
            let node_us = (1e12 + self.node_clock(t, s.stepped) * TICK.as_micros() as f64) as u64;
            let now = Reading {
                sent: tokio::time::Instant::from_std(at(t)),
                recv: tokio::time::Instant::from_std(at(t)),
                node_us,
            };
            let taken = track.take_by(now, self.drift, self.explains);
            if let Some(before) = taken.newer {
                if st.until.is_some() {
                    let std = |r: &Reading| (r.recv.into_std(), r.node_us);
                    st.node_reading(before.as_ref().map(std), std(&now), self.drift);
                }
            }
            if let Some(Verdict::Ahead(_)) = taken.verdict {
                st.clock_ran_ahead(at(t) + quarantine, at(t));
                seen = true;
            }
            if let Some(end) = taken.settled {
                st.clock_only_cut(end.into_std());
            }
            out.push((t, st.on_at(at(t), true).is_some(), seen));
        }
        out
    }

    /// Whether the client counts the node's vote, at a reading, while the
    /// holder's key is gone there and the holder counts its lock valid.
    fn second_holder(&self, s: &State) -> bool {
        self.view(s).iter().any(|&(t, out, _)| {
            let gone = self.node_clock(t, s.stepped) >= f64::from(self.ttl);
            gone && f64::from(t) < self.holder_until() && !out
        })
    }
}

/// The checker's state.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct State {
    /// Real time, ticks.
    t: u8,
    /// The ticks at which the client read the node's clock (bit `t`).
    reads: u32,
    /// When the node's clock stepped, if it did.
    stepped: Option<u8>,
}

/// What happens next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// A tick of real time passes.
    Tick,
    /// The client reads the node's clock (a reply comes in) now.
    Read,
    /// The node's clock steps ahead now.
    Step,
}

/// The safety property.
pub(crate) const NO_SECOND_HOLDER: &str =
    "the client never counts the node while the holder's key is gone there and still valid";

impl Model for FirstSightModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            t: 0,
            reads: 1,
            stepped: None,
        }]
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        if s.t < self.horizon {
            out.push(Action::Tick);
        }
        if s.reads & (1 << s.t) == 0 && s.reads.count_ones() < self.reads {
            out.push(Action::Read);
        }
        // A step at a tick comes before any reading then (the reading
        // shows it).
        let unread = s.reads & (1 << s.t) == 0;
        if matches!(self.clock, Clock::Step(_)) && s.stepped.is_none() && s.t > 0 && unread {
            out.push(Action::Step);
        }
    }

    fn next_state(&self, s: &State, a: Action) -> Option<State> {
        let mut s = s.clone();
        match a {
            Action::Tick => s.t += 1,
            Action::Read => s.reads |= 1 << s.t,
            Action::Step => s.stepped = Some(s.t),
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(NO_SECOND_HOLDER, |m: &Self, s: &State| !m.second_holder(s)),
            Property::sometimes("the node seen running ahead", |m: &Self, s: &State| {
                m.view(s).iter().any(|&(_, _, seen)| seen)
            }),
            Property::sometimes(
                "the node counts again within half a quarantine of the first jump seen",
                |m: &Self, s: &State| {
                    let view = m.view(s);
                    let first = view.iter().find(|v| v.2).map(|v| v.0);
                    first.is_some_and(|first| {
                        view.iter()
                            .any(|&(t, out, _)| !out && t > first && t < first + m.ttl / 2)
                    })
                },
            ),
        ]
    }
}

/// A mutant: every jump seen before the rate counts as the rate's doing.
pub(crate) fn always_explained(_: &Unexplained, _: Rate, _: f64) -> bool {
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::check;

    #[test]
    fn model_first_sight_a_fast_clock_counts_again_once_its_rate_explains_it() {
        let m = FirstSightModel::shipped(Clock::Fast(1.05));
        let found = check("first sight: a clock 5 % fast", m);
        found.assert_safe(
            "first sight, fast",
            100,
            "the node counts again within half a quarantine of the first jump seen",
        );
    }

    #[test]
    fn model_first_sight_a_step_keeps_its_whole_quarantine() {
        let m = FirstSightModel::shipped(Clock::Step(2));
        let found = check("first sight: a step of half a second", m);
        found.assert_safe("first sight, step", 1_000, "the node seen running ahead");
        assert!(
            !found
                .reached
                .contains(&"the node counts again within half a quarantine of the first jump seen"),
            "a step's quarantine ended early"
        );
    }

    #[test]
    fn model_first_sight_finds_a_second_holder_when_a_step_passes_for_a_rate() {
        let m = FirstSightModel {
            explains: always_explained,
            ..FirstSightModel::shipped(Clock::Step(2))
        };
        let found = check("first sight, weakened: every jump taken for the rate's", m);
        found.assert_violates("first sight, weakened", NO_SECOND_HOLDER);
    }
}
