//! A count that only grows, read while connected, model-checked: how a
//! client finds that a node's statistics were reset (`CONFIG RESETSTAT`
//! hides evictions and flushes before it) when its readings of
//! `total_commands_processed` are in flight together and are taken in in
//! any order (a round's reply and a re-check's, by different tasks).
//!
//! The node's count starts at 10 and grows by one with each reading it
//! runs (a reading is a command); the statistics are reset once, to 0, at
//! any moment. Nothing else runs, so a reading after the reset reads less
//! than any before it: a client that kept a reading from before the reset
//! must find it (padding with other commands after a reset is beyond any
//! rule on this count; the `TIME` calls count beside it covers that). The
//! client sends at most four readings, at most three in flight at once;
//! each is run by the node, then taken in, in any order, and judged by the
//! crate's rule (`counts::grown`) against the reading it kept.
//!
//! Property: a reading sent after the reset, once every reading that ran
//! before it was taken in (at least one), finds the reset when taken in,
//! whatever else is in flight. Mutants: keeping any reading whose reply
//! came in later than the kept one's (the rule before: a reading that ran
//! after the reset became the measure), keeping only judged readings (a
//! reading from before the reset taken in after one from after it is
//! lost), and moving the kept reply's time on with every reading taken in
//! (while readings overlap, none is judged).

use stateright::{Model, Property};

use crate::node::trust::counts::grown;

/// The rule the client applies to each reading it takes in: the reading
/// kept, the reading, its send and reply times; whether it finds a reset,
/// and the reading to keep.
type Rule = fn(Option<(u64, u8)>, Option<u64>, (u8, u8)) -> (bool, Option<(u64, u8)>);

/// The rule before: a reading sent after the kept one came in is judged;
/// any reading whose reply came in later is kept.
fn kept_when_later(
    last: Option<(u64, u8)>,
    read: Option<u64>,
    (sent, recv): (u8, u8),
) -> (bool, Option<(u64, u8)>) {
    let mut found = false;
    if let (Some((before, at)), Some(read)) = (last, read) {
        found = sent > at && read < before;
    }
    let keep = read.filter(|_| last.is_none_or(|(_, at)| recv > at));
    (found, keep.map(|r| (r, recv)).or(last))
}

/// A mutant: the kept reading's reply time moves on with every reading
/// taken in, and the higher value is kept.
fn time_moves_on(
    last: Option<(u64, u8)>,
    read: Option<u64>,
    (sent, recv): (u8, u8),
) -> (bool, Option<(u64, u8)>) {
    match (last, read) {
        (_, None) => (false, last),
        (None, Some(r)) => (false, Some((r, recv))),
        (Some((before, at)), Some(r)) if sent > at => (r < before, Some((r, recv))),
        (Some((before, at)), Some(r)) => (false, Some((before.max(r), at.max(recv)))),
    }
}

/// A mutant: only judged readings are kept (and the first).
fn judged_only(
    last: Option<(u64, u8)>,
    read: Option<u64>,
    (sent, recv): (u8, u8),
) -> (bool, Option<(u64, u8)>) {
    match (last, read) {
        (_, None) => (false, last),
        (None, Some(r)) => (false, Some((r, recv))),
        (Some((before, at)), Some(r)) if sent > at => (r < before, Some((r, recv))),
        (Some(_), Some(_)) => (false, last),
    }
}

/// The node's count before the first reading.
const START: u64 = 10;

/// The model.
pub(crate) struct CountsModel {
    /// How the client judges and keeps readings.
    rule: Rule,
    /// Readings the client sends at most.
    readings: u8,
    /// Readings in flight at once at most.
    in_flight: usize,
}

/// One reading: when it was sent, what it read once run (`None`: not run
/// yet), whether it ran after the reset, and whether it was sent after the
/// reset once every reading that ran before it was taken in (at least
/// one).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct Reading {
    sent: u8,
    read: Option<u64>,
    after_reset: bool,
    owes_finding: bool,
}

/// A state.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct State {
    /// The logical clock: one tick per step.
    now: u8,
    /// The node's count.
    count: u64,
    /// Whether the statistics were reset.
    reset: bool,
    /// Readings sent so far.
    sent: u8,
    /// Readings in flight.
    flight: Vec<Reading>,
    /// The reading the client kept.
    kept: Option<(u64, u8)>,
    /// Whether the client found a reset.
    found: bool,
    /// Whether a reading that ran before the reset was taken in.
    saw_before: bool,
    /// Whether a reading that owes the finding (see [`Reading`]) was taken
    /// in: the moment the property asks for the reset to be found.
    due: bool,
}

/// An action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// The client sends a reading.
    Send,
    /// The node runs reading `i` (of those in flight).
    Run(usize),
    /// The statistics are reset.
    Reset,
    /// The client takes in reading `i`, run.
    TakeIn(usize),
}

impl Model for CountsModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            now: 0,
            count: START,
            reset: false,
            sent: 0,
            flight: Vec::new(),
            kept: None,
            found: false,
            saw_before: false,
            due: false,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        if s.sent < self.readings && s.flight.len() < self.in_flight {
            actions.push(Action::Send);
        }
        if !s.reset {
            actions.push(Action::Reset);
        }
        for (i, r) in s.flight.iter().enumerate() {
            actions.push(match r.read {
                None => Action::Run(i),
                Some(_) => Action::TakeIn(i),
            });
        }
    }

    fn next_state(&self, s: &State, action: Action) -> Option<State> {
        let mut s = s.clone();
        s.now += 1;
        match action {
            Action::Send => {
                s.sent += 1;
                let before_in_flight = s.flight.iter().any(|r| r.read.is_some() && !r.after_reset);
                s.flight.push(Reading {
                    sent: s.now,
                    read: None,
                    after_reset: false,
                    owes_finding: s.reset && s.saw_before && !before_in_flight,
                });
            }
            Action::Reset => {
                s.reset = true;
                s.count = 0;
            }
            Action::Run(i) => {
                let r = &mut s.flight[i];
                r.read = Some(s.count);
                r.after_reset = s.reset;
                s.count += 1;
            }
            Action::TakeIn(i) => {
                let r = s.flight.remove(i);
                let (found, kept) = (self.rule)(s.kept, r.read, (r.sent, s.now));
                s.found |= found;
                s.kept = kept;
                s.due |= r.owes_finding;
                s.saw_before |= !r.after_reset;
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "a reset is found by a reading sent after it",
                |_, s: &State| !s.due || s.found,
            ),
            Property::sometimes("a reset is found", |_, s: &State| s.found),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::check;

    const FOUND: &str = "a reset is found by a reading sent after it";

    fn model(rule: Rule) -> CountsModel {
        CountsModel {
            rule,
            readings: 4,
            in_flight: 3,
        }
    }

    #[test]
    fn model_counts_a_reset_is_found_whatever_order_readings_come_in() {
        check("counts: readings in flight together", model(grown)).assert_safe(
            "counts",
            1_000,
            "a reset is found",
        );
    }

    #[test]
    fn model_counts_finds_a_reset_missed_where_a_later_reply_is_kept() {
        check(
            "counts, before: a later reply is kept",
            model(kept_when_later),
        )
        .assert_violates("counts, before", FOUND);
    }

    #[test]
    fn model_counts_finds_a_reset_missed_where_the_kept_time_moves_on() {
        check(
            "counts, weakened: the kept time moves on",
            model(time_moves_on),
        )
        .assert_violates("counts, time moves on", FOUND);
    }

    #[test]
    fn model_counts_finds_a_reset_missed_where_only_judged_readings_are_kept() {
        check(
            "counts, weakened: judged readings alone",
            model(judged_only),
        )
        .assert_violates("counts, judged only", FOUND);
    }
}
