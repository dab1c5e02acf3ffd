//! Named wake-ups: how a semaphore's waiters learn that a permit freed
//! without every waiter of every client trying for it.
//!
//! A released permit can go only to the waiters at the head of the
//! semaphore's waiting list (a waiter takes a slot only while fewer live
//! waiters are ahead of it than slots are free). So the release
//! (`SEMAPHORE_RELEASE`, and an undo that leaves more slots free than it
//! found, `SEMAPHORE_UNDO`, both in `semaphore/scripts.rs`) publishes, on the semaphore's channel on each
//! node, the ids of the first live waiters, one per free slot. Every
//! waiter id starts with its client's token, so a client knows its own
//! waiters in a message; a client hears the channel on one node (the
//! waiters' notification connection, `node/notify/watch.rs`, subscribed while it
//! has waiters), and a message naming one of its waiters wakes its line.
//! Takes and refused attempts change no free slot and name nobody, so
//! they wake nobody: with client tracking on the slot keys, every slot
//! change woke every client's front waiter, and all but one of them were
//! refused.
//!
//! None of this is a safety input: the slot quorum still decides who
//! holds a permit. A node that cannot tell (a `PUBLISH` or `SUBSCRIBE`
//! denied, a lost connection) only costs time: its waiters fall back to
//! reading the slots with tracking on, the slots' TTLs and the retry cap.

/// Whether a message's `payload` (waiter ids, space-separated) names a
/// waiter whose id starts with `token`.
pub(crate) fn names(payload: &[u8], token: &str) -> bool {
    payload
        .split(|b| *b == b' ')
        .any(|id| id.starts_with(token.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_names_a_client_by_its_token() {
        assert!(names(b"aaaa01 bbbb02", "bbbb"));
        assert!(!names(b"aaaa01 aaaa02", "bbbb"));
        assert!(!names(b"", "bbbb"));
    }
}
