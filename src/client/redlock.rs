//! [`Redlock`], the client handle, and the lock rounds that acquiring and
//! holding a lock share: the key, release, and the error that explains a
//! lost vote.
//!
//! The lock itself is the Redlock algorithm: a key set with `SET key value
//! NX PX ttl` on a quorum of independent nodes, owned by whoever knows its
//! random value, and valid for `ttl - elapsed - drift` after the attempt
//! started (see [`validity`]). Acquiring is in `acquire.rs` (the waiting
//! loop in `waiting.rs`), holding (extend, release, auto-extend) in
//! `guard.rs`.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use tokio::time::Instant;

use crate::client::config::Config;
use crate::counter::batch::Batches;
use crate::counter::CounterKeys;
use crate::error::{Error, Result};
use crate::keys::{self, Kind};
use crate::lock::held::Held;
use crate::lock::scripts;
use crate::node::connection::request::Request;
use crate::quorum::tally::{NodeSet, Tally};
use crate::quorum::{Counts, Quorum};
use crate::telemetry::stats::Stats;
use crate::wait::{WaitKeys, Waiting};

/// A client for a set of independent Redis nodes that locks by majority.
///
/// Cheap to clone (an `Arc` inside) and `Send + Sync`: make one per process
/// and share it.
///
/// # Examples
///
/// ```no_run
/// # async fn f() -> redquorum::Result<()> {
/// use std::time::Duration;
/// let redlock = redquorum::Redlock::builder()
///     .nodes(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])
///     .build()?;
/// let lock = redlock.lock("orders", Duration::from_secs(10)).await?;
/// // ... exclusive work, within lock.validity() ...
/// lock.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Redlock {
    /// Shared state; clones of a `Redlock` are handles to the same nodes.
    pub(crate) inner: Arc<Inner>,
}

/// Where a holder waiting for a fencing token gets it (see `mint.rs`).
pub(crate) type MintWaiter = tokio::sync::oneshot::Sender<Result<u64>>;

/// What all clones of one [`Redlock`] share.
#[derive(Debug)]
pub(crate) struct Inner {
    /// The nodes and the rounds still finishing in the background.
    pub(crate) quorum: Quorum,
    /// Checked configuration.
    pub(crate) config: Config,
    /// This client's waiters and notification connections.
    pub(crate) waiting: Waiting,
    /// Fencing counters' group-commit queues and what this client knows of
    /// each counter.
    pub(crate) mints: Batches<MintWaiter>,
}

impl Redlock {
    /// Made by the builder after validation.
    pub(crate) fn from_parts(quorum: Quorum, config: Config, waiting: Waiting) -> Self {
        Self {
            inner: Arc::new(Inner {
                quorum,
                config,
                waiting,
                mints: Batches::default(),
            }),
        }
    }

    /// How this client waits for held locks.
    pub(crate) fn waiting(&self) -> &Waiting {
        &self.inner.waiting
    }

    /// The node set, for the rounds built on it.
    pub(crate) fn nodes(&self) -> &Quorum {
        &self.inner.quorum
    }

    /// The checked settings.
    pub(crate) fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The drift allowance for `ttl` on keys the nodes in `held` hold: the
    /// configured factor, or the fastest of their clocks' measured rates
    /// beyond ours where that is more (`node/clock/clockrate.rs`), plus 2 ms.
    pub(crate) fn drift_on(&self, ttl: Duration, held: NodeSet) -> Duration {
        self.config().drift_at(ttl, self.nodes().rate_excess(held))
    }

    /// What this client (every clone of it) did since it was built, and
    /// where it stands: acquisitions by outcome, waits by what woke them,
    /// extensions, releases, losses, what is held now, counter allocations,
    /// and each node's requests and errors. Cheap; needs no feature.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(redlock: redquorum::Redlock) {
    /// let stats = redlock.stats();
    /// println!("{} acquired, {} lost, {} of {} nodes up",
    ///     stats.acquired, stats.lost, stats.nodes_up, stats.nodes.len());
    /// # }
    /// ```
    pub fn stats(&self) -> Stats {
        let quorum = &self.inner.quorum;
        let mut stats = quorum.telemetry.counters.snapshot();
        let now = std::time::Instant::now();
        for (node, s) in quorum.nodes.iter().zip(stats.nodes.iter_mut()) {
            s.addr = node.addr.clone();
            s.up = node.is_healthy();
            s.quarantined = node.quarantined(now).is_some();
            (s.clock_ahead, s.clock_behind) = node.clock_jumps();
            s.clock_rate_ppm = node.clock_rate().map(|r| ((r - 1.0) * 1e6).ceil() as i64);
            s.clock_offset_us = node.clock_offset_us();
            s.notifications = self.inner.waiting.notifying(node.index);
        }
        stats.nodes_up = stats.nodes.iter().filter(|n| n.up).count();
        stats.notification_connections = stats.nodes.iter().filter(|n| n.notifications).count();
        stats
    }

    /// Number of configured nodes.
    pub fn node_count(&self) -> usize {
        self.inner.quorum.nodes.len()
    }

    /// Number of nodes that must agree: `nodes / 2 + 1`.
    pub fn quorum(&self) -> usize {
        self.inner.quorum.needed()
    }

    /// The shortest TTL that still leaves validity after an acquisition
    /// round that takes the whole node timeout: below it, an attempt on
    /// nodes that answer slowly but in time is never valid (validity is
    /// `ttl - elapsed - drift`, the drift `ttl * drift_factor + 2 ms`).
    /// Attempts with shorter TTLs are not refused (fast nodes answer far
    /// sooner than their timeout), but a holder that must keep its lock,
    /// such as a command run under it, wants more: the CLI refuses less.
    pub fn shortest_ttl(&self) -> Duration {
        let config = &self.inner.config;
        let fixed = self.inner.quorum.node_timeout + config.drift(Duration::ZERO);
        fixed.div_f64((1.0 - config.drift_factor).max(f64::EPSILON))
    }

    /// The `host:port` of every node, in configured order.
    pub fn node_addrs(&self) -> impl Iterator<Item = &str> {
        self.inner.quorum.nodes.iter().map(|n| n.addr.as_str())
    }

    /// The Redis key used for `resource` (prefix + resource).
    pub fn key_for(&self, resource: &str) -> String {
        format!("{}{}", self.inner.config.key_prefix, resource)
    }

    /// The keys of the fencing counter for `resource` (the shared one, if
    /// configured): ours, and where versions before the reserved namespace
    /// kept it (read once, when ours does not exist yet).
    pub(crate) fn fence_keys(&self, resource: &str) -> CounterKeys {
        let name = self.config().fencing_counter.as_deref().unwrap_or(resource);
        CounterKeys {
            name: name.to_owned(),
            ..self.counter_keys(Kind::Fence, &format!("fence:{name}"))
        }
    }

    /// The keys of a counter of `kind` (serial numbers or fencing tokens)
    /// whose keys were named `name` before the reserved namespace (see
    /// [`CounterKeys`]).
    pub(crate) fn counter_keys(&self, kind: Kind, name: &str) -> CounterKeys {
        let legacy = self.key_for(name);
        let prefix = &self.config().key_prefix;
        let turns = match kind {
            Kind::Serial => Kind::SerialLock,
            _ => Kind::FenceLock,
        };
        CounterKeys {
            name: name.to_owned(),
            key: keys::internal(prefix, kind, &legacy),
            turns: keys::internal(prefix, turns, &legacy),
            legacy,
        }
    }

    /// The keys of the fencing counter named `name` that a semaphore or an
    /// election keeps beside its key `anchor` (it never had a legacy key).
    pub(crate) fn fence_keys_at(&self, name: &str, anchor: &str) -> CounterKeys {
        let prefix = &self.config().key_prefix;
        let key = keys::internal(prefix, Kind::Fence, anchor);
        CounterKeys {
            name: name.to_owned(),
            legacy: key.clone(),
            key,
            turns: keys::internal(prefix, Kind::FenceLock, anchor),
        }
    }

    /// Waits until requests this client left to finish in the background
    /// (releases and extensions still on their way to slow nodes) are done;
    /// each is bounded by the node timeout. Call it before a short-lived
    /// program exits, so no key is left to expire by TTL.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(redlock: redquorum::Redlock) -> redquorum::Result<()> {
    /// redlock.lock("job", std::time::Duration::from_secs(5)).await?.release().await?;
    /// redlock.settle().await;
    /// # Ok(()) }
    /// ```
    pub async fn settle(&self) {
        self.inner.quorum.settled().await;
    }

    /// Validates a resource name a caller gave (not empty, not in our
    /// reserved namespace) and a TTL; returns the TTL in milliseconds.
    pub(crate) fn check_resource(&self, resource: &str, ttl: Duration) -> Result<u64> {
        if resource.is_empty() {
            return Err(Error::InvalidConfig("resource name is empty".into()));
        }
        keys::check_resource(resource)?;
        self.inner.config.check_ttl(ttl)
    }

    /// Maps a lost vote to the error that explains it: the resource is held
    /// by someone else only when the refusals alone rule a quorum out;
    /// anything else is an outage that names the failed nodes (and says how
    /// many refused, when some did).
    pub(crate) fn failure(&self, resource: &str, key: &str, tally: Tally) -> Error {
        if tally.refusals_prevent_quorum() {
            Error::Contended {
                resource: resource.to_owned(),
            }
        } else {
            tally.into_error(resource, key)
        }
    }

    /// The error for a lost compare-and-X vote: too many nodes failed, or the
    /// nodes no longer hold our value.
    pub(crate) fn failure_or_expired(&self, resource: &str, key: &str, tally: Tally) -> Error {
        if tally.failures_prevent_quorum() {
            tally.into_error(resource, key)
        } else {
            Error::Expired {
                resource: resource.to_owned(),
            }
        }
    }

    /// Compare-and-delete on all nodes, until decided.
    ///
    /// This client's next waiter for the key goes as soon as the release is
    /// handed to every node (its attempt is queued behind it there). Where
    /// this client saw contention on the key (`contended`: the lock was
    /// taken after waiting; or a recent release found others waiting), or in
    /// strict-FIFO mode, the release also asks whether others wait; if so,
    /// this client's next `lock()` on the key queues behind them instead of
    /// racing them.
    /// `line` is the key the lock's waiters line up on (the lock key, or a
    /// semaphore's); a lock standing on more than its key (`held`: a
    /// multi-lock's keys, a reader's lease, a permit's slot) is released by
    /// what that says.
    pub(crate) async fn release_round(
        &self,
        (key, value): (&str, &str),
        contended: bool,
        line: &str,
        held: Option<&dyn Held>,
    ) -> Tally {
        let queues = &self.waiting().queues;
        let ask = || contended || self.config().strict_fifo || queues.is_contended(line);
        let req = match held {
            Some(held) => held.release_request(value, ask()),
            None if ask() => telling_release_request(&self.config().key_prefix, key, value, line),
            None => release_request(key, value),
        };
        let nodes = self.nodes();
        let fan = nodes.fanout(&req, nodes.all());
        queues.released(line);
        let mut others_wait = false;
        let classify = |_: usize, v: &Value| match v {
            Value::Int(2) => {
                others_wait = true;
                Some(true)
            }
            v => int_vote(0, v),
        };
        let (tally, stragglers) = nodes
            .count(fan, "release", Counts::All, classify, |t, _| {
                t.decided().is_some()
            })
            .await;
        stragglers.finish_in_background();
        if others_wait {
            queues.mark_contended(line);
        }
        tally
    }

    /// Compare-and-delete on `targets`, without waiting for replies (see
    /// [`Quorum::send_quietly`]).
    pub(crate) fn release_quietly(&self, key: &str, value: &str, targets: NodeSet) {
        self.nodes()
            .send_quietly(&release_request(key, value), targets);
    }
}

/// The compare-and-delete request.
fn release_request(key: &str, value: &str) -> Arc<Request> {
    Request::script(&scripts::RELEASE, [key], |cmd| {
        cmd.arg(value);
    })
}

/// Compare-and-delete that also says whether others wait in `line`'s list.
fn telling_release_request(prefix: &str, key: &str, value: &str, line: &str) -> Arc<Request> {
    let waiters = WaitKeys::of(prefix, line);
    let keys = [key, &waiters.queue, &waiters.leases];
    Request::script(&scripts::RELEASE_TELLING_WAITERS, keys, |cmd| {
        cmd.arg(value);
    })
}

/// Classifies a script's integer reply: 1 = done, 0 = not ours (node
/// index unused).
pub(crate) fn int_vote(_: usize, v: &Value) -> Option<bool> {
    match v {
        Value::Int(1) => Some(true),
        Value::Int(0) => Some(false),
        _ => None,
    }
}

/// `ttl - elapsed - drift`, or `None` when nothing is left: how much longer
/// a lock is ours when the round that took (or extended) it decided,
/// `elapsed` after it started.
///
/// Why each term: every node set the key's TTL after the round started, so
/// from the decision it has at least `ttl` minus what already `elapsed`
/// left; and a node's clock may run faster than ours, by up to the drift
/// allowance. Never underflows.
pub(crate) fn validity(ttl: Duration, elapsed: Duration, drift: Duration) -> Option<Duration> {
    ttl.checked_sub(elapsed)
        .and_then(|d| d.checked_sub(drift))
        .filter(|d| !d.is_zero())
}

/// Until when a lock is ours, for a round that started at `start` and
/// decided at `decided`: [`validity`] counted from the decision, which is
/// `start + ttl - drift`. `None` if no time is left.
pub(crate) fn valid_until(
    start: Instant,
    decided: Instant,
    ttl: Duration,
    drift: Duration,
) -> Option<Instant> {
    validity(ttl, decided.saturating_duration_since(start), drift).map(|v| decided + v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validity_math() {
        let ms = Duration::from_millis;
        assert_eq!(validity(ms(1000), ms(100), ms(12)), Some(ms(888)));
        // No underflow panic on tiny TTLs or long rounds.
        assert_eq!(validity(ms(3), ms(5), ms(2)), None);
        assert_eq!(validity(ms(10), ms(8), ms(2)), None);
        assert_eq!(validity(ms(10), ms(0), ms(20)), None);
    }

    #[test]
    fn a_lock_is_ours_until_ttl_minus_drift_after_the_start() {
        let ms = Duration::from_millis;
        let start = Instant::now();
        // A slow round (half the TTL) still leaves ttl - drift from its
        // start, not ttl - drift - 2 x elapsed.
        assert_eq!(
            valid_until(start, start + ms(500), ms(1000), ms(12)),
            Some(start + ms(988))
        );
        assert_eq!(valid_until(start, start + ms(995), ms(1000), ms(12)), None);
    }

    #[test]
    fn redlock_is_clone_send_sync() {
        fn assert_traits<T: Clone + Send + Sync + 'static>() {}
        assert_traits::<Redlock>();
    }
}
