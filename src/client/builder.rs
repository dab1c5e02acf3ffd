//! [`RedlockBuilder`]: checks the settings and the node list, and makes the
//! [`Redlock`] with its node set.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::client::config::{Config, DEFAULT_NODE_TIMEOUT};
use crate::client::redlock::Redlock;
use crate::client::urls::{identity, open_member};
use crate::error::{Error, Result};
use crate::node::clock::clockwatch::ClockNews;
use crate::node::trust::amnesia::AmnesiaCheck;
use crate::node::Node;
use crate::quorum::tally::{quorum_tolerating, MAX_NODES};
use crate::quorum::Quorum;
use crate::telemetry::Telemetry;
use crate::wait::Waiting;

/// Shortest time one connection attempt to a node is given (the node
/// timeout, if longer). Rounds never wait for it past their deadline.
const MIN_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

impl Redlock {
    /// Starts configuring a client. See [`RedlockBuilder`].
    pub fn builder() -> RedlockBuilder {
        RedlockBuilder::default()
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
    /// Per-node, per-request timeout.
    node_timeout: Duration,
    /// Settings being built.
    config: Config,
    /// Members that may fail over at once.
    amnesia_tolerance: usize,
}

impl fmt::Debug for RedlockBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedlockBuilder")
            .field("nodes", &(self.urls.len() + self.clients.len()))
            .field("node_timeout", &self.node_timeout)
            .field("config", &self.config)
            .field("amnesia_tolerance", &self.amnesia_tolerance)
            .finish()
    }
}

impl Default for RedlockBuilder {
    fn default() -> Self {
        Self {
            urls: Vec::new(),
            clients: Vec::new(),
            node_timeout: DEFAULT_NODE_TIMEOUT,
            config: Config::default(),
            amnesia_tolerance: crate::client::config::DEFAULT_AMNESIA_TOLERANCE,
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

    /// Adds the members of a comma-separated list of URLs, as
    /// `REDQUORUM_NODES` holds them: `host:port` parts after a
    /// `redis+cluster://` URL are that cluster's further seeds (see
    /// [`split_node_list`](crate::split_node_list)).
    ///
    /// ```no_run
    /// # fn f() -> redquorum::Result<()> {
    /// let redlock = redquorum::Redlock::builder()
    ///     .node_list("redis+cluster://10.0.1.1:7000,10.0.1.2:7000,redis://10.0.2.1:6379")
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn node_list(self, list: &str) -> Self {
        self.nodes(crate::client::urls::split_node_list(list))
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

    /// How long [`Redlock::lock`] waits, in retries of the average pause:
    /// `retries × (retry_delay + retry_jitter / 2)`; zero means one attempt.
    /// Defaults to [`DEFAULT_RETRY_COUNT`](crate::DEFAULT_RETRY_COUNT).
    pub fn retry_count(mut self, retries: u32) -> Self {
        self.config.retry_count = retries;
        self
    }

    /// Fixed pause after an attempt that failed for want of nodes; zero is
    /// allowed. Defaults to [`DEFAULT_RETRY_DELAY`](crate::DEFAULT_RETRY_DELAY).
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.config.retry_delay = delay;
        self
    }

    /// Random extra pause (uniform in `0..=jitter`) after such an attempt;
    /// zero is allowed. Defaults to
    /// [`DEFAULT_RETRY_JITTER`](crate::DEFAULT_RETRY_JITTER).
    pub fn retry_jitter(mut self, jitter: Duration) -> Self {
        self.config.retry_jitter = jitter;
        self
    }

    /// Clock drift allowance as a fraction of the TTL, in `0.0..0.5`. Defaults
    /// to [`DEFAULT_DRIFT_FACTOR`](crate::DEFAULT_DRIFT_FACTOR).
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.config.drift_factor = factor;
        self
    }

    /// How long each node may take to answer one request. Defaults to
    /// [`DEFAULT_NODE_TIMEOUT`](crate::DEFAULT_NODE_TIMEOUT).
    ///
    /// A round that opens a node's first connection waits for its set-up
    /// (the handshake and the check for lost writes: several round trips)
    /// up to the connect timeout, this timeout but at least 1 s; a node
    /// whose first attempt ended, made or failed, gets this timeout again.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// When auto-extension renews a lock, as a fraction of its TTL, in
    /// `0.05..=0.9`. Defaults to [`DEFAULT_AUTO_EXTEND_FRACTION`](crate::DEFAULT_AUTO_EXTEND_FRACTION).
    pub fn auto_extend_fraction(mut self, fraction: f64) -> Self {
        self.config.auto_extend_fraction = fraction;
        self
    }

    /// Longest a waiter sleeps between attempts when no news comes (must be
    /// above zero). Defaults to [`DEFAULT_WAIT_CAP`](crate::DEFAULT_WAIT_CAP).
    pub fn wait_cap(mut self, cap: Duration) -> Self {
        self.config.wait_cap = cap;
        self
    }

    /// Whether waiters are woken by the nodes when the lock they wait for
    /// changes (one extra connection per node, opened when this client first
    /// waits). Off, waiters retry on the holder's TTL and on the
    /// [wait cap](RedlockBuilder::wait_cap). Defaults to
    /// [`DEFAULT_NOTIFICATIONS`](crate::DEFAULT_NOTIFICATIONS).
    pub fn notifications(mut self, on: bool) -> Self {
        self.config.notifications = on;
        self
    }

    /// Whether every release asks the nodes whether others wait for the
    /// resource (strict FIFO across clients, even for a holder that never
    /// had to wait), at the cost of one more read per release on every node.
    /// Defaults to [`DEFAULT_STRICT_FIFO`](crate::DEFAULT_STRICT_FIFO): only
    /// where this client has seen contention on the resource.
    pub fn strict_fifo(mut self, on: bool) -> Self {
        self.config.strict_fifo = on;
        self
    }

    /// Mints every fencing token (a fenced [`Redlock::lock`]) from one counter
    /// named `name`, shared by all resources, instead of one counter per
    /// resource. Tokens then increase across all resources (still strictly
    /// above every earlier holder's of each one), and the nodes keep one
    /// record instead of one per resource ever fenced: choose it when you
    /// fence per entity (`invoice-7`, `invoice-8`, ...); holders that mint
    /// at once share compare-and-set rounds. Every client that fences the
    /// same resources must use the same setting. Default: one per resource.
    pub fn fencing_counter(mut self, name: impl Into<String>) -> Self {
        self.config.fencing_counter = Some(name.into());
        self
    }

    /// How long a node that may have lost writes (it restarted, was
    /// replaced, flushed or evicted keys, or was just started and not
    /// declared new) does not count toward a lock quorum; it still receives
    /// our commands, so it holds the locks taken meanwhile. Set it to **the
    /// longest TTL any client of these nodes uses**: this client refuses
    /// longer TTLs with [`Error::InvalidConfig`], and `build()` refuses a
    /// quarantine above [`MAX_TTL`](crate::MAX_TTL). Zero turns the check
    /// off and trusts every node, **for counters too** (a node that lost
    /// its records is never repaired): only for throwaway nodes. Whole
    /// seconds, rounded up. Defaults to
    /// [`DEFAULT_RESTART_QUARANTINE`](crate::DEFAULT_RESTART_QUARANTINE).
    ///
    /// The quarantine counts on this client's monotonic clock from when it
    /// first saw the evidence, never on the node's uptime. A node is checked
    /// each time a connection to it is made (a restart always breaks
    /// connections) and again while connected (see the repository's
    /// `docs/guarantees.md`, which lists the signals).
    pub fn restart_quarantine(mut self, longest_ttl: Duration) -> Self {
        self.config.restart_quarantine = longest_ttl;
        self
    }

    /// For members that are replicated deployments (Sentinel or Cluster),
    /// whose failover loses acknowledged writes at once: tolerate `f` such
    /// members failing over together by making any two quorums share more
    /// than `f` nodes (a quorum is then more than `(N + f) / 2` nodes).
    /// `build()` logs how many failed nodes that leaves room for, and
    /// refuses an `f` that leaves no quorum. Defaults to
    /// [`DEFAULT_AMNESIA_TOLERANCE`](crate::DEFAULT_AMNESIA_TOLERANCE).
    pub fn amnesia_tolerance(mut self, f: usize) -> Self {
        self.amnesia_tolerance = f;
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

    /// Starts every lock value this client writes with `label/` (a host
    /// name and process id, say), before its 128 random bits, so that
    /// [`Redlock::inspect`] can tell who holds a lock
    /// ([`Holder::label`](crate::Holder::label)). At most 200 bytes, no
    /// `/` or control characters; checked by `build()`.
    pub fn holder_label(mut self, label: impl Into<String>) -> Self {
        self.config.holder_label = label.into();
        self
    }

    /// Labels the lock metrics (feature `metrics`) with the class `f` gives
    /// each resource name (`invoice-42` to `invoice`): keep the classes
    /// few. Without it no metric carries anything derived from a name.
    pub fn metric_class<F>(mut self, f: F) -> Self
    where
        F: Fn(&str) -> String + Send + Sync + 'static,
    {
        self.config.class_fn = Some(Arc::new(f));
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
    /// same node twice (also spelled differently: `localhost` and
    /// `127.0.0.1`, with and without the default port or `/0`), or settings
    /// out of range. An even node count is allowed but logged as a warning:
    /// it tolerates no more failures than one node fewer; so is a single
    /// node, which tolerates none.
    pub fn build(self) -> Result<Redlock> {
        let c = &self.config;
        c.check(self.node_timeout)?;
        // Each member's client, and its seeds where it is a Redis Cluster.
        let mut clients = Vec::with_capacity(self.urls.len() + self.clients.len());
        for (index, url) in self.urls.iter().enumerate() {
            if url.trim().is_empty() {
                return Err(Error::InvalidConfig(format!(
                    "node {index} is an empty entry in the node list (a doubled or trailing \
                     comma?)"
                )));
            }
            clients.push(open_member(url.trim())?);
        }
        clients.extend(self.clients.into_iter().map(|c| (c, None)));
        if clients.is_empty() {
            return Err(Error::InvalidConfig("no redis nodes given".into()));
        }
        if clients.len() > MAX_NODES {
            return Err(Error::InvalidConfig(format!(
                "{} nodes given; at most {} are supported",
                clients.len(),
                MAX_NODES
            )));
        }
        let needed = quorum_with(clients.len(), self.amnesia_tolerance)?;
        let amnesia = (!c.restart_quarantine.is_zero()).then(|| AmnesiaCheck {
            quarantine_secs: c.restart_quarantine.as_secs()
                + u64::from(c.restart_quarantine.subsec_nanos() > 0),
        });
        let mut seen = HashMap::new();
        let clock_news: ClockNews = Arc::new(tokio::sync::watch::Sender::new(0));
        let identities: Vec<String> = clients
            .iter()
            .map(|(client, _)| identity(client.get_connection_info()))
            .collect();
        let quarantine_secs = amnesia.as_ref().map_or(0, |a| a.quarantine_secs);
        let deployment = crate::node::trust::panel::deployment(&identities, quarantine_secs);
        let panel = Arc::new(crate::node::trust::panel::Panel::new(
            clients.len(),
            deployment,
        ));
        let mut nodes = Vec::with_capacity(clients.len());
        let mut watched = Vec::with_capacity(clients.len());
        // A connection attempt is never waited for past a round's deadline,
        // but it may run longer in the background (TLS, AUTH on a far node).
        let connect_timeout = self.node_timeout.max(MIN_CONNECT_TIMEOUT);
        for (index, (client, seeds)) in clients.into_iter().enumerate() {
            let info = client.get_connection_info();
            let identity = identities[index].clone();
            if let Some(first) = seen.insert(identity.clone(), index) {
                return Err(Error::InvalidConfig(format!(
                    "node {index} ({}) is node {first} again ({identity}); each node must be an \
                     independent server",
                    info.addr()
                )));
            }
            let watch_client = client.clone();
            let node = match seeds {
                #[cfg(feature = "cluster")]
                Some(seeds) => Node::cluster(
                    index,
                    &client,
                    seeds,
                    crate::node::cluster::shards::LinkSettings {
                        connect_timeout,
                        amnesia: amnesia.clone(),
                        allowance: c.drift_factor,
                        news: Arc::clone(&clock_news),
                        panel: Arc::clone(&panel),
                    },
                ),
                _ => Node::new(
                    index,
                    client,
                    connect_timeout,
                    amnesia.clone(),
                    (c.drift_factor, &clock_news, &panel),
                ),
            };
            watched.push((watch_client, node.watch_route()));
            nodes.push(node);
        }
        match nodes.len() {
            1 => tracing::warn!(
                target: crate::telemetry::targets::SETUP,
                "a single redis node: nothing is tolerated if it fails or restarts empty; \
                 use 3 or 5 independent nodes"
            ),
            n if n.is_multiple_of(2) => tracing::warn!(
                target: crate::telemetry::targets::SETUP,
                nodes = n,
                "an even number of redis nodes ({n}) tolerates no more failures ({}) than {} \
                 would; use an odd number",
                (n - 1) / 2,
                n - 1
            ),
            _ => {}
        }
        let telemetry = Arc::new(Telemetry::new(nodes.len(), self.config.class_fn.clone()));
        let waiting = Waiting::new(
            &telemetry,
            &watched,
            connect_timeout,
            self.node_timeout,
            self.config.wait_cap,
            self.config.notifications,
        );
        Ok(Redlock::from_parts(
            Quorum::new(nodes, needed, self.node_timeout, telemetry, clock_news),
            self.config,
            waiting,
        ))
    }
}

/// The quorum for `n` nodes that tolerates `f` members losing writes at
/// once: more than `(n + f) / 2`. Logs what that leaves when `f > 0`.
fn quorum_with(n: usize, f: usize) -> Result<usize> {
    let needed = quorum_tolerating(n, f);
    if needed > n {
        return Err(Error::InvalidConfig(format!(
            "amnesia tolerance {f} needs quorums of {needed} of {n} nodes, more than there are; \
             use more nodes or a lower tolerance (at most {})",
            n.saturating_sub(1)
        )));
    }
    if f > 0 {
        tracing::info!(
            target: crate::telemetry::targets::SETUP,
            "amnesia tolerance {f}: quorums of {needed} of {n} nodes; {} may be down at once",
            n - needed
        );
    }
    Ok(needed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::config::MAX_TTL;

    #[test]
    fn amnesia_tolerance_widens_the_quorum() {
        assert_eq!(quorum_with(5, 0).unwrap(), 3);
        assert_eq!(quorum_with(5, 1).unwrap(), 4);
        assert_eq!(quorum_with(7, 1).unwrap(), 5);
        assert_eq!(quorum_with(5, 4).unwrap(), 5);
        let e = quorum_with(5, 5).unwrap_err().to_string();
        assert!(e.contains("at most 4"), "{e}");
        // Any two quorums share more than f nodes.
        for n in 1..10 {
            for f in 0..n {
                let q = quorum_with(n, f).unwrap();
                assert!(2 * q - n > f, "n={n} f={f} q={q}");
            }
        }
    }

    #[test]
    fn a_quarantine_beyond_the_longest_ttl_is_refused_before_any_node_is_touched() {
        let build = |q| {
            Redlock::builder()
                .nodes(["redis://127.0.0.1:1"])
                .restart_quarantine(q)
                .build()
        };
        for q in [Duration::MAX, MAX_TTL + Duration::from_millis(1)] {
            match build(q) {
                Err(Error::InvalidConfig(text)) => assert!(text.contains("restart quarantine")),
                other => panic!("{q:?}: {other:?}"),
            }
        }
        assert!(build(MAX_TTL).is_ok());
    }
}
