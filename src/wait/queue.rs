//! Waiting inside one client: callers that want the same resource line up
//! in arrival order and only the one at the front contends on the nodes, so
//! a client never races itself. The front waiter's [`Signal`] collects the
//! news that may free the lock: invalidations from the nodes and releases
//! by this client.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::mutex::lock;
use crate::node::notify::watch::Heard;
use crate::wait::signal::Signal;

/// After one of our releases found others waiting, this client's next
/// `lock()` on the resource joins the waiting list at once instead of
/// trying a plain `SET NX` first: the releasing holder must not win again
/// just because it heard of its own release first.
const CONTENDED_FOR: Duration = Duration::from_secs(1);

/// Contended marks kept before old ones are pruned.
const MAX_MARKS: usize = 1024;

/// An observer's number and news, as registered under a key.
type Observed = (u64, Arc<Signal>);

/// One resource's line of waiters in this client.
#[derive(Debug, Default)]
struct Line {
    /// Waiters in arrival order, each with its own wake-up; the front one
    /// contends.
    waiters: Mutex<VecDeque<(u64, Arc<Notify>)>>,
    /// News for the front waiter (shared with its notification reads).
    signal: Arc<Signal>,
}

/// Every resource this client is waiting for, by Redis key.
#[derive(Debug, Default)]
pub(crate) struct Queues {
    /// Lines by lock key; a line is removed when its last waiter leaves.
    lines: Mutex<HashMap<String, Arc<Line>>>,
    /// Other keys whose news goes to lines (a semaphore's slots, a
    /// multi-lock's other keys), while the lines exist: key -> the lines'
    /// keys. Kept under `lines`' lock.
    routes: Mutex<HashMap<String, Vec<String>>>,
    /// Observers (an election's watchers) by key: news only, no line.
    observers: Mutex<HashMap<String, Vec<Observed>>>,
    /// Keys whose release found others waiting, until when.
    contended: Mutex<HashMap<String, Instant>>,
    /// Numbers waiters.
    next: AtomicU64,
    /// Callers in some line: zero lets a release skip the lookup (the free
    /// path pays nothing for waiting it does not use).
    in_line: AtomicUsize,
    /// Marks ever set (they are pruned lazily): zero lets a release skip
    /// the lookup.
    marks: AtomicUsize,
}

impl Queues {
    /// Joins the line for `key`, at the back; news about any of `watched`
    /// reaches it too.
    pub(crate) fn join(&self, key: &str, watched: &[String]) -> Place<'_> {
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        self.in_line.fetch_add(1, Ordering::AcqRel);
        let wake = Arc::new(Notify::new());
        let mut lines = lock(&self.lines);
        let line = Arc::clone(lines.entry(key.to_owned()).or_default());
        let mut routes = lock(&self.routes);
        for other in watched.iter().filter(|w| *w != key) {
            let to = routes.entry(other.clone()).or_default();
            if !to.iter().any(|l| l == key) {
                to.push(key.to_owned());
            }
        }
        drop(routes);
        let had_company = {
            let mut waiters = lock(&line.waiters);
            waiters.push_back((number, Arc::clone(&wake)));
            waiters.len() > 1
        };
        Place {
            queues: self,
            key: key.to_owned(),
            line,
            number,
            wake,
            had_company,
        }
    }

    /// Passes what a node said to the waiters it concerns: a change of a
    /// key goes to the line of the key (or that routes it), a message to
    /// the line its channel routes to (the caller checked that it names
    /// one of ours), everything to every line and observer.
    pub(crate) fn invalidated(&self, node: usize, what: Heard<'_>) {
        let named = matches!(what, Heard::Message { .. });
        let lines = lock(&self.lines);
        let routes = lock(&self.routes);
        let some = each_name(&what, |name| {
            let k = std::str::from_utf8(name).unwrap_or_default();
            let routed = routes.get(k).into_iter().flatten();
            let own = lines.get(k).into_iter();
            for line in own.chain(routed.filter_map(|l| lines.get(l))) {
                match named {
                    true => line.signal.node_named(node),
                    false => line.signal.key_changed(node),
                }
            }
        });
        if !some {
            for line in lines.values() {
                line.signal.node_changed(node);
            }
        }
        drop(routes);
        drop(lines);
        let observers = lock(&self.observers);
        if observers.is_empty() {
            return;
        }
        let some = each_name(&what, |name| {
            let found = std::str::from_utf8(name)
                .ok()
                .and_then(|k| observers.get(k));
            for (_, signal) in found.into_iter().flatten() {
                signal.node_changed(node);
            }
        });
        if !some {
            for signal in observers.values().flatten() {
                signal.1.node_changed(node);
            }
        }
    }

    /// Registers an observer of `keys`: its signal hears every node's news
    /// about them, until the returned registration is dropped.
    pub(crate) fn observe(self: &Arc<Self>, keys: &[String]) -> Observation {
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        let signal = Arc::new(Signal::default());
        let mut observers = lock(&self.observers);
        for key in keys {
            let entry = observers.entry(key.clone()).or_default();
            entry.push((number, Arc::clone(&signal)));
        }
        Observation {
            queues: Arc::clone(self),
            keys: keys.to_vec(),
            number,
            signal,
        }
    }

    /// This client is releasing `key`: its front waiter may go now (its
    /// next request to every node is queued behind the release).
    pub(crate) fn released(&self, key: &str) {
        if self.in_line.load(Ordering::Acquire) == 0 {
            return;
        }
        if let Some(line) = lock(&self.lines).get(key) {
            line.signal.poke();
        }
    }

    /// A release of `key` found others waiting for it.
    pub(crate) fn mark_contended(&self, key: &str) {
        let now = Instant::now();
        let mut marks = lock(&self.contended);
        if marks.len() >= MAX_MARKS {
            marks.retain(|_, until| *until > now);
        }
        marks.insert(key.to_owned(), now + CONTENDED_FOR);
        self.marks.store(marks.len(), Ordering::Release);
    }

    /// Whether a recent release of `key` found others waiting.
    pub(crate) fn is_contended(&self, key: &str) -> bool {
        if self.marks.load(Ordering::Acquire) == 0 {
            return false;
        }
        lock(&self.contended)
            .get(key)
            .is_some_and(|until| Instant::now() < *until)
    }
}

/// Calls `f` with each key or channel `what` names; false when it names
/// everything (`Heard::All`), without calling `f`.
fn each_name(what: &Heard<'_>, mut f: impl FnMut(&[u8])) -> bool {
    match what {
        Heard::Keys(keys) => keys.iter().for_each(|k| f(k)),
        Heard::Message { channel, .. } => f(channel),
        Heard::All => return false,
    }
    true
}

/// An observer's registration (see [`Queues::observe`]); dropping it ends
/// it.
#[derive(Debug)]
pub(crate) struct Observation {
    /// The queues it is registered in.
    queues: Arc<Queues>,
    /// The keys observed.
    keys: Vec<String>,
    /// Its number, to find it again.
    number: u64,
    /// Its news.
    signal: Arc<Signal>,
}

impl Observation {
    /// The observer's news.
    pub(crate) fn signal(&self) -> &Arc<Signal> {
        &self.signal
    }
}

impl Drop for Observation {
    fn drop(&mut self) {
        let mut observers = lock(&self.queues.observers);
        for key in &self.keys {
            if let Some(list) = observers.get_mut(key) {
                list.retain(|(n, _)| *n != self.number);
                if list.is_empty() {
                    observers.remove(key);
                }
            }
        }
    }
}

/// A caller's place in a resource's line; leaving (drop) lets the next one
/// go.
#[derive(Debug)]
pub(crate) struct Place<'a> {
    /// The queues it belongs to.
    queues: &'a Queues,
    /// The lock key.
    key: String,
    /// The line.
    line: Arc<Line>,
    /// This waiter's number in the line.
    number: u64,
    /// Woken when this waiter reaches the front.
    wake: Arc<Notify>,
    /// Somebody of this client was ahead when it joined (so the resource is
    /// most likely held by us right now).
    had_company: bool,
}

impl Place<'_> {
    /// Waits until this caller is at the front of the line, or `deadline`
    /// passes (then `false`).
    pub(crate) async fn turn(&self, deadline: Instant) -> bool {
        loop {
            let woken = self.wake.notified();
            if lock(&self.line.waiters).front().map(|(n, _)| *n) == Some(self.number) {
                return true;
            }
            tokio::select! {
                () = woken => {}
                () = tokio::time::sleep_until(deadline) => return false,
            }
        }
    }

    /// Whether someone of this client was ahead of this caller when it
    /// joined.
    pub(crate) fn had_company(&self) -> bool {
        self.had_company
    }

    /// The front waiter's news.
    pub(crate) fn signal(&self) -> &Arc<Signal> {
        &self.line.signal
    }

    /// Goes to the back of the line, waking the caller that is now at the
    /// front (a caller that gave its place on the nodes up goes behind this
    /// client's other callers here too, who may be listed there ahead of
    /// it).
    pub(crate) fn to_back(&self) {
        let mut waiters = lock(&self.line.waiters);
        if let Some(me) = waiters
            .iter()
            .position(|(n, _)| *n == self.number)
            .and_then(|at| waiters.remove(at))
        {
            waiters.push_back(me);
        }
        if let Some((n, next)) = waiters.front() {
            if *n != self.number {
                next.notify_one();
            }
        }
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.queues.in_line.fetch_sub(1, Ordering::AcqRel);
        let mut lines = lock(&self.queues.lines);
        let mut waiters = lock(&self.line.waiters);
        let was_front = waiters.front().map(|(n, _)| *n) == Some(self.number);
        waiters.retain(|(n, _)| *n != self.number);
        if was_front {
            if let Some((_, next)) = waiters.front() {
                next.notify_one();
            }
        }
        if waiters.is_empty() {
            drop(waiters);
            if lines
                .get(&self.key)
                .is_some_and(|l| Arc::ptr_eq(l, &self.line))
            {
                lines.remove(&self.key);
                lock(&self.queues.routes).retain(|_, to| {
                    to.retain(|line| *line != self.key);
                    !to.is_empty()
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quorum::tally::node_bit;
    use crate::wait::signal::Keys;

    #[tokio::test]
    async fn line_is_first_come_first_served() {
        let q = Queues::default();
        let a = q.join("k", &[]);
        let b = q.join("k", &[]);
        assert!(!a.had_company() && b.had_company());
        let soon = Instant::now() + Duration::from_millis(20);
        assert!(a.turn(soon).await);
        assert!(!b.turn(soon).await, "b is behind a");
        drop(a);
        assert!(b.turn(Instant::now() + Duration::from_secs(5)).await);
        drop(b);
        assert!(lock(&q.lines).is_empty(), "empty lines are removed");
    }

    #[tokio::test]
    async fn a_caller_sent_to_the_back_lets_the_next_go_first() {
        let q = Queues::default();
        let (a, b) = (q.join("k", &[]), q.join("k", &[]));
        let soon = || Instant::now() + Duration::from_millis(20);
        assert!(a.turn(soon()).await);
        a.to_back();
        assert!(b.turn(soon()).await, "b is at the front now");
        assert!(!a.turn(soon()).await, "a is behind b");
        drop(b);
        assert!(a.turn(soon()).await);
        a.to_back();
        assert!(a.turn(soon()).await, "alone, a stays at the front");
    }

    #[tokio::test]
    async fn key_changes_are_news_in_the_rounds_that_hear_keys() {
        let q = Queues::default();
        let a = q.join("line", &["slot".to_owned()]);
        let slot = [b"slot".to_vec()];
        let signal = a.signal();
        let changed = |round: Keys| {
            signal.reset();
            signal.keys_heard(round);
            q.invalidated(1, Heard::Keys(&slot));
            signal.dirty() != 0
        };
        assert!(changed(Keys::Always), "a lock's key: always news");
        assert!(!changed(Keys::Never), "a channel names the waiters");
        let round = signal.round() + 1;
        assert!(changed(Keys::Round(round)), "the round that read the slots");
        signal.reset();
        q.invalidated(1, Heard::Keys(&slot));
        assert_eq!(signal.dirty(), 0, "a later round's: not news");
        q.invalidated(1, Heard::All);
        assert_ne!(signal.dirty(), 0, "a lost connection always is");
    }

    #[tokio::test]
    async fn news_reaches_the_line_of_the_key() {
        let q = Queues::default();
        let a = q.join("k", &[]);
        let other = q.join("other", &[]);
        q.invalidated(3, Heard::Keys(&[b"k".to_vec()]));
        assert_eq!(a.signal().dirty(), node_bit(3));
        assert_eq!(other.signal().dirty(), 0);
        a.signal().news().await; // a permit was stored
        q.released("k");
        assert!(a.signal().poked());
        let round = a.signal().reset();
        assert!(!a.signal().poked() && a.signal().dirty() == 0);
        a.signal().armed(round - 1, 2, -2);
        assert_eq!(a.signal().armed_free(), 0, "a read of an earlier round");
        a.signal().armed(round, 2, 5000);
        assert_eq!(a.signal().armed_free(), 0, "the key is there");
        a.signal().armed(round, 2, -2);
        assert_eq!(a.signal().armed_free(), node_bit(2));
        q.invalidated(1, Heard::All);
        assert_eq!(other.signal().dirty(), node_bit(1));
    }

    #[tokio::test]
    async fn news_of_a_watched_key_reaches_its_line_while_it_exists() {
        let q = Queues::default();
        let slots = ["s:0".to_owned(), "s:1".to_owned()];
        let a = q.join("s", &slots);
        q.invalidated(2, Heard::Keys(&[b"s:1".to_vec()]));
        assert_eq!(a.signal().dirty(), node_bit(2));
        drop(a);
        assert!(lock(&q.routes).is_empty(), "routes leave with the line");
    }

    #[tokio::test]
    async fn news_of_a_key_reaches_every_line_that_watches_it() {
        let q = Queues::default();
        let (ab, bc) = (
            ["a".to_owned(), "b".to_owned()],
            ["b".to_owned(), "c".to_owned()],
        );
        let first = q.join("a", &ab);
        let second = q.join("b", &bc);
        let third = q.join("c", &["c".to_owned(), "b".to_owned()]);
        q.invalidated(1, Heard::Keys(&[b"b".to_vec()]));
        for place in [&first, &second, &third] {
            assert_eq!(place.signal().dirty(), node_bit(1));
        }
        drop(third);
        assert_eq!(lock(&q.routes).get("b"), Some(&vec!["a".to_owned()]));
        drop(first);
        assert_eq!(lock(&q.routes).get("c"), Some(&vec!["b".to_owned()]));
        drop(second);
        assert!(lock(&q.routes).is_empty(), "routes leave with their lines");
    }

    #[tokio::test]
    async fn observers_hear_news_of_their_keys_until_dropped() {
        let q = Arc::new(Queues::default());
        let keys = ["e".to_owned(), "r".to_owned()];
        let o = q.observe(&keys);
        q.invalidated(1, Heard::Keys(&[b"r".to_vec()]));
        assert_eq!(o.signal().dirty(), node_bit(1));
        o.signal().news().await;
        drop(o);
        assert!(lock(&q.observers).is_empty());
    }

    #[test]
    fn contended_marks_expire() {
        let q = Queues::default();
        assert!(!q.is_contended("k"));
        q.mark_contended("k");
        assert!(q.is_contended("k"));
    }
}
