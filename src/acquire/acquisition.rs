//! One way to acquire anything: [`Acquire`], what `Redlock::lock`,
//! `lock_all`, `RwLock::read` and `write`, `Semaphore::acquire` and
//! `Election::campaign` return. It is awaited as it is (it waits as the
//! primitive does by default), or first told how: `.wait(d)` for at most
//! `d`, `.try_once()` for one attempt, `.fenced()` for a fencing token;
//! `.run(f)` runs work with it held, renewed meanwhile, and releases it.
//!
//! Each primitive says how it is taken (the sealed [`Acquirable`]); this
//! file knows none of them.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::pin::Pin;
use std::time::Duration;

use crate::acquire::patience::Patience;
use crate::client::redlock::Redlock;
use crate::error::{Error, Result};
use crate::lock::guard::{Lock, LockHandle};

pub(crate) use sealed::{How, Wait};

/// A taking in progress, boxed so that every primitive's has one type.
pub(crate) type Taking<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

/// The span of an acquisition made as `how` says, named for that form
/// among the five given (one attempt, waiting, waiting at most a time,
/// fenced, fenced waiting at most a time): the names the older methods
/// had, so that what an operator filters on stays. Its fields are the
/// ones an acquisition records (`resource`, `semaphore` or `election`,
/// `outcome`, `rounds`, `nodes`).
macro_rules! acquisition_span {
    ($how:expr, $once:literal, $wait:literal, $within:literal, $fenced:literal, $fenced_within:literal) => {{
        use $crate::acquire::acquisition::Wait;
        let how = $how;
        match (how.fenced, how.wait) {
            (false, Wait::Once) => acquisition_span!(@ $once),
            (false, Wait::Default) => acquisition_span!(@ $wait),
            (false, Wait::Within(_)) => acquisition_span!(@ $within),
            (true, Wait::Default) => acquisition_span!(@ $fenced),
            (true, _) => acquisition_span!(@ $fenced_within),
        }
    }};
    (@ $name:literal) => {
        tracing::info_span!(
            $name,
            resource = tracing::field::Empty,
            semaphore = tracing::field::Empty,
            election = tracing::field::Empty,
            outcome = tracing::field::Empty,
            rounds = tracing::field::Empty,
            nodes = tracing::field::Empty,
        )
    };
}

pub(crate) use acquisition_span;

/// The sealed part of [`Acquirable`]: what each primitive implements.
pub(crate) mod sealed {
    use std::time::Duration;

    use super::{Lock, Patience, Redlock, Taking};

    /// How long an acquisition waits.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Wait {
        /// As the primitive waits by default (a lock: `retry_count` pauses).
        Default,
        /// For at most this long (zero: one attempt).
        Within(Duration),
        /// One attempt, no waiting.
        Once,
    }

    /// How an acquisition is to be made.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct How {
        /// How long it waits.
        pub(crate) wait: Wait,
        /// Whether it mints a fencing token.
        pub(crate) fenced: bool,
    }

    impl How {
        /// The patience its waiting loop has on `redlock`, where `default` is
        /// the primitive's own (`None`: the lock's).
        pub(crate) fn patience(self, redlock: &Redlock, default: Option<Patience>) -> Patience {
            match self.wait {
                Wait::Default => default.unwrap_or_else(|| Patience::default_for(redlock)),
                Wait::Within(wait) => Patience::within(wait),
                Wait::Once => Patience::within(Duration::ZERO),
            }
        }
    }

    /// How a primitive is taken.
    pub trait Target<'a>: Send + 'a {
        /// What holding it is.
        type Held: Send + 'a;

        /// Takes it as `how` says.
        fn take(self, how: How) -> Taking<'a, Self::Held>;

        /// The lock under what is held (for [`super::Acquire::run`]).
        fn lock_of(held: Self::Held) -> Lock;

        /// `taking`, giving the lock under what it takes.
        fn lock_of_taken(taking: Taking<'a, Self::Held>) -> Taking<'a, Lock> {
            Box::pin(async move { taking.await.map(Self::lock_of) })
        }
    }
}

/// What an [`Acquire`] takes: a lock on one resource or on several, a read
/// or a write of a [`RwLock`](crate::RwLock), a [`Permit`](crate::Permit),
/// a [`Leadership`](crate::Leadership). Implemented by this crate's
/// primitives only.
pub trait Acquirable<'a>: sealed::Target<'a> {}

impl<'a, T: sealed::Target<'a>> Acquirable<'a> for T {}

/// An acquisition not yet started: await it to take what it names, or
/// first say how.
///
/// # Examples
///
/// ```no_run
/// # async fn f(redlock: redquorum::Redlock) -> redquorum::Result<()> {
/// use std::time::Duration;
/// let ttl = Duration::from_secs(10);
/// // Waits as the client is configured to (retry_count pauses).
/// let lock = redlock.lock("orders", ttl).await?;
/// lock.release().await?;
/// // One attempt; at most 3 s; with a fencing token.
/// let lock = redlock.lock("orders", ttl).try_once().await?;
/// lock.release().await?;
/// let lock = redlock.lock("orders", ttl).wait(Duration::from_secs(3)).await?;
/// lock.release().await?;
/// let lock = redlock.lock("invoice-7", ttl).fenced().await?;
/// let token = lock.fencing_token();
/// lock.release().await?;
/// // Work with the lock held, renewed meanwhile, released after.
/// let n = redlock.lock("report", ttl).run(|held| async move { 42 }).await?;
/// # Ok(()) }
/// ```
#[must_use = "an acquisition does nothing until it is awaited or run"]
pub struct Acquire<'a, T: Acquirable<'a>> {
    /// What it takes.
    target: T,
    /// How.
    how: How,
    /// The borrow `T` holds.
    _borrow: PhantomData<&'a ()>,
}

impl<'a, T: Acquirable<'a>> Acquire<'a, T> {
    /// An acquisition of `target`, made as the primitive does by default.
    pub(crate) fn new(target: T) -> Self {
        Self {
            target,
            how: How {
                wait: Wait::Default,
                fenced: false,
            },
            _borrow: PhantomData,
        }
    }

    /// Waits for at most `wait` (the retry count does not apply); zero
    /// means one attempt.
    ///
    /// # Errors
    ///
    /// Once awaited: [`Error::Timeout`](crate::Error::Timeout) (carrying
    /// the last attempt's error) when `wait` runs out.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.how.wait = Wait::Within(wait);
        self
    }

    /// Makes one attempt, no retries: someone else holding it is
    /// [`Error::Contended`](crate::Error::Contended) at once.
    pub fn try_once(mut self) -> Self {
        self.how.wait = Wait::Once;
        self
    }

    /// Mints a fencing token once it is taken (see
    /// [`Lock::fencing_token`]): a number larger than every earlier
    /// holder's. What is returned was still valid when its token was
    /// minted. A leadership always has its term.
    pub fn fenced(mut self) -> Self {
        self.how.fenced = true;
        self
    }

    /// Takes it, then runs `f` while holding it, renewed in the background,
    /// and releases it when `f` finishes. If it is lost while `f` runs (the
    /// nodes said it is gone or someone else's, or its validity ran out),
    /// `f`'s future is dropped at its next `.await`.
    ///
    /// # Errors
    ///
    /// The acquisition's errors, or [`Error::Expired`](crate::Error::Expired)
    /// if it was lost while `f` ran.
    pub fn run<F, Fut, R>(self, f: F) -> impl Future<Output = Result<R>> + 'a
    where
        F: FnOnce(LockHandle) -> Fut + 'a,
        Fut: Future<Output = R> + 'a,
        R: 'a,
    {
        // Started here, so that the future returned names no `T` (whose
        // lifetime would make it not `Send` for `tokio::spawn`).
        let taking = T::lock_of_taken(self.target.take(self.how));
        async move { holding(taking.await?, f).await }
    }
}

impl<'a, T: Acquirable<'a>> IntoFuture for Acquire<'a, T> {
    type Output = Result<T::Held>;
    type IntoFuture = Taking<'a, T::Held>;

    fn into_future(self) -> Self::IntoFuture {
        self.target.take(self.how)
    }
}

impl<'a, T: Acquirable<'a>> fmt::Debug for Acquire<'a, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Acquire")
            .field("wait", &self.how.wait)
            .field("fenced", &self.how.fenced)
            .finish_non_exhaustive()
    }
}

/// Runs `f` while holding `lock`, renewed in the background: released when
/// `f` finishes; `f` cancelled (dropped at its next `.await`) and
/// [`Error::Expired`] returned if the lock is lost first. What `.run(f)`
/// does once it holds.
async fn holding<F, Fut, T>(lock: Lock, f: F) -> Result<T>
where
    F: FnOnce(LockHandle) -> Fut,
    Fut: Future<Output = T>,
{
    lock.auto_extend();
    let work = f(lock.handle());
    tokio::select! {
        value = work => {
            if let Err(e) = lock.release().await {
                tracing::warn!(target: crate::telemetry::targets::WORK, error = %e, "release after the work failed; the key expires by itself");
            }
            Ok(value)
        }
        () = lock.lost() => {
            let resource = lock.resource().to_owned();
            tracing::warn!(target: crate::telemetry::targets::WORK, resource, "lock lost while the work was running; work cancelled");
            drop(lock);
            Err(Error::Expired { resource })
        }
    }
}
