//! The [`Lock`] guard: validity, extension, release, auto-extension and the
//! "lock lost" signal.
//!
//! All holders of one lock (the guard, [`LockHandle`]s given to `.run(f)`
//! work, the auto-extend task) share one record (`shared.rs`, with the
//! extension round and the auto-extend loop), made whole when the lock
//! was won (`won.rs`); where the lock stands (its deadline, lost or
//! released) and all of it that changes is in `standing.rs`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, instrument};

use crate::clock;
use crate::error::{Error, Result};
use crate::fenced_writes::Fence;
use crate::lock::renewal::watchdog;
use crate::lock::shared::Shared;
use crate::quorum::background::Background;

/// A held distributed lock.
///
/// Release it with [`Lock::release`]. If it is dropped instead, a best-effort
/// release is spawned on the runtime it was acquired on (never blocking in
/// `Drop`), and otherwise the key expires after its TTL. A `Lock` is `Send` and
/// can move between tasks.
///
/// # Examples
///
/// ```no_run
/// # async fn f(redlock: redquorum::Redlock) -> redquorum::Result<()> {
/// use std::time::Duration;
/// let lock = redlock.lock("orders", Duration::from_secs(5)).await?;
/// lock.ensure_valid(Duration::from_millis(500))?; // cheap local check
/// lock.extend(Duration::from_secs(5)).await?;
/// lock.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping a Lock releases it in the background; call release().await"]
#[derive(Debug)]
pub struct Lock {
    /// The shared record.
    shared: Arc<Shared>,
    /// Where the drop-time release runs (no async work in `Drop`).
    runtime: tokio::runtime::Handle,
    /// False once `release()` took over, so `Drop` does nothing.
    armed: bool,
}

/// A cheap, cloneable view of a held lock, as given to [`Acquire::run`](crate::Acquire::run)
/// work: check validity, wait for loss, read the fencing token. Holding one
/// does not keep the lock.
#[derive(Clone, Debug)]
pub struct LockHandle {
    /// The shared record.
    shared: Arc<Shared>,
}

impl Lock {
    /// The lock `shared` describes, just won: held from here on, and
    /// watched for its validity running out unrenewed (counted lost then,
    /// not held until someone releases it). The watch ends as soon as it
    /// is released or lost and never keeps the lock alive; it also cuts the
    /// validity when a node the lock is held on is seen running its clock
    /// ahead (`Basis`).
    pub(crate) fn start(shared: Shared, runtime: tokio::runtime::Handle) -> Self {
        let lock = Self {
            shared: Arc::new(shared),
            runtime,
            armed: true,
        };
        let weak = Arc::downgrade(&lock.shared);
        let mut rx = lock.shared.state.subscribe();
        let mut news = lock.shared.redlock.nodes().clock_news();
        lock.runtime.spawn(async move {
            loop {
                let st = *rx.borrow_and_update();
                if st.released || st.lost {
                    return;
                }
                tokio::select! {
                    changed = rx.changed() => if changed.is_err() { return },
                    changed = news.changed() => {
                        let Some(shared) = weak.upgrade() else { return };
                        if changed.is_ok() {
                            shared.clock_jumped();
                        }
                    }
                    () = tokio::time::sleep_until(clock::timer(st.valid_until)) => break,
                }
            }
            if let Some(shared) = weak.upgrade() {
                shared.expired_unrenewed();
            }
        });
        lock
    }

    /// Attaches the fencing token (right after acquisition).
    pub(crate) fn with_fencing_token(self, token: u64) -> Self {
        self.shared.state.set_tokens(vec![token]);
        self
    }

    /// Attaches a multi-lock's fencing tokens, one per resource in its
    /// order (right after acquisition).
    pub(crate) fn with_fencing_tokens(self, tokens: Vec<u64>) -> Self {
        self.shared.state.set_tokens(tokens);
        self
    }

    /// The resource name; for a lock on several resources
    /// ([`Redlock::lock_all`](crate::Redlock::lock_all)), their names in key order joined by `+`.
    pub fn resource(&self) -> &str {
        &self.shared.resource
    }

    /// The resources held: the one resource, or a multi-lock's in key
    /// order, each once.
    pub fn resources(&self) -> Vec<&str> {
        self.shared.resources()
    }

    /// The fencing token of `resource`, one of those held, for locks from
    /// a fenced [`Redlock::lock`](crate::Redlock::lock) or [`Redlock::lock_all`](crate::Redlock::lock_all); `None`
    /// otherwise.
    pub fn fencing_token_for(&self, resource: &str) -> Option<u64> {
        self.shared.token_for(resource)
    }

    /// The Redis key held.
    pub(crate) fn key(&self) -> &str {
        &self.shared.key
    }

    /// Our random value in the key, which proves ownership.
    pub(crate) fn value(&self) -> &str {
        &self.shared.value
    }

    /// Time left before the lock may expire on the nodes (monotonic clock,
    /// with the drift allowance already taken off). Zero once expired or lost.
    pub fn validity(&self) -> Duration {
        self.shared.validity()
    }

    /// The instant (monotonic clock) the lock's validity ends by this
    /// client's count, also after a failed extension marked it lost:
    /// [`Lock::validity`] then reads zero, but no other client can take the
    /// lock before this instant (unless a node forgot our key or someone
    /// deleted it). Work that must stop before anyone else can hold the
    /// lock stops by then (the CLI kills a command whose lock was lost no
    /// later than this).
    pub fn valid_until(&self) -> Instant {
        clock::timer(self.shared.state.deadline())
    }

    /// Why the lock is lost (the failed extension's error, or
    /// [`Error::Expired`] once its validity ran out, renewed or not), or
    /// `None` while it is valid or after its release.
    pub fn lost_reason(&self) -> Option<Error> {
        self.shared.lost_reason()
    }

    /// True while [`Lock::validity`] is above zero and no extension failed.
    pub fn is_valid(&self) -> bool {
        !self.validity().is_zero()
    }

    /// Cheap local check before a guarded write: fails unless at least
    /// `min_remaining` of validity is left. Returns the validity left.
    ///
    /// # Errors
    ///
    /// [`Error::Expired`] when the lock is gone (validity ran out, or an
    /// extension failed), [`Error::ValidityTooShort`] when it is still ours
    /// but for less than `min_remaining`.
    pub fn ensure_valid(&self, min_remaining: Duration) -> Result<Duration> {
        self.shared.ensure_valid(min_remaining)
    }

    /// The fencing token, for locks taken fenced ([`Acquire::fenced`](crate::Acquire::fenced)): strictly
    /// greater than every token handed to earlier holders of this resource.
    /// Pass it to the storage you write to and have it reject smaller tokens.
    /// A fenced multi-lock has one per resource
    /// ([`Lock::fencing_token_for`]); this is its first resource's.
    pub fn fencing_token(&self) -> Option<u64> {
        self.shared.state.token(0)
    }

    /// What a write under this lock carries to storage that checks
    /// tokens ([`crate::FencedRedis`]): the resource and its fencing token; `None`
    /// for a lock taken without one. A multi-lock's first resource; see
    /// [`Lock::fence_for`].
    pub fn fence(&self) -> Option<Fence<'_>> {
        self.shared.fence()
    }

    /// [`Lock::fence`] for `resource`, one of a fenced multi-lock's.
    pub fn fence_for(&self, resource: &str) -> Option<Fence<'_>> {
        self.shared.fence_for(resource)
    }

    /// Resets the lock's TTL to `ttl` from now on a quorum of nodes.
    ///
    /// Refuses locally, with no network traffic, if the lock already expired.
    /// Succeeds only if a quorum extended it *and* the extension completed
    /// within the current validity; the new validity is measured from the
    /// extension's own start.
    ///
    /// What a failed extension means: it deletes nothing, but it may still
    /// have been applied on some nodes (a slow node applies it after we
    /// stopped waiting). So before it is sent, the validity is lowered to
    /// what the extension would leave (`ttl` from its start, less the drift
    /// allowance) if that is shorter, and only a confirmed extension raises
    /// it. An `extend` with a shorter TTL than the lock has left therefore
    /// shortens the lock, whether it succeeds or fails. Several extensions
    /// of one lock in flight at once count in the order they were sent, as
    /// the nodes apply them: the validity never exceeds what the last one
    /// sent would leave.
    ///
    /// # Errors
    ///
    /// [`Error::Expired`] when the lock expired or a quorum no longer holds our
    /// value, [`Error::NoQuorum`] when too many nodes failed,
    /// [`Error::InvalidConfig`] for an unusable TTL.
    pub async fn extend(&self, ttl: Duration) -> Result<()> {
        self.shared.extend(ttl).await
    }

    /// Asks a quorum whether our value is still there (is it still mine?).
    ///
    /// # Errors
    ///
    /// [`Error::NoQuorum`] when too few nodes answered to tell.
    pub async fn is_held(&self) -> Result<bool> {
        self.shared.is_held().await
    }

    /// Releases the lock on all nodes (compare-and-delete, so a lock that
    /// expired and was taken by someone else is left alone). Returns once a
    /// quorum answered; slower nodes are finished in the background.
    ///
    /// # Errors
    ///
    /// [`Error::Expired`] when a quorum no longer held our value (it had
    /// expired: what you did under it may have overlapped another holder),
    /// [`Error::NoQuorum`] when too many nodes failed to answer (the key then
    /// expires by its TTL).
    #[instrument(skip_all, fields(resource = %self.shared.resource, outcome, nodes))]
    pub async fn release(mut self) -> Result<()> {
        self.armed = false;
        self.shared.releasing();
        let s = &self.shared;
        let tally = s.release_round().await;
        let released = tally.decided() == Some(true);
        tracing::Span::current().record("outcome", if released { "released" } else { "failed" });
        if released {
            debug!("released");
            Ok(())
        } else {
            Err(s.redlock.failure_or_expired(&s.resource, &s.key, tally))
        }
    }

    /// Starts renewing the lock in the background every
    /// `ttl × auto_extend_fraction`, or sooner where the validity left
    /// calls for it (a renewal starts at least twice the latest round's
    /// duration before the validity ends), until it is released or
    /// dropped. A renewal that fails for want of answers (nodes slow,
    /// paused or cut off) is tried again, sooner as the validity left
    /// shrinks; the lock is marked lost, and [`Lock::lost`] resolves, when
    /// its validity runs out unrenewed or the nodes say it is gone or
    /// someone else's.
    /// Calling it again starts nothing new.
    pub fn auto_extend(&self) {
        if !self.shared.state.start_renewing() {
            return;
        }
        let interval = self
            .shared
            .ttl
            .mul_f64(self.shared.redlock.config().auto_extend_fraction);
        let weak = Arc::downgrade(&self.shared);
        let rx = self.shared.state.subscribe();
        self.runtime.spawn(watchdog(weak, rx, interval));
    }

    /// Resolves when the lock is lost: the nodes said it is gone or someone
    /// else's, or its validity ran out without being extended. Use it in `select!` next to the work
    /// the lock protects.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.shared.lost()
    }

    /// A cloneable view of this lock for other tasks.
    pub fn handle(&self) -> LockHandle {
        LockHandle {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.shared.releasing();
        let shared = Arc::clone(&self.shared);
        let token = Background::enter(&shared.redlock.nodes().background);
        // Best effort: if the runtime is gone the task is dropped and the key
        // expires by its TTL.
        self.runtime.spawn(async move {
            let _token = token;
            let tally = shared.release_round().await;
            if tally.decided() != Some(true) {
                debug!(resource = %shared.resource, "drop-time release did not reach a quorum");
            }
        });
    }
}

impl LockHandle {
    /// The resource name.
    pub fn resource(&self) -> &str {
        &self.shared.resource
    }

    /// See [`Lock::validity`].
    pub fn validity(&self) -> Duration {
        self.shared.validity()
    }

    /// See [`Lock::valid_until`].
    pub fn valid_until(&self) -> Instant {
        clock::timer(self.shared.state.deadline())
    }

    /// See [`Lock::lost_reason`].
    pub fn lost_reason(&self) -> Option<Error> {
        self.shared.lost_reason()
    }

    /// See [`Lock::is_valid`].
    pub fn is_valid(&self) -> bool {
        !self.validity().is_zero()
    }

    /// See [`Lock::ensure_valid`].
    ///
    /// # Errors
    ///
    /// [`Error::Expired`] when the lock is gone (validity ran out, or an
    /// extension failed), [`Error::ValidityTooShort`] when it is still ours
    /// but for less than `min_remaining`.
    pub fn ensure_valid(&self, min_remaining: Duration) -> Result<Duration> {
        self.shared.ensure_valid(min_remaining)
    }

    /// See [`Lock::fencing_token`].
    pub fn fencing_token(&self) -> Option<u64> {
        self.shared.state.token(0)
    }

    /// See [`Lock::fence`].
    pub fn fence(&self) -> Option<Fence<'_>> {
        self.shared.fence()
    }

    /// See [`Lock::fence_for`].
    pub fn fence_for(&self, resource: &str) -> Option<Fence<'_>> {
        self.shared.fence_for(resource)
    }

    /// See [`Lock::fencing_token_for`].
    pub fn fencing_token_for(&self, resource: &str) -> Option<u64> {
        self.shared.token_for(resource)
    }

    /// See [`Lock::resources`].
    pub fn resources(&self) -> Vec<&str> {
        self.shared.resources()
    }

    /// See [`Lock::lost`].
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.shared.lost()
    }
}
