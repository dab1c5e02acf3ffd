//! Taking the lock: [`Redlock::try_lock`], [`Redlock::lock`],
//! [`Redlock::lock_timeout`], [`Redlock::lock_fenced`] and
//! [`Redlock::with_lock`].
//!
//! `try_lock` is one attempt (`attempt.rs`). The others wait (`waiting.rs`):
//! callers of this client line up per resource, the front one makes a plain
//! attempt, then registers in the resource's waiting list on the nodes and
//! tries again whenever a quorum of nodes may have the lock free (`wait/`),
//! until its patience runs out.

use std::future::Future;
use std::time::Duration;

use tracing::{debug, instrument, warn};

use crate::counter::CounterKeys;
use crate::error::{Error, Result};
use crate::lock::attempt::{Ask, Attempts, KeyAttempt};
use crate::lock::guard::{Lock, LockHandle};
use crate::lock::patience::Patience;
use crate::lock::redlock::Redlock;
use crate::lock::waiting::recorded;
use crate::telemetry::labels::{Mode, Primitive};
use crate::telemetry::Acquisition;

impl Redlock {
    /// One attempt to take the lock, no retries.
    ///
    /// # Errors
    ///
    /// [`Error::Contended`] when someone else holds it, [`Error::NoQuorum`]
    /// when too many nodes are unreachable, [`Error::TtlTooShort`] when the quorum
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
    #[instrument(skip_all, fields(resource, outcome, rounds, nodes))]
    pub async fn try_lock(&self, resource: &str, ttl: Duration) -> Result<Lock> {
        tracing::Span::current().record("resource", resource);
        let ttl_ms = self.check_resource(resource, ttl)?;
        let key = KeyAttempt::new(self, resource, self.key_for(resource), ttl, ttl_ms);
        self.try_once(&key).await
    }

    /// One plain attempt at `what`, recorded as a `try` acquisition.
    pub(crate) async fn try_once(&self, what: &impl Attempts) -> Result<Lock> {
        let telemetry = &self.nodes().telemetry;
        let rec = telemetry.acquisition(what.primitive(), Mode::Try, what.resource());
        rec.attempted();
        let result = what.attempt(Ask::Plain).await;
        let result = result.map(|lock| lock.counted(rec.holding()));
        recorded(rec, result.map_err(|f| f.error))
    }

    /// Takes the lock, waiting for it for up to `retry_count` times the
    /// average retry pause (`retry_delay + retry_jitter / 2`: 2 s with the
    /// defaults; no retries means one attempt).
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
    /// # Errors
    ///
    /// [`Error::Timeout`] (saying how long it waited, and carrying the last
    /// attempt's error) when the patience runs out; with no retries, the
    /// errors of [`Redlock::try_lock`].
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
    #[instrument(skip_all, fields(resource, outcome, rounds, nodes))]
    pub async fn lock(&self, resource: &str, ttl: Duration) -> Result<Lock> {
        let patience = Patience::default_for(self);
        self.acquire(resource, ttl, patience).await
    }

    /// Takes the lock, waiting for it (as [`Redlock::lock`] does) for at most
    /// `wait`; the retry count does not apply. A zero `wait` means one
    /// attempt.
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
    #[instrument(skip_all, fields(resource, outcome, rounds, nodes))]
    pub async fn lock_timeout(
        &self,
        resource: &str,
        ttl: Duration,
        wait: Duration,
    ) -> Result<Lock> {
        self.acquire(resource, ttl, Patience::within(wait)).await
    }

    /// Takes the lock (as [`Redlock::lock`]) and mints a fencing token for it:
    /// a number strictly greater than every token handed to earlier holders
    /// of this resource, from the quorum counter, even if an earlier
    /// holder's lock expired without release.
    ///
    /// Give the token to the storage you write to and have it reject writes
    /// carrying a smaller token than it has seen: that stops a holder that
    /// paused past its lock's validity from doing damage.
    ///
    /// Tokens follow the order in which holders took the lock: a lock is
    /// returned only if it was still valid when its token's compare-and-set
    /// reached a quorum (every later holder takes the lock after that, and
    /// mints a larger token). A lock that expired while its token was minted
    /// (a slow link) is released and the attempt counts as failed; it is
    /// tried again within the same patience as [`Redlock::lock`].
    ///
    /// What it costs: one compare-and-set round on every node after the
    /// lock (this client guesses the counter is where it last minted; a
    /// guess another client overtook costs one more round); and the
    /// counter is one small record per resource on every
    /// node, kept forever (it must never go back). Fencing per entity
    /// (`invoice-7`, `invoice-8`, ...) grows memory with the entities; name
    /// one counter for all resources with
    /// [`RedlockBuilder::fencing_counter`](crate::RedlockBuilder::fencing_counter)
    /// to keep it at one record (tokens then increase across all resources).
    ///
    /// # Errors
    ///
    /// As [`Redlock::lock`]; [`Error::Expired`] when every lock taken within
    /// the patience expired before its token was minted; if the token cannot
    /// be minted (no quorum) the lock is released and that error returned.
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
    #[instrument(skip_all, fields(resource, outcome, rounds, nodes))]
    pub async fn lock_fenced(&self, resource: &str, ttl: Duration) -> Result<Lock> {
        let patience = Patience::default_for(self);
        self.fenced(resource, ttl, patience).await
    }

    /// Takes the lock and mints a fencing token (as
    /// [`Redlock::lock_fenced`]), waiting for at most `wait` (as
    /// [`Redlock::lock_timeout`]).
    ///
    /// # Errors
    ///
    /// As [`Redlock::lock_timeout`] and [`Redlock::lock_fenced`].
    #[instrument(skip_all, fields(resource, outcome, rounds, nodes))]
    pub async fn lock_fenced_timeout(
        &self,
        resource: &str,
        ttl: Duration,
        wait: Duration,
    ) -> Result<Lock> {
        self.fenced(resource, ttl, Patience::within(wait)).await
    }

    /// [`Redlock::lock_fenced`]'s loop for the lock on `resource`.
    async fn fenced(&self, resource: &str, ttl: Duration, patience: Patience) -> Result<Lock> {
        tracing::Span::current().record("resource", resource);
        let ttl_ms = self.check_resource(resource, ttl)?;
        let key = KeyAttempt::new(self, resource, self.key_for(resource), ttl, ttl_ms);
        let fence = self.fence_keys(resource);
        self.fenced_with(&key, std::slice::from_ref(&fence), patience)
            .await
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

    /// Runs `f` while holding the lock, extending it in the background. `f`
    /// gets a [`LockHandle`] to check validity or read the fencing token.
    ///
    /// If the lock is lost while `f` runs (the nodes said it is gone or
    /// someone else's, or its validity ran out), `f`'s future is dropped at its next `.await` and
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
        run_holding(lock, f).await
    }

    /// [`Redlock::lock`]'s waiting loop ([`Redlock::wait_for`]) for the
    /// lock on `resource`.
    async fn acquire(&self, resource: &str, ttl: Duration, patience: Patience) -> Result<Lock> {
        tracing::Span::current().record("resource", resource);
        let ttl_ms = self.check_resource(resource, ttl)?;
        let key = KeyAttempt::new(self, resource, self.key_for(resource), ttl, ttl_ms);
        self.wait_for(&key, patience).await
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

/// Runs `f` while holding `lock`, renewed in the background: released when
/// `f` finishes; `f` cancelled (dropped at its next `.await`) and
/// [`Error::Expired`] returned if the lock is lost first. Shared by
/// `with_lock` and the semaphore's `with_permit`.
pub(crate) async fn run_holding<F, Fut, T>(lock: Lock, f: F) -> Result<T>
where
    F: FnOnce(LockHandle) -> Fut,
    Fut: Future<Output = T>,
{
    lock.auto_extend();
    let work = f(lock.handle());
    tokio::select! {
        value = work => {
            if let Err(e) = lock.release().await {
                warn!(target: crate::telemetry::targets::WORK, error = %e, "release after the work failed; the key expires by itself");
            }
            Ok(value)
        }
        () = lock.lost() => {
            let resource = lock.resource().to_owned();
            warn!(target: crate::telemetry::targets::WORK, resource, "lock lost while the work was running; work cancelled");
            drop(lock);
            Err(Error::Expired { resource })
        }
    }
}
