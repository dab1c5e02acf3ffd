//! The rule for a held lock's extensions: the guard never believes more
//! than the nodes (see [`Extensions`]).

use tokio::time::Instant;

/// The extensions of one lock, in dispatch order: the rule that keeps the
/// guard from believing more than the nodes.
///
/// A node applies our extensions in the order we sent them (the node layer
/// keeps each node's requests in order), so on a node the key lives as long
/// as the last extension that reached it says. An extension that *may*
/// take effect therefore lowers the validity before it is sent, to `start +
/// ttl - drift` if that is earlier (a failed extension may still have been
/// applied on some nodes, a shorter one then shortens the lock); and only a
/// confirmed one raises it, counted from its own start, and never above the
/// bound of an extension sent after it. A confirmation that arrives after a
/// later extension was confirmed changes nothing.
#[derive(Debug, Default)]
pub(crate) struct Extensions {
    /// Extensions sent so far; the acquisition is number 0.
    sent: u64,
    /// The latest extension (by dispatch order) a quorum confirmed.
    confirmed: u64,
    /// Extensions sent after `confirmed`: number and the instant the lock
    /// is valid until if it takes effect.
    pending: Vec<(u64, Instant)>,
}

impl Extensions {
    /// Records an extension about to be sent that, if it takes effect, leaves
    /// the lock valid until `bound`; returns its number.
    pub(crate) fn send(&mut self, bound: Instant) -> u64 {
        self.sent += 1;
        self.pending.push((self.sent, bound));
        self.sent
    }

    /// Extension `seq` was confirmed by a quorum, valid until `until`:
    /// returns the new validity bound, or `None` if a later extension was
    /// confirmed first (it governs).
    pub(crate) fn confirm(&mut self, seq: u64, until: Instant) -> Option<Instant> {
        if seq <= self.confirmed {
            return None;
        }
        self.confirmed = seq;
        self.pending.retain(|(s, _)| *s > seq);
        Some(self.pending.iter().fold(until, |u, (_, b)| u.min(*b)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_confirmed_extension_never_outlives_one_sent_after_it() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut ext = Extensions::default();
        // A long extension, then a short one, both in flight.
        let long = ext.send(t0 + s(30));
        let short = ext.send(t0 + s(1));
        // The long one is confirmed first: the short one may still land.
        assert_eq!(ext.confirm(long, t0 + s(30)), Some(t0 + s(1)));
        // The short one confirmed: it governs.
        assert_eq!(ext.confirm(short, t0 + s(1)), Some(t0 + s(1)));
        // Confirmed in the other order: the long one's late confirmation
        // changes nothing.
        let mut ext = Extensions::default();
        let long = ext.send(t0 + s(30));
        let short = ext.send(t0 + s(1));
        assert_eq!(ext.confirm(short, t0 + s(1)), Some(t0 + s(1)));
        assert_eq!(ext.confirm(long, t0 + s(30)), None);
    }

    #[test]
    fn a_failed_extension_keeps_bounding_until_a_later_one_is_confirmed() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut ext = Extensions::default();
        let _failed = ext.send(t0 + s(1));
        let next = ext.send(t0 + s(10));
        assert_eq!(ext.confirm(next, t0 + s(10)), Some(t0 + s(10)));
        assert!(ext.pending.is_empty());
    }
}
