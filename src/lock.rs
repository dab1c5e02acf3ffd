//! The Redlock algorithm: acquire, extend and release on a quorum of nodes.
//!
//! One attempt (see `../shared/DESIGN.md` §1): pick a fresh random value, note a
//! monotonic start, send `SET key value NX PX ttl` to every node at once, and
//! decide as soon as a quorum said OK or can no longer say OK. The lock is ours
//! only with a quorum *and* time left: `validity = ttl - elapsed - drift`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use tokio::time::Instant;
use tracing::{debug, instrument, trace, warn};

use crate::config::{Config, RedlockBuilder};
use crate::counter::{self, Record};
use crate::error::{Error, NodeErrorKind, Result};
use crate::guard::{Lock, LockHandle};
use crate::node::{Node, Request};
use crate::quorum::{all_nodes, Fanout, NodeSet, Tally, Vote, MAX_NODES};
use crate::scripts;

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

/// What all clones of one [`Redlock`] share.
#[derive(Debug)]
pub(crate) struct Inner {
    /// The nodes, in configured order (index = position).
    pub(crate) nodes: Vec<Node>,
    /// Checked configuration.
    pub(crate) config: Config,
    /// Rounds finishing in the background (stragglers of a release...).
    pub(crate) background: Arc<crate::quorum::Background>,
}

/// How long `acquire` keeps trying.
#[derive(Clone, Copy, Debug)]
enum Patience {
    /// At most this many retries after the first attempt.
    Retries(u32),
    /// Retry until this instant; never sleep past it.
    Until(Instant),
}

impl Redlock {
    /// Starts configuring a client. See [`RedlockBuilder`].
    pub fn builder() -> RedlockBuilder {
        RedlockBuilder::default()
    }

    /// Made by [`RedlockBuilder::build`] after validation.
    pub(crate) fn from_parts(nodes: Vec<Node>, config: Config) -> Self {
        Self {
            inner: Arc::new(Inner {
                nodes,
                config,
                background: Arc::default(),
            }),
        }
    }

    /// Number of configured nodes.
    pub fn node_count(&self) -> usize {
        self.inner.nodes.len()
    }

    /// Number of nodes that must agree: `nodes / 2 + 1`.
    pub fn quorum(&self) -> usize {
        crate::quorum::quorum(self.inner.nodes.len())
    }

    /// The `host:port` of every node, in configured order.
    pub fn node_addrs(&self) -> impl Iterator<Item = &str> {
        self.inner.nodes.iter().map(|n| n.addr.as_str())
    }

    /// The Redis key used for `resource` (prefix + resource).
    pub fn key_for(&self, resource: &str) -> String {
        format!("{}{}", self.inner.config.key_prefix, resource)
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
        self.inner.background.settled().await;
    }

    /// One attempt to take the lock, no retries.
    ///
    /// # Errors
    ///
    /// [`Error::Contended`] when someone else holds it, [`Error::NoQuorum`]
    /// when too many nodes are unreachable, [`Error::Expired`] when the quorum
    /// took longer than the TTL allows, [`Error::InvalidConfig`] for an empty
    /// resource or an unusable TTL.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(redlock: redquorum::Redlock) -> redquorum::Result<()> {
    /// match redlock.try_lock("report", std::time::Duration::from_secs(5)).await {
    ///     Ok(lock) => lock.release().await?,
    ///     Err(e) if e.is_contended() => println!("someone else is on it"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    #[instrument(skip_all, fields(resource))]
    pub async fn try_lock(&self, resource: &str, ttl: Duration) -> Result<Lock> {
        self.acquire(resource, ttl, Patience::Retries(0)).await
    }

    /// Takes the lock, retrying with a random pause per the builder's retry
    /// settings. Dropping the future cancels it; a half-taken attempt is
    /// released in the background.
    ///
    /// # Errors
    ///
    /// As [`Redlock::try_lock`], for the last attempt.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(redlock: redquorum::Redlock) -> redquorum::Result<()> {
    /// let lock = redlock.lock("orders", std::time::Duration::from_secs(10)).await?;
    /// println!("held for another {:?}", lock.validity());
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    #[instrument(skip_all, fields(resource))]
    pub async fn lock(&self, resource: &str, ttl: Duration) -> Result<Lock> {
        let retries = self.inner.config.retry_count;
        self.acquire(resource, ttl, Patience::Retries(retries))
            .await
    }

    /// Takes the lock, retrying for at most `wait` (the retry count does not
    /// apply). A zero `wait` means one attempt.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] (carrying the last attempt's error) when `wait` runs
    /// out, or the errors of [`Redlock::try_lock`] that retrying cannot fix.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(redlock: redquorum::Redlock) -> redquorum::Result<()> {
    /// use std::time::Duration;
    /// let lock = redlock.lock_timeout("orders", Duration::from_secs(10), Duration::from_secs(3)).await?;
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    #[instrument(skip_all, fields(resource))]
    pub async fn lock_timeout(
        &self,
        resource: &str,
        ttl: Duration,
        wait: Duration,
    ) -> Result<Lock> {
        let until = Instant::now() + wait;
        self.acquire(resource, ttl, Patience::Until(until)).await
    }

    /// Takes the lock (as [`Redlock::lock`]) and mints a fencing token for it:
    /// a number strictly greater than every token handed to earlier holders
    /// of this resource, from the quorum counter (`fence:<resource>`), even
    /// if an earlier holder's lock expired without release.
    ///
    /// Give the token to the storage you write to and have it reject writes
    /// carrying a smaller token than it has seen: that stops a holder that
    /// paused past its lock's validity from doing damage.
    ///
    /// # Errors
    ///
    /// As [`Redlock::lock`]; if the token cannot be minted (no quorum) the
    /// lock is released and that error returned.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(redlock: redquorum::Redlock) -> redquorum::Result<()> {
    /// let lock = redlock.lock_fenced("invoice-42", std::time::Duration::from_secs(5)).await?;
    /// let token = lock.fencing_token().unwrap_or_default();
    /// // storage.write_if_token_at_least(token, ...)
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    #[instrument(skip_all, fields(resource))]
    pub async fn lock_fenced(&self, resource: &str, ttl: Duration) -> Result<Lock> {
        let lock = self.lock(resource, ttl).await?;
        let key = self.key_for(&format!("fence:{resource}"));
        let mut next = |e: &Record| -> Result<Record> {
            let n =
                e.n.checked_add(1)
                    .ok_or_else(|| Error::InvalidConfig("fencing counter is at u64::MAX".into()))?;
            Ok(Record {
                period: String::new(),
                n,
            })
        };
        match counter::allocate(self, resource, &key, None, &mut next).await {
            Ok((_, new)) => Ok(lock.with_fencing_token(new.n)),
            Err(e) => {
                if let Err(release) = lock.release().await {
                    debug!(error = %release, "release after failed fencing token");
                }
                Err(e)
            }
        }
    }

    /// Runs `f` while holding the lock, extending it in the background. `f`
    /// gets a [`LockHandle`] to check validity or read the fencing token.
    ///
    /// If the lock is lost while `f` runs (an extension failed, or validity ran
    /// out), `f`'s future is dropped at its next `.await` and
    /// [`Error::Expired`] is returned: work that needs the lock stops as soon
    /// as the lock is gone. When `f` finishes, the lock is released.
    ///
    /// # Errors
    ///
    /// The errors of [`Redlock::lock`], or [`Error::Expired`] if the lock was
    /// lost while `f` ran.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(redlock: redquorum::Redlock) -> redquorum::Result<()> {
    /// let total = redlock
    ///     .with_lock("nightly-report", std::time::Duration::from_secs(10), |lock| async move {
    ///         // long work; the lock is renewed every ~3.3 s meanwhile
    ///         lock.validity()
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn with_lock<F, Fut, T>(&self, resource: &str, ttl: Duration, f: F) -> Result<T>
    where
        F: FnOnce(LockHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        let lock = self.lock(resource, ttl).await?;
        lock.auto_extend();
        let work = f(lock.handle());
        tokio::select! {
            value = work => {
                if let Err(e) = lock.release().await {
                    warn!(error = %e, "release after with_lock failed; the key expires by itself");
                }
                Ok(value)
            }
            () = lock.lost() => {
                warn!(resource, "lock lost while with_lock work was running; work cancelled");
                drop(lock);
                Err(Error::Expired { resource: resource.to_owned() })
            }
        }
    }

    /// The retry loop around [`Redlock::attempt`].
    async fn acquire(&self, resource: &str, ttl: Duration, patience: Patience) -> Result<Lock> {
        tracing::Span::current().record("resource", resource);
        let ttl_ms = self.check_resource(resource, ttl)?;
        let key = self.key_for(resource);
        let started = Instant::now();
        let mut retries = 0u32;
        loop {
            let err = match self.attempt(resource, &key, ttl, ttl_ms).await {
                Ok(lock) => return Ok(lock),
                Err(e) => e,
            };
            let pause = self.retry_pause();
            match patience {
                Patience::Retries(max) if retries >= max => return Err(err),
                Patience::Until(until) if Instant::now() + pause >= until => {
                    return Err(Error::Timeout {
                        resource: resource.to_owned(),
                        waited: started.elapsed(),
                        last: Box::new(err),
                    })
                }
                _ => {}
            }
            retries += 1;
            debug!(retry = retries, ?pause, error = %err, "lock attempt failed; retrying");
            if pause.is_zero() {
                tokio::task::yield_now().await;
            } else {
                tokio::time::sleep(pause).await;
            }
        }
    }

    /// Validates a resource name and TTL; returns the TTL in milliseconds.
    pub(crate) fn check_resource(&self, resource: &str, ttl: Duration) -> Result<u64> {
        if resource.is_empty() {
            return Err(Error::InvalidConfig("resource name is empty".into()));
        }
        self.inner.config.check_ttl(ttl)
    }

    /// A random pause of `retry_delay + uniform(0..=retry_jitter)`.
    fn retry_pause(&self) -> Duration {
        use rand::Rng;
        let c = &self.inner.config;
        let jitter = c.retry_jitter.as_nanos().min(u64::MAX as u128) as u64;
        c.retry_delay + Duration::from_nanos(rand::rng().random_range(0..=jitter))
    }

    /// A fresh lock value: 128 random bits in hex, unless a hook is set.
    fn new_value(&self) -> String {
        match &self.inner.config.value_fn {
            Some(f) => f(),
            None => format!("{:032x}", rand::random::<u128>()),
        }
    }

    /// One acquisition attempt.
    async fn attempt(&self, resource: &str, key: &str, ttl: Duration, ttl_ms: u64) -> Result<Lock> {
        let nodes = &self.inner.nodes;
        let value = self.new_value();
        // If this future is dropped mid-round, a SET may already have landed:
        // the guard releases everywhere in the background.
        let mut cleanup = Cleanup {
            redlock: self,
            key,
            value: &value,
            armed: true,
        };
        let start = Instant::now();
        let mut cmd = redis::Cmd::with_capacity(6, key.len() + value.len() + 32);
        cmd.arg("SET")
            .arg(key)
            .arg(&value)
            .arg("NX")
            .arg("PX")
            .arg(ttl_ms);
        let req = Request::plain(cmd);
        let set_vote = |v: &Value| match v {
            Value::Okay => Some(true),
            Value::Nil => Some(false),
            _ => None,
        };
        let (tally, stragglers) = self.vote_round(&req, "set", set_vote).await;
        let validity = validity(ttl, start.elapsed(), self.inner.config.drift(ttl));
        cleanup.armed = false;
        drop(cleanup);
        if tally.decided() == Some(true) {
            if let Some(validity) = validity {
                // Won: let the slower nodes' SETs land too (bounded by the
                // node timeout), so the lock sits on every healthy node and
                // survives the loss of a holder node.
                stragglers.finish_in_background();
                return Ok(Lock::new(
                    self.clone(),
                    resource,
                    key,
                    value,
                    ttl,
                    start + validity,
                ));
            }
        }
        // Failed: drop the SETs still waiting (one already sent is ordered
        // before our release there; one still queued is not sent), and undo
        // on every node that did not clearly refuse, because a SET may have
        // succeeded where the reply was lost or late.
        drop(stragglers);
        self.release_quietly(key, &value, all_nodes(nodes.len()) & !tally.no);
        Err(if tally.decided() == Some(true) {
            // Won the quorum but took so long the lock would be stale.
            Error::Expired {
                resource: resource.to_owned(),
            }
        } else {
            self.failure(resource, tally)
        })
    }

    /// Maps a lost vote to the error that explains it.
    pub(crate) fn failure(&self, resource: &str, tally: Tally) -> Error {
        if tally.failures_prevent_quorum() || tally.no == 0 {
            Error::NoQuorum {
                resource: resource.to_owned(),
                needed: tally.quorum,
                succeeded: tally.yes_count(),
                failures: tally.failures,
            }
        } else {
            Error::Contended {
                resource: resource.to_owned(),
            }
        }
    }

    /// Sends `req` to all nodes and counts votes until the outcome is
    /// decided. `classify` maps a reply to yes (`Some(true)`), no
    /// (`Some(false)`) or unexpected (`None`). Returns the tally and the calls
    /// still in flight, for the caller to drop or to finish in the background.
    pub(crate) async fn vote_round(
        &self,
        req: &Arc<Request>,
        what: &'static str,
        classify: impl Fn(&Value) -> Option<bool>,
    ) -> (Tally, Fanout<'_>) {
        self.vote_until(req, what, classify, |tally, _| tally.decided().is_some())
            .await
    }

    /// [`Redlock::vote_round`] with the caller's own rule for when to stop
    /// counting: `done` sees the tally and the calls still in flight after
    /// each vote.
    pub(crate) async fn vote_until(
        &self,
        req: &Arc<Request>,
        what: &'static str,
        mut classify: impl FnMut(&Value) -> Option<bool>,
        done: impl Fn(&Tally, &Fanout<'_>) -> bool,
    ) -> (Tally, Fanout<'_>) {
        let nodes = &self.inner.nodes;
        let all = all_nodes(nodes.len());
        let mut fan = Fanout::start(&self.inner, req, all);
        let mut tally = Tally::new(nodes.len(), nodes.len());
        while let Some((i, reply)) = fan.next().await {
            let vote = match reply.map(|v| classify(&v)) {
                Ok(Some(true)) => Vote::Yes,
                Ok(Some(false)) => Vote::No,
                Ok(None) => Vote::Failed(NodeErrorKind::UnexpectedReply),
                Err(kind) => Vote::Failed(kind),
            };
            log_vote(&nodes[i], what, &vote);
            tally.record(&nodes[i], vote);
            if done(&tally, &fan) {
                break;
            }
        }
        (tally, fan)
    }

    /// Compare-and-delete on all nodes, until decided.
    pub(crate) async fn release_round(&self, key: &str, value: &str) -> Tally {
        let req = release_request(key, value);
        let (tally, stragglers) = self.vote_round(&req, "release", int_vote).await;
        stragglers.finish_in_background();
        tally
    }

    /// The error for a lost compare-and-X vote: too many nodes failed, or the
    /// nodes no longer hold our value.
    pub(crate) fn failure_or_expired(&self, resource: &str, tally: Tally) -> Error {
        if tally.failures_prevent_quorum() {
            self.failure(resource, tally)
        } else {
            Error::Expired {
                resource: resource.to_owned(),
            }
        }
    }

    /// Sends compare-and-delete to `targets` and returns without waiting for
    /// replies: each request is handed to its node (or queued, in order)
    /// here, ahead of our next request there, and the calls are carried to
    /// the end in the background.
    pub(crate) fn release_quietly(&self, key: &str, value: &str, targets: NodeSet) {
        if targets == 0 {
            return;
        }
        let req = release_request(key, value);
        Fanout::start(&self.inner, &req, targets).finish_in_background();
    }
}

/// Releases a half-finished attempt if its future is dropped.
struct Cleanup<'a> {
    /// The client the attempt runs on.
    redlock: &'a Redlock,
    /// The key being set.
    key: &'a str,
    /// Our value for it.
    value: &'a str,
    /// False once the attempt finished normally.
    armed: bool,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        if self.armed {
            let all = all_nodes(self.redlock.inner.nodes.len());
            self.redlock.release_quietly(self.key, self.value, all);
        }
    }
}

/// The compare-and-delete request.
fn release_request(key: &str, value: &str) -> Arc<Request> {
    Request::script(&scripts::RELEASE, |cmd| {
        cmd.arg(1).arg(key).arg(value);
    })
}

/// Classifies a script's integer reply: 1 = done, 0 = not ours.
pub(crate) fn int_vote(v: &Value) -> Option<bool> {
    match v {
        Value::Int(1) => Some(true),
        Value::Int(0) => Some(false),
        _ => None,
    }
}

/// `ttl - elapsed - drift`, or `None` when nothing is left.
pub(crate) fn validity(ttl: Duration, elapsed: Duration, drift: Duration) -> Option<Duration> {
    ttl.checked_sub(elapsed)
        .and_then(|d| d.checked_sub(drift))
        .filter(|d| !d.is_zero())
}

/// Per-node outcome at `debug!`; failures a quorum survived show up at `warn!`
/// only once, in the caller's error.
fn log_vote(node: &Node, what: &'static str, vote: &Vote) {
    match vote {
        Vote::Failed(kind) => {
            debug!(node = node.index, addr = %node.addr, op = what, ?kind, "node failed")
        }
        _ => trace!(node = node.index, op = what, ?vote, "node replied"),
    }
}

// The quorum bookkeeping uses bit sets of at most 64 nodes.
const _: () = assert!(MAX_NODES == 64);

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
    fn redlock_is_clone_send_sync() {
        fn assert_traits<T: Clone + Send + Sync + 'static>() {}
        assert_traits::<Redlock>();
    }
}
