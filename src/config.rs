//! The [`RedlockBuilder`] and the defaults it starts from.
//!
//! Every default is a `DEFAULT_*` constant so it can be read in the docs and
//! referred to in code; each one says why it has the value it has.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::lock::Redlock;
use crate::node::Node;

/// Retries after the first attempt in [`Redlock::lock`]. With the default delay
/// and jitter (50 ms + up to 100 ms) this waits about 2 s in total for a
/// contended resource before giving up, in line with redsync and node-redlock.
pub const DEFAULT_RETRY_COUNT: u32 = 20;

/// Fixed part of the pause between attempts. Long enough that a holder's
/// release usually lands first, short enough not to idle.
pub const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(50);

/// Random extra pause (uniform in `0..=jitter`) between attempts, so that
/// contenders that failed together do not retry together (the algorithm's
/// "random delay" that breaks split votes).
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

/// Auto-extension renews the lock after this fraction of its TTL has passed,
/// so two more renewals can fail (each bounded by the node timeout) before the
/// lock could lapse.
pub const DEFAULT_AUTO_EXTEND_FRACTION: f64 = 1.0 / 3.0;

/// Largest TTL accepted (about 49.7 days): keeps the millisecond arithmetic far
/// from overflow, and no lock should outlive its holder by that much.
pub const MAX_TTL: Duration = Duration::from_millis(u32::MAX as u64);

/// Shortest time one connection attempt to a node is given (the node
/// timeout, if longer). Rounds never wait for it past their deadline.
const MIN_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// A hook that makes lock values (tests pin them; the default draws 128 random
/// bits).
pub type ValueFn = Arc<dyn Fn() -> String + Send + Sync>;

/// The checked settings a [`Redlock`] runs with.
#[derive(Clone)]
pub(crate) struct Config {
    /// Prepended to every resource to form the Redis key.
    pub(crate) key_prefix: String,
    /// Retries after the first attempt in `lock()`.
    pub(crate) retry_count: u32,
    /// Fixed pause between attempts.
    pub(crate) retry_delay: Duration,
    /// Random extra pause between attempts.
    pub(crate) retry_jitter: Duration,
    /// Fraction of the TTL allowed for clock drift.
    pub(crate) drift_factor: f64,
    /// Per-node, per-request timeout.
    pub(crate) node_timeout: Duration,
    /// When auto-extension renews, as a fraction of the TTL.
    pub(crate) auto_extend_fraction: f64,
    /// Makes the random lock values; overridable for deterministic tests.
    pub(crate) value_fn: Option<ValueFn>,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("key_prefix", &self.key_prefix)
            .field("retry_count", &self.retry_count)
            .field("retry_delay", &self.retry_delay)
            .field("retry_jitter", &self.retry_jitter)
            .field("drift_factor", &self.drift_factor)
            .field("node_timeout", &self.node_timeout)
            .field("auto_extend_fraction", &self.auto_extend_fraction)
            .field("value_fn", &self.value_fn.as_ref().map(|_| "custom"))
            .finish()
    }
}

impl Config {
    /// The drift allowance for a TTL: `ttl * drift_factor + 2 ms`.
    pub(crate) fn drift(&self, ttl: Duration) -> Duration {
        ttl.mul_f64(self.drift_factor) + Duration::from_millis(2)
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

/// Builds a [`Redlock`]. Get one with [`Redlock::builder`].
///
/// # Examples
///
/// ```
/// # fn f() -> redquorum::Result<()> {
/// use std::time::Duration;
/// let redlock = redquorum::Redlock::builder()
///     .nodes(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])
///     .retry_count(5)
///     .node_timeout(Duration::from_millis(50))
///     .build()?; // no connection is made yet
/// # Ok(()) }
/// ```
#[must_use]
pub struct RedlockBuilder {
    /// Node URLs, in order; kept as strings until `build()` so errors can name them.
    urls: Vec<String>,
    /// Clients handed in directly (reused connection settings), after the URLs.
    clients: Vec<redis::Client>,
    /// Settings being built.
    config: Config,
}

impl fmt::Debug for RedlockBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedlockBuilder")
            .field("nodes", &(self.urls.len() + self.clients.len()))
            .field("config", &self.config)
            .finish()
    }
}

impl Default for RedlockBuilder {
    fn default() -> Self {
        Self {
            urls: Vec::new(),
            clients: Vec::new(),
            config: Config {
                key_prefix: String::new(),
                retry_count: DEFAULT_RETRY_COUNT,
                retry_delay: DEFAULT_RETRY_DELAY,
                retry_jitter: DEFAULT_RETRY_JITTER,
                drift_factor: DEFAULT_DRIFT_FACTOR,
                node_timeout: DEFAULT_NODE_TIMEOUT,
                auto_extend_fraction: DEFAULT_AUTO_EXTEND_FRACTION,
                value_fn: None,
            },
        }
    }
}

impl RedlockBuilder {
    /// Adds Redis nodes by URL (`redis://[:password@]host:port[/db]`, or
    /// `rediss://` with the `tls` feature). Use an odd number of independent
    /// nodes; 5 is the usual choice. May be called more than once.
    pub fn nodes<I, S>(mut self, urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.urls
            .extend(urls.into_iter().map(|u| u.as_ref().to_owned()));
        self
    }

    /// Adds nodes from existing `redis::Client`s (to reuse their connection
    /// settings, TLS or credentials). They come after any URLs.
    pub fn clients<I: IntoIterator<Item = redis::Client>>(mut self, clients: I) -> Self {
        self.clients.extend(clients);
        self
    }

    /// Prefix for every key: the key is `prefix + resource`. Defaults to empty,
    /// which is what redsync, node-redlock and redlock-py use, so their clients
    /// exclude ours on the same resource name.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.config.key_prefix = prefix.into();
        self
    }

    /// Retries after the first attempt in [`Redlock::lock`]. Defaults to
    /// [`DEFAULT_RETRY_COUNT`].
    pub fn retry_count(mut self, retries: u32) -> Self {
        self.config.retry_count = retries;
        self
    }

    /// Fixed pause between attempts; zero is allowed. Defaults to
    /// [`DEFAULT_RETRY_DELAY`].
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.config.retry_delay = delay;
        self
    }

    /// Random extra pause (uniform in `0..=jitter`) between attempts; zero is
    /// allowed. Defaults to [`DEFAULT_RETRY_JITTER`].
    pub fn retry_jitter(mut self, jitter: Duration) -> Self {
        self.config.retry_jitter = jitter;
        self
    }

    /// Clock drift allowance as a fraction of the TTL, in `0.0..0.5`. Defaults
    /// to [`DEFAULT_DRIFT_FACTOR`].
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.config.drift_factor = factor;
        self
    }

    /// How long each node may take to answer one request. Defaults to
    /// [`DEFAULT_NODE_TIMEOUT`].
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.config.node_timeout = timeout;
        self
    }

    /// When auto-extension renews a lock, as a fraction of its TTL, in
    /// `0.05..=0.9`. Defaults to [`DEFAULT_AUTO_EXTEND_FRACTION`].
    pub fn auto_extend_fraction(mut self, fraction: f64) -> Self {
        self.config.auto_extend_fraction = fraction;
        self
    }

    /// Replaces the random lock-value generator (the value must be unique per
    /// attempt and hard to guess; this hook is for tests). Defaults to 128
    /// random bits in hex.
    pub fn value_generator<F>(mut self, f: F) -> Self
    where
        F: Fn() -> String + Send + Sync + 'static,
    {
        self.config.value_fn = Some(Arc::new(f));
        self
    }

    /// Checks the configuration and makes the [`Redlock`]. Connects to nothing:
    /// connections open on first use and reopen after failures, so nodes that
    /// are down now are fine as long as a quorum is up when locking.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidUrl`] for a URL that does not parse (or `rediss://`
    /// without the `tls` feature), [`Error::InvalidConfig`] for no nodes, the
    /// same node twice, or settings out of range. An even node count is
    /// allowed but logged as a warning: it tolerates no more failures than one
    /// node fewer.
    pub fn build(self) -> Result<Redlock> {
        let c = &self.config;
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
        if c.node_timeout.is_zero() {
            return Err(Error::InvalidConfig(
                "node timeout must be above zero".into(),
            ));
        }
        let mut clients = Vec::with_capacity(self.urls.len() + self.clients.len());
        for url in &self.urls {
            clients.push(open_client(url)?);
        }
        clients.extend(self.clients);
        if clients.is_empty() {
            return Err(Error::InvalidConfig("no redis nodes given".into()));
        }
        if clients.len() > crate::quorum::MAX_NODES {
            return Err(Error::InvalidConfig(format!(
                "{} nodes given; at most {} are supported",
                clients.len(),
                crate::quorum::MAX_NODES
            )));
        }
        let mut seen = HashSet::new();
        let mut nodes = Vec::with_capacity(clients.len());
        // A connection attempt is never waited for past a round's deadline,
        // but it may run longer in the background (TLS, AUTH on a far node).
        let connect_timeout = c.node_timeout.max(MIN_CONNECT_TIMEOUT);
        for (index, client) in clients.into_iter().enumerate() {
            let info = client.get_connection_info();
            let identity = format!("{}/{}", info.addr(), info.redis_settings().db());
            if !seen.insert(identity.clone()) {
                return Err(Error::InvalidConfig(format!(
                    "node {index} ({identity}) is listed twice; each node must be independent"
                )));
            }
            nodes.push(Node::new(index, client, connect_timeout));
        }
        if nodes.len().is_multiple_of(2) {
            tracing::warn!(
                nodes = nodes.len(),
                "even number of redis nodes: it tolerates no more failures than {} nodes",
                nodes.len() - 1
            );
        }
        Ok(Redlock::from_parts(nodes, self.config))
    }
}

/// Parses one node URL, with errors that never echo a password.
fn open_client(url: &str) -> Result<redis::Client> {
    #[cfg(feature = "tls")]
    if url.starts_with("rediss://") {
        // rustls refuses to guess a crypto provider; install ring once so a
        // `rediss://` URL works instead of panicking on first connect.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    #[cfg(not(feature = "tls"))]
    if url.starts_with("rediss://") {
        return Err(Error::InvalidUrl {
            url: redact(url),
            source: redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "rediss:// needs redquorum's `tls` feature",
            )),
        });
    }
    redis::Client::open(url).map_err(|source| Error::InvalidUrl {
        url: redact(url),
        source,
    })
}

/// Removes the userinfo part (`user:password@`) of a URL for messages.
pub(crate) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***@{}", &url[..scheme], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        RedlockBuilder::default().config
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
        assert!(c.check_ttl(MAX_TTL + Duration::from_millis(1)).is_err());
        assert!(c.check_ttl(MAX_TTL).is_ok());
    }

    #[test]
    fn drift_is_fraction_plus_two_ms() {
        let c = config();
        assert_eq!(c.drift(Duration::from_secs(10)), Duration::from_millis(102));
    }

    #[test]
    fn redacts_passwords() {
        assert_eq!(redact("redis://:s3cret@h:1/0"), "redis://***@h:1/0");
        assert_eq!(redact("redis://h:1"), "redis://h:1");
    }
}
