//! Reading a lock's state without taking it: who holds it on how many
//! nodes, for how long at least, when it could be taken, and how many wait
//! ([`Redlock::inspect`]; a semaphore's permits in `semaphore/mod.rs`).
//!
//! One read-only script per node ([`INSPECT`](crate::lock::scripts::INSPECT))
//! reads the keys' values and TTLs and counts the live waiters; the
//! client puts the nodes' answers together as a taker would count them:
//! a value on a quorum of nodes is a holder, and it keeps that quorum
//! until the quorum-th longest of its TTLs runs out (unless renewed).
//! Nothing here is a vote: a holder read here may have released since,
//! and a lock read as free may be taken a moment later.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::Value;
use tokio::time::Instant;

use crate::client::redlock::Redlock;
use crate::error::Result;
use crate::keys::{self, Kind};
use crate::lock::scripts;
use crate::mutex;
use crate::node::connection::request::Request;
use crate::quorum::fanout::Fanout;
use crate::quorum::tally::Tally;
use crate::quorum::Counts;
use crate::wait::list::WaitKeys;

/// A lock's state on the nodes, as [`Redlock::inspect`] read it (for a
/// semaphore, one permit's: [`Semaphore::inspect`](crate::Semaphore::inspect)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockState {
    /// The holder a quorum of nodes agree on, if any.
    pub holder: Option<Holder>,
    /// On how many nodes the key is set, by the holder or anyone else (an
    /// attempt that lost, a holder that lost its quorum): above zero with
    /// no holder, the lock is still not free there.
    pub held_on: usize,
    /// How many nodes answered (at least a quorum, or the read fails).
    pub answered: usize,
    /// How long until a quorum of the nodes that answered hold no key, if
    /// nobody renews or takes it meanwhile: zero when it could be taken
    /// now; `None` when a key set without a TTL keeps it from ever
    /// freeing by itself.
    pub free_in: Option<Duration>,
    /// How many waiters (of every client) are lined up for it: the most
    /// any node lists whose lease has not ended.
    pub waiting: usize,
}

/// Who holds a lock, as the nodes tell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// The lock's value on a quorum of nodes: 128 random bits in hex, or
    /// what the holder's [`value_generator`](crate::RedlockBuilder::value_generator)
    /// made (the CLI's start with `host:pid/`).
    pub value: String,
    /// How long at least a quorum of nodes still hold it, counted from
    /// when the read began, unless renewed; `None` when a quorum holds it
    /// with no TTL.
    pub time_left: Option<Duration>,
}

impl Holder {
    /// The part of the value before its random part, when the value is
    /// `label/` followed by 32 hex digits (as the CLI writes it): who
    /// holds the lock, in the holder's words.
    pub fn label(&self) -> Option<&str> {
        let (label, random) = self.value.rsplit_once('/')?;
        let random_part = random.len() == 32 && random.bytes().all(|b| b.is_ascii_hexdigit());
        (random_part && !label.is_empty()).then_some(label)
    }

    /// Whether this is the mark the readers of the name's read-write lock
    /// keep on its key while they read ([`Redlock::rw_lock`]): readers
    /// hold the name, not one holder ([`RwLock::inspect`] names them).
    ///
    /// [`Redlock::rw_lock`]: crate::Redlock::rw_lock
    /// [`RwLock::inspect`]: crate::RwLock::inspect
    pub fn is_readers_mark(&self) -> bool {
        self.value == crate::keys::readers_mark!()
    }

    /// Whether this is the mark the permits of the name's semaphore keep
    /// on its key while they are held ([`Redlock::semaphore`]): permits
    /// hold the name, not one holder ([`Semaphore::inspect`] names them).
    ///
    /// [`Redlock::semaphore`]: crate::Redlock::semaphore
    /// [`Semaphore::inspect`]: crate::Semaphore::inspect
    pub fn is_permits_mark(&self) -> bool {
        self.value == crate::keys::permits_mark!()
    }
}

/// What one node said of one key: its value (empty: not set) and PTTL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KeyView {
    /// The value; empty when the key is not set.
    value: String,
    /// Its PTTL in ms; -1 for a key without a TTL.
    pttl: i64,
}

impl KeyView {
    /// A key with `value` (empty: not set) and `pttl`.
    pub(crate) fn new(value: String, pttl: i64) -> Self {
        Self { value, pttl }
    }
}

/// What one node said: its live waiters and each key's view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NodeView {
    /// Waiters whose lease has not ended.
    waiting: usize,
    /// One per key, in the order asked.
    keys: Vec<KeyView>,
}

impl Redlock {
    /// Reads `resource`'s lock on every node without taking it: the holder
    /// a quorum agree on and how long it keeps it at least, on how many
    /// nodes the key is set, when it could be taken, and how many wait.
    /// A snapshot: the holder may renew, release or lose it a moment later.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) for an empty or reserved name (before
    /// any node is asked), [`Error::NoQuorum`](crate::Error::NoQuorum) when fewer than a quorum of
    /// nodes answered.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(redlock: redquorum::Redlock) -> redquorum::Result<()> {
    /// let state = redlock.inspect("nightly-report").await?;
    /// match &state.holder {
    ///     Some(h) => println!("held by {}, {:?} left", h.label().unwrap_or(&h.value), h.time_left),
    ///     None => println!("free in {:?}", state.free_in),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self, resource: &str) -> Result<LockState> {
        self.check_resource(resource, Duration::from_secs(1))?;
        let key = self.key_for(resource);
        let mut states = self
            .inspect_keys(resource, &key, std::slice::from_ref(&key))
            .await?;
        Ok(states.remove(0))
    }

    /// The number of permits the semaphore `name` has on the nodes (pinned
    /// by its first acquisition): what most nodes that answered hold;
    /// `None` where none holds one (no semaphore of that name was taken).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) for an empty or
    /// reserved name, [`Error::NoQuorum`](crate::Error::NoQuorum) when fewer
    /// than a quorum of nodes answered.
    pub async fn semaphore_permits(&self, name: &str) -> Result<Option<usize>> {
        self.check_resource(name, Duration::from_secs(1))?;
        let prefix = &self.config().key_prefix;
        let line = keys::internal(prefix, Kind::Semaphore, &self.key_for(name));
        let pin = keys::internal(prefix, Kind::SemaphorePin, &line);
        let req = Request::plain(redis::cmd("GET").arg(&pin).to_owned());
        let read = |v: &Value| {
            let held: Option<String> = redis::from_redis_value_ref(v).ok()?;
            Some(held.and_then(|k| k.parse::<usize>().ok()))
        };
        let counts: Vec<usize> = self
            .read_every_node(&req, name, read)
            .await?
            .into_iter()
            .flatten()
            .collect();
        let most = |k: &usize| counts.iter().filter(|v| *v == k).count();
        Ok(counts.iter().max_by_key(|k| most(k)).copied())
    }

    /// Sends `req` (a read) to every node and waits for each to answer or
    /// fail: what `read` made of each answer (a reply it cannot read counts
    /// as no answer), in the nodes' order. `name` is what an error names.
    ///
    /// # Errors
    ///
    /// [`Error::NoQuorum`](crate::Error::NoQuorum) when fewer than a quorum
    /// of nodes answered.
    pub(crate) async fn read_every_node<V: Send>(
        &self,
        req: &Arc<Request>,
        name: &str,
        read: impl Fn(&Value) -> Option<V> + Sync,
    ) -> Result<Vec<V>> {
        let views: Mutex<Vec<Option<V>>> =
            Mutex::new((0..self.node_count()).map(|_| None).collect());
        let classify = |i: usize, v: &Value| {
            let view = read(v)?;
            mutex::lock(&views)[i] = Some(view);
            Some(true)
        };
        let done = |t: &Tally, _: &Fanout<'_>| t.heard() >= t.asked;
        let (tally, _) = self
            .nodes()
            .vote_until(req, "inspect", Counts::All, classify, done)
            .await;
        if tally.yes_count() < self.quorum() {
            return Err(tally.into_no_quorum(name));
        }
        Ok(mutex::into_inner(views).into_iter().flatten().collect())
    }

    /// Reads `keys` (lock keys of one hash slot, whose waiters line up on
    /// `line`) on every node, and puts the answers together: one state per
    /// key. `name` is what an error names.
    pub(crate) async fn inspect_keys(
        &self,
        name: &str,
        line: &str,
        keys: &[String],
    ) -> Result<Vec<LockState>> {
        let waiters = WaitKeys::of(&self.config().key_prefix, line);
        let mut named = Vec::with_capacity(keys.len() + 1);
        named.push(waiters.leases.as_str());
        named.extend(keys.iter().map(String::as_str));
        let req = Request::script_any(&scripts::INSPECT, &named, |_| {});
        let started = Instant::now();
        let views = self
            .read_every_node(&req, name, |v| read_view(v, keys.len()))
            .await?;
        let waiting = views.iter().map(|v| v.waiting).max().unwrap_or(0);
        let elapsed = started.elapsed();
        Ok((0..keys.len())
            .map(|k| {
                let of_key: Vec<&KeyView> = views.iter().map(|v| &v.keys[k]).collect();
                let mut state = combine(&of_key, self.quorum(), elapsed);
                state.waiting = waiting;
                state
            })
            .collect())
    }
}

/// A node's `INSPECT` reply for `keys` keys: {waiting, value, pttl, ...}.
fn read_view(v: &Value, keys: usize) -> Option<NodeView> {
    let Value::Array(items) = v else { return None };
    let (first, rest) = items.split_first()?;
    let Value::Int(waiting) = first else {
        return None;
    };
    if rest.len() != 2 * keys {
        return None;
    }
    let keys = rest
        .chunks(2)
        .map(|pair| {
            let value = match &pair[0] {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                Value::SimpleString(s) => s.clone(),
                _ => return None,
            };
            let Value::Int(pttl) = pair[1] else {
                return None;
            };
            Some(KeyView { value, pttl })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(NodeView {
        waiting: usize::try_from(*waiting).ok()?,
        keys,
    })
}

/// The `quorum`-th smallest of `times` (ms; `None`: never), if there are
/// that many.
pub(crate) fn nth_smallest(mut times: Vec<Option<u64>>, quorum: usize) -> Option<Option<u64>> {
    // `None` (never) sorts after every time.
    times.sort_by_key(|t| t.map_or((1, 0), |ms| (0, ms)));
    times.get(quorum.checked_sub(1)?).copied()
}

/// One key's state from the views of the nodes that answered; `elapsed`
/// is how long the read took (taken off the holder's time left, so that it
/// is a lower bound).
pub(crate) fn combine(views: &[&KeyView], quorum: usize, elapsed: Duration) -> LockState {
    let left = |v: &KeyView| u64::try_from(v.pttl).ok();
    let set: Vec<&&KeyView> = views.iter().filter(|v| !v.value.is_empty()).collect();
    let holder = set
        .iter()
        .find(|v| set.iter().filter(|w| w.value == v.value).count() >= quorum)
        .map(|v| {
            // The quorum-th longest of its TTLs: its nodes, longest first.
            let mut times: Vec<Option<u64>> = set
                .iter()
                .filter(|w| w.value == v.value)
                .map(|w| left(w))
                .collect();
            times.sort_by_key(|t| std::cmp::Reverse(t.map_or((1, 0), |ms| (0, ms))));
            let time_left =
                times[quorum - 1].map(|ms| Duration::from_millis(ms).saturating_sub(elapsed));
            Holder {
                value: v.value.clone(),
                time_left,
            }
        });
    // A node is free now (0) or once its key's TTL runs out (never without one).
    let frees: Vec<Option<u64>> = views
        .iter()
        .map(|v| if v.value.is_empty() { Some(0) } else { left(v) })
        .collect();
    LockState {
        holder,
        held_on: set.len(),
        answered: views.len(),
        free_in: nth_smallest(frees, quorum)
            .flatten()
            .map(Duration::from_millis),
        waiting: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(value: &str, pttl: i64) -> KeyView {
        KeyView {
            value: value.into(),
            pttl,
        }
    }

    #[test]
    fn a_holder_is_a_value_on_a_quorum_and_keeps_it_until_its_quorum_th_ttl() {
        let (a, b, free) = (key("a", 9_000), key("b", 4_000), key("", -2));
        let short_a = key("a", 2_000);
        let views = [&a, &a, &short_a, &b, &free];
        let s = combine(&views, 3, Duration::from_millis(10));
        let holder = s.holder.expect("a holds three of five");
        assert_eq!(holder.value, "a");
        assert_eq!(holder.time_left, Some(Duration::from_millis(1_990)));
        assert_eq!(s.held_on, 4);
        // Free on one node now, on b's at 4 s, on the short a's at 2 s.
        assert_eq!(s.free_in, Some(Duration::from_secs(4)));

        let split = [&a, &b, &free];
        let s = combine(&split, 2, Duration::ZERO);
        assert_eq!(s.holder, None, "no value on a quorum");
        assert_eq!(s.free_in, Some(Duration::from_secs(4)));
        let s = combine(&[&free, &free, &a], 2, Duration::ZERO);
        assert_eq!((s.free_in, s.held_on), (Some(Duration::ZERO), 1));
    }

    #[test]
    fn a_key_without_ttl_never_frees_by_itself() {
        let forever = key("x", -1);
        let s = combine(&[&forever, &forever, &key("", -2)], 2, Duration::ZERO);
        assert_eq!(s.free_in, None);
        assert_eq!(s.holder.map(|h| h.time_left), Some(None));
    }

    #[test]
    fn the_label_is_what_precedes_the_random_part() {
        let holder = |v: &str| Holder {
            value: v.into(),
            time_left: None,
        };
        let random = "0123456789abcdef0123456789abcdef";
        assert_eq!(
            holder(&format!("host-a:42/{random}")).label(),
            Some("host-a:42")
        );
        assert_eq!(holder(random).label(), None);
        assert_eq!(holder("a/b").label(), None);
    }

    #[test]
    fn replies_of_another_shape_are_refused() {
        let ok = Value::Array(vec![
            Value::Int(2),
            Value::BulkString(b"v".to_vec()),
            Value::Int(500),
        ]);
        assert_eq!(
            read_view(&ok, 1),
            Some(NodeView {
                waiting: 2,
                keys: vec![key("v", 500)]
            })
        );
        assert_eq!(read_view(&ok, 2), None);
        assert_eq!(read_view(&Value::Int(1), 1), None);
    }
}
