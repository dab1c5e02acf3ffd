//! Whose trust a member's yes rests on, where the member is a Redis
//! Cluster: pure rules, so that the model checks the very code
//! (`model/shards.rs`). A member that is one node is a cluster of one
//! shard whose slots never move, where both rules are trivial.

/// Whose trust decides a member's reply (see [`judges`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Judges<T> {
    /// The node or shard the request went to.
    Sent(T),
    /// Every shard seen: the member is trusted only if all are.
    Every,
}

/// Whose trust decides a member's reply to a request: the node or shard
/// the request went to (`sent`), or, where that is not known (a request
/// made before a cluster's slot map was read), every shard seen. Never the
/// shard the map names when the reply is counted: that one may not have
/// answered.
pub(crate) fn judges<T>(sent: Option<T>) -> Judges<T> {
    match sent {
        Some(t) => Judges::Sent(t),
        None => Judges::Every,
    }
}

/// The shard that took a slot over between two reads of the slot map, if
/// one did: the one serving it now (`after`), where the map before
/// (`before`: `None` on a first read; `Some(None)` where no shard served
/// the slot) named another shard or none.
///
/// The keys of a slot move with it as they are (a reshard migrates them):
/// if the shard it came from had lost writes (a failover just before the
/// move), the shard taking it over lacks them too, while its own evidence
/// shows nothing. So it does not count toward lock quorums for one
/// maximum TTL from the moment a client sees the move (every lock it may
/// lack was taken before the move), and its counter records count only
/// once repaired. A client's first read has nothing to compare: there the
/// connection check's evidence decides (keys imported into a node count as
/// keys it may have dropped: `evidence.rs`).
#[cfg_attr(not(any(test, feature = "cluster")), allow(dead_code))]
pub(crate) fn received<T: PartialEq>(before: Option<Option<T>>, after: Option<T>) -> Option<T> {
    match (before, after) {
        (Some(before), Some(after)) if before.as_ref() != Some(&after) => Some(after),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_moved_or_newly_served_is_received_and_a_first_read_is_not() {
        assert_eq!(received(Some(Some(1)), Some(2)), Some(2));
        assert_eq!(received(Some(None), Some(2)), Some(2));
        assert_eq!(received(Some(Some(2)), Some(2)), None);
        assert_eq!(received(None, Some(2)), None);
        assert_eq!(received(Some(Some(1)), None::<u8>), None);
        assert_eq!(judges(Some(3)), Judges::Sent(3));
        assert_eq!(judges(None::<u8>), Judges::Every);
    }
}
