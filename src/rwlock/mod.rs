//! The read-write lock: many readers or one writer, phase-fair.
//!
//! Each reader has a lease of its own on the nodes' clocks (a sorted set
//! of reader values scored by the instant each lease ends), so a crashed
//! reader keeps writers out only until its own lease ends; the writer
//! holds the name's lock key, the very key [`Redlock::lock`] takes, which
//! holds the readers' mark while they read: a name is one lock, whichever
//! way it is taken. One script per node decides, from what that node
//! holds and who waits there (`rwlock/scripts.rs`): a reader enters while no
//! writer holds or waits ahead of it, a writer while no reader's lease is
//! live and nobody waits ahead of it. A lock needs a quorum of nodes, as
//! the lock does; a reader's quorum and a writer's share a node, whose
//! script admits only one of them. Waiting is the lock's: one list per
//! lock on every node, ordered by when each waiter started waiting, woken
//! by the nodes when the writer's key changes or, for a writer kept out by
//! readers, when the last of their leases on a node is released.

pub(crate) mod attempt;
pub(crate) mod inspect;
pub(crate) mod keys;
pub(crate) mod scripts;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::Value;

use crate::acquire::acquisition::{sealed, Acquire, How, Taking, Wait};
use crate::acquire::patience::Patience;
use crate::client::redlock::Redlock;
use crate::counter::CounterKeys;
use crate::error::{Error, Result};
use crate::lock::guard::{Lock, LockHandle};
use crate::node::connection::request::Request;
use crate::quorum::Counts;
use crate::rwlock::attempt::{RwAttempt, Side};
use crate::rwlock::keys::RwKeys;

/// What [`RwLock::read`] and [`RwLock::write`] take: one side of the lock.
#[derive(Debug)]
pub struct RwAccess<'a> {
    /// The lock.
    rw: &'a RwLock,
    /// Which side.
    side: Side,
    /// The TTL.
    ttl: Duration,
}

impl<'a> sealed::Target<'a> for RwAccess<'a> {
    type Held = Lock;

    fn take(self, how: How) -> Taking<'a, Lock> {
        Box::pin(self.rw.take(self.side, self.ttl, how))
    }

    fn lock_of(held: Lock) -> Lock {
        held
    }
}
/// A read-write lock over the nodes: at any instant, any number of valid
/// readers or one valid writer.
///
/// Made by [`Redlock::rw_lock`]; cheap to keep and share (clone it). A
/// reader or a writer holds a [`Lock`], with everything a lock has
/// (validity, [`Lock::ensure_valid`], extension, auto-extension,
/// [`Lock::lost`], release, release on drop).
///
/// Waiting is phase-fair: a writer waits for the reads in progress when it
/// arrived and for the writers ahead of it, however many readers keep
/// arriving; a reader waits at most for the writer holding and the writer
/// waiting ahead of it, and the readers behind a writer all enter when it
/// leaves.
///
/// # Examples
///
/// ```no_run
/// # async fn f(redlock: redquorum::Redlock) -> redquorum::Result<()> {
/// use std::time::Duration;
/// let catalog = redlock.rw_lock("catalog")?;
/// let read = catalog.read(Duration::from_secs(5)).await?; // shared
/// read.release().await?;
/// let write = catalog.write(Duration::from_secs(5)).await?; // alone
/// write.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RwLock {
    /// The client.
    redlock: Redlock,
    /// The name the caller gave.
    name: String,
    /// Its keys on the nodes.
    keys: Arc<RwKeys>,
    /// Where its writers' fencing tokens are counted.
    fence: CounterKeys,
}

impl Redlock {
    /// The read-write lock named `name`: the lock [`Redlock::lock`] takes
    /// on the same name, with a shared side. Its writer takes the name's
    /// lock key (and mints from the name's fencing counter), so a plain
    /// lock of the name is a writer: it waits for the readers, and they for
    /// it. Its readers' leases and the rest live in redquorum's reserved
    /// namespace.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for an empty or reserved name.
    pub fn rw_lock(&self, name: &str) -> Result<RwLock> {
        if name.is_empty() {
            return Err(Error::InvalidConfig("read-write lock name is empty".into()));
        }
        crate::keys::check_resource(name)?;
        let prefix = &self.config().key_prefix;
        let keys = RwKeys::new(prefix, &self.key_for(name));
        Ok(RwLock {
            redlock: self.clone(),
            name: name.to_owned(),
            // The name's lock counter: a writer is the name's lock.
            fence: self.fence_keys(name),
            keys: Arc::new(keys),
        })
    }
}

impl RwLock {
    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// An attempt on `side` for `ttl`, checked.
    fn attempt(&self, side: Side, ttl: Duration) -> Result<RwAttempt<'_>> {
        let ttl_ms = self.redlock.config().check_ttl(ttl)?;
        let (redlock, name) = (&self.redlock, self.name.as_str());
        Ok(RwAttempt::new(
            redlock,
            name,
            &self.keys,
            side,
            (ttl, ttl_ms),
        ))
    }

    /// Reads for `ttl`: await what this returns to read, waiting as
    /// [`Redlock::lock`] does (behind the writer holding and the writers
    /// that started waiting before this call), or first say how
    /// ([`Acquire`]). `.try_once()` makes one attempt, which no writer may
    /// hold or wait for.
    ///
    /// Fenced (`.fenced()`): the last writer's fencing token as the
    /// reader's [`Lock::fencing_token`], read from a quorum of nodes after
    /// the read was taken, so every writer that held the lock before has a
    /// token at most that, and every later one a larger token (from a
    /// fenced [`RwLock::write`]). Compare it with the token stored beside
    /// the data to know whether a write happened since. 0 if no fenced
    /// writer ever held it.
    ///
    /// # Errors
    ///
    /// As [`Redlock::lock`]: with `.try_once()`, [`Error::Contended`] when
    /// a writer holds it or waits. Fenced: if the token cannot be read (no
    /// quorum), the read is released and that error returned.
    pub fn read(&self, ttl: Duration) -> Acquire<'_, RwAccess<'_>> {
        Acquire::new(RwAccess {
            rw: self,
            side: Side::Read,
            ttl,
        })
    }

    /// Writes for `ttl`: await what this returns to write, waiting as
    /// [`Redlock::lock`] does, or first say how ([`Acquire`]).
    /// `.try_once()` makes one attempt, in which nobody may read, write or
    /// wait. Fenced (`.fenced()`): a fencing token as [`Redlock::lock`]
    /// mints one, larger than every earlier writer's of this lock.
    ///
    /// # Errors
    ///
    /// As [`Redlock::lock`]: with `.try_once()`, [`Error::Contended`] when
    /// a reader or a writer holds it or someone waits.
    pub fn write(&self, ttl: Duration) -> Acquire<'_, RwAccess<'_>> {
        Acquire::new(RwAccess {
            rw: self,
            side: Side::Write,
            ttl,
        })
    }

    /// Takes `side` as `how` says.
    async fn take(&self, side: Side, ttl: Duration, how: How) -> Result<Lock> {
        let patience = how.patience(&self.redlock, None);
        match (side, how.fenced) {
            (Side::Read, true) => self.fenced_read(ttl, patience).await,
            (Side::Write, true) => self.fenced_write(ttl, patience).await,
            (_, false) => {
                let what = self.attempt(side, ttl)?;
                match how.wait {
                    Wait::Once => self.redlock.try_once(&what).await,
                    _ => self.redlock.wait_for(&what, patience).await,
                }
            }
        }
    }

    /// A read within `patience`, with the last writer's token. Returned
    /// only if the read lease is still valid once the token was read, as a
    /// fenced write is once its token was minted: a reader paused between
    /// its lease and the token's read could otherwise carry the token a
    /// writer that took the lock meanwhile also got.
    async fn fenced_read(&self, ttl: Duration, patience: Patience) -> Result<Lock> {
        let what = self.attempt(Side::Read, ttl)?;
        loop {
            let lock = self.redlock.wait_for(&what, patience).await?;
            // Valid now means valid when the token was read, which was
            // earlier.
            let error = match self.last_write_token().await {
                Ok(token) if lock.is_valid() => return Ok(lock.with_fencing_token(token)),
                Ok(_) => Error::Expired {
                    resource: self.name.clone(),
                },
                Err(e) => e,
            };
            let _ = lock.release().await;
            if !error.is_expired() || patience.run_out() {
                return Err(error);
            }
        }
    }

    /// The largest token minted for this lock's writers that a quorum of
    /// nodes shows (0: none).
    async fn last_write_token(&self) -> Result<u64> {
        let mut cmd = redis::cmd("HGET");
        cmd.arg(&self.fence.key).arg("n");
        let req = Request::plain(cmd);
        let mut largest = 0u64;
        let classify = |_: usize, v: &Value| match v {
            Value::Nil => Some(true),
            Value::BulkString(b) => {
                let n = std::str::from_utf8(b).ok()?.parse::<u64>().ok()?;
                largest = largest.max(n);
                Some(true)
            }
            _ => None,
        };
        let nodes = self.redlock.nodes();
        let (tally, _) = nodes
            .vote_round(&req, "read", Counts::Trusted, classify)
            .await;
        match tally.decided() {
            Some(true) => Ok(largest),
            _ => Err(tally.into_no_quorum(&self.name)),
        }
    }

    /// A write within `patience`, with a fencing token.
    async fn fenced_write(&self, ttl: Duration, patience: Patience) -> Result<Lock> {
        let what = self.attempt(Side::Write, ttl)?;
        let fences = std::slice::from_ref(&self.fence);
        self.redlock.fenced_with(&what, fences, patience).await
    }

    /// One attempt to read.
    ///
    /// # Errors
    ///
    /// As [`RwLock::read`] with `.try_once()`.
    #[deprecated(since = "0.2.0", note = "use `read(ttl).try_once()`")]
    pub async fn try_read(&self, ttl: Duration) -> Result<Lock> {
        self.read(ttl).try_once().await
    }

    /// [`RwLock::read`], waiting at most `wait`.
    ///
    /// # Errors
    ///
    /// As [`RwLock::read`] with `.wait(wait)`.
    #[deprecated(since = "0.2.0", note = "use `read(ttl).wait(wait)`")]
    pub async fn read_timeout(&self, ttl: Duration, wait: Duration) -> Result<Lock> {
        self.read(ttl).wait(wait).await
    }

    /// [`RwLock::read`], fenced.
    ///
    /// # Errors
    ///
    /// As [`RwLock::read`] with `.fenced()`.
    #[deprecated(since = "0.2.0", note = "use `read(ttl).fenced()`")]
    pub async fn read_fenced(&self, ttl: Duration) -> Result<Lock> {
        self.read(ttl).fenced().await
    }

    /// [`RwLock::read`], fenced, waiting at most `wait`.
    ///
    /// # Errors
    ///
    /// As [`RwLock::read`] with `.fenced().wait(wait)`.
    #[deprecated(since = "0.2.0", note = "use `read(ttl).fenced().wait(wait)`")]
    pub async fn read_fenced_timeout(&self, ttl: Duration, wait: Duration) -> Result<Lock> {
        self.read(ttl).fenced().wait(wait).await
    }

    /// Runs `f` while reading.
    ///
    /// # Errors
    ///
    /// As [`Acquire::run`].
    #[deprecated(since = "0.2.0", note = "use `read(ttl).run(f)`")]
    pub async fn with_read<F, Fut, T>(&self, ttl: Duration, f: F) -> Result<T>
    where
        F: FnOnce(LockHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        self.read(ttl).run(f).await
    }

    /// One attempt to write.
    ///
    /// # Errors
    ///
    /// As [`RwLock::write`] with `.try_once()`.
    #[deprecated(since = "0.2.0", note = "use `write(ttl).try_once()`")]
    pub async fn try_write(&self, ttl: Duration) -> Result<Lock> {
        self.write(ttl).try_once().await
    }

    /// [`RwLock::write`], waiting at most `wait`.
    ///
    /// # Errors
    ///
    /// As [`RwLock::write`] with `.wait(wait)`.
    #[deprecated(since = "0.2.0", note = "use `write(ttl).wait(wait)`")]
    pub async fn write_timeout(&self, ttl: Duration, wait: Duration) -> Result<Lock> {
        self.write(ttl).wait(wait).await
    }

    /// [`RwLock::write`], fenced.
    ///
    /// # Errors
    ///
    /// As [`RwLock::write`] with `.fenced()`.
    #[deprecated(since = "0.2.0", note = "use `write(ttl).fenced()`")]
    pub async fn write_fenced(&self, ttl: Duration) -> Result<Lock> {
        self.write(ttl).fenced().await
    }

    /// [`RwLock::write`], fenced, waiting at most `wait`.
    ///
    /// # Errors
    ///
    /// As [`RwLock::write`] with `.fenced().wait(wait)`.
    #[deprecated(since = "0.2.0", note = "use `write(ttl).fenced().wait(wait)`")]
    pub async fn write_fenced_timeout(&self, ttl: Duration, wait: Duration) -> Result<Lock> {
        self.write(ttl).fenced().wait(wait).await
    }

    /// Runs `f` while writing.
    ///
    /// # Errors
    ///
    /// As [`Acquire::run`].
    #[deprecated(since = "0.2.0", note = "use `write(ttl).run(f)`")]
    pub async fn with_write<F, Fut, T>(&self, ttl: Duration, f: F) -> Result<T>
    where
        F: FnOnce(LockHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        self.write(ttl).run(f).await
    }
}
