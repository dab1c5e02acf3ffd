//! The lock's settings and the defaults they start from.
//!
//! Every default is a `DEFAULT_*` constant so it can be read in the docs and
//! referred to in code; each one says why it has the value it has. The
//! builder (`builder.rs`) fills a [`Config`]; the checks that depend only on
//! it (TTL limits, the drift allowance) live here.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};

/// How long [`Redlock::lock`](crate::Redlock::lock) waits, in retries of the
/// average pause: `retry_count × (retry_delay + retry_jitter / 2)`, about 2 s
/// with the defaults, in line with redsync and node-redlock (how often it
/// actually tries depends on what it hears from the nodes). Zero means one
/// attempt.
pub const DEFAULT_RETRY_COUNT: u32 = 20;

/// Fixed part of the pause after an attempt that failed for want of nodes
/// (nothing then says when to try again). Long enough for a restarting node
/// to come back, short enough not to idle.
pub const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(50);

/// Random extra pause (uniform in `0..=jitter`) after such an attempt, so
/// that contenders that failed together do not retry together.
pub const DEFAULT_RETRY_JITTER: Duration = Duration::from_millis(100);

/// Clock drift allowance as a fraction of the TTL (plus 2 ms), from the Redlock
/// description: nodes' clocks may run up to 1 % faster than ours.
pub const DEFAULT_DRIFT_FACTOR: f64 = 0.01;

/// How long one node may take to answer one request. Far below any sensible TTL
/// (the algorithm requires that), and far above a healthy round trip (tens of
/// microseconds on loopback, a few milliseconds across a data centre). A hung
/// node costs nothing while a quorum answers faster; it only bounds how long
/// we wait when it is needed for the decision.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(100);

/// Auto-extension renews the lock after this fraction of its TTL has passed;
/// a renewal that fails is tried again while validity is left (after an
/// eighth of what is left, each try bounded by the node timeout), so a
/// minority of nodes, or a majority for a moment, failing costs nothing.
pub const DEFAULT_AUTO_EXTEND_FRACTION: f64 = 1.0 / 3.0;

/// Longest a waiter sleeps between attempts while the lock is held and no
/// news comes. With notifications on, news (a release by anyone, the key's
/// expiry by the nodes' TTLs, a release by this client) wakes it at once and
/// the cap is only the safety net for a notification that never came; with
/// notifications off it is how soon a waiter notices a release. Each sleep
/// is drawn from `cap/2..=cap`, so waiters of several clients spread out.
pub const DEFAULT_WAIT_CAP: Duration = Duration::from_millis(200);

/// Waiters are woken by the nodes (server-assisted client tracking, Redis
/// 6+, no server configuration) by default. Turn it off to save the one
/// extra connection per node and client; waiters then retry on the cap and
/// on the holder's TTL.
pub const DEFAULT_NOTIFICATIONS: bool = true;

/// Off: a release asks the nodes whether others wait (so that the releasing
/// client queues its own next `lock()` behind them) only where this client
/// has seen contention on the resource, because asking costs the free path
/// about 13 % of its throughput. On, every release asks: a holder that never
/// had to wait still queues behind a waiter that hears of releases later
/// than it does (a client far away).
pub const DEFAULT_STRICT_FIFO: bool = false;

/// Default [`RedlockBuilder::restart_quarantine`](crate::RedlockBuilder::restart_quarantine):
/// one minute, the longest TTL any client of the nodes may use.
pub const DEFAULT_RESTART_QUARANTINE: Duration = Duration::from_secs(60);

/// Default [`RedlockBuilder::amnesia_tolerance`](crate::RedlockBuilder::amnesia_tolerance):
/// members are single servers, which lose writes only by restarting.
pub const DEFAULT_AMNESIA_TOLERANCE: usize = 0;

/// Largest TTL accepted with the restart quarantine off (about 49.7 days): keeps the millisecond arithmetic far
/// from overflow, and no lock should outlive its holder by that much.
pub const MAX_TTL: Duration = Duration::from_millis(u32::MAX as u64);

/// A hook that makes lock values (tests pin them; the default draws 128 random
/// bits).
pub type ValueFn = Arc<dyn Fn() -> String + Send + Sync>;

/// The checked settings a [`Redlock`](crate::Redlock) runs with (the node
/// timeout belongs to the node set).
#[derive(Clone)]
pub(crate) struct Config {
    /// Prepended to every resource to form the Redis key.
    pub(crate) key_prefix: String,
    /// How long `lock()` waits, in average retry pauses.
    pub(crate) retry_count: u32,
    /// Fixed pause between attempts.
    pub(crate) retry_delay: Duration,
    /// Random extra pause between attempts.
    pub(crate) retry_jitter: Duration,
    /// Fraction of the TTL allowed for clock drift.
    pub(crate) drift_factor: f64,
    /// When auto-extension renews, as a fraction of the TTL.
    pub(crate) auto_extend_fraction: f64,
    /// Makes the random lock values; overridable for deterministic tests.
    pub(crate) value_fn: Option<ValueFn>,
    /// What lock values start with (`label/`), so that an inspection can
    /// tell who holds a lock; empty: nothing.
    pub(crate) holder_label: String,
    /// Longest sleep between a waiter's attempts without news.
    pub(crate) wait_cap: Duration,
    /// Whether waiters are woken by the nodes' notifications.
    pub(crate) notifications: bool,
    /// Whether every release asks whether others wait.
    pub(crate) strict_fifo: bool,
    /// One fencing counter for every resource, instead of one per resource.
    pub(crate) fencing_counter: Option<String>,
    /// How long a node that may have lost writes does not count for locks
    /// (zero: nodes are trusted); also the longest TTL allowed.
    pub(crate) restart_quarantine: Duration,
    /// Maps resource names to the class their metrics are labelled with.
    pub(crate) class_fn: Option<crate::telemetry::ClassFn>,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("key_prefix", &self.key_prefix)
            .field("retry_count", &self.retry_count)
            .field("retry_delay", &self.retry_delay)
            .field("retry_jitter", &self.retry_jitter)
            .field("drift_factor", &self.drift_factor)
            .field("auto_extend_fraction", &self.auto_extend_fraction)
            .field("value_fn", &self.value_fn.as_ref().map(|_| "custom"))
            .field("holder_label", &self.holder_label)
            .field("wait_cap", &self.wait_cap)
            .field("notifications", &self.notifications)
            .field("strict_fifo", &self.strict_fifo)
            .field("fencing_counter", &self.fencing_counter)
            .field("restart_quarantine", &self.restart_quarantine)
            .field("class_fn", &self.class_fn.as_ref().map(|_| "custom"))
            .finish()
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            key_prefix: String::new(),
            retry_count: DEFAULT_RETRY_COUNT,
            retry_delay: DEFAULT_RETRY_DELAY,
            retry_jitter: DEFAULT_RETRY_JITTER,
            drift_factor: DEFAULT_DRIFT_FACTOR,
            auto_extend_fraction: DEFAULT_AUTO_EXTEND_FRACTION,
            value_fn: None,
            holder_label: String::new(),
            wait_cap: DEFAULT_WAIT_CAP,
            notifications: DEFAULT_NOTIFICATIONS,
            strict_fifo: DEFAULT_STRICT_FIFO,
            fencing_counter: None,
            restart_quarantine: DEFAULT_RESTART_QUARANTINE,
            class_fn: None,
        }
    }
}

impl Config {
    /// Checks every setting (`node_timeout` is the builder's) before
    /// anything is built or any node asked.
    pub(crate) fn check(&self, node_timeout: Duration) -> Result<()> {
        let c = self;
        crate::keys::check_prefix(&c.key_prefix)?;
        let label = &c.holder_label;
        if label.len() > 200 || label.chars().any(|ch| ch == '/' || ch.is_control()) {
            return Err(Error::InvalidConfig(format!(
                "holder label {label:?}: give at most 200 bytes with no '/' or control characters"
            )));
        }
        if !(0.0..0.5).contains(&c.drift_factor) {
            return Err(Error::InvalidConfig(format!(
                "drift factor {} is outside 0.0..0.5",
                c.drift_factor
            )));
        }
        if !(0.05..=0.9).contains(&c.auto_extend_fraction) {
            return Err(Error::InvalidConfig(format!(
                "auto-extend fraction {} is outside 0.05..=0.9",
                c.auto_extend_fraction
            )));
        }
        // Both are added up into a waiter's lease and into deadlines: above
        // the longest TTL they would make no sense and could overflow.
        for (what, d) in [("wait cap", c.wait_cap), ("node timeout", node_timeout)] {
            if d.is_zero() {
                return Err(Error::InvalidConfig(format!("{what} must be above zero")));
            }
            if d > MAX_TTL {
                return Err(Error::InvalidConfig(format!(
                    "{what} {d:?} exceeds the maximum {MAX_TTL:?} (the longest TTL)"
                )));
            }
        }
        if c.restart_quarantine > MAX_TTL {
            return Err(Error::InvalidConfig(format!(
                "restart quarantine {:?} exceeds the maximum {MAX_TTL:?} (the longest TTL); \
                 set it to the longest TTL any client of these nodes uses",
                c.restart_quarantine
            )));
        }
        Ok(())
    }

    /// How long `lock()` keeps trying: `retry_count` pauses of the average
    /// retry pause (`retry_delay + retry_jitter / 2`), about 2 s with the
    /// defaults; zero with no retries.
    pub(crate) fn lock_patience(&self) -> Duration {
        self.retry_delay
            .saturating_add(self.retry_jitter / 2)
            .saturating_mul(self.retry_count)
    }

    /// The drift allowance for a TTL: `ttl * drift_factor + 2 ms`.
    pub(crate) fn drift(&self, ttl: Duration) -> Duration {
        self.drift_at(ttl, 0.0)
    }

    /// The drift allowance for a TTL on nodes whose clocks were measured
    /// running up to `excess` faster than ours: `ttl * max(drift_factor,
    /// excess) + 2 ms` (an excess of 1, a clock twice as fast, leaves no
    /// validity: it is not counted higher).
    pub(crate) fn drift_at(&self, ttl: Duration, excess: f64) -> Duration {
        let factor = self.drift_factor.max(excess.clamp(0.0, 1.0));
        ttl.mul_f64(factor) + Duration::from_millis(2)
    }

    /// Rejects TTLs that could never give a positive validity, or that are
    /// not representable as `PX` milliseconds.
    pub(crate) fn check_ttl(&self, ttl: Duration) -> Result<u64> {
        let ms = ttl.as_millis();
        if ms == 0 {
            return Err(Error::InvalidConfig(format!(
                "ttl {ttl:?} is below one millisecond"
            )));
        }
        if ttl > MAX_TTL {
            return Err(Error::InvalidConfig(format!(
                "ttl {ttl:?} exceeds the maximum {MAX_TTL:?}"
            )));
        }
        let q = self.restart_quarantine;
        if !q.is_zero() && ttl > q {
            return Err(Error::InvalidConfig(format!(
                "ttl {ttl:?} exceeds the restart quarantine {q:?}: a node that may have lost \
                 our keys counts again after that long, while such a lock could still be valid; \
                 raise the restart quarantine on every client of these nodes (it must be the \
                 longest TTL any of them uses)"
            )));
        }
        // Validity is ttl - elapsed - drift, and elapsed is at least a few
        // microseconds, so a TTL at or under the drift can never be valid.
        if ttl <= self.drift(ttl) {
            return Err(Error::InvalidConfig(format!(
                "ttl {ttl:?} can never be valid: the clock-drift allowance alone is {:?}",
                self.drift(ttl)
            )));
        }
        Ok(ms as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config::default()
    }

    #[test]
    fn ttl_checks() {
        let c = config();
        assert!(matches!(
            c.check_ttl(Duration::ZERO),
            Err(Error::InvalidConfig(_))
        ));
        assert!(c.check_ttl(Duration::from_micros(900)).is_err());
        // 2 ms: drift is 2.02 ms, never valid.
        assert!(c.check_ttl(Duration::from_millis(2)).is_err());
        assert_eq!(c.check_ttl(Duration::from_millis(3)).ok(), Some(3));
        assert!(c.check_ttl(DEFAULT_RESTART_QUARANTINE).is_ok());
        let e = c
            .check_ttl(DEFAULT_RESTART_QUARANTINE + Duration::from_millis(1))
            .unwrap_err();
        assert!(e.to_string().contains("restart quarantine"), "{e}");
        let mut c = config();
        c.restart_quarantine = Duration::ZERO;
        assert!(c.check_ttl(MAX_TTL + Duration::from_millis(1)).is_err());
        assert!(c.check_ttl(MAX_TTL).is_ok());
    }

    #[test]
    fn lock_patience_is_retries_times_the_average_pause() {
        let mut c = config();
        assert_eq!(c.lock_patience(), Duration::from_secs(2));
        c.retry_count = 0;
        assert_eq!(c.lock_patience(), Duration::ZERO);
    }

    #[test]
    fn long_waits_saturate_instead_of_panicking() {
        let mut c = config();
        c.retry_delay = Duration::MAX;
        c.retry_jitter = Duration::MAX;
        assert_eq!(c.lock_patience(), Duration::MAX);
        let far = crate::wait::deadline_in(Duration::MAX);
        assert!(far > tokio::time::Instant::now() + Duration::from_secs(365 * 24 * 3600));
    }

    #[test]
    fn drift_is_fraction_plus_two_ms() {
        let c = config();
        assert_eq!(c.drift(Duration::from_secs(10)), Duration::from_millis(102));
    }
}
