//! Taking the lock: [`Redlock::try_lock`], [`Redlock::lock`],
//! [`Redlock::lock_timeout`], [`Redlock::lock_fenced`] and
//! [`Redlock::with_lock`], one attempt at a time.
//!
//! One attempt: pick a fresh random value, note a monotonic start, send
//! `SET key value NX PX ttl` to every node at once, and decide as soon as a
//! quorum said OK or can no longer say OK. The lock is ours only with a
//! quorum *and* time left ([`validity`]). A failed attempt releases on every
//! node that did not clearly refuse, because a `SET` may have landed where
//! the reply was lost; so does an attempt whose future is dropped.

use std::future::Future;
use std::time::Duration;

use redis::Value;
use tokio::time::Instant;
use tracing::{debug, instrument, warn};

use crate::counter::{self, Record};
use crate::error::{Error, Result};
use crate::guard::{Lock, LockHandle};
use crate::node::request::Request;
use crate::redlock::{validity, Redlock};

/// How long `acquire` keeps trying.
#[derive(Clone, Copy, Debug)]
enum Patience {
    /// At most this many retries after the first attempt.
    Retries(u32),
    /// Retry until this instant; never sleep past it.
    Until(Instant),
}

impl Redlock {
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
        let retries = self.config().retry_count;
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
        match counter::allocate(self.nodes(), resource, &key, None, &mut next).await {
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

    /// A random pause of `retry_delay + uniform(0..=retry_jitter)`.
    fn retry_pause(&self) -> Duration {
        use rand::Rng;
        let c = self.config();
        let jitter = c.retry_jitter.as_nanos().min(u64::MAX as u128) as u64;
        c.retry_delay + Duration::from_nanos(rand::rng().random_range(0..=jitter))
    }

    /// A fresh lock value: 128 random bits in hex, unless a hook is set.
    fn new_value(&self) -> String {
        match &self.config().value_fn {
            Some(f) => f(),
            None => format!("{:032x}", rand::random::<u128>()),
        }
    }

    /// One acquisition attempt.
    async fn attempt(&self, resource: &str, key: &str, ttl: Duration, ttl_ms: u64) -> Result<Lock> {
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
        let (tally, stragglers) = self.nodes().vote_round(&req, "set", set_vote).await;
        let validity = validity(ttl, start.elapsed(), self.config().drift(ttl));
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
        self.release_quietly(key, &value, self.nodes().all() & !tally.no);
        Err(if tally.decided() == Some(true) {
            // Won the quorum but took so long the lock would be stale.
            Error::Expired {
                resource: resource.to_owned(),
            }
        } else {
            self.failure(resource, tally)
        })
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
            let all = self.redlock.nodes().all();
            self.redlock.release_quietly(self.key, self.value, all);
        }
    }
}
