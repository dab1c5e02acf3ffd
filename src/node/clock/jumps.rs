//! The jumps ahead a node's clock showed, kept for the locks held there: a
//! lock asks how much the jumps seen since its keys were last set took off
//! their life (`clockwatch.rs` records them, `lock/shared.rs` asks).

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// How many jumps ahead a node's watch remembers for the locks held there
/// (a lock asks about those seen since its keys were last set).
pub(crate) const JUMPS_KEPT: usize = 64;

/// A node's latest jumps ahead, each with when it was seen (the reply that
/// showed it came in) and the sum of the excesses seen before it.
#[derive(Debug, Default)]
pub(crate) struct Jumps {
    /// Oldest first: (seen at, the total before it).
    kept: VecDeque<(Instant, Duration)>,
    /// Every excess seen, summed.
    total: Duration,
    /// When the latest jump no longer kept was seen.
    forgotten: Option<Instant>,
}

impl Jumps {
    /// Records a jump ahead by `excess` seen at `at`.
    pub(crate) fn push(&mut self, at: Instant, excess: Duration) {
        if self.kept.len() == JUMPS_KEPT {
            self.forgotten = self.kept.pop_front().map(|(at, _)| at);
        }
        self.kept.push_back((at, self.total));
        self.total = self.total.saturating_add(excess);
    }

    /// What the jumps seen after `since` add up to: each one took its
    /// excess off the life of every key there, so two steps of 10 s cost a
    /// key 20 s. Where jumps seen after `since` were no longer kept, all
    /// of its life ([`Duration::MAX`]).
    pub(crate) fn since(&self, since: Instant) -> Duration {
        if self.forgotten.is_some_and(|at| at > since) {
            return Duration::MAX;
        }
        self.kept
            .iter()
            .find(|(at, _)| *at > since)
            .map_or(Duration::ZERO, |(_, before)| {
                self.total.saturating_sub(*before)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_since_a_key_was_set_add_up() {
        let t = Instant::now();
        let ms = Duration::from_millis;
        let mut jumps = Jumps::default();
        assert_eq!(jumps.since(t), Duration::ZERO);
        jumps.push(t + ms(10), ms(300));
        jumps.push(t + ms(20), ms(200));
        // A key set before both lost both; one set between, the second.
        assert_eq!(jumps.since(t), ms(500));
        assert_eq!(jumps.since(t + ms(15)), ms(200));
        assert_eq!(jumps.since(t + ms(20)), Duration::ZERO);
        // Past what is kept: a key set before a forgotten jump lost all.
        for i in 0..JUMPS_KEPT as u64 {
            jumps.push(t + ms(100 + i), ms(1));
        }
        assert_eq!(jumps.since(t + ms(15)), Duration::MAX);
        assert_eq!(jumps.since(t + ms(100)), ms(JUMPS_KEPT as u64 - 1));
    }
}
