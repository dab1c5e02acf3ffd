//! Taking the lock: [`Redlock::lock`], which returns an [`Acquire`] (one
//! attempt with `.try_once()`, a bounded wait with `.wait(d)`, a fencing
//! token with `.fenced()`, work under the lock with `.run(f)`), and the
//! older forms it replaces.
//!
//! One attempt is `attempt.rs`. Waiting is `waiting.rs`: callers of this
//! client line up per resource, the front one makes a plain attempt, then
//! registers in the resource's waiting list on the nodes and tries again
//! whenever a quorum of nodes may have the lock free (`wait/`), until its
//! patience runs out.

use std::future::Future;
use std::time::Duration;

use tracing::{debug, Instrument};

use crate::acquire::acquisition::{acquisition_span, sealed, Acquire, How, Taking, Wait};
use crate::acquire::attempt::{Ask, Attempts, KeyAttempt};
use crate::acquire::patience::Patience;
use crate::acquire::waiting::recorded;
use crate::client::redlock::Redlock;
use crate::counter::CounterKeys;
use crate::error::{Error, Result};
use crate::lock::guard::{Lock, LockHandle};
use crate::telemetry::labels::{Mode, Primitive};
use crate::telemetry::Acquisition;

/// What [`Redlock::lock`] takes: the lock on one resource.
#[derive(Debug)]
pub struct OneLock<'a> {
    /// The client.
    redlock: &'a Redlock,
    /// The resource.
    resource: &'a str,
    /// The lock's TTL.
    ttl: Duration,
}

impl<'a> sealed::Target<'a> for OneLock<'a> {
    type Held = Lock;

    fn take(self, how: How) -> Taking<'a, Lock> {
        let span = acquisition_span!(
            how,
            "try_lock",
            "lock",
            "lock_timeout",
            "lock_fenced",
            "lock_fenced_timeout"
        );
        Box::pin(
            self.redlock
                .take_lock(self.resource, self.ttl, how)
                .instrument(span),
        )
    }

    fn lock_of(held: Lock) -> Lock {
        held
    }
}

impl Redlock {
    /// Takes the lock on `resource` for `ttl`: await what this returns to
    /// take it, waiting for it for up to `retry_count` times the average
    /// retry pause (`retry_delay + retry_jitter / 2`: 2 s with the
    /// defaults; no retries means one attempt); or first say how
    /// ([`Acquire`]): `.try_once()`, `.wait(d)`, `.fenced()`, `.run(f)`.
    ///
    /// How it waits: callers of this client for the same resource are served
    /// in arrival order, and only the first one contends. It tries once; if
    /// the lock is held, it joins the resource's waiting list on the nodes
    /// (ordered by when it started waiting: the releasing holder and clients
    /// that have seen the resource contended queue behind it; a client's
    /// first plain attempt on a resource it has not seen contended, and
    /// other Redlock libraries, do not) and tries again as soon as a quorum
    /// of nodes may have the lock free: when a node tells it the key changed
    /// (a release by any client, see
    /// [`RedlockBuilder::notifications`](crate::RedlockBuilder::notifications)), when
    /// the holder's key expires by the nodes' TTLs, or after
    /// [`RedlockBuilder::wait_cap`](crate::RedlockBuilder::wait_cap) without
    /// news. Nodes that fail make it
    /// pause `retry_delay` plus jitter.
    ///
    /// Dropping the future cancels it; a half-taken attempt is released and
    /// its place in the waiting lists given up in the background.
    ///
    /// Fenced (`.fenced()`): a fencing token is minted for it, a number
    /// strictly greater than every token handed to earlier holders of this
    /// resource, from the quorum counter, even if an earlier holder's lock
    /// expired without release. Give the token to the storage you write to
    /// and have it reject writes carrying a smaller token than it has seen
    /// ([`FencedRedis`](crate::FencedRedis), [`PgFence`](crate::PgFence)):
    /// that stops a holder that paused past its lock's validity from doing
    /// damage. Tokens follow the order in which holders took the lock: a
    /// lock is returned only if it was still valid when its token's
    /// compare-and-set reached a quorum; one that expired meanwhile (a slow
    /// link) is released and tried again within the same patience. What it
    /// costs: one compare-and-set round on every node after the lock (one
    /// more where another client minted since), and one small record per
    /// resource on every node, kept forever (it must never go back); name
    /// one counter for all resources with
    /// [`RedlockBuilder::fencing_counter`](crate::RedlockBuilder::fencing_counter)
    /// to keep it at one record (tokens then increase across all resources).
    ///
    /// # Errors
    ///
    /// Once awaited: [`Error::Timeout`] (saying how long it waited, and
    /// carrying the last attempt's error) when the patience runs out; with
    /// `.try_once()` (or no retries), [`Error::Contended`] when someone else
    /// holds it, [`Error::NoQuorum`] when too many nodes are unreachable,
    /// [`Error::TtlTooShort`] when the quorum took longer than the TTL
    /// allows; [`Error::InvalidConfig`] for an empty resource or an unusable
    /// TTL. Fenced: [`Error::Expired`] when every lock taken within the
    /// patience expired before its token was minted; if the token cannot be
    /// minted (no quorum) the lock is released and that error returned.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(redlock: redquorum::Redlock) -> redquorum::Result<()> {
    /// use std::time::Duration;
    /// let lock = redlock.lock("orders", Duration::from_secs(10)).await?;
    /// println!("held for another {:?}", lock.validity());
    /// lock.release().await?;
    ///
    /// match redlock.lock("report", Duration::from_secs(5)).try_once().await {
    ///     Ok(lock) => lock.release().await?,
    ///     Err(e) if e.is_contended() => println!("someone else is on it"),
    ///     Err(e) => return Err(e),
    /// }
    ///
    /// let lock = redlock.lock("invoice-42", Duration::from_secs(5)).fenced().await?;
    /// let token = lock.fencing_token().unwrap_or_default();
    /// // storage.write_if_token_at_least(token, ...)
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn lock<'a>(&'a self, resource: &'a str, ttl: Duration) -> Acquire<'a, OneLock<'a>> {
        Acquire::new(OneLock {
            redlock: self,
            resource,
            ttl,
        })
    }

    /// Takes the lock on `resource` as `how` says.
    async fn take_lock(&self, resource: &str, ttl: Duration, how: How) -> Result<Lock> {
        tracing::Span::current().record("resource", resource);
        let ttl_ms = self.check_resource(resource, ttl)?;
        let key = KeyAttempt::new(self, resource, self.key_for(resource), ttl, ttl_ms);
        let patience = how.patience(self, None);
        if how.fenced {
            let fence = self.fence_keys(resource);
            return self
                .fenced_with(&key, std::slice::from_ref(&fence), patience)
                .await;
        }
        match how.wait {
            Wait::Once => self.try_once(&key).await,
            _ => self.wait_for(&key, patience).await,
        }
    }

    /// One attempt to take the lock, no retries.
    ///
    /// # Errors
    ///
    /// As [`Redlock::lock`] with `.try_once()`.
    #[deprecated(since = "0.2.0", note = "use `lock(resource, ttl).try_once()`")]
    pub async fn try_lock(&self, resource: &str, ttl: Duration) -> Result<Lock> {
        self.lock(resource, ttl).try_once().await
    }

    /// One plain attempt at `what`, recorded as a `try` acquisition.
    pub(crate) async fn try_once(&self, what: &impl Attempts) -> Result<Lock> {
        let telemetry = &self.nodes().telemetry;
        let rec = telemetry.acquisition(what.primitive(), Mode::Try, what.resource());
        rec.attempted();
        let result = what.attempt(Ask::Plain).await;
        let result = result.map(|won| won.counted(rec.holding()));
        recorded(rec, result.map_err(|f| f.error))
    }

    /// Takes the lock, waiting for it for at most `wait`.
    ///
    /// # Errors
    ///
    /// As [`Redlock::lock`] with `.wait(wait)`.
    #[deprecated(since = "0.2.0", note = "use `lock(resource, ttl).wait(wait)`")]
    pub async fn lock_timeout(
        &self,
        resource: &str,
        ttl: Duration,
        wait: Duration,
    ) -> Result<Lock> {
        self.lock(resource, ttl).wait(wait).await
    }

    /// Takes the lock and mints a fencing token for it.
    ///
    /// # Errors
    ///
    /// As [`Redlock::lock`] with `.fenced()`.
    #[deprecated(since = "0.2.0", note = "use `lock(resource, ttl).fenced()`")]
    pub async fn lock_fenced(&self, resource: &str, ttl: Duration) -> Result<Lock> {
        self.lock(resource, ttl).fenced().await
    }

    /// Takes the lock and mints a fencing token, waiting for at most `wait`.
    ///
    /// # Errors
    ///
    /// As [`Redlock::lock`] with `.fenced().wait(wait)`.
    #[deprecated(
        since = "0.2.0",
        note = "use `lock(resource, ttl).fenced().wait(wait)`"
    )]
    pub async fn lock_fenced_timeout(
        &self,
        resource: &str,
        ttl: Duration,
        wait: Duration,
    ) -> Result<Lock> {
        self.lock(resource, ttl).fenced().wait(wait).await
    }

    /// The loop of a fenced acquisition (locks, permits, leadership,
    /// multi-locks): take it as `what` says, mint from the counter at each
    /// of `fences` at once (a multi-lock has one per resource), keep it
    /// only if it outlived the minting (the fencing order rule: every later
    /// holder takes it after the mint reached a quorum, and mints a larger
    /// number).
    pub(crate) async fn fenced_with(
        &self,
        what: &impl Attempts,
        fences: &[CounterKeys],
        patience: Patience,
    ) -> Result<Lock> {
        let resource = what.resource();
        let telemetry = &self.nodes().telemetry;
        let rec = telemetry.acquisition(what.primitive(), Mode::Fenced, resource);
        let result = self.fenced_loop(what, fences, patience, &rec).await;
        recorded(rec, result)
    }

    /// [`Redlock::fenced_with`]'s loop, its attempts counted in `rec`.
    async fn fenced_loop(
        &self,
        what: &impl Attempts,
        fences: &[CounterKeys],
        patience: Patience,
        rec: &Acquisition<'_>,
    ) -> Result<Lock> {
        let resource = what.resource();
        loop {
            let lock = self.wait_loop(what, patience, rec).await?;
            let mints = fences.iter().map(|fence| self.mint(fence));
            let minted: Result<Vec<u64>> =
                futures::future::join_all(mints).await.into_iter().collect();
            // Valid now means valid when the compare-and-sets were decided,
            // which was earlier.
            let error = match minted {
                Ok(tokens) if lock.is_valid() => return Ok(lock.with_fencing_tokens(tokens)),
                Ok(tokens) => {
                    debug!(
                        ?tokens,
                        "lock expired while its fencing token was minted; retrying"
                    );
                    Error::Expired {
                        resource: resource.to_owned(),
                    }
                }
                Err(e) => e,
            };
            if let Err(release) = lock.release().await {
                debug!(error = %release, "release after a fencing token that cannot be used");
            }
            if !error.is_expired() || patience.run_out() {
                return Err(error);
            }
        }
    }

    /// Runs `f` while holding the lock, extending it in the background.
    ///
    /// # Errors
    ///
    /// As [`Acquire::run`].
    #[deprecated(since = "0.2.0", note = "use `lock(resource, ttl).run(f)`")]
    pub async fn with_lock<F, Fut, T>(&self, resource: &str, ttl: Duration, f: F) -> Result<T>
    where
        F: FnOnce(LockHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        self.lock(resource, ttl).run(f).await
    }

    /// Takes one of our own locks (its key in the reserved namespace, see
    /// `keys.rs`), which only spaces its takers out: waiting as
    /// [`Redlock::lock`] does while another holds it, giving up at the first
    /// attempt that fails for want of nodes; `label` names it in errors and
    /// logs.
    pub(crate) async fn lock_internal(
        &self,
        label: &str,
        key: &str,
        ttl: Duration,
    ) -> Result<Lock> {
        let patience = Patience::while_held(self);
        let ttl_ms = self.config().check_ttl(ttl)?;
        let key = KeyAttempt::new(self, label, key.to_owned(), ttl, ttl_ms)
            .standing_for(Primitive::Internal);
        self.wait_for(&key, patience).await
    }
}
