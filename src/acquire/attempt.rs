//! One attempt to take the lock, and what it learned when it failed.
//!
//! An attempt picks a fresh random value, notes a monotonic start, sends
//! one request to every node at once and decides as soon as a quorum said
//! yes or can no longer say yes. The request is a plain `SET key value NX PX
//! ttl` (the free path, and every other Redlock client's) or, for a caller
//! that is waiting, `QUEUED_SET`: the same `SET NX` done only if nobody live
//! waits ahead of it on that node. The lock is ours only with a quorum
//! *and* time left ([`valid_until`]). A failed attempt releases on every node
//! that did not clearly refuse, because a `SET` may have landed where the
//! reply was lost; so does an attempt whose future is dropped.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use redis::Value;
use tokio::time::Instant;

use crate::acquire::waiter::Waiter;
use crate::acquire::won::{Place, Won};
use crate::client::redlock::{valid_until, Redlock};
use crate::clock;
use crate::error::Error;
use crate::lock::held::{Held, Takes};
use crate::lock::scripts;
use crate::lock::standing::Basis;
use crate::node::connection::request::Request;
use crate::quorum::tally::NodeSet;
use crate::quorum::Counts;
use crate::telemetry::labels::Primitive;
use crate::wait::plan::Seen;
use crate::wait::{Listen, WaitKeys};

/// How an attempt asks the nodes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Ask<'a> {
    /// A plain `SET NX`.
    Plain,
    /// As this registered waiter.
    Queued(&'a Waiter<'a>),
}

impl Ask<'_> {
    /// The waiter's id, ticket and lease in ms, marked registered; `None`
    /// for a plain attempt.
    fn waiter(&self) -> Option<(&str, u64, u64)> {
        match self {
            Ask::Plain => None,
            Ask::Queued(w) => {
                let (_, id, ticket, lease_ms) = w.register();
                Some((id, ticket, lease_ms))
            }
        }
    }
}

/// A failed attempt: why, and what each node said about the lock.
#[derive(Debug)]
pub(crate) struct Failed {
    /// The error that explains the failure.
    pub(crate) error: Error,
    /// Per node, what frees the lock there.
    pub(crate) seen: Vec<Seen>,
}

/// The end of the id of a waiter that takes a lock key whole (a plain
/// lock's, a multi-lock's, a read-write lock's writer): readers listed
/// behind it wait for it.
pub(crate) const EXCLUSIVE: &str = ":w";

/// What a waiter attempts again and again: the lock on one key, or one of
/// a semaphore's slots (`semaphore/`). The waiting loop
/// ([`Redlock::wait_for`]) is the same for both.
pub(crate) trait Attempts {
    /// The name the caller gave, for errors.
    fn resource(&self) -> &str;
    /// The key this client's callers line up on, whose waiting list on the
    /// nodes orders the waiters: the lock key, or the semaphore's.
    fn line(&self) -> &str;
    /// The keys whose change on a node may let a waiter in.
    fn watched(&self) -> &[String];
    /// The channel where releases name the waiters they let in, if any
    /// (a semaphore's, see `wait/named.rs`).
    fn channel(&self) -> Option<&str> {
        None
    }
    /// Every key and channel whose news goes to this client's line.
    fn heard(&self) -> &[String] {
        self.watched()
    }
    /// What the lock stands for, in metrics.
    fn primitive(&self) -> Primitive;
    /// Whose news a waiter waits for between attempts.
    fn listen(&self) -> Listen {
        Listen::Quorum
    }
    /// Whether a caller that finds others of this client waiting ahead of
    /// it joins the nodes' waiting list at once, as it arrives, rather
    /// than when this client's line lets it try (see `acquire/waiting.rs`).
    fn joins_on_arrival(&self) -> bool {
        false
    }
    /// What ends this waiter's id in the waiting list (one that takes a
    /// lock key whole, as a read-write lock's writer or a plain lock's
    /// waiter does: [`EXCLUSIVE`], which the readers' scripts read).
    fn waiter_mark(&self) -> &'static str {
        ""
    }
    /// Whether, where a waiter's attempt found someone listed ahead of it
    /// and its notification read finds every key free, it also reads who
    /// is listed ahead of it in each waiting list it is in
    /// (`Waiting::arm_ahead`): the one ahead may have taken the lock and
    /// released it before that read. Every lock but the semaphore (whose
    /// releases name the waiters they let in).
    fn reads_list_when_ahead(&self) -> bool {
        false
    }
    /// Whom a waiter waits for when they are listed ahead of it: waiters
    /// whose id ends in this (a read-write lock's reader: writers); empty:
    /// everyone.
    fn kept_out_by(&self) -> &'static str {
        ""
    }
    /// A value of its watched keys that leaves them free for it (a
    /// read-write lock's reader: the readers' mark); `None`: only no key.
    fn free_value(&self) -> Option<&'static str> {
        None
    }
    /// A key besides the watched ones that kept the last attempt out, and
    /// the nodes where it did (a semaphore's: the name's lock key, held by
    /// a lock, or wanted by a waiter on its list): its change there is
    /// news for the next round.
    fn guard(&self) -> Option<(&str, NodeSet)> {
        None
    }
    /// The waiting lists a waiter is listed in besides its line's (a
    /// multi-lock's other resources'): joined and left with it.
    fn listed_also_in(&self) -> &[WaitKeys] {
        &[]
    }
    /// One attempt, asking as `ask` says.
    async fn attempt(&self, ask: Ask<'_>) -> Result<Won, Failed>;
}

/// The lock on one key, as the waiting loop attempts it.
#[derive(Debug)]
pub(crate) struct KeyAttempt<'a> {
    /// The client.
    redlock: &'a Redlock,
    /// The caller's name for it.
    resource: &'a str,
    /// The key, alone (what is watched).
    key: [String; 1],
    /// The key, then its waiting list: what its line hears, the list where
    /// a notification read found someone else first in it (who may leave
    /// without taking the key). Made when a waiter first asks, so that a
    /// plain attempt does not.
    heard: OnceLock<[String; 2]>,
    /// The TTL, checked.
    ttl: Duration,
    /// The TTL in ms.
    ttl_ms: u64,
    /// What the lock stands for, in metrics.
    primitive: Primitive,
}

impl<'a> KeyAttempt<'a> {
    /// The lock at `key` for `ttl` (checked: `ttl_ms`), named `resource`.
    pub(crate) fn new(
        redlock: &'a Redlock,
        resource: &'a str,
        key: String,
        ttl: Duration,
        ttl_ms: u64,
    ) -> Self {
        Self {
            redlock,
            resource,
            key: [key],
            heard: OnceLock::new(),
            ttl,
            ttl_ms,
            primitive: Primitive::Lock,
        }
    }

    /// The same lock, standing for `primitive` in metrics.
    pub(crate) fn standing_for(mut self, primitive: Primitive) -> Self {
        self.primitive = primitive;
        self
    }
}

impl Attempts for KeyAttempt<'_> {
    fn primitive(&self) -> Primitive {
        self.primitive
    }

    fn resource(&self) -> &str {
        self.resource
    }

    fn line(&self) -> &str {
        &self.key[0]
    }

    fn watched(&self) -> &[String] {
        &self.key
    }

    fn heard(&self) -> &[String] {
        self.heard.get_or_init(|| {
            let key = &self.key[0];
            let prefix = &self.redlock.config().key_prefix;
            [key.clone(), WaitKeys::of(prefix, key).queue]
        })
    }

    fn reads_list_when_ahead(&self) -> bool {
        true
    }

    fn waiter_mark(&self) -> &'static str {
        // It takes the key whole: readers of the name wait for it as for
        // a read-write lock's writer (`rwlock/scripts.rs`).
        EXCLUSIVE
    }

    async fn attempt(&self, ask: Ask<'_>) -> Result<Won, Failed> {
        let (resource, key) = (self.resource, &self.key[0]);
        self.redlock
            .attempt_on(resource, key, None, self.ttl, self.ttl_ms, ask)
            .await
    }
}

impl Redlock {
    /// A fresh lock value: 128 random bits in hex (after the holder label
    /// and a `/`, when one is set), unless a hook is set.
    pub(crate) fn new_value(&self) -> String {
        let config = self.config();
        match &config.value_fn {
            Some(f) => f(),
            None if config.holder_label.is_empty() => format!("{:032x}", rand::random::<u128>()),
            None => format!("{}/{:032x}", config.holder_label, rand::random::<u128>()),
        }
    }

    /// One attempt to take the lock at `key` for `ttl` (`ttl_ms` in ms),
    /// or, given `held`, as that says (`key` the key it stands on first).
    pub(crate) async fn attempt_on(
        &self,
        resource: &str,
        key: &str,
        held: Option<&Arc<dyn Takes>>,
        ttl: Duration,
        ttl_ms: u64,
        ask: Ask<'_>,
    ) -> Result<Won, Failed> {
        let value = self.new_value();
        let release_quietly = |targets| match held {
            None => self.release_quietly(key, &value, targets),
            Some(held) => {
                let nodes = self.nodes();
                nodes.send_quietly(&held.release_request(&value, false), targets);
            }
        };
        // If this future is dropped mid-round, a SET may already have landed:
        // the guard releases everywhere in the background.
        let cleanup = UndoOnDrop::new(|| release_quietly(self.nodes().all()));
        let start = clock::now();
        let req = match held {
            None => set_request(key, &value, ttl_ms, ask),
            Some(held) => held.take_request(&value, ttl_ms, ask.waiter()),
        };
        // What the nodes say about the lock, for a waiter's next sleep (a
        // plain attempt's failure is followed by a waiter's attempt at once).
        let mut seen = match ask {
            Ask::Plain => Vec::new(),
            Ask::Queued(_) => vec![Seen::Unknown; self.node_count()],
        };
        let classify = |i: usize, v: &Value| {
            let (won, now_seen) = read_reply(v, Instant::now())?;
            if let Some(slot) = seen.get_mut(i) {
                *slot = now_seen;
            }
            Some(won)
        };
        // Counted until the outcome is explained, not only decided: a lost
        // attempt must tell contention from an outage.
        let (tally, stragglers) = self
            .nodes()
            .vote_until(&req, "set", Counts::Trusted, classify, |t, _| t.explained())
            .await;
        let valid_until = valid_until(start, clock::now(), ttl, self.drift_on(ttl, tally.yes));
        cleanup.disarm();
        if tally.decided() == Some(true) {
            if let Some(valid_until) = valid_until {
                // Won: let the slower nodes' SETs land too (bounded by the
                // node timeout), so the lock sits on every healthy node and
                // survives the loss of a holder node.
                stragglers.finish_in_background();
                let held = held
                    .filter(|h| h.keeps())
                    .map(|h| Arc::clone(h) as Arc<dyn Held>);
                let place = Place {
                    key,
                    line: key,
                    held,
                };
                return Ok(Won::new(
                    self.clone(),
                    resource,
                    place,
                    value,
                    ttl,
                    Basis::new(tally.yes, start, ttl, valid_until),
                    matches!(ask, Ask::Queued(_)),
                ));
            }
        }
        // Failed. A plain attempt drops the SETs still waiting (one already
        // sent is ordered before our release there; one still queued is not
        // sent). A waiter's requests go out anyway: they register it in the
        // waiting list on every node, which keeps the order of waiters the
        // same everywhere (a SET they make is undone by the release queued
        // behind them). Then undo on every node that did not clearly
        // refuse, because a SET may have landed where the reply was lost;
        // and on every node whose connection broke and was remade during
        // the attempt, because a SET sent again there finds our own key
        // and refuses.
        match ask {
            Ask::Plain => drop(stragglers),
            Ask::Queued(_) => stragglers.finish_in_background(),
        }
        let (refused, lacks_nodes) = (tally.no, tally.failures_prevent_quorum());
        let error = if tally.decided() == Some(true) {
            // Won the quorum but took so long the lock would be stale.
            Error::TtlTooShort {
                resource: resource.to_owned(),
                ttl,
                took: start.elapsed(),
            }
        } else {
            self.failure(resource, key, tally)
        };
        if let Ask::Queued(w) = ask {
            // A waiter that won but could not use the lock, or that too few
            // nodes answered, gives its place up (a split vote with one slow
            // node keeps it). It leaves the list before the release, so the
            // waiter behind it, woken by the release, finds itself first.
            if error.is_expired() || lacks_nodes {
                w.yield_place();
            }
        }
        let resent = self.nodes().reconnected_after(start.into_std());
        release_quietly(self.nodes().all() & (!refused | resent));
        Err(Failed { error, seen })
    }
}

/// The request of one attempt.
fn set_request(key: &str, value: &str, ttl_ms: u64, ask: Ask<'_>) -> Arc<Request> {
    match ask {
        Ask::Plain => {
            let mut cmd = redis::Cmd::with_capacity(6, key.len() + value.len() + 32);
            cmd.arg("SET")
                .arg(key)
                .arg(value)
                .arg("NX")
                .arg("PX")
                .arg(ttl_ms);
            Request::plain(cmd)
        }
        Ask::Queued(w) => {
            let (keys, id, ticket, lease_ms) = w.register();
            Request::script(
                &scripts::QUEUED_SET,
                [key, &keys.queue, &keys.leases],
                |cmd| {
                    cmd.arg(value).arg(ttl_ms).arg(id).arg(ticket).arg(lease_ms);
                },
            )
        }
    }
}

/// A node's reply to an attempt, read at `now`: whether it set the key, and
/// what frees the lock there (a node we set is free again once the failed
/// attempt's release reaches it). `None` for a reply our requests never get.
fn read_reply(v: &Value, now: Instant) -> Option<(bool, Seen)> {
    match v {
        Value::Okay => Some((true, Seen::Free)),
        Value::Nil => Some((false, Seen::Unknown)),
        Value::Array(_) => read_queued_reply(v, now).map(|(won, seen)| (won == 1, seen)),
        _ => None,
    }
}

/// A waiter's script reply `{won, pttl, ahead}`, read at `now`: what it
/// took (0: nothing; the lock's script says 1, a semaphore's the slot
/// number from 1) and what frees a place there.
pub(crate) fn read_queued_reply(v: &Value, now: Instant) -> Option<(i64, Seen)> {
    match v {
        Value::Array(items) => {
            let [Value::Int(won), Value::Int(pttl), Value::Int(ahead)] = items.as_slice() else {
                return None;
            };
            let seen = match (*won, *pttl, *ahead) {
                (1.., _, _) => Seen::Free,
                // 3: a semaphore's, yielding to a waiter on the name's list.
                (_, _, 1 | 3) => Seen::Ahead,
                (_, -2, _) => Seen::Free,
                (_, -1, _) => Seen::Held,
                // The key's PTTL is rounded to the millisecond.
                (_, ms, _) => Seen::Expires(now + Duration::from_millis(ms.max(0) as u64 + 1)),
            };
            Some((*won, seen))
        }
        _ => None,
    }
}

/// Undoes a half-finished attempt if its future is dropped (a lock's or a
/// permit's: the undo is whatever the attempt says), unless disarmed when
/// the attempt finished normally.
pub(crate) struct UndoOnDrop<F: FnOnce()> {
    /// The undo, until it ran or was disarmed.
    undo: Option<F>,
}

impl<F: FnOnce()> UndoOnDrop<F> {
    /// A guard that runs `undo` on drop.
    pub(crate) fn new(undo: F) -> Self {
        Self { undo: Some(undo) }
    }

    /// The attempt finished normally: nothing to undo on drop.
    pub(crate) fn disarm(mut self) {
        self.undo = None;
    }
}

impl<F: FnOnce()> Drop for UndoOnDrop<F> {
    fn drop(&mut self) {
        if let Some(undo) = self.undo.take() {
            undo();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_frees_the_lock() {
        let now = Instant::now();
        let arr = |a, b, c| Value::Array(vec![Value::Int(a), Value::Int(b), Value::Int(c)]);
        assert_eq!(read_reply(&Value::Okay, now), Some((true, Seen::Free)));
        assert_eq!(read_reply(&Value::Nil, now), Some((false, Seen::Unknown)));
        assert_eq!(read_reply(&arr(1, 0, 0), now), Some((true, Seen::Free)));
        assert_eq!(read_reply(&arr(0, 500, 1), now), Some((false, Seen::Ahead)));
        assert_eq!(read_reply(&arr(0, -1, 0), now), Some((false, Seen::Held)));
        assert_eq!(
            read_reply(&arr(0, 500, 0), now),
            Some((false, Seen::Expires(now + Duration::from_millis(501))))
        );
        assert_eq!(read_reply(&Value::Int(1), now), None);
    }
}
