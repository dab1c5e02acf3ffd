//! A quarantine's end on the node's clock too: a quarantine is measured on
//! our clock, and a client whose own clock runs fast (a virtual machine
//! whose clock source misbehaves) would see it end early in real time,
//! counting the node while a lock it forgot can still be valid. So a
//! quarantine also lasts until the node's own clock, as its replies show
//! it (`TIME` behind every request: `clockwatch.rs`), advanced by the
//! quarantine's length times `1 + drift_factor` (the node's clock may run
//! that much fast) since it began: both clocks must show it over, and a
//! majority of the members' too (`panel.rs`: the node's clock alone may
//! step or run fast unseen). A node whose clock is never read (`TIME`
//! refused) is judged on ours alone.

use std::time::{Duration, Instant};

/// The node's clock against one quarantine.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct NodeBound {
    /// When (our clock) the quarantine on now (or the last one) began.
    since: Option<Instant>,
    /// The node's time (µs) then, at the latest, once a reading dated it:
    /// the reading before it moved on by our clock's time since (more, if
    /// our clock runs fast), or the first one after it.
    from: Option<u64>,
    /// The latest reading of the node's clock: when (our clock) its reply
    /// came in, and the node's time in µs.
    latest: Option<(Instant, u64)>,
    /// The drift factor the node's clock is allowed.
    allowance: f64,
}

impl NodeBound {
    /// A quarantine begins at `now` (none was on): the next reading dates
    /// it on the node's clock.
    pub(crate) fn begin(&mut self, now: Instant) {
        self.since = Some(now);
        self.from = None;
    }

    /// When (our clock) the quarantine on now, or the last one, began.
    pub(crate) fn since(&self) -> Option<Instant> {
        self.since
    }

    /// No quarantine is on any more, nor to be judged (a served loss).
    pub(crate) fn end(&mut self) {
        self.since = None;
        self.from = None;
    }

    /// A reading of the node's clock while a quarantine is on: `node_us`
    /// in a reply that came in at `recv`, the reading before it `before`
    /// (as `(recv, node_us)`), judged with the drift factor `allowance`.
    pub(crate) fn reading(
        &mut self,
        before: Option<(Instant, u64)>,
        (recv, node_us): (Instant, u64),
        allowance: f64,
    ) {
        if self.latest.is_some_and(|(r, _)| r > recv) {
            return;
        }
        self.latest = Some((recv, node_us));
        self.allowance = allowance;
        let Some(since) = self.since else { return };
        if self.from.is_none() {
            // The latest reading from before the start, moved on to it.
            let (r, us) = match before {
                Some((r, us)) if r <= since => (r, us),
                _ => (recv, node_us),
            };
            let on = since.saturating_duration_since(r).as_micros();
            self.from = Some(us.saturating_add(u64::try_from(on).unwrap_or(u64::MAX)));
        }
    }

    /// How much longer, about, the node's clock must run before a
    /// quarantine of `length` that began at [`NodeBound::begin`] is over on
    /// it too; `read`: whether the node's clock was ever read (one that
    /// never is, `TIME` refused, is judged on ours alone: `None`). Not read
    /// since the start: all of it, until a reading dates it.
    pub(crate) fn left(&self, length: Duration, read: bool) -> Option<Duration> {
        let need = length.as_secs_f64() * 1e6 * (1.0 + self.allowance);
        let (Some((_, latest)), Some(from)) = (self.latest, self.from) else {
            let waits = read && self.since.is_some();
            return waits.then(|| Duration::from_micros(need.ceil() as u64));
        };
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
        // Never read: ours alone; read, but not since the start: all of it.
        b.begin(t0);
        assert_eq!(b.left(Duration::from_secs(10), false), None);
        assert_eq!(
            b.left(Duration::from_secs(10), true),
            Some(Duration::from_secs(10))
        );
        b.reading(None, (t0, 1_000_000), 0.01);
        // Ten of our seconds later (a client clock running fast), the node
        // shows five: 5.1 s to go on the node's clock.
        let later = t0 + Duration::from_secs(10);
        b.reading(Some((t0, 1_000_000)), (later, 6_000_000), 0.01);
        assert_eq!(
            b.left(Duration::from_secs(10), true),
            Some(Duration::from_micros(5_100_000))
        );
        b.reading(Some((later, 6_000_000)), (later, 11_100_000), 0.01);
        assert_eq!(b.left(Duration::from_secs(10), true), None);
    }

    #[test]
    fn a_start_is_dated_from_the_reading_before_it_moved_on_by_our_clock() {
        let t0 = Instant::now();
        let mut b = NodeBound::default();
        b.begin(t0 + Duration::from_secs(2));
        // The reading before the start (at 1 s on the node) moved on by
        // the 2 s of ours since: 3 s on the node, at the latest.
        let before = Some((t0, 1_000_000));
        b.reading(before, (t0 + Duration::from_secs(3), 4_000_000), 0.0);
        assert_eq!(b.left(Duration::from_secs(1), true), None);
        assert_eq!(
            b.left(Duration::from_secs(2), true),
            Some(Duration::from_secs(1))
        );
        // An older reading, come in late, changes nothing.
        b.reading(None, (t0 + Duration::from_secs(1), 9_000_000), 0.0);
        assert_eq!(
            b.left(Duration::from_secs(2), true),
            Some(Duration::from_secs(1))
        );
    }
}
