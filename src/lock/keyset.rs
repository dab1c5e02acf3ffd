//! Several resources locked together: the resources in the one order every
//! client uses, their keys and waiting lists, and the requests that act on
//! every key at once (`lock/multi_scripts.rs`): every key, or none, on each
//! node.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::lock::held::{Held, Takes};
use crate::lock::multi_scripts;
use crate::node::connection::request::Request;
use crate::wait::list::WaitKeys;

/// Most resources one multi-lock may take (a script's keys: three per
/// resource for a waiter).
pub const MAX_RESOURCES: usize = 64;

/// Several resources taken together.
#[derive(Debug)]
pub(crate) struct KeySet {
    /// The resources, in the order of their keys (the order every client
    /// uses), without repeats.
    pub(crate) resources: Vec<String>,
    /// Their lock keys, in that order.
    pub(crate) keys: Vec<String>,
    /// Their waiting lists, in that order.
    waits: Vec<WaitKeys>,
    /// What a waiter for them hears: their keys (what it asks the nodes to
    /// tell of in every round), then their waiting lists, only where a
    /// notification read asked who is first in them. Waiters join and renew
    /// the lists all the time, and every change would wake every waiter;
    /// but a waiter kept out by one listed ahead of it may miss that one's
    /// whole turn (take and release) before its notification read, which
    /// then finds the keys as free as before and asks who is first in each
    /// list instead (`Waiting::arm_ahead`), and the one ahead may leave
    /// without taking the keys (given up, or timed out while it waited for
    /// another of its resources).
    pub(crate) heard: Vec<String>,
    /// The resources as one name, for errors and logs: `a+b`.
    pub(crate) name: String,
}

impl KeySet {
    /// The keys, with room for `more` to follow.
    fn named(&self, more: usize) -> Vec<&str> {
        let mut keys = Vec::with_capacity(self.keys.len() + more);
        keys.extend(self.keys.iter().map(String::as_str));
        keys
    }

    /// The set of `resources` (checked: at least one, at most
    /// [`MAX_RESOURCES`], none empty or reserved) under the key prefix
    /// `prefix`.
    pub(crate) fn new(prefix: &str, resources: &[&str]) -> Result<Self> {
        if resources.is_empty() {
            return Err(Error::InvalidConfig(
                "no resources to lock: name at least one".into(),
            ));
        }
        if resources.len() > MAX_RESOURCES {
            return Err(Error::InvalidConfig(format!(
                "{} resources in one lock: at most {MAX_RESOURCES} may be taken together",
                resources.len()
            )));
        }
        let mut pairs = Vec::with_capacity(resources.len());
        for r in resources {
            if r.is_empty() {
                return Err(Error::InvalidConfig("a resource name is empty".into()));
            }
            crate::keys::check_resource(r)?;
            pairs.push((format!("{prefix}{r}"), (*r).to_owned()));
        }
        pairs.sort();
        pairs.dedup();
        let waits: Vec<WaitKeys> = pairs.iter().map(|(k, _)| WaitKeys::of(prefix, k)).collect();
        let (keys, resources): (Vec<_>, Vec<_>) = pairs.into_iter().unzip();
        let name = resources.join("+");
        let queues = waits.iter().map(|w| w.queue.clone());
        let heard = keys.iter().cloned().chain(queues).collect();
        Ok(Self {
            resources,
            keys,
            waits,
            heard,
            name,
        })
    }

    /// The first key: this client's callers line up on it.
    pub(crate) fn line(&self) -> &str {
        &self.keys[0]
    }

    /// The waiting lists but the first one's (a waiter's own is that).
    pub(crate) fn other_lists(&self) -> &[WaitKeys] {
        &self.waits[1..]
    }
}

impl Held for KeySet {
    fn release_request(&self, value: &str, telling: bool) -> Arc<Request> {
        let lists = if telling { self.waits.len() } else { 0 };
        let mut keys = self.named(lists);
        keys.extend(self.waits[..lists].iter().map(|w| w.leases.as_str()));
        Request::script_any(&multi_scripts::RELEASE_ALL, &keys, |cmd| {
            cmd.arg(value).arg(self.keys.len());
        })
    }

    fn extend_request(&self, value: &str, ttl_ms: u64) -> Arc<Request> {
        Request::script_any(&multi_scripts::EXTEND_ALL, &self.named(0), |cmd| {
            cmd.arg(value).arg(ttl_ms);
        })
    }

    fn held_request(&self, value: &str) -> Arc<Request> {
        Request::script_any(&multi_scripts::HELD_ALL, &self.named(0), |cmd| {
            cmd.arg(value);
        })
    }

    fn resources(&self) -> Option<&[String]> {
        Some(&self.resources)
    }
}

impl Takes for KeySet {
    fn take_request(
        &self,
        value: &str,
        ttl_ms: u64,
        waiter: Option<(&str, u64, u64)>,
    ) -> Arc<Request> {
        match waiter {
            None => Request::script_any(&multi_scripts::TAKE_ALL, &self.named(0), |cmd| {
                cmd.arg(value).arg(ttl_ms);
            }),
            Some((id, ticket, lease_ms)) => {
                let mut keys = self.named(0);
                keys.extend(self.waits.iter().map(|w| w.queue.as_str()));
                keys.extend(self.waits.iter().map(|w| w.leases.as_str()));
                Request::script_any(&multi_scripts::QUEUED_TAKE_ALL, &keys, |cmd| {
                    cmd.arg(value).arg(ttl_ms).arg(id).arg(ticket).arg(lease_ms);
                })
            }
        }
    }
}
