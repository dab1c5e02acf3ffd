//! The jumps ahead a node's clock showed before its rate was known, kept
//! until a rate tells a clock that runs fast from a step.
//!
//! Until two agreeing spans measured a node's rate (`clockrate.rs`), its
//! readings are judged by the drift factor alone, so a clock that merely
//! runs fast (5 %, say) shows up as a jump ahead, as a step would, and
//! quarantines the node for a whole restart quarantine (`clockwatch.rs`).
//! For a step that length is needed: a holder that counted on its key
//! there before the step may count on it until its own validity ends, up
//! to a TTL later. A clock that runs fast is another matter: what the
//! readings showed is its excess over the span they cover, no more, and
//! from the moment the rate is known every key there is counted at that
//! rate. So each jump seen before the rate is kept here, and once a rate is
//! accepted it is judged again at that rate: where the rate accounts for
//! every one of them, the quarantine they began ends at the latest of
//! their ends, each the reply that showed it plus its excess plus the two
//! readings' round trips (where in them the node read its clock is not
//! known); where it does not (a step among them), the whole quarantine
//! stays.

use std::time::Duration;

use tokio::time::Instant;

use crate::node::clock::clockrate::{rtt, Reading};

/// How many jumps before a rate are kept: a rate comes after about a
/// second of replies, and on a busy client many replies of that second
/// may each show one (a clock 5 % fast, read every few milliseconds). Past
/// this many, no quarantine is ended early. At most about 24 KiB per node,
/// and only until a rate is known.
const KEPT: usize = 256;

/// A jump ahead seen before the rate was known: the two readings it lies
/// between and the excess they showed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Unexplained {
    /// The earlier reading.
    pub(crate) before: Reading,
    /// The reading that showed the jump.
    pub(crate) after: Reading,
    /// How far beyond the drift allowance the node's clock ran ahead.
    pub(crate) excess: Duration,
}

impl Unexplained {
    /// Where a quarantine for this jump ends if a rate accounts for it:
    /// the reply that showed it, plus the excess, plus both round trips.
    pub(crate) fn end(&self) -> Instant {
        self.after.recv + self.excess + rtt(&self.before) + rtt(&self.after)
    }
}

/// The jumps ahead seen before a rate was known.
#[derive(Debug, Default)]
pub(crate) struct FirstSight {
    /// The jumps kept, oldest first.
    jumps: Vec<Unexplained>,
    /// More were seen than kept.
    overflowed: bool,
}

impl FirstSight {
    /// Keeps a jump seen before a rate was known.
    pub(crate) fn push(&mut self, jump: Unexplained) {
        if self.jumps.len() == KEPT {
            self.overflowed = true;
        } else {
            self.jumps.push(jump);
        }
    }

    /// A rate was accepted: where the quarantine those jumps began may end,
    /// if `explains` accounts for every one of them (`None`: none was
    /// kept, one was a step, or more were seen than kept). Forgets them.
    pub(crate) fn settle(&mut self, explains: impl Fn(&Unexplained) -> bool) -> Option<Instant> {
        let jumps = std::mem::take(&mut self.jumps);
        let overflowed = std::mem::take(&mut self.overflowed);
        if overflowed || !jumps.iter().all(explains) {
            return None;
        }
        jumps.iter().map(Unexplained::end).max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jump(base: Instant, at_ms: u64, excess_ms: u64) -> Unexplained {
        let reading = |ms: u64| Reading {
            sent: base + Duration::from_millis(ms),
            recv: base + Duration::from_millis(ms + 1),
            node_us: 0,
        };
        Unexplained {
            before: reading(at_ms - 1_000),
            after: reading(at_ms),
            excess: Duration::from_millis(excess_ms),
        }
    }

    #[test]
    fn a_quarantine_ends_early_only_where_every_jump_is_explained() {
        let t = Instant::now();
        let mut seen = FirstSight::default();
        assert_eq!(seen.settle(|_| true), None, "nothing kept: nothing to end");
        seen.push(jump(t, 1_000, 40));
        seen.push(jump(t, 2_000, 38));
        // The latest end: 2001 ms + 38 ms + two 1 ms round trips.
        assert_eq!(
            seen.settle(|_| true),
            Some(t + Duration::from_millis(2_041))
        );
        assert_eq!(seen.settle(|_| true), None, "forgotten once settled");
        // One step among them: the whole quarantine stays.
        seen.push(jump(t, 1_000, 40));
        seen.push(jump(t, 2_000, 30_000));
        assert_eq!(seen.settle(|j| j.excess < Duration::from_secs(1)), None);
        // More than kept: never ended early.
        for i in 0..=KEPT as u64 {
            seen.push(jump(t, 1_000 + i, 1));
        }
        assert_eq!(seen.settle(|_| true), None);
        assert_eq!(seen.settle(|_| true), None);
    }
}
