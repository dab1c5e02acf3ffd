//! A semaphore's keys on the nodes (its waiting list, its slots, the
//! channel its releases name waiters on, the name's lock key and waiting
//! list, which its permits keep a mark on and yield to), and a held
//! permit's requests: its slot's extension and check, and the release that
//! names the waiters it lets in (`wait/named.rs`).

use std::sync::Arc;

use crate::keys::{self, Kind};
use crate::lock::held::Held;
use crate::node::connection::request::Request;
use crate::semaphore::scripts;
use crate::wait::list::WaitKeys;

/// A semaphore's keys on the nodes (its waiting list and its slots) and
/// its channel.
#[derive(Debug)]
pub(crate) struct SlotKeys {
    /// The waiting list.
    pub(crate) waiters: WaitKeys,
    /// The name's waiting list (the plain lock's), whose live waiters go
    /// before permits not yet taken.
    name_waiters: WaitKeys,
    /// The slot keys in slot order, then the name's lock key, then the
    /// channel: everything whose news goes to the semaphore's line.
    heard: Vec<String>,
}

impl SlotKeys {
    /// The keys of the semaphore whose waiters line up on `line` (key
    /// prefix `prefix`), with `slots` its slot keys and `name` the name's
    /// lock key.
    pub(crate) fn new(prefix: &str, line: &str, name: &str, slots: Vec<String>) -> Self {
        let mut heard = slots;
        heard.push(name.to_owned());
        heard.push(keys::internal(prefix, Kind::Wake, line));
        Self {
            waiters: WaitKeys::of(prefix, line),
            name_waiters: WaitKeys::of(prefix, name),
            heard,
        }
    }

    /// The slot keys, in slot order.
    pub(crate) fn slots(&self) -> &[String] {
        &self.heard[..self.heard.len() - 2]
    }

    /// The name's lock key, which holds the permits' mark while permits
    /// are held.
    pub(crate) fn name(&self) -> &str {
        &self.heard[self.heard.len() - 2]
    }

    /// The channel its releases name waiters on.
    pub(crate) fn channel(&self) -> &str {
        self.heard.last().map_or("", String::as_str)
    }

    /// The slot keys, the name's lock key and the channel: what routes
    /// news to the line.
    pub(crate) fn heard(&self) -> &[String] {
        &self.heard
    }

    /// The keys of every semaphore script (`semaphore/scripts.rs`): the
    /// waiting list and its leases, the name's lock key, its waiting list
    /// and leases, the slots.
    pub(crate) fn keys(&self) -> Vec<&str> {
        let slots = self.slots();
        let mut keys = Vec::with_capacity(5 + slots.len());
        keys.push(self.waiters.queue.as_str());
        keys.push(self.waiters.leases.as_str());
        keys.push(self.name());
        keys.push(self.name_waiters.queue.as_str());
        keys.push(self.name_waiters.leases.as_str());
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

/// A held permit, as its lock acts on the nodes: the slot `slot` of
/// `keys`. Checked as a plain lock on the slot key; extended with the
/// permits' mark on the name's lock key; its release names the waiters it
/// lets in.
#[derive(Debug)]
pub(crate) struct SlotHold {
    /// The semaphore's keys.
    pub(crate) keys: Arc<SlotKeys>,
    /// The slot held (from 0).
    pub(crate) slot: usize,
}

impl SlotHold {
    /// The slot's key.
    pub(crate) fn key(&self) -> &str {
        self.keys.slots().get(self.slot).map_or("", String::as_str)
    }
}

impl Held for SlotHold {
    fn release_request(&self, value: &str, _telling: bool) -> Arc<Request> {
        self.keys.release_request(self.slot, value)
    }

    fn extend_request(&self, value: &str, ttl_ms: u64) -> Arc<Request> {
        Request::script_any(&scripts::SEMAPHORE_EXTEND, &self.keys.keys(), |cmd| {
            cmd.arg(value).arg(self.slot + 1).arg(ttl_ms);
        })
    }

    fn held_request(&self, _value: &str) -> Arc<Request> {
        Request::plain(redis::cmd("GET").arg(self.key()).to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_channel_share_the_semaphores_tag() {
        let k = SlotKeys::new("", "line", "line", vec!["s0".into(), "s1".into()]);
        assert_eq!(k.slots(), ["s0", "s1"]);
        assert_eq!(k.name(), "line");
        assert_eq!(k.channel(), "redquorum:wake:{line}:line");
        assert_eq!(k.heard().len(), 4);
        assert_eq!(k.keys().len(), 7);
    }
}
