//! What every holder of one lock shares (the guard, the [`LockHandle`]s
//! given to `.run(f)` work, the auto-extend task), and what is done on
//! it: extension, the ownership check, the release and loss bookkeeping,
//! and the auto-extend loop.
//!
//! [`LockHandle`]: crate::LockHandle

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::Value;
use tokio::time::Instant;
use tracing::{debug, instrument, warn};

use crate::clock;
use crate::error::{Error, Result};
use crate::extensions::Extensions;
use crate::fenced_writes::Fence;
use crate::lock::held::Held;
use crate::lock::redlock::{int_vote, valid_until, Redlock};
use crate::lock::scripts;
use crate::mutex;
use crate::node::request::Request;
use crate::quorum::tally::NodeSet;
use crate::quorum::Counts;
use crate::standing::Standing;
use crate::telemetry::labels::LostReason;
use crate::telemetry::Holding;
use crate::wait::named::SlotKeys;

/// What every holder of one lock shares.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The client, for extend and release.
    pub(crate) redlock: Redlock,
    /// The resource as the caller named it.
    pub(crate) resource: String,
    /// The Redis key (prefix + resource; a semaphore's slot).
    pub(crate) key: String,
    /// The key whose line of waiters its release concerns: the lock key, or
    /// the semaphore's.
    pub(crate) line: String,
    /// A semaphore's permit: the semaphore's keys and the slot held (its
    /// release names the waiters it lets in).
    pub(crate) permit: Option<(Arc<SlotKeys>, usize)>,
    /// What it stands on where that is more than `key` (a multi-lock's
    /// keys, `key` the first; a reader's lease): extension, check and
    /// release act on that.
    pub(crate) held: Option<Arc<dyn Held>>,
    /// Our random value: proves ownership to the compare-and-X scripts.
    pub(crate) value: String,
    /// The TTL the lock was taken with; auto-extension renews to it.
    pub(crate) ttl: Duration,
    /// Fencing token minted right after acquisition, if asked for.
    /// Set once, after the lock is counted (its expiry watch then holds a
    /// weak reference, so the lock can no longer be changed in place).
    pub(crate) fencing_token: std::sync::OnceLock<u64>,
    /// A fenced multi-lock's tokens, one per resource, in its order.
    pub(crate) tokens: std::sync::OnceLock<Vec<u64>>,
    /// Taken after waiting: its release asks whether others wait.
    pub(crate) contended: bool,
    /// Validity and status, observable by `lost()` waiters.
    pub(crate) state: Standing,
    /// Set once an auto-extend task was started, so there is only one.
    pub(crate) watchdog: AtomicBool,
    /// How long the latest round on the nodes took (the acquisition, then
    /// each confirmed extension), in ns, with the drift allowance: the
    /// auto-extend task starts a renewal at least twice that before the
    /// validity ends, so the renewal lands while the lock is still ours.
    pub(crate) round_ns: AtomicU64,
    /// Extensions sent and not yet overtaken by a confirmed later one: what
    /// bounds the validity (see `extensions.rs`).
    pub(crate) extensions: Mutex<Extensions>,
    /// How the telemetry counts it (held, released, lost).
    pub(crate) holding: Holding,
    /// What the validity was last counted from (see [`Basis`]).
    pub(crate) basis: Mutex<Basis>,
    /// Keeps the nodes' clocks read while the lock is held
    /// ([`Quorum::probe_while_held`](crate::quorum::Quorum::probe_while_held)).
    pub(crate) _clock_probe: Arc<()>,
}

/// What a lock's validity was counted from: the round that last set its
/// keys (the acquisition, then each confirmed extension), for `ttl`. A
/// node among `held` whose clock was seen running ahead after `start`
/// drops its key that much early, and one whose clock was since measured
/// running faster than the validity allowed for drops it at that rate: the
/// validity is cut by as much ([`Shared::clock_bound`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Basis {
    /// The nodes whose yes counted toward the quorum.
    pub(crate) held: NodeSet,
    /// When the round started (its keys were set after this).
    pub(crate) start: Instant,
    /// The TTL the round set.
    pub(crate) ttl: Duration,
    /// The validity the round gave.
    pub(crate) until: Instant,
}

impl Basis {
    /// The validity `until` of a round started at `start` that set `ttl`,
    /// counted on the yes of the nodes in `held`.
    pub(crate) fn new(held: NodeSet, start: Instant, ttl: Duration, until: Instant) -> Self {
        Self {
            held,
            start,
            ttl,
            until,
        }
    }
}

impl Shared {
    /// Marks it released (the auto-extend task stops) and counts the
    /// release with the validity it had left.
    pub(crate) fn releasing(&self) {
        let left = self.validity();
        self.state.mark_released();
        let telemetry = &self.redlock.nodes().telemetry;
        self.holding.released(telemetry, left);
    }

    /// Marks it lost for `because` and counts the loss as `reason`.
    /// Counted first, so whoever `lost()` wakes sees the loss counted.
    pub(crate) fn lose(&self, because: Error, reason: LostReason) {
        let telemetry = &self.redlock.nodes().telemetry;
        self.holding.lost(telemetry, reason);
        self.state.mark_lost(because);
    }

    /// Its validity ran out with nobody renewing it: counted lost now,
    /// unless it was released or lost meanwhile, or an auto-extend task
    /// (which counts its own losses) renews it.
    pub(crate) fn expired_unrenewed(&self) {
        let st = self.state.now();
        let auto = self.watchdog.load(std::sync::atomic::Ordering::Acquire);
        if auto || st.released || st.lost || clock::now() < st.valid_until {
            return;
        }
        self.lose(
            Error::Expired {
                resource: self.resource.clone(),
            },
            LostReason::ExpiredWhileHeld,
        );
    }

    /// See [`Lock::resources`].
    pub(crate) fn resources(&self) -> Vec<&str> {
        match self.held.as_ref().and_then(|h| h.resources()) {
            Some(all) => all.iter().map(String::as_str).collect(),
            None => vec![self.resource.as_str()],
        }
    }

    /// See [`Lock::fence`]: the first resource's.
    pub(crate) fn fence(&self) -> Option<Fence<'_>> {
        let first = self.resources().first().copied()?;
        self.fence_for(first)
    }

    /// See [`Lock::fence_for`]: `resource` as this lock names it, with its
    /// token.
    pub(crate) fn fence_for(&self, resource: &str) -> Option<Fence<'_>> {
        let held = self.resources().into_iter().find(|r| *r == resource)?;
        Some(Fence::new(held, self.token_for(resource)?))
    }

    /// See [`Lock::fencing_token_for`].
    pub(crate) fn token_for(&self, resource: &str) -> Option<u64> {
        let Some(all) = self.held.as_ref().and_then(|h| h.resources()) else {
            return (resource == self.resource)
                .then(|| self.fencing_token.get().copied())
                .flatten();
        };
        let i = all.iter().position(|r| r == resource)?;
        self.tokens.get().and_then(|t| t.get(i).copied())
    }

    /// See [`Lock::lost_reason`].
    pub(crate) fn lost_reason(&self) -> Option<Error> {
        let st = self.state.now();
        self.state.lost_because().or_else(|| {
            (!st.released && clock::now() >= st.valid_until).then(|| Error::Expired {
                resource: self.resource.clone(),
            })
        })
    }

    /// The release round on every node (see [`Redlock::release_round`]).
    pub(crate) async fn release_round(&self) -> crate::quorum::tally::Tally {
        let permit = self.permit.as_ref().map(|(keys, slot)| (&**keys, *slot));
        let held = (self.key.as_str(), self.value.as_str());
        self.redlock
            .release_round(
                held,
                self.contended,
                &self.line,
                permit,
                self.held.as_deref(),
            )
            .await
    }

    /// The validity `basis` gives, less what clocks seen running ahead
    /// since its round started took from its keys (the jumps of the node
    /// that lost the most: the quorum needed every node that counted), and
    /// no later than the keys' life at the fastest rate now accepted for a
    /// node whose yes counted (a clock that started running faster after
    /// the keys were set: its early readings are jumps, the later ones, once
    /// its new rate is accepted, are not).
    ///
    /// And where nodes among `held` were found to have lost data after the
    /// round started (a restart, an eviction, a flush: `node/vigil.rs`), so
    /// that those left are fewer than a quorum, the keys may be gone from a
    /// quorum already: the validity ends at the round's start (it is over).
    ///
    /// And where a quorum of nodes ran their clocks ahead of ours since
    /// then, the odd clock is ours (stalled, or slow beyond the allowance):
    /// nothing it counts can be trusted, so the validity ends at the round's
    /// start too ([`Shared::our_clock_odd`]).
    pub(crate) fn clock_bound(&self, basis: &Basis) -> Instant {
        let nodes = self.redlock.nodes();
        if self.our_clock_odd(basis) {
            return basis.start;
        }
        let lost = nodes.lost_since(basis.held, basis.start);
        if lost != 0 && ((basis.held & !lost).count_ones() as usize) < nodes.needed() {
            return basis.start;
        }
        let at_rate = basis
            .ttl
            .checked_sub(self.redlock.drift_on(basis.ttl, basis.held))
            .map_or(basis.start, |life| basis.start + life);
        let until = basis.until.min(at_rate).max(basis.start);
        let cut = nodes.ran_ahead_since(basis.held, basis.start);
        if cut.is_zero() {
            return until;
        }
        let bound = until.checked_sub(cut).unwrap_or(basis.start);
        bound.max(basis.start)
    }

    /// Whether a quorum of nodes ran their clocks ahead of ours since
    /// `basis`'s round started: each reading compares a node's advance with
    /// ours, so a quorum of nodes ahead at once says ours fell behind.
    pub(crate) fn our_clock_odd(&self, basis: &Basis) -> bool {
        let nodes = self.redlock.nodes();
        crate::quorum::probe::ours_is_odd(nodes.ran_ahead_after(basis.start), nodes.needed())
    }

    /// Says that a clock that ran ahead cut the validity by `by`.
    pub(crate) fn cut_by_clock(&self, by: Duration) {
        let basis = *mutex::lock(&self.basis);
        if self.our_clock_odd(&basis) {
            warn!(
                target: crate::telemetry::targets::LOST,
                resource = %self.resource,
                "a quorum of nodes ran their clocks ahead of ours: the odd clock is this \
                 client's (stalled, or running slow), and no validity is kept on it; the lock \
                 counts as lost, and the nodes sit out lock quorums here for the restart \
                 quarantine"
            );
            return;
        }
        warn!(
            target: crate::telemetry::targets::LOST,
            resource = %self.resource,
            cut_ms = by.as_millis().min(u128::from(u64::MAX)) as u64,
            "a node this lock's quorum needed ran its clock ahead, or lost data (keys evicted, \
             a flush, a restart): its key there may be gone early, so the lock's validity is \
             cut by as much"
        );
    }

    /// A node's clock ran ahead, or was measured running faster, or a node
    /// was found to have lost data: cuts the validity where the lock's keys
    /// were on it (see [`Basis`]).
    pub(crate) fn clock_jumped(&self) {
        let basis = *mutex::lock(&self.basis);
        let bound = self.clock_bound(&basis);
        let until = self.state.now().valid_until;
        if bound < until {
            self.state.lower_to(bound);
            self.cut_by_clock(until - bound);
        }
    }

    /// Validity left, zero if lost.
    pub(crate) fn validity(&self) -> Duration {
        self.state.validity()
    }

    /// See [`Lock::ensure_valid`].
    pub(crate) fn ensure_valid(&self, min_remaining: Duration) -> Result<Duration> {
        self.state.ensure_valid(&self.resource, min_remaining)
    }

    /// See [`Lock::extend`] (and `extensions.rs` for the validity rule).
    #[instrument(skip_all, fields(resource = %self.resource, outcome, nodes))]
    pub(crate) async fn extend(&self, ttl: Duration) -> Result<()> {
        let start = clock::now();
        let result = self.extend_round(ttl, start).await;
        let ok = result.is_ok();
        tracing::Span::current().record("outcome", if ok { "extended" } else { "failed" });
        let telemetry = &self.redlock.nodes().telemetry;
        telemetry.extension(
            self.holding.primitive(),
            clock::now().saturating_duration_since(start),
            ok,
        );
        result
    }

    /// The extension's round, started at `start`.
    async fn extend_round(&self, ttl: Duration, start: Instant) -> Result<()> {
        let redlock = &self.redlock;
        let ttl_ms = redlock.config().check_ttl(ttl)?;
        // The nodes that will extend are not known yet: counted at the
        // fastest clock measured among all.
        let drift = redlock.drift_on(ttl, redlock.nodes().all());
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
        let req = match &self.held {
            None => Request::script(&scripts::EXTEND, [&self.key], |cmd| {
                cmd.arg(&self.value).arg(ttl_ms);
            }),
            Some(held) => held.extend_request(&self.value, ttl_ms),
        };
        let (tally, stragglers) = redlock
            .nodes()
            .vote_round(&req, "extend", Counts::Trusted, int_vote)
            .await;
        stragglers.finish_in_background();
        let now = clock::now();
        match (tally.decided(), valid_until(start, now, ttl, drift)) {
            (Some(true), Some(until)) if now < old.valid_until => {
                let basis = Basis::new(tally.yes, start, ttl, until);
                let cut = self.clock_bound(&basis);
                if cut < until {
                    self.cut_by_clock(until - cut);
                }
                let until = cut;
                let mut ext = Extensions::locked(&self.extensions);
                if let Some(until) = ext.confirm(seq, until) {
                    *mutex::lock(&self.basis) = basis;
                    self.state.set_until(until);
                }
                let took = now.saturating_duration_since(start) + drift;
                self.round_ns.store(nanos(took), Ordering::Relaxed);
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
    pub(crate) async fn is_held(&self) -> Result<bool> {
        let redlock = &self.redlock;
        let req = match &self.held {
            None => Request::plain(redis::cmd("GET").arg(&self.key).to_owned()),
            Some(held) => held.held_request(&self.value),
        };
        let ours = |_: usize, v: &Value| match v {
            Value::BulkString(b) => Some(b == self.value.as_bytes()),
            Value::Nil | Value::Int(0) => Some(false),
            Value::Int(1) => Some(true),
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
    pub(crate) fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.state.lost()
    }
}

/// A duration in whole nanoseconds, saturating.
pub(crate) fn nanos(d: Duration) -> u64 {
    d.as_nanos().min(u128::from(u64::MAX)) as u64
}
