//! The lock on several resources at once ([`Redlock::lock_all`] and its
//! forms), and the attempt its waiting loop makes.
//!
//! Every node runs one script per attempt that takes every key or none
//! (`lock/multi_scripts.rs`); the quorum decides as for one key, and a lost
//! attempt is undone everywhere. A waiter is listed in every resource's
//! waiting list under one ticket and id, so every list orders waiters the
//! same way and no cycle of waiters can form, whatever order callers name
//! the resources in.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::acquire::acquisition::{acquisition_span, sealed, Acquire, How, Taking, Wait};
use crate::acquire::attempt::{Ask, Attempts, Failed};
use crate::acquire::patience::Patience;
use crate::acquire::won::Won;
use crate::client::redlock::Redlock;
use crate::error::{Error, NodeErrorKind, Result};
use crate::lock::guard::{Lock, LockHandle};
use crate::lock::held::Takes;
use crate::lock::keyset::KeySet;
use crate::telemetry::labels::Primitive;
use crate::wait::list::WaitKeys;
use tracing::Instrument;

/// What [`Redlock::lock_all`] takes: the lock on several resources at once.
#[derive(Debug)]
pub struct AllLocks<'a> {
    /// The client.
    redlock: &'a Redlock,
    /// The resources.
    resources: &'a [&'a str],
    /// The lock's TTL.
    ttl: Duration,
}

impl<'a> sealed::Target<'a> for AllLocks<'a> {
    type Held = Lock;

    fn take(self, how: How) -> Taking<'a, Lock> {
        let span = acquisition_span!(
            how,
            "try_lock_all",
            "lock_all",
            "lock_all_timeout",
            "lock_all_fenced",
            "lock_all_fenced_timeout"
        );
        Box::pin(
            self.redlock
                .take_all(self.resources, self.ttl, how)
                .instrument(span),
        )
    }

    fn lock_of(held: Lock) -> Lock {
        held
    }
}
/// The lock on a [`KeySet`], as the waiting loop attempts it.
#[derive(Debug)]
pub(crate) struct SetAttempt<'a> {
    /// The client.
    redlock: &'a Redlock,
    /// The resources.
    set: Arc<KeySet>,
    /// The TTL, checked.
    ttl: Duration,
    /// The TTL in ms.
    ttl_ms: u64,
}

impl<'a> SetAttempt<'a> {
    /// The lock on every resource of `set` for `ttl` (checked: `ttl_ms`).
    pub(crate) fn new(redlock: &'a Redlock, set: Arc<KeySet>, ttl: Duration, ttl_ms: u64) -> Self {
        Self {
            redlock,
            set,
            ttl,
            ttl_ms,
        }
    }
}

impl Attempts for SetAttempt<'_> {
    fn resource(&self) -> &str {
        &self.set.name
    }

    fn line(&self) -> &str {
        self.set.line()
    }

    fn watched(&self) -> &[String] {
        &self.set.keys
    }

    fn heard(&self) -> &[String] {
        &self.set.heard
    }

    fn primitive(&self) -> Primitive {
        Primitive::Lock
    }

    fn listed_also_in(&self) -> &[WaitKeys] {
        self.set.other_lists()
    }

    fn reads_list_when_ahead(&self) -> bool {
        true
    }

    fn waiter_mark(&self) -> &'static str {
        crate::acquire::attempt::EXCLUSIVE
    }

    async fn attempt(&self, ask: Ask<'_>) -> Result<Won, Failed> {
        let set = &self.set;
        let held: Arc<dyn Takes> = set.clone();
        let result = self
            .redlock
            .attempt_on(
                &set.name,
                set.line(),
                Some(&held),
                self.ttl,
                self.ttl_ms,
                ask,
            )
            .await;
        result.map_err(|mut failed| {
            // A cluster member refuses keys of several slots in one script:
            // no retry fixes that, the names must change.
            let cross = failed.error.node_failures().iter().find(
                |f| matches!(&f.kind, NodeErrorKind::Redis(e) if e.code() == Some("CROSSSLOT")),
            );
            if let Some(f) = cross {
                failed.error = Error::CrossSlot {
                    resources: set.name.clone(),
                    node: f.addr.clone(),
                };
            }
            failed
        })
    }
}

impl Redlock {
    /// The set of `resources` with `ttl` checked, in the one order every
    /// client uses (by key), each once.
    fn key_set(&self, resources: &[&str], ttl: Duration) -> Result<(Arc<KeySet>, u64)> {
        let set = KeySet::new(&self.config().key_prefix, resources)?;
        let ttl_ms = self.config().check_ttl(ttl)?;
        // A member that is a Redis Cluster refuses keys of several slots in
        // one script: said before anything is sent.
        #[cfg(feature = "cluster")]
        if let Some(member) = self.nodes().nodes.iter().find(|n| n.is_cluster()) {
            let slot = |k: &String| crate::keys::key_slot(k.as_bytes());
            if set.keys.iter().any(|k| slot(k) != slot(&set.keys[0])) {
                return Err(Error::CrossSlot {
                    resources: set.name.clone(),
                    node: member.addr.clone(),
                });
            }
        }
        tracing::Span::current().record("resource", set.name.as_str());
        Ok((Arc::new(set), ttl_ms))
    }

    /// Takes every one of `resources` at once, or none, for `ttl`: await
    /// what this returns, or first say how ([`Acquire`]: `.try_once()`,
    /// `.wait(d)`, `.fenced()`, `.run(f)`). Each node takes all their keys
    /// or none in one script, and the lock is ours with a quorum of such
    /// nodes, as for [`Redlock::lock`]. The keys are the single locks' keys:
    /// it excludes [`Redlock::lock`] on any of them, and the other way
    /// round. The order of `resources` does not matter; a name given twice
    /// counts once.
    ///
    /// It waits as [`Redlock::lock`] does, in every resource's waiting list
    /// at once: the waiter that started waiting first (ties broken by a
    /// random id) is first in every list it is in, so waiters for
    /// overlapping sets are served in that order and can never wait for
    /// each other in a cycle, whatever order each names its resources in.
    /// It is woken by a change of any of the keys.
    ///
    /// Fenced: a token per resource ([`Lock::fencing_token_for`]), each
    /// from that resource's counter, as [`Redlock::lock`] mints one: larger
    /// than every token of earlier holders of the resource, whether they
    /// held it alone or with others. The counters are minted at once, after
    /// the lock; a lock that did not outlive them is released and taken
    /// again.
    ///
    /// # Errors
    ///
    /// As [`Redlock::lock`]; [`Error::Contended`](crate::Error::Contended)
    /// names the resources joined by `+`;
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) for no
    /// resources, more than [`MAX_RESOURCES`](crate::MAX_RESOURCES), or an
    /// empty or reserved name, before anything is sent.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(redlock: redquorum::Redlock) -> redquorum::Result<()> {
    /// use std::time::Duration;
    /// // Another caller may name them as ["account-9", "account-7"]: no deadlock.
    /// let both = redlock.lock_all(&["account-7", "account-9"], Duration::from_secs(5)).await?;
    /// // move money between the two accounts
    /// both.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn lock_all<'a>(
        &'a self,
        resources: &'a [&'a str],
        ttl: Duration,
    ) -> Acquire<'a, AllLocks<'a>> {
        Acquire::new(AllLocks {
            redlock: self,
            resources,
            ttl,
        })
    }

    /// Takes every one of `resources` as `how` says.
    async fn take_all(&self, resources: &[&str], ttl: Duration, how: How) -> Result<Lock> {
        let patience = how.patience(self, None);
        if how.fenced {
            return self.all_fenced(resources, ttl, patience).await;
        }
        let (set, ttl_ms) = self.key_set(resources, ttl)?;
        let what = SetAttempt::new(self, set, ttl, ttl_ms);
        match how.wait {
            Wait::Once => self.try_once(&what).await,
            _ => self.wait_for(&what, patience).await,
        }
    }

    /// One attempt to take every one of `resources` at once, or none.
    ///
    /// # Errors
    ///
    /// As [`Redlock::lock_all`] with `.try_once()`.
    #[deprecated(since = "0.2.0", note = "use `lock_all(resources, ttl).try_once()`")]
    pub async fn try_lock_all(&self, resources: &[&str], ttl: Duration) -> Result<Lock> {
        self.lock_all(resources, ttl).try_once().await
    }

    /// [`Redlock::lock_all`], waiting at most `wait`.
    ///
    /// # Errors
    ///
    /// As [`Redlock::lock_all`] with `.wait(wait)`.
    #[deprecated(since = "0.2.0", note = "use `lock_all(resources, ttl).wait(wait)`")]
    pub async fn lock_all_timeout(
        &self,
        resources: &[&str],
        ttl: Duration,
        wait: Duration,
    ) -> Result<Lock> {
        self.lock_all(resources, ttl).wait(wait).await
    }

    /// [`Redlock::lock_all`] with a fencing token per resource.
    ///
    /// # Errors
    ///
    /// As [`Redlock::lock_all`] with `.fenced()`.
    #[deprecated(since = "0.2.0", note = "use `lock_all(resources, ttl).fenced()`")]
    pub async fn lock_all_fenced(&self, resources: &[&str], ttl: Duration) -> Result<Lock> {
        self.lock_all(resources, ttl).fenced().await
    }

    /// [`Redlock::lock_all`] fenced, waiting at most `wait`.
    ///
    /// # Errors
    ///
    /// As [`Redlock::lock_all`] with `.fenced().wait(wait)`.
    #[deprecated(
        since = "0.2.0",
        note = "use `lock_all(resources, ttl).fenced().wait(wait)`"
    )]
    pub async fn lock_all_fenced_timeout(
        &self,
        resources: &[&str],
        ttl: Duration,
        wait: Duration,
    ) -> Result<Lock> {
        self.lock_all(resources, ttl).fenced().wait(wait).await
    }

    /// A fenced multi-lock within `patience`: a token per resource, from
    /// that resource's counter ([`Redlock::fenced_with`]).
    async fn all_fenced(
        &self,
        resources: &[&str],
        ttl: Duration,
        patience: Patience,
    ) -> Result<Lock> {
        let (set, ttl_ms) = self.key_set(resources, ttl)?;
        let fences: Vec<_> = set.resources.iter().map(|r| self.fence_keys(r)).collect();
        let what = SetAttempt::new(self, set, ttl, ttl_ms);
        self.fenced_with(&what, &fences, patience).await
    }

    /// Runs `f` while holding every one of `resources`.
    ///
    /// # Errors
    ///
    /// As [`Acquire::run`].
    #[deprecated(since = "0.2.0", note = "use `lock_all(resources, ttl).run(f)`")]
    pub async fn with_lock_all<F, Fut, T>(
        &self,
        resources: &[&str],
        ttl: Duration,
        f: F,
    ) -> Result<T>
    where
        F: FnOnce(LockHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        self.lock_all(resources, ttl).run(f).await
    }
}
