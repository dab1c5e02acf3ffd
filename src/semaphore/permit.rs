//! The [`Permit`] guard: a [`Lock`] on one of a semaphore's slots, so it
//! validates, extends, auto-extends, signals loss and releases exactly as a
//! lock does (the same code: `lock/guard.rs`).

use std::ops::Deref;

use crate::error::Result;
use crate::lock::guard::Lock;

/// One of a [`Semaphore`](crate::Semaphore)'s permits, held.
///
/// A permit is a lock on one of the semaphore's slots, and everything a
/// [`Lock`] offers works on it through `Deref`: [`Lock::validity`](crate::Lock::validity),
/// [`Lock::ensure_valid`](crate::Lock::ensure_valid), [`Lock::extend`](crate::Lock::extend), [`Lock::auto_extend`](crate::Lock::auto_extend),
/// [`Lock::lost`](crate::Lock::lost), [`Lock::fencing_token`](crate::Lock::fencing_token). Release it with
/// [`Permit::release`]; dropping it releases it in the background.
///
/// # Examples
///
/// ```no_run
/// # async fn f(redlock: redquorum::Redlock) -> redquorum::Result<()> {
/// use std::time::Duration;
/// let pool = redlock.semaphore("gpu", 4)?;
/// let permit = pool.acquire(Duration::from_secs(10)).await?;
/// permit.ensure_valid(Duration::from_millis(500))?;
/// permit.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping a Permit releases it in the background; call release().await"]
#[derive(Debug)]
pub struct Permit {
    /// The slot's lock.
    lock: Lock,
    /// Which slot.
    slot: usize,
}

impl Permit {
    /// Wraps the lock on slot `slot`.
    pub(crate) fn new(lock: Lock, slot: usize) -> Self {
        Self { lock, slot }
    }

    /// The slot held, from 0 to `permits - 1`: no two valid permits of one
    /// semaphore hold the same slot at the same time.
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// Releases the permit on all nodes, as [`Lock::release`](crate::Lock::release) does; the
    /// longest waiter for the semaphore is woken by the nodes.
    ///
    /// # Errors
    ///
    /// As [`Lock::release`](crate::Lock::release).
    pub async fn release(self) -> Result<()> {
        self.lock.release().await
    }

    /// The slot's lock itself.
    pub fn into_lock(self) -> Lock {
        self.lock
    }
}

impl Deref for Permit {
    type Target = Lock;

    fn deref(&self) -> &Lock {
        &self.lock
    }
}
