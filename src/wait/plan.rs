//! When a waiter tries again, as a pure rule: as soon as a quorum of nodes
//! may have the lock free, by what each node last said (its key's remaining
//! TTL) and by the news since (a node reported a change).

use tokio::time::Instant;

use crate::quorum::tally::{node_bit, NodeSet};

/// What a failed attempt learned about the lock on one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Seen {
    /// Free there now (nobody held it, or we did and released it).
    Free,
    /// Held, and the node expires the key at about this instant.
    Expires(Instant),
    /// Held with no expiry: only a change frees it.
    Held,
    /// Someone waits ahead of us there: only a change (the one ahead taking
    /// the lock, or leaving) lets us go.
    Ahead,
    /// The node did not answer.
    Unknown,
}

impl Seen {
    /// Whether a later read that finds no key there means the lock became
    /// free (not so where someone waits ahead of us).
    pub(crate) fn freed_by_absence(self) -> bool {
        !matches!(self, Seen::Ahead)
    }
}

/// Whether an attempt split: it took the lock (or a slot) on some nodes and
/// found it held on others, so a release may still be on its way to those.
pub(crate) fn split(seen: &[Seen]) -> bool {
    seen.contains(&Seen::Free)
        && seen
            .iter()
            .any(|s| matches!(s, Seen::Held | Seen::Expires(_)))
}

/// The earliest instant a quorum of nodes may have the lock free: now if
/// `quorum` nodes are free or brought news (`news`: they reported a change,
/// or a later read found no key), else the instant the last of the earliest
/// `quorum` keys expires, or `None` if that is unknown (only news or the
/// retry cap wake the waiter then).
pub(crate) fn next_try(
    seen: &[Seen],
    news: NodeSet,
    quorum: usize,
    now: Instant,
) -> Option<Instant> {
    let mut free_at: Vec<Instant> = seen
        .iter()
        .enumerate()
        .filter_map(|(i, s)| match s {
            _ if news & node_bit(i) != 0 => Some(now),
            Seen::Free => Some(now),
            Seen::Expires(at) => Some((*at).max(now)),
            Seen::Held | Seen::Ahead | Seen::Unknown => None,
        })
        .collect();
    if quorum == 0 || free_at.len() < quorum {
        return None;
    }
    free_at.sort_unstable();
    Some(free_at[quorum - 1])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn waits_for_the_quorum_th_expiry() {
        let now = Instant::now();
        let at = |ms| now + Duration::from_millis(ms);
        let seen = [
            Seen::Expires(at(300)),
            Seen::Expires(at(100)),
            Seen::Unknown,
            Seen::Expires(at(200)),
            Seen::Expires(at(900)),
        ];
        assert_eq!(next_try(&seen, 0, 3, now), Some(at(300)));
        // A change reported by node 4 stands for "free now".
        assert_eq!(next_try(&seen, node_bit(4), 3, now), Some(at(200)));
        assert_eq!(next_try(&seen, 0b11111, 3, now), Some(now));
    }

    #[test]
    fn unknown_nodes_never_count() {
        let now = Instant::now();
        let seen = [Seen::Unknown, Seen::Ahead, Seen::Free, Seen::Held];
        assert_eq!(next_try(&seen, 0, 2, now), None);
        assert_eq!(next_try(&seen, node_bit(3), 2, now), Some(now));
        assert!(Seen::Held.freed_by_absence() && !Seen::Ahead.freed_by_absence());
    }

    #[test]
    fn an_expiry_in_the_past_is_now() {
        let now = Instant::now();
        let past = now.checked_sub(Duration::from_millis(5)).unwrap_or(now);
        assert_eq!(next_try(&[Seen::Expires(past)], 0, 1, now), Some(now));
    }
}
