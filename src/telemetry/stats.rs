//! [`Stats`], a snapshot of what one client did and where it stands, and
//! the always-on counters behind it (a few relaxed atomic additions per
//! event, no dependency).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

use crate::telemetry::labels::{Primitive, Woken, ERROR_KINDS};

/// What one [`Redlock`](crate::Redlock) (and every clone of it) did since
/// it was built, and where it stands now: taken by
/// [`Redlock::stats`](crate::Redlock::stats), cheap (a few dozen atomic
/// reads), for a status page or a periodic log line. Counters only grow;
/// gauges (`held_*`, `nodes_up`, a node's `up`) are the state at the
/// snapshot.
///
/// Locks, semaphore permits and leaderships are all locks underneath: the
/// acquisition, wait, extension, release and loss counters cover all three
/// (and this client's own internal locks).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Acquisitions that returned a lock, permit or leadership.
    pub acquired: u64,
    /// Acquisitions that gave up because others held it
    /// ([`Error::Contended`](crate::Error::Contended), a `try_*` call).
    pub contended: u64,
    /// Acquisitions whose patience ran out
    /// ([`Error::Timeout`](crate::Error::Timeout)).
    pub timed_out: u64,
    /// Acquisitions that failed otherwise (too few nodes, a round too slow
    /// for the TTL, a fencing token that came too late, bad input).
    pub failed: u64,
    /// Attempts made by all acquisitions (one quorum round each).
    pub attempts: u64,
    /// Sleeps between attempts that a node's notification ended.
    pub woken_by_notification: u64,
    /// Sleeps that ended when the holder's TTL ran out on the nodes.
    pub woken_by_ttl: u64,
    /// Sleeps that this client's own release ended.
    pub woken_by_own_release: u64,
    /// Sleeps that ended at the retry cap, without news.
    pub woken_by_cap: u64,
    /// Sleeps that ended when the caller's patience ran out.
    pub woken_by_deadline: u64,
    /// Pauses after failing nodes (retry delay with jitter).
    pub paused: u64,
    /// Extensions (by hand or automatic) confirmed by a quorum.
    pub extended: u64,
    /// Extensions that failed.
    pub extend_failed: u64,
    /// Releases (by hand or on drop).
    pub released: u64,
    /// Locks lost while held: an automatic extension failed, validity ran
    /// out, or the lock was released after its validity had run out.
    pub lost: u64,
    /// Locks held now (taken by [`Redlock::lock`](crate::Redlock::lock)
    /// and friends), neither released nor known lost.
    pub held_locks: u64,
    /// Semaphore permits held now.
    pub held_permits: u64,
    /// Elections this client leads now.
    pub held_leaderships: u64,
    /// Numbers allocated from quorum counters (serial numbers, fencing
    /// tokens, terms; a serial batch counts once).
    pub allocations: u64,
    /// Allocations that failed.
    pub allocation_failures: u64,
    /// Compare-and-set rounds lost to another client's allocation.
    pub allocation_conflicts: u64,
    /// Semaphore attempts whose nodes took different slots for them and
    /// that asked those on other slots to move to the slot most took.
    pub permit_moves: u64,
    /// Those moves that won the permit.
    pub permit_moves_won: u64,
    /// Notifications pushed by the nodes (key changes, connection losses,
    /// a semaphore's releases that name one of our waiters).
    pub notifications: u64,
    /// Notification connections open now.
    pub notification_connections: usize,
    /// Nodes whose last request was answered in time.
    pub nodes_up: usize,
    /// Each node, in configured order.
    pub nodes: Vec<NodeStats>,
}

/// One node's part of [`Stats`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeStats {
    /// Its position in the configured list.
    pub index: usize,
    /// `host:port` (never a password).
    pub addr: String,
    /// Whether its last request was answered in time.
    pub up: bool,
    /// Whether it is quarantined now: it may have lost locks that can still
    /// be valid, so it does not count toward lock quorums.
    pub quarantined: bool,
    /// Whether its notification connection is open.
    pub notifications: bool,
    /// Requests sent to it (each round sends one to every node).
    pub requests: u64,
    /// Requests it did not answer in time, in rounds that waited for it (a
    /// round decided without it does not).
    pub timeouts: u64,
    /// Requests lost to a failed connection.
    pub connection_errors: u64,
    /// Requests it answered with an error (a script error, a refusal).
    pub server_errors: u64,
    /// Replies none of our scripts return.
    pub unexpected_replies: u64,
    /// Requests its ACL refused.
    pub denied: u64,
    /// Yes votes that did not count: it was quarantined.
    pub quarantined_votes: u64,
    /// Counter acceptances that did not count: its record was not repaired
    /// after it may have lost writes.
    pub unrepaired_votes: u64,
    /// Times its clock ran ahead of ours beyond the drift allowance (a step
    /// forward, or a clock running fast), each followed by a quarantine:
    /// read from the `TIME` sent behind every request.
    pub clock_ahead: u64,
    /// Times its clock stepped back against ours (safe: keys live longer).
    pub clock_behind: u64,
    /// How much faster than ours its clock runs, in parts per million (at
    /// most: the measurement's upper bound; negative: slower), once about a
    /// second of replies measured it; `None` before. Beyond the drift
    /// factor, a lock's validity on it is counted at this rate.
    pub clock_rate_ppm: Option<i64>,
    /// How far its wall clock is ahead of ours (negative: behind), µs,
    /// with the uncertainty of the reply it was read from (half its round
    /// trip), as of its latest reply; `None` before the first. Told, not
    /// used: no decision depends on clocks agreeing, only on their rates
    /// and steps.
    pub clock_offset_us: Option<(i64, u64)>,
}

/// The counters behind [`Stats`].
#[derive(Debug)]
pub(crate) struct Counters {
    /// By outcome: acquired, contended, timed out, failed.
    acquisitions: [AtomicU64; 4],
    /// Attempts.
    attempts: AtomicU64,
    /// Wake-ups, by [`Woken`] in declaration order.
    woken: [AtomicU64; 6],
    /// Extensions ok, failed.
    extensions: [AtomicU64; 2],
    /// Releases.
    released: AtomicU64,
    /// Losses.
    lost: AtomicU64,
    /// Held now, by lock, permit, leadership (internal ones not shown).
    held: [AtomicI64; 4],
    /// Allocations ok, failed, conflicts.
    allocations: [AtomicU64; 3],
    /// Semaphore move rounds, those won.
    moves: [AtomicU64; 2],
    /// Notifications.
    notifications: AtomicU64,
    /// Per node: requests, then one per error kind.
    nodes: Vec<[AtomicU64; 1 + ERROR_KINDS.len()]>,
}

impl Counters {
    /// Zeroed counters for `nodes` nodes.
    pub(crate) fn new(nodes: usize) -> Self {
        Self {
            acquisitions: Default::default(),
            attempts: AtomicU64::new(0),
            woken: Default::default(),
            extensions: Default::default(),
            released: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            held: Default::default(),
            allocations: Default::default(),
            moves: Default::default(),
            notifications: AtomicU64::new(0),
            nodes: (0..nodes).map(|_| Default::default()).collect(),
        }
    }

    /// An acquisition ended with `outcome` after `rounds` attempts.
    pub(crate) fn acquired(&self, outcome: &str, rounds: u32) {
        let i = match outcome {
            "acquired" => 0,
            "contended" => 1,
            "timeout" => 2,
            _ => 3,
        };
        self.acquisitions[i].fetch_add(1, Relaxed);
        self.attempts.fetch_add(u64::from(rounds), Relaxed);
    }

    /// A sleep ended as `woken` says.
    pub(crate) fn woke(&self, woken: Woken) {
        self.woken[woken as usize].fetch_add(1, Relaxed);
    }

    /// An extension ended.
    pub(crate) fn extension(&self, ok: bool) {
        self.extensions[usize::from(!ok)].fetch_add(1, Relaxed);
    }

    /// A release.
    pub(crate) fn released(&self) {
        self.released.fetch_add(1, Relaxed);
    }

    /// A loss.
    pub(crate) fn lost(&self) {
        self.lost.fetch_add(1, Relaxed);
    }

    /// One more (`delta` 1) or one fewer (-1) lock of `primitive` held.
    pub(crate) fn held(&self, primitive: Primitive, delta: i64) {
        self.held[primitive as usize].fetch_add(delta, Relaxed);
    }

    /// An allocation ended.
    pub(crate) fn allocation(&self, conflicts: u32, ok: bool) {
        self.allocations[usize::from(!ok)].fetch_add(1, Relaxed);
        self.allocations[2].fetch_add(u64::from(conflicts), Relaxed);
    }

    /// A semaphore attempt made a move round, `won` or not.
    pub(crate) fn moved(&self, won: bool) {
        self.moves[0].fetch_add(1, Relaxed);
        self.moves[1].fetch_add(u64::from(won), Relaxed);
    }

    /// A notification.
    pub(crate) fn notified(&self) {
        self.notifications.fetch_add(1, Relaxed);
    }

    /// A request was sent to node `node`.
    pub(crate) fn node_sent(&self, node: usize) {
        if let Some(counts) = self.nodes.get(node) {
            counts[0].fetch_add(1, Relaxed);
        }
    }

    /// Node `node` failed a round with the error kind `kind`.
    pub(crate) fn node_failed(&self, node: usize, kind: usize) {
        if let Some(counts) = self.nodes.get(node) {
            counts[1 + kind].fetch_add(1, Relaxed);
        }
    }

    /// The snapshot; the caller fills in what the nodes know of themselves
    /// (address, `up`, quarantine, notifications) and the totals of those.
    pub(crate) fn snapshot(&self) -> Stats {
        let get = |a: &AtomicU64| a.load(Relaxed);
        let held = |p: Primitive| self.held[p as usize].load(Relaxed).max(0) as u64;
        let woken = |w: Woken| get(&self.woken[w as usize]);
        Stats {
            acquired: get(&self.acquisitions[0]),
            contended: get(&self.acquisitions[1]),
            timed_out: get(&self.acquisitions[2]),
            failed: get(&self.acquisitions[3]),
            attempts: get(&self.attempts),
            woken_by_notification: woken(Woken::Notification),
            woken_by_ttl: woken(Woken::Ttl),
            woken_by_own_release: woken(Woken::OwnRelease),
            woken_by_cap: woken(Woken::Cap),
            woken_by_deadline: woken(Woken::Deadline),
            paused: woken(Woken::Pause),
            extended: get(&self.extensions[0]),
            extend_failed: get(&self.extensions[1]),
            released: get(&self.released),
            lost: get(&self.lost),
            held_locks: held(Primitive::Lock),
            held_permits: held(Primitive::Semaphore),
            held_leaderships: held(Primitive::Election),
            allocations: get(&self.allocations[0]),
            allocation_failures: get(&self.allocations[1]),
            allocation_conflicts: get(&self.allocations[2]),
            permit_moves: get(&self.moves[0]),
            permit_moves_won: get(&self.moves[1]),
            notifications: get(&self.notifications),
            notification_connections: 0,
            nodes_up: 0,
            nodes: self
                .nodes
                .iter()
                .enumerate()
                .map(|(index, c)| NodeStats {
                    index,
                    requests: get(&c[0]),
                    timeouts: get(&c[1]),
                    connection_errors: get(&c[2]),
                    server_errors: get(&c[3]),
                    unexpected_replies: get(&c[4]),
                    denied: get(&c[5]),
                    quarantined_votes: get(&c[6]),
                    unrepaired_votes: get(&c[7]),
                    ..NodeStats::default()
                })
                .collect(),
        }
    }
}
