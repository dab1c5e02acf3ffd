//! A quarantine's end on the node's clock too: a quarantine is measured on
//! our clock, and a client whose own clock runs fast (a virtual machine
//! whose clock source misbehaves) would see it end early in real time,
//! counting the node while a lock it forgot can still be valid. So a
//! quarantine also lasts until the node's own clock, as its replies show
//! it (`TIME` behind every request: `clockwatch.rs`), advanced by the
//! quarantine's length times `1 + drift_factor` (the node's clock may run
//! that much fast) since it began: both clocks must show it over. A node
//! whose clock is never read (`TIME` refused) is judged on ours alone.

use std::time::{Duration, Instant};

/// The node's clock against one quarantine.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct NodeBound {
    /// The latest reading of the node's clock: when (our clock) its reply
    /// came in, and the node's time in µs.
    latest: Option<(Instant, u64)>,
    /// The node's time (µs) when the quarantine on now began, at the
    /// latest: a reading before it moved on by our clock's time since
    /// (more, if our clock runs fast), or the first reading after it.
    from: Option<u64>,
    /// The drift factor the node's clock is allowed.
    allowance: f64,
}

impl NodeBound {
    /// A quarantine begins at `now` (none was on): the node's time then,
    /// from the latest reading.
    pub(crate) fn begin(&mut self, now: Instant) {
        self.from = self.latest.map(|(recv, us)| {
            let since = now.saturating_duration_since(recv).as_micros();
            us.saturating_add(u64::try_from(since).unwrap_or(u64::MAX))
        });
    }

    /// A reading of the node's clock, `node_us` in a reply that came in at
    /// `recv`, judged with the drift factor `allowance`; `on`: whether a
    /// quarantine is on (the first reading in one dates its start where
    /// none before did).
    pub(crate) fn reading(&mut self, recv: Instant, node_us: u64, allowance: f64, on: bool) {
        if self.latest.is_some_and(|(r, _)| r > recv) {
            return;
        }
        self.latest = Some((recv, node_us));
        self.allowance = allowance;
        if on && self.from.is_none() {
            self.from = Some(node_us);
        }
    }

    /// How much longer, about, the node's clock must run before a
    /// quarantine of `length` that began when [`NodeBound::begin`] says is
    /// over on it too (`None`: it is, or the node's clock is not read).
    pub(crate) fn left(&self, length: Duration) -> Option<Duration> {
        let ((_, latest), from) = (self.latest?, self.from?);
        let need = length.as_secs_f64() * 1e6 * (1.0 + self.allowance);
        let passed = latest.saturating_sub(from) as f64;
        (passed < need).then(|| Duration::from_micros((need - passed).ceil() as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_clocks_must_show_a_quarantine_over() {
        let t0 = Instant::now();
        let mut b = NodeBound::default();
        // Never read: ours alone.
        b.begin(t0);
        assert_eq!(b.left(Duration::from_secs(10)), None);
        b.reading(t0, 1_000_000, 0.01, true);
        // Ten of our seconds later (a client clock running fast), the node
        // shows five: 5.1 s to go on the node's clock.
        let later = t0 + Duration::from_secs(10);
        b.reading(later, 6_000_000, 0.01, true);
        assert_eq!(
            b.left(Duration::from_secs(10)),
            Some(Duration::from_micros(5_100_000))
        );
        b.reading(later, 11_100_000, 0.01, true);
        assert_eq!(b.left(Duration::from_secs(10)), None);
    }

    #[test]
    fn a_start_is_dated_from_the_reading_before_it_moved_on_by_our_clock() {
        let t0 = Instant::now();
        let mut b = NodeBound::default();
        b.reading(t0, 1_000_000, 0.0, false);
        b.begin(t0 + Duration::from_secs(2));
        // The node read 3 s at the start, at the latest.
        b.reading(t0 + Duration::from_secs(3), 4_000_000, 0.0, true);
        assert_eq!(b.left(Duration::from_secs(1)), None);
        assert_eq!(b.left(Duration::from_secs(2)), Some(Duration::from_secs(1)));
        // An older reading, come in late, changes nothing.
        b.reading(t0 + Duration::from_secs(1), 9_000_000, 0.0, true);
        assert_eq!(b.left(Duration::from_secs(2)), Some(Duration::from_secs(1)));
    }
}
