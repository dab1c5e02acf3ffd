//! The quorum semaphore: at most `permits` holders at once.
//!
//! A semaphore of K permits is K slot keys, each an ordinary quorum lock,
//! so there is at most one valid holder per slot and at most K in all, for
//! every K, while any minority of nodes is down, slow or unreachable; and a
//! permit has everything a lock has (validity, extension, the lost signal,
//! fencing). The obvious alternative, every node admitting K holders and a
//! majority deciding, admits more than K once K >= 2: with five nodes and
//! K = 2, three holders can each win three nodes while no node admits more
//! than two.
//!
//! Taking a permit is one round in the common case: one script per node
//! takes a free slot (`attempt.rs`): the one of the attempt's rank among
//! the waiters, counting free slots in slot order on every node, so
//! waiters woken together take distinct slots and the same ones
//! everywhere; the slot a quorum took is ours (`slots.rs`), and the
//! winner fills it where it was free on the other nodes, so the next
//! waiter does not take it there and another slot elsewhere. Waiting is
//! the lock's: callers of this client line up, a waiter registers in the
//! semaphore's waiting list on the nodes, ordered by when it started
//! waiting (a caller behind others of its client registers as it arrives,
//! so the list is in arrival order across clients), and may take a slot on
//! a node only while fewer live waiters are ahead of it than slots are
//! free there; it is woken by the release that lets it in (which names
//! it on the semaphore's channel, `wait/named.rs`), by the slots' TTLs, or
//! by this client's own release.
//!
//! A name is one lock whichever kind takes it: permits keep a mark on the
//! name's lock key while they are held, are taken only where that key is
//! free or holds their mark, and yield to a live waiter on the name's list
//! that came before them (`scripts.rs`); a waiter kept out by the name
//! also reads its key, whose change wakes it (`attempt.rs`).

pub(crate) mod attempt;
pub(crate) mod handle;
pub(crate) mod keys;
pub(crate) mod permit;
pub(crate) mod scripts;
pub(crate) mod slots;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tracing::Instrument;

use crate::acquire::acquisition::{acquisition_span, sealed, Acquire, How, Taking, Wait};
use crate::acquire::patience::Patience;
use crate::error::{Error, Result};
use crate::lock::guard::{Lock, LockHandle};
use crate::lock::inspect::LockState;
use crate::pin;
use crate::semaphore::attempt::SlotAttempt;
use crate::semaphore::handle::Semaphore;
use crate::semaphore::permit::Permit;

/// What [`Semaphore::acquire`] takes: one of its permits.
#[derive(Debug)]
pub struct PermitOf<'a> {
    /// The semaphore.
    semaphore: &'a Semaphore,
    /// The permit's TTL.
    ttl: Duration,
}

impl<'a> sealed::Target<'a> for PermitOf<'a> {
    type Held = Permit;

    fn take(self, how: How) -> Taking<'a, Permit> {
        let span = acquisition_span!(
            how,
            "try_acquire",
            "acquire",
            "acquire_timeout",
            "acquire_fenced",
            "acquire_fenced_timeout"
        );
        span.record("semaphore", self.semaphore.name.as_str());
        Box::pin(self.semaphore.take(self.ttl, how).instrument(span))
    }

    fn lock_of(held: Permit) -> Lock {
        held.into_lock()
    }
}

impl Semaphore {
    /// Reads every permit without taking one: one [`LockState`] per
    /// permit, in slot order, each with the number of waiters lined up
    /// for the semaphore (see [`Redlock::inspect`](crate::Redlock::inspect)).
    /// A permit with a holder is taken; give the number of permits every
    /// client of the semaphore gives.
    ///
    /// # Errors
    ///
    /// [`Error::NoQuorum`](crate::Error::NoQuorum) when fewer than a quorum of nodes answered.
    pub async fn inspect(&self) -> Result<Vec<LockState>> {
        self.redlock
            .inspect_keys(&self.name, &self.line, self.keys.slots())
            .await
    }

    /// Takes a permit for `ttl`: await what this returns to take one,
    /// waiting as [`Redlock::lock`](crate::Redlock::lock) waits for a lock
    /// (for the same patience): in arrival order across clients, woken by
    /// the nodes as soon as a permit frees; or first say how ([`Acquire`]).
    /// Fenced (`.fenced()`): a token larger than the token of every earlier
    /// holder of the same slot (the semaphore's tokens come from one
    /// counter, so they are also unique across its slots), minted as
    /// [`Redlock::lock`](crate::Redlock::lock) mints.
    ///
    /// # Errors
    ///
    /// As [`Redlock::lock`](crate::Redlock::lock): with `.try_once()`,
    /// [`Error::Contended`](crate::Error::Contended) when every permit is
    /// held (or waiters of other clients are first in line).
    pub fn acquire(&self, ttl: Duration) -> Acquire<'_, PermitOf<'_>> {
        Acquire::new(PermitOf {
            semaphore: self,
            ttl,
        })
    }

    /// Takes a permit as `how` says.
    async fn take(&self, ttl: Duration, how: How) -> Result<Permit> {
        let patience = how.patience(&self.redlock, None);
        if how.fenced {
            return self.fenced(ttl, patience).await;
        }
        match how.wait {
            Wait::Once => {
                let what = self.slots_for(ttl)?;
                self.pin().await?;
                let lock = self.redlock.try_once(&what).await?;
                Ok(self.permit(lock))
            }
            _ => self.wait(ttl, patience).await,
        }
    }

    /// One attempt at a permit, no waiting.
    ///
    /// # Errors
    ///
    /// As [`Semaphore::acquire`] with `.try_once()`.
    #[deprecated(since = "0.2.0", note = "use `acquire(ttl).try_once()`")]
    pub async fn try_acquire(&self, ttl: Duration) -> Result<Permit> {
        self.acquire(ttl).try_once().await
    }

    /// Takes a permit, waiting at most `wait`.
    ///
    /// # Errors
    ///
    /// As [`Semaphore::acquire`] with `.wait(wait)`.
    #[deprecated(since = "0.2.0", note = "use `acquire(ttl).wait(wait)`")]
    pub async fn acquire_timeout(&self, ttl: Duration, wait: Duration) -> Result<Permit> {
        self.acquire(ttl).wait(wait).await
    }

    /// Takes a permit with a fencing token.
    ///
    /// # Errors
    ///
    /// As [`Semaphore::acquire`] with `.fenced()`.
    #[deprecated(since = "0.2.0", note = "use `acquire(ttl).fenced()`")]
    pub async fn acquire_fenced(&self, ttl: Duration) -> Result<Permit> {
        self.acquire(ttl).fenced().await
    }

    /// Takes a permit with a fencing token, waiting at most `wait`.
    ///
    /// # Errors
    ///
    /// As [`Semaphore::acquire`] with `.fenced().wait(wait)`.
    #[deprecated(since = "0.2.0", note = "use `acquire(ttl).fenced().wait(wait)`")]
    pub async fn acquire_fenced_timeout(&self, ttl: Duration, wait: Duration) -> Result<Permit> {
        self.acquire(ttl).fenced().wait(wait).await
    }

    /// The fenced waiting loop for a permit.
    async fn fenced(&self, ttl: Duration, patience: Patience) -> Result<Permit> {
        let what = self.slots_for(ttl)?;
        self.pin().await?;
        let lock = self
            .redlock
            .fenced_with(&what, std::slice::from_ref(&self.fence), patience)
            .await?;
        Ok(self.permit(lock))
    }

    /// Runs `f` while holding a permit, renewed in the background.
    ///
    /// # Errors
    ///
    /// As [`Acquire::run`].
    #[deprecated(since = "0.2.0", note = "use `acquire(ttl).run(f)`")]
    pub async fn with_permit<F, Fut, T>(&self, ttl: Duration, f: F) -> Result<T>
    where
        F: FnOnce(LockHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        self.acquire(ttl).run(f).await
    }

    /// The waiting loop for a permit.
    async fn wait(&self, ttl: Duration, patience: Patience) -> Result<Permit> {
        let what = self.slots_for(ttl)?;
        self.pin().await?;
        let lock = self.redlock.wait_for(&what, patience).await?;
        Ok(self.permit(lock))
    }

    /// Pins the number of permits on the nodes (see `pin.rs`), once per
    /// handle and its clones: a client with another number is refused
    /// before it takes a slot.
    async fn pin(&self) -> Result<()> {
        if self.pinned.load(Ordering::Acquire) {
            return Ok(());
        }
        let k = self.permits();
        let conflict = |pinned| Error::SemaphoreConflict {
            semaphore: self.name.clone(),
            pinned,
            asked: k,
            key: self.pin_key.clone(),
        };
        let at = (self.name.as_str(), self.pin_key.as_str());
        pin::pin(self.redlock.nodes(), at, &k.to_string(), conflict).await?;
        self.pinned.store(true, Ordering::Release);
        Ok(())
    }

    /// This semaphore's slots, to be attempted for `ttl`.
    fn slots_for(&self, ttl: Duration) -> Result<SlotAttempt<'_>> {
        let ttl_ms = self.redlock.config().check_ttl(ttl)?;
        Ok(SlotAttempt {
            semaphore: self,
            ttl,
            ttl_ms,
            guarded: AtomicU64::new(0),
        })
    }

    /// The permit a won slot lock is.
    fn permit(&self, lock: Lock) -> Permit {
        let slot = self.keys.slots().iter().position(|s| s == lock.key());
        Permit::new(lock, slot.unwrap_or_default())
    }
}
