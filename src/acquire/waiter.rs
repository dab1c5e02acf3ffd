//! A caller's entry in the waiting lists on the nodes: its id and ticket
//! (its place, the same on every node), its lease, joining at once and
//! leaving (also when dropped).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::client::redlock::Redlock;
use crate::node::connection::request::Request;
use crate::quorum::tally::NodeSet;
use crate::wait::scripts;
use crate::wait::WaitKeys;

/// A caller's entry in a resource's waiting list on the nodes. Dropping it
/// takes the entry out again (sent in the background, ahead of anything the
/// caller sends to the nodes later).
#[derive(Debug)]
pub(crate) struct Waiter<'a> {
    /// The client.
    redlock: &'a Redlock,
    /// The waiting list's keys.
    keys: WaitKeys,
    /// Other waiting lists it is listed in under the same id and ticket (a
    /// multi-lock's other resources').
    more: Vec<WaitKeys>,
    /// This waiter's id in the list: this client's token, then random
    /// (a release that names it wakes this client).
    id: String,
    /// When it started waiting (or last gave its place up), in
    /// microseconds of this client's wall clock: its place in the list, the
    /// same on every node.
    ticket: AtomicU64,
    /// How long its registration lasts without renewal, in ms.
    lease_ms: u64,
    /// Set once a queued attempt was sent: the entry may exist somewhere.
    registered: AtomicBool,
    /// Nodes known to have taken the entry out already (a semaphore
    /// waiter's winning take leaves the list where it took a slot): leaving
    /// skips them.
    gone_from: AtomicU64,
    /// Set when it gave its place up; cleared when read.
    yielded: AtomicBool,
    /// Set when its attempt won a permit with a slot to spare on a quorum
    /// (`SEMAPHORE_TAKE`): the next waiter may take one at once.
    spare: AtomicBool,
}

impl<'a> Waiter<'a> {
    /// A waiter for the lock at `key` that started waiting at `since`.
    pub(crate) fn new(redlock: &'a Redlock, key: &str, since: SystemTime) -> Self {
        Self {
            redlock,
            keys: WaitKeys::of(&redlock.config().key_prefix, key),
            more: Vec::new(),
            id: format!(
                "{}{:016x}",
                redlock.waiting().token(),
                rand::random::<u64>()
            ),
            ticket: AtomicU64::new(micros(since)),
            lease_ms: redlock.waiting().lease().as_millis().max(1) as u64,
            registered: AtomicBool::new(false),
            gone_from: AtomicU64::new(0),
            yielded: AtomicBool::new(false),
            spare: AtomicBool::new(false),
        }
    }
}

impl Waiter<'_> {
    /// Its id in the list.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// Every waiting list it is in: its line's, then the others'.
    pub(crate) fn queues(&self) -> impl Iterator<Item = &str> {
        self.lists().map(|keys| keys.queue.as_str())
    }

    /// The same waiter, its id ending in `mark`.
    pub(crate) fn marked(mut self, mark: &str) -> Self {
        self.id.push_str(mark);
        self
    }

    /// The same waiter, listed in `lists` too.
    pub(crate) fn also_in(mut self, lists: &[WaitKeys]) -> Self {
        self.more = lists.to_vec();
        self
    }

    /// Every waiting list it is listed in.
    fn lists(&self) -> impl Iterator<Item = &WaitKeys> {
        std::iter::once(&self.keys).chain(&self.more)
    }

    /// Marks the entry as possibly made on the nodes (an attempt carrying
    /// it is about to go out) and returns it: the waiting list's keys, the
    /// id, the ticket and the lease in ms.
    pub(crate) fn register(&self) -> (&WaitKeys, &str, u64, u64) {
        self.registered.store(true, Ordering::Release);
        let ticket = self.ticket.load(Ordering::Acquire);
        (&self.keys, &self.id, ticket, self.lease_ms)
    }

    /// Gives its place in the list up: a waiter that won but could not use
    /// the lock (its round took longer than the TTL allows), or failed for
    /// want of nodes, would otherwise block everyone behind it for as long
    /// as it waits. Its next attempt joins at the back.
    pub(crate) fn yield_place(&self) {
        self.leave();
        self.ticket
            .store(micros(SystemTime::now()), Ordering::Release);
        self.yielded.store(true, Ordering::Release);
    }

    /// Whether it gave its place up since the last call.
    pub(crate) fn take_yielded(&self) -> bool {
        self.yielded.swap(false, Ordering::AcqRel)
    }

    /// Records whether its winning attempt left a slot to spare.
    pub(crate) fn set_spare(&self, spare: bool) {
        self.spare.store(spare, Ordering::Release);
    }

    /// Whether its winning attempt left a slot to spare.
    pub(crate) fn spare(&self) -> bool {
        self.spare.load(Ordering::Acquire)
    }

    /// Records that `nodes` took the entry out themselves (the winning
    /// attempt's script did): leaving does not ask them again.
    pub(crate) fn gone_from(&self, nodes: NodeSet) {
        self.gone_from.fetch_or(nodes, Ordering::AcqRel);
    }

    /// Joins the list on every node now, without an attempt
    /// (`JOIN_WAITING_LIST`; sent in the background, ahead of anything
    /// sent to the nodes later).
    pub(crate) fn join_now(&self) {
        let (_, id, ticket, lease_ms) = self.register();
        let nodes = self.redlock.nodes();
        for keys in self.lists() {
            let req = Request::script(
                &scripts::JOIN_WAITING_LIST,
                [&keys.queue, &keys.leases],
                |cmd| {
                    cmd.arg("").arg(0).arg(id).arg(ticket).arg(lease_ms);
                },
            );
            nodes.send_quietly(&req, nodes.all());
        }
    }

    /// Leaves the list on every node that has not taken the entry out
    /// already (sent in the background, ahead of anything sent to the
    /// nodes later).
    fn leave(&self) {
        let gone = self.gone_from.swap(0, Ordering::AcqRel);
        if self.registered.swap(false, Ordering::AcqRel) {
            let nodes = self.redlock.nodes();
            let targets = nodes.all() & !gone;
            if targets == 0 {
                return;
            }
            for keys in self.lists() {
                let req = Request::script(&scripts::UNQUEUE, [&keys.queue, &keys.leases], |cmd| {
                    cmd.arg(&self.id);
                });
                nodes.send_quietly(&req, targets);
            }
        }
    }
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        self.leave();
    }
}

/// `at` in microseconds since the Unix epoch (0 before it).
fn micros(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros().min(u128::from(u64::MAX)) as u64)
}
