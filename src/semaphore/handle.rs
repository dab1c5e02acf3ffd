//! A [`Semaphore`]: its name, its keys and how many permits it has (made
//! by [`Redlock::semaphore`](crate::Redlock::semaphore)). Taking permits is in `attempt.rs` and
//! `mod.rs`.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::client::redlock::Redlock;
use crate::counter::CounterKeys;
use crate::error::{Error, Result};
use crate::keys::{self, Kind};
use crate::semaphore::keys::SlotKeys;

/// Most permits one semaphore may have: every attempt sends one key per
/// slot to every node.
pub const MAX_PERMITS: usize = 256;

/// A semaphore over the nodes: at most `permits` holders at any instant.
///
/// Made by [`Redlock::semaphore`](crate::Redlock::semaphore); cheap to keep and share (clone it).
/// Every client of one semaphore must give it the same number of permits:
/// a client that says more uses slots the others do not know of.
///
/// # Examples
///
/// ```no_run
/// # async fn f(redlock: redquorum::Redlock) -> redquorum::Result<()> {
/// use std::time::Duration;
/// let licences = redlock.semaphore("licences", 4)?;
/// let n = licences
///     .acquire(Duration::from_secs(10)).run(|permit| async move {
///         // at most 4 of these run at once, across every client
///         permit.validity()
///     })
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Semaphore {
    /// The client.
    pub(crate) redlock: Redlock,
    /// The name the caller gave.
    pub(crate) name: String,
    /// The key waiters line up on (never written).
    pub(crate) line: String,
    /// Its keys on the nodes (slots, waiting list) and its channel.
    pub(crate) keys: Arc<SlotKeys>,
    /// Where its fencing tokens are counted.
    pub(crate) fence: CounterKeys,
    /// Where its number of permits is pinned on the nodes.
    pub(crate) pin_key: String,
    /// Whether this handle (or a clone) pinned it already.
    pub(crate) pinned: Arc<AtomicBool>,
}

impl Redlock {
    /// A semaphore named `name` with `permits` permits (1 to
    /// [`MAX_PERMITS`]). Its slots live in redquorum's reserved
    /// namespace; while a permit is held, its permits keep a mark on the
    /// name's lock key, so the semaphore and the lock of the same name
    /// (the CLI's `lock -n 1`), or its read-write lock or election,
    /// exclude each other, and a waiting lock goes before permits that
    /// start waiting after it. The number of permits is pinned on
    /// the nodes by the first acquisition: a client that gives the same
    /// name another number gets
    /// [`Error::SemaphoreConflict`](crate::Error::SemaphoreConflict)
    /// before it takes anything.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) for an empty or reserved name, or a number
    /// of permits out of range.
    pub fn semaphore(&self, name: &str, permits: usize) -> Result<Semaphore> {
        if name.is_empty() {
            return Err(Error::InvalidConfig("semaphore name is empty".into()));
        }
        keys::check_resource(name)?;
        if !(1..=MAX_PERMITS).contains(&permits) {
            return Err(Error::InvalidConfig(format!(
                "semaphore {name:?}: {permits} permits; give 1 to {MAX_PERMITS}"
            )));
        }
        let prefix = &self.config().key_prefix;
        let anchor = self.key_for(name);
        let line = keys::internal(prefix, Kind::Semaphore, &anchor);
        let pin_key = keys::internal(prefix, Kind::SemaphorePin, &line);
        let slots = (0..permits)
            .map(|i| keys::permit(prefix, &anchor, i))
            .collect();
        Ok(Semaphore {
            redlock: self.clone(),
            name: name.to_owned(),
            keys: Arc::new(SlotKeys::new(prefix, &line, &anchor, slots)),
            fence: self.fence_keys_at(name, &line),
            line,
            pin_key,
            pinned: Arc::default(),
        })
    }
}

impl Semaphore {
    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many permits it has.
    pub fn permits(&self) -> usize {
        self.keys.slots().len()
    }
}
