//! Named wake-ups: how a semaphore's waiters learn that a permit freed
//! without every waiter of every client trying for it.
//!
//! A released permit can go only to the waiters at the head of the
//! semaphore's waiting list (a waiter takes a slot only while fewer live
//! waiters are ahead of it than slots are free). So the release
//! (`SEMAPHORE_RELEASE`, and an undo that leaves more slots free than it
//! found, `SEMAPHORE_UNDO`) publishes, on the semaphore's channel on each
//! node, the ids of the first live waiters, one per free slot. Every
//! waiter id starts with its client's token, so a client knows its own
//! waiters in a message; a client hears the channel on one node (the
//! waiters' notification connection, `node/watch.rs`, subscribed while it
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

use std::sync::Arc;

use crate::keys::{self, Kind};
use crate::node::request::Request;
use crate::wait::list::WaitKeys;
use crate::wait::scripts;

/// A semaphore's keys on the nodes (its waiting list and its slots) and
/// its channel.
#[derive(Debug)]
pub(crate) struct SlotKeys {
    /// The waiting list.
    pub(crate) waiters: WaitKeys,
    /// The slot keys in slot order, then the channel: everything whose
    /// news goes to the semaphore's line.
    heard: Vec<String>,
}

impl SlotKeys {
    /// The keys of the semaphore whose waiters line up on `line` (key
    /// prefix `prefix`), with `slots` its slot keys.
    pub(crate) fn new(prefix: &str, line: &str, slots: Vec<String>) -> Self {
        let mut heard = slots;
        heard.push(keys::internal(prefix, Kind::Wake, line));
        Self {
            waiters: WaitKeys::of(prefix, line),
            heard,
        }
    }

    /// The slot keys, in slot order.
    pub(crate) fn slots(&self) -> &[String] {
        &self.heard[..self.heard.len() - 1]
    }

    /// The channel its releases name waiters on.
    pub(crate) fn channel(&self) -> &str {
        self.heard.last().map_or("", String::as_str)
    }

    /// The slot keys and the channel: what routes news to the line.
    pub(crate) fn heard(&self) -> &[String] {
        &self.heard
    }

    /// The keys of the semaphore scripts: the waiting list, its leases,
    /// the slots.
    pub(crate) fn keys(&self) -> Vec<&str> {
        let slots = self.slots();
        let mut keys = Vec::with_capacity(2 + slots.len());
        keys.push(self.waiters.queue.as_str());
        keys.push(self.waiters.leases.as_str());
        keys.extend(slots.iter().map(String::as_str));
        keys
    }

    /// The release of slot `slot` (from 0) held with `value`, naming the
    /// waiters it lets in.
    pub(crate) fn release_request(&self, slot: usize, value: &str) -> Arc<Request> {
        Request::script_any(&scripts::SEMAPHORE_RELEASE, &self.keys(), |cmd| {
            cmd.arg(value).arg(slot + 1).arg(self.channel());
        })
    }
}

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
    fn keys_and_channel_share_the_semaphores_tag() {
        let k = SlotKeys::new("", "line", vec!["s0".into(), "s1".into()]);
        assert_eq!(k.slots(), ["s0", "s1"]);
        assert_eq!(k.channel(), "redquorum:wake:{line}:line");
        assert_eq!(k.heard().len(), 3);
    }

    #[test]
    fn a_message_names_a_client_by_its_token() {
        assert!(names(b"aaaa01 bbbb02", "bbbb"));
        assert!(!names(b"aaaa01 aaaa02", "bbbb"));
        assert!(!names(b"", "bbbb"));
    }
}
