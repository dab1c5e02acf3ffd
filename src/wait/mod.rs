//! Waiting for a held lock.
//!
//! Inside one client, callers for the same resource line up and only the
//! front one contends ([`queue`]). Across clients, a waiter registers in the
//! resource's waiting list on every node, ordered by ticket (the time it
//! started waiting), and a waiter's attempt (`QUEUED_SET`) takes the lock
//! only when nobody live is ahead of it there; so the registered waiter
//! that waited longest goes next, and the releasing holder and clients that
//! have seen the resource contended queue behind it (a client's first plain
//! `SET NX` on a resource it has not seen contended does not: that keeps the
//! free path one round trip). Between attempts it sleeps until a quorum of nodes may have
//! the lock free ([`plan`]): when the holder's key expires by the nodes'
//! TTLs, or at once when the nodes report a change to the key (server-
//! assisted tracking on a notification connection per node,
//! `node/notify/watch.rs`), or when this client releases it; and never longer than
//! the retry cap, nor than two node timeouts where too few nodes could
//! tell it of a change (their notification reads failed: a node at
//! `maxclients`, or too slow to answer), so the next attempt reads them
//! again. A semaphore's waiters are woken by name instead, by the
//! release that lets them in ([`named`]). None of this is a safety input:
//! the `SET NX` quorum still decides who holds the lock.

pub(crate) mod list;
pub(crate) mod named;
pub(crate) mod plan;
pub(crate) mod queue;
pub(crate) mod scripts;
pub(crate) mod signal;

pub(crate) use list::WaitKeys;

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::node::notify::watch::{Heard, Sink, Watch};
use crate::node::notify::watches::{Route, Watches};
use crate::quorum::tally::{node_bit, nodes_where, NodeSet};
use crate::telemetry::labels::Woken;
use crate::telemetry::Telemetry;
use crate::wait::named::names;
use crate::wait::plan::{next_try, split, Seen};
use crate::wait::queue::Queues;
use crate::wait::signal::{Keys, Signal};

/// How this client waits.
#[derive(Debug)]
pub(crate) struct Waiting {
    /// Lines of this client's waiters, by key.
    pub(crate) queues: Arc<Queues>,
    /// Each node's notification connections; empty when notifications are
    /// off.
    watches: Vec<Watches>,
    /// Longest sleep between attempts without news.
    cap: Duration,
    /// Longest sleep while too few nodes could tell news (their
    /// notification reads failed): the next attempt reads them again.
    rearm: Duration,
    /// How long a waiter's registration on a node lasts without renewal.
    lease: Duration,
    /// Where this client's listeners start (random), so that the clients
    /// of one semaphore listen to different nodes.
    spread: u64,
    /// How this client's waiter ids start (random): a semaphore's release
    /// names waiters by id, and a client knows its own by this.
    token: String,
}

impl Waiting {
    /// Waiting over the nodes `clients` point at (with, for a member that
    /// is a Redis Cluster, where its keys are served): with notification
    /// connections (opened within `connect_timeout`, each read bounded by
    /// the node `timeout`) if `notify`, sleeping at most `cap` between
    /// attempts.
    pub(crate) fn new(
        telemetry: &Arc<Telemetry>,
        clients: &[(redis::Client, Option<Route>)],
        connect_timeout: Duration,
        timeout: Duration,
        cap: Duration,
        notify: bool,
    ) -> Self {
        let queues = Arc::new(Queues::default());
        let weak = Arc::downgrade(&queues);
        let telemetry = Arc::downgrade(telemetry);
        let token = format!("{:08x}", rand::random::<u32>());
        let ours = token.clone();
        let sink: Sink = Arc::new(move |node, what| {
            if let Heard::Message { payload, .. } = what {
                if !names(payload, &ours) {
                    // A release that lets in other clients' waiters.
                    return;
                }
            }
            if let Some(telemetry) = telemetry.upgrade() {
                telemetry.notified();
            }
            if let Some(queues) = weak.upgrade() {
                queues.invalidated(node, what);
            }
        });
        let watches = if notify {
            clients
                .iter()
                .enumerate()
                .map(|(i, (c, route))| {
                    let timeouts = (connect_timeout, timeout);
                    Watches::new(i, (c, route.clone()), timeouts, Arc::clone(&sink))
                })
                .collect()
        } else {
            Vec::new()
        };
        Self {
            queues,
            watches,
            cap,
            rearm: cap.min(timeout.saturating_mul(2)),
            // The front waiter attempts at least once per cap (each attempt
            // renews), so three caps and two slow rounds never lapse a live
            // waiter's registration, and a dead one blocks others that long.
            lease: cap
                .saturating_mul(3)
                .saturating_add(timeout.saturating_mul(2)),
            spread: rand::random(),
            token,
        }
    }

    /// How this client's waiter ids start.
    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    /// How long a registration lasts without renewal.
    pub(crate) fn lease(&self) -> Duration {
        self.lease
    }

    /// Whether node `i`'s notification connection is open now.
    pub(crate) fn notifying(&self, i: usize) -> bool {
        self.watches.get(i).is_some_and(|w| w.connected())
    }

    /// The notification connections of `nodes`.
    fn watches_in(&self, nodes: NodeSet) -> impl Iterator<Item = &Watches> {
        self.watches
            .iter()
            .filter(move |w| nodes & node_bit(w.index()) != 0)
    }

    /// Reads `key` on the notification connections of `nodes`, so that
    /// each tells us of the key's next change. The reads run on their own
    /// (a slow or dead notification connection never delays an attempt); a
    /// read that finds no key reports it to `signal` for `round`.
    /// A key that holds `free` reads as free (see [`Watch::arm`]).
    pub(crate) fn arm(
        &self,
        (key, free): (&str, Option<&'static str>),
        nodes: NodeSet,
        signal: &Arc<Signal>,
        round: u64,
    ) {
        for watch in self.watches_in(nodes) {
            let (watch, key, signal) = (watch.for_key(key), key.to_owned(), Arc::clone(signal));
            tokio::spawn(async move { read_key(&watch, (&key, free), &signal, round).await });
        }
    }

    /// [`Waiting::arm`] for `ahead`'s keys on the nodes of `nodes`, where
    /// our last attempt found someone listed ahead of us: where the reads
    /// find every key free, who is listed ahead of us in each of its
    /// waiting lists is read too ([`read_ahead`]), since the one ahead may
    /// have taken the lock and released it before our read (then the keys
    /// have no more to tell). The keys and lists share a hash slot.
    pub(crate) fn arm_ahead(&self, ahead: Ahead, nodes: NodeSet, signal: &Arc<Signal>, round: u64) {
        let ahead = Arc::new(ahead);
        let Some(first) = ahead.keys.first() else {
            return;
        };
        for watch in self.watches_in(nodes) {
            let (watch, signal) = (watch.for_key(first), Arc::clone(signal));
            let ahead = Arc::clone(&ahead);
            tokio::spawn(async move { read_ahead(&watch, &ahead, &signal, round).await });
        }
    }

    /// Hears `channel` (a semaphore's, see [`named`]) on node `node` for
    /// `signal`: at once if that node's notification connection hears it
    /// already (or is being subscribed to it), else in the background.
    /// A subscription made now counts as news (a release may have named us
    /// before it took) for the round current when it took, not `round`: an
    /// attempt made meanwhile found the channel being subscribed to and
    /// armed nothing there of its own. (The sleep counts it unless that
    /// round's attempt found someone waiting ahead of us there.) Where the
    /// node will not subscribe, `keys` (the slots) are read there instead,
    /// as [`Waiting::arm`] reads them, for round `round`.
    pub(crate) fn hear(
        &self,
        (channel, node): (&str, usize),
        keys: &[String],
        signal: &Arc<Signal>,
        round: u64,
    ) {
        let Some(watch) = self.watches.get(node) else {
            return;
        };
        if watch.hears(channel) {
            return;
        }
        let (watch, channel, keys) = (watch.clone(), channel.to_owned(), keys.to_vec());
        let signal = Arc::clone(signal);
        tokio::spawn(async move {
            match watch.listen(&channel).await {
                Ok(false) => {}
                Ok(true) => signal.armed(signal.round(), node, -2),
                Err(_) => {
                    signal.keys_heard(Keys::Always);
                    for key in keys {
                        read_key(&watch.for_key(&key), (&key, None), &signal, round).await;
                    }
                }
            }
        });
    }

    /// The node whose channel a waiter of `line` hears ([`Waiting::hear`]):
    /// of the nodes that answered their last request in time (`healthy`)
    /// and whose notification connection is open or may be opened, the
    /// first (in the order of [`Waiting::listener`]) that hears `channel`
    /// already, else the first that answered the last attempt (`seen`).
    /// So it stays the same while that node is well, also when an attempt
    /// was decided before it answered.
    pub(crate) fn ear(
        &self,
        (line, channel): (&str, &str),
        seen: &[Seen],
        healthy: NodeSet,
    ) -> Option<usize> {
        let well = |i: usize| healthy & node_bit(i) != 0 && self.watches[i].usable();
        let answered = |i: usize| seen.get(i).is_some_and(|s| *s != Seen::Unknown);
        self.order(line)
            .find(|&i| well(i) && self.watches[i].heard(channel))
            .or_else(|| self.order(line).find(|&i| well(i) && answered(i)))
    }

    /// After a failed attempt that took a slot on some nodes, or that
    /// followed a message naming us (`named`), and found every slot held on
    /// other nodes (`seen`): the first of those others (in the order of
    /// [`Waiting::listener`]) whose notification connection is usable. A
    /// release still on its way there frees a slot that no message we hear
    /// tells of (the node we hear had it first), so its slots are read
    /// there (and tracked).
    pub(crate) fn split_ear(&self, line: &str, seen: &[Seen], named: bool) -> Option<usize> {
        let held = |s: &Seen| matches!(s, Seen::Held | Seen::Expires(_));
        if !named && !split(seen) {
            return None;
        }
        self.order(line)
            .find(|&i| seen.get(i).is_some_and(held) && self.watches[i].usable())
    }

    /// The nodes in the order a waiter of `line` prefers them as its
    /// listener: from a place given by the line and this client (so that
    /// clients and lines spread over the nodes), then round; none when
    /// notifications are off.
    fn order(&self, line: &str) -> impl Iterator<Item = usize> {
        let n = self.watches.len();
        let mut hasher = std::hash::DefaultHasher::new();
        line.hash(&mut hasher);
        let start = if n == 0 {
            0
        } else {
            (hasher.finish() ^ self.spread) as usize % n
        };
        (0..n).map(move |k| (start + k) % n)
    }

    /// The one node a waiter of `line` listens to when one node's news is
    /// enough (see [`Listen`]): the first, in an order that starts at a
    /// place given by the line and this client (so that clients and lines
    /// spread over the nodes), which answered the last attempt (`seen`)
    /// and whose notification connection is open or may be opened (it did
    /// not fail just now); preferably one that refused the attempt rather
    /// than one where it took a slot (`Seen::Free`), whose undo would be
    /// news of our own making; `None` if none qualifies (or notifications
    /// are off).
    pub(crate) fn listener(&self, line: &str, seen: &[Seen]) -> Option<usize> {
        let order = || self.order(line);
        let can = |i: usize, free: bool| {
            let answered = seen
                .get(i)
                .is_some_and(|s| *s != Seen::Unknown && (free || *s != Seen::Free));
            answered && self.watches[i].usable()
        };
        order()
            .find(|&i| can(i, false))
            .or_else(|| order().find(|&i| can(i, true)))
    }

    /// Sleeps until a quorum of nodes may have the lock free (by `seen` and
    /// the news on `signal`; with [`Listen::One`], until any news), this
    /// client released it, the retry cap (with jitter, so waiters of
    /// several clients do not retry together) or `deadline`; says which.
    pub(crate) async fn sleep(
        &self,
        signal: &Signal,
        seen: &[Seen],
        (quorum, listen): (usize, Listen),
        deadline: Instant,
    ) -> Woken {
        let mut cap_at = deadline_in(jittered(self.cap));
        let mut short = false;
        loop {
            let heard = signal.news();
            if signal.poked() {
                return Woken::OwnRelease;
            }
            let now = Instant::now();
            let absent = nodes_where(seen, |s| s.freed_by_absence());
            let news = signal.dirty() | (signal.armed_free() & absent);
            if listen == Listen::One && news != 0 {
                return Woken::Notification;
            }
            // Too few nodes can tell us of a change (their reads failed;
            // with one node's news, that node's): try again soon, which
            // reads them again.
            let unarmed = signal.unarmed_nodes();
            let deaf = match listen {
                Listen::Quorum => seen.len() - (unarmed.count_ones() as usize) < quorum,
                Listen::One => unarmed != 0,
            };
            if deaf && !short {
                short = true;
                cap_at = cap_at.min(deadline_in(jittered(self.rearm)));
            }
            let at = next_try(seen, news, quorum, now)
                .map_or(cap_at, |t| t.min(cap_at))
                .min(deadline);
            let woken = if at == deadline {
                Woken::Deadline
            } else if at == cap_at {
                Woken::Cap
            } else if news != 0 && at <= now {
                Woken::Notification
            } else {
                Woken::Ttl
            };
            if at <= now {
                return woken;
            }
            tokio::select! {
                () = heard => {}
                () = tokio::time::sleep_until(at) => return woken,
            }
        }
    }
}

/// Reads `key` on `watch` (see [`Watch::arm`]), so that the node tells of
/// its next change (a read that fails is told to `signal`: no news will
/// come from there); a read that finds no key is news to `signal` for
/// `round`.
async fn read_key(watch: &Watch, (key, free): (&str, Option<&str>), signal: &Signal, round: u64) {
    match watch.arm(key, free).await {
        Ok(Some(pttl)) => signal.armed(round, watch.index(), pttl),
        Ok(None) => {}
        Err(_) => signal.unarmed(round, watch.index()),
    }
}

/// A waiter kept out by others listed ahead of it: what its notification
/// reads look at ([`Waiting::arm_ahead`]).
#[derive(Debug)]
pub(crate) struct Ahead {
    /// The keys whose change may let it in.
    pub(crate) keys: Vec<String>,
    /// Every waiting list it is in.
    pub(crate) queues: Vec<String>,
    /// Its id in them.
    pub(crate) me: String,
    /// Whom it waits for when listed ahead of it: waiters whose id ends in
    /// this (a read-write lock's reader: writers, `:w`); empty: everyone.
    pub(crate) mark: &'static str,
    /// A value that leaves its keys free for it (a reader's: the readers'
    /// mark).
    pub(crate) free: Option<&'static str>,
}

/// Whether someone `ahead` waits for is listed before it in `listed` (a
/// waiting list, in order, from its first entry).
fn kept_out(listed: &[String], ahead: &Ahead) -> bool {
    listed
        .iter()
        .take_while(|id| **id != ahead.me)
        .any(|id| id.ends_with(ahead.mark))
}

/// [`read_key`] for each of `ahead`'s keys where someone waited ahead of
/// us: a held key's change will be told; free (or still tracked) keys say
/// nothing of whether the one ahead came and went, so who is listed ahead
/// of us in each waiting list is read: if nobody we wait for, that is news
/// for `round`; else the one ahead is still to take the lock, and the keys
/// (tracked from the reads on) will tell, or, if it leaves without taking
/// it, the list (tracked from its read on; news to lines that hear it).
/// (A winner leaves the lists before it releases, so keys found free after
/// its release find it gone from them.)
async fn read_ahead(watch: &Watch, ahead: &Ahead, signal: &Signal, round: u64) {
    for key in &ahead.keys {
        match watch.arm(key, ahead.free).await {
            Ok(Some(-2) | None) => {}
            Ok(Some(_)) => return,
            Err(_) => return signal.unarmed(round, watch.index()),
        }
    }
    // Anyone first but us keeps us out; for a mark, every entry before
    // ours is looked at.
    let all = !ahead.mark.is_empty();
    for queue in &ahead.queues {
        match watch.listed(queue, all).await {
            Ok(Some(listed)) if kept_out(&listed, ahead) => return,
            Ok(Some(_)) => {}
            Ok(None) => return,
            Err(_) => return signal.unarmed(round, watch.index()),
        }
    }
    signal.let_in(round, watch.index());
}

/// Whose news a waiter waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Listen {
    /// Every node's, until a quorum may have the lock free: a lock's key.
    Quorum,
    /// One node's: a semaphore's channel ([`Waiting::ear`], [`named`]),
    /// or its slots ([`Waiting::listener`]) where the channel is refused. A
    /// permit is released on every node at once, so one node's news stands
    /// for all of them (the attempt still needs a quorum); one node telling
    /// each waiter, not every node, keeps the news from costing the nodes
    /// more than the permits themselves.
    One,
}

/// The instant `wait` from now, or one so far away that it stands for
/// "forever" when `wait` is too long to add (`Duration::MAX`).
pub(crate) fn deadline_in(wait: Duration) -> tokio::time::Instant {
    /// About thirty years: no wait is longer, and the timer takes it.
    const FOREVER: Duration = Duration::from_secs(30 * 365 * 24 * 3600);
    let now = tokio::time::Instant::now();
    now.checked_add(wait.min(FOREVER)).unwrap_or(now)
}

/// A random time in `cap/2..=cap`.
fn jittered(cap: Duration) -> Duration {
    use rand::Rng;
    let half = cap / 2;
    let spread = half.as_nanos().min(u128::from(u64::MAX)) as u64;
    half + Duration::from_nanos(rand::rng().random_range(0..=spread))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waiting over `n` nodes nobody listens on (no connection is made).
    fn waiting(n: usize) -> Waiting {
        let telemetry = Arc::new(Telemetry::new(n, None));
        let clients: Vec<(redis::Client, Option<Route>)> = (0..n)
            .map(|_| {
                (
                    redis::Client::open("redis://127.0.0.1:1").expect("url"),
                    None,
                )
            })
            .collect();
        let d = Duration::from_millis(100);
        Waiting::new(&telemetry, &clients, d, d, d, true)
    }

    #[test]
    fn after_a_split_the_slots_are_read_where_every_slot_was_held() {
        let w = waiting(4);
        let later = Instant::now() + Duration::from_secs(1);
        let split = [Seen::Free, Seen::Expires(later), Seen::Unknown, Seen::Held];
        let held = w.split_ear("line", &split, false);
        assert!(matches!(held, Some(1 | 3)), "{held:?}");
        let refused = [Seen::Ahead, Seen::Expires(later), Seen::Unknown, Seen::Held];
        assert_eq!(w.split_ear("line", &refused, false), None, "no slot taken");
        let named = w.split_ear("line", &refused, true);
        assert!(
            matches!(named, Some(1 | 3)),
            "named, and refused: {named:?}"
        );
        let taken = [Seen::Free, Seen::Free, Seen::Ahead, Seen::Unknown];
        assert_eq!(
            w.split_ear("line", &taken, true),
            None,
            "no node held every slot"
        );
    }

    #[test]
    fn a_waiter_hears_a_node_that_answered_and_is_well() {
        let w = waiting(3);
        let seen = [Seen::Unknown, Seen::Held, Seen::Unknown];
        assert_eq!(w.ear(("line", "ch"), &seen, 0b111), Some(1));
        assert_eq!(
            w.ear(("line", "ch"), &seen, 0b101),
            None,
            "node 1 is not well"
        );
        assert_eq!(w.ear(("line", "ch"), &[Seen::Unknown; 3], 0b111), None);
    }
}
