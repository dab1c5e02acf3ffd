//! The [`Lock`] guard: validity, extension, release, auto-extension and the
//! "lock lost" signal.
//!
//! All holders of one lock (the guard, [`LockHandle`]s given to `with_lock`
//! work, the auto-extend task) share one `Shared` record; where the lock
//! stands (its deadline, lost or released) is in `standing.rs`.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use redis::Value;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, error, instrument, warn};

use crate::error::{Error, Result};
use crate::extensions::Extensions;
use crate::lock::redlock::{int_vote, valid_until, Redlock};
use crate::node::request::Request;
use crate::quorum::background::Background;
use crate::quorum::Counts;
use crate::scripts;
use crate::standing::{Standing, State};
use crate::telemetry::labels::LostReason;
use crate::telemetry::Holding;

/// What every holder of one lock shares.
#[derive(Debug)]
struct Shared {
    /// The client, for extend and release.
    redlock: Redlock,
    /// The resource as the caller named it.
    resource: String,
    /// The Redis key (prefix + resource; a semaphore's slot).
    key: String,
    /// The key whose line of waiters its release concerns: the lock key, or
    /// the semaphore's.
    line: String,
    /// Our random value: proves ownership to the compare-and-X scripts.
    value: String,
    /// The TTL the lock was taken with; auto-extension renews to it.
    ttl: Duration,
    /// Fencing token minted right after acquisition, if asked for.
    fencing_token: Option<u64>,
    /// Taken after waiting: its release asks whether others wait.
    contended: bool,
    /// Validity and status, observable by `lost()` waiters.
    state: Standing,
    /// Set once an auto-extend task was started, so there is only one.
    watchdog: AtomicBool,
    /// Extensions sent and not yet overtaken by a confirmed later one: what
    /// bounds the validity (see `extensions.rs`).
    extensions: Mutex<Extensions>,
    /// How the telemetry counts it (held, released, lost).
    holding: Holding,
}

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

/// A cheap, cloneable view of a held lock, as given to [`Redlock::with_lock`]
/// work: check validity, wait for loss, read the fencing token. Holding one
/// does not keep the lock.
#[derive(Clone, Debug)]
pub struct LockHandle {
    /// The shared record.
    shared: Arc<Shared>,
}

impl Lock {
    /// Wraps a freshly acquired lock on `keys.0`, whose waiters line up on
    /// `keys.1`.
    pub(crate) fn new(
        redlock: Redlock,
        resource: &str,
        (key, line): (&str, &str),
        value: String,
        ttl: Duration,
        valid_until: Instant,
        contended: bool,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                redlock,
                resource: resource.to_owned(),
                key: key.to_owned(),
                line: line.to_owned(),
                value,
                ttl,
                fencing_token: None,
                contended,
                state: Standing::new(valid_until),
                watchdog: AtomicBool::new(false),
                extensions: Mutex::default(),
                holding: Holding::untracked(),
            }),
            runtime: tokio::runtime::Handle::current(),
            armed: true,
        }
    }

    /// Counts it as `holding` says (right after acquisition, before
    /// sharing).
    pub(crate) fn counted(mut self, holding: Holding) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.holding = holding;
        }
        self
    }

    /// Attaches the fencing token (right after acquisition, before sharing).
    pub(crate) fn with_fencing_token(mut self, token: u64) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.fencing_token = Some(token);
        }
        self
    }

    /// The resource name.
    pub fn resource(&self) -> &str {
        &self.shared.resource
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
        self.shared.state.deadline()
    }

    /// Why the lock was marked lost (the failed extension's error, or
    /// [`Error::Expired`] when validity ran out), or `None` while it is not.
    pub fn lost_reason(&self) -> Option<Error> {
        self.shared.state.lost_because()
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

    /// The fencing token, for locks from [`Redlock::lock_fenced`]: strictly
    /// greater than every token handed to earlier holders of this resource.
    /// Pass it to the storage you write to and have it reject smaller tokens.
    pub fn fencing_token(&self) -> Option<u64> {
        self.shared.fencing_token
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
        let tally = s
            .redlock
            .release_round(&s.key, &s.value, s.contended, &s.line)
            .await;
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
    /// `ttl × auto_extend_fraction` until it is released or dropped. If a
    /// renewal fails, the lock is marked lost and [`Lock::lost`] resolves.
    /// Calling it again starts nothing new.
    pub fn auto_extend(&self) {
        if self.shared.watchdog.swap(true, Ordering::AcqRel) {
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

    /// Resolves when the lock is lost: an extension failed, or its validity
    /// ran out without being extended. Use it in `select!` next to the work
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
            let tally = shared
                .redlock
                .release_round(&shared.key, &shared.value, shared.contended, &shared.line)
                .await;
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
        self.shared.state.deadline()
    }

    /// See [`Lock::lost_reason`].
    pub fn lost_reason(&self) -> Option<Error> {
        self.shared.state.lost_because()
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
        self.shared.fencing_token
    }

    /// See [`Lock::lost`].
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.shared.lost()
    }
}

impl Shared {
    /// Marks it released (the auto-extend task stops) and counts the
    /// release with the validity it had left.
    fn releasing(&self) {
        let left = self.validity();
        self.state.mark_released();
        let telemetry = &self.redlock.nodes().telemetry;
        self.holding.released(telemetry, left);
    }

    /// Marks it lost for `because` and counts the loss as `reason`.
    /// Counted first, so whoever `lost()` wakes sees the loss counted.
    fn lose(&self, because: Error, reason: LostReason) {
        let telemetry = &self.redlock.nodes().telemetry;
        self.holding.lost(telemetry, reason);
        self.state.mark_lost(because);
    }

    /// Validity left, zero if lost.
    fn validity(&self) -> Duration {
        self.state.validity()
    }

    /// See [`Lock::ensure_valid`].
    fn ensure_valid(&self, min_remaining: Duration) -> Result<Duration> {
        self.state.ensure_valid(&self.resource, min_remaining)
    }

    /// See [`Lock::extend`] (and `extensions.rs` for the validity rule).
    #[instrument(skip_all, fields(resource = %self.resource, outcome, nodes))]
    async fn extend(&self, ttl: Duration) -> Result<()> {
        let start = Instant::now();
        let result = self.extend_round(ttl, start).await;
        let ok = result.is_ok();
        tracing::Span::current().record("outcome", if ok { "extended" } else { "failed" });
        let telemetry = &self.redlock.nodes().telemetry;
        telemetry.extension(self.holding.primitive(), start.elapsed(), ok);
        result
    }

    /// The extension's round, started at `start`.
    async fn extend_round(&self, ttl: Duration, start: Instant) -> Result<()> {
        let redlock = &self.redlock;
        let ttl_ms = redlock.config().check_ttl(ttl)?;
        let drift = redlock.config().drift(ttl);
        let (seq, old) = {
            let mut ext = Extensions::locked(&self.extensions);
            let old = self.state.now();
            if old.lost || start >= old.valid_until {
                // Never extend a lock that has already expired: someone else
                // may hold it by now, and we could not tell.
                return Err(Error::Expired {
                    resource: self.resource.clone(),
                });
            }
            // From here the extension may take effect on any node: the
            // lock is ours at most until what it would leave.
            let bound = start + ttl.saturating_sub(drift);
            self.state.lower_to(bound);
            (ext.send(bound), old)
        };
        let req = Request::script(&scripts::EXTEND, |cmd| {
            cmd.arg(1).arg(&self.key).arg(&self.value).arg(ttl_ms);
        });
        let (tally, stragglers) = redlock
            .nodes()
            .vote_round(&req, "extend", Counts::Trusted, int_vote)
            .await;
        stragglers.finish_in_background();
        let now = Instant::now();
        match (tally.decided(), valid_until(start, now, ttl, drift)) {
            (Some(true), Some(until)) if now < old.valid_until => {
                let mut ext = Extensions::locked(&self.extensions);
                if let Some(until) = ext.confirm(seq, until) {
                    self.state.set_until(until);
                }
                debug!(validity = ?self.validity(), "extended");
                Ok(())
            }
            (Some(true), _) => Err(Error::Expired {
                resource: self.resource.clone(),
            }),
            _ => Err(redlock.failure_or_expired(&self.resource, &self.key, tally)),
        }
    }

    /// See [`Lock::is_held`].
    async fn is_held(&self) -> Result<bool> {
        let redlock = &self.redlock;
        let mut cmd = redis::cmd("GET");
        cmd.arg(&self.key);
        let req = Request::plain(cmd);
        let ours = |_: usize, v: &Value| match v {
            Value::BulkString(b) => Some(b == self.value.as_bytes()),
            Value::Nil => Some(false),
            _ => None,
        };
        let (tally, _) = redlock
            .nodes()
            .vote_round(&req, "get", Counts::Trusted, ours)
            .await;
        match tally.decided() {
            Some(true) => Ok(true),
            _ if tally.failures_prevent_quorum() => {
                Err(redlock.failure(&self.resource, &self.key, tally))
            }
            _ => Ok(false),
        }
    }

    /// See [`Lock::lost`].
    fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.state.lost()
    }
}

/// The auto-extend loop. Holds only a `Weak`, so it stops by itself once the
/// lock is released or every holder dropped it.
async fn watchdog(weak: Weak<Shared>, mut rx: watch::Receiver<State>, interval: Duration) {
    loop {
        let sleep = tokio::time::sleep(interval);
        tokio::pin!(sleep);
        // Wake early if the lock is released, so the task does not linger.
        loop {
            tokio::select! {
                () = &mut sleep => break,
                changed = rx.changed() => {
                    let st = *rx.borrow_and_update();
                    if changed.is_err() || st.released || st.lost {
                        return;
                    }
                }
            }
        }
        let Some(shared) = weak.upgrade() else { return };
        let st = shared.state.now();
        if st.released || st.lost {
            return;
        }
        match shared.extend(shared.ttl).await {
            Ok(()) => {}
            Err(e) => {
                if shared.state.now().released {
                    return;
                }
                error!(resource = %shared.resource, error = %e, "auto-extend failed: lock lost");
                shared.lose(e, LostReason::ExtendFailed);
                return;
            }
        }
        let _ = rx.borrow_and_update();
        if shared.validity().is_zero() {
            warn!(resource = %shared.resource, "lock validity ran out");
            let expired = Error::Expired {
                resource: shared.resource.clone(),
            };
            shared.lose(expired, LostReason::ValidityRanOut);
            return;
        }
    }
}
