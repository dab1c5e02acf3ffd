//! What every holder of one lock shares (the guard, the [`LockHandle`]s
//! given to `.run(f)` work, the auto-extend task), and what is done on
//! it: extension, the ownership check, the release and loss bookkeeping,
//! and the auto-extend loop.
//!
//! [`LockHandle`]: crate::LockHandle

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use tokio::time::Instant;
use tracing::{debug, instrument, warn};

use crate::client::redlock::{int_vote, valid_until, Redlock};
use crate::clock;
use crate::error::{Error, Result};
use crate::fenced_writes::Fence;
use crate::lock::held::Held;
use crate::lock::scripts;
use crate::lock::standing::{Basis, Standing};
use crate::node::connection::request::Request;
use crate::quorum::Counts;
use crate::telemetry::labels::LostReason;
use crate::telemetry::Holding;

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
    /// What it stands on where that is more than `key` (a multi-lock's
    /// keys, `key` the first; a reader's lease; a permit's slot with the
    /// semaphore's waiting list): extension, check and release act on that.
    pub(crate) held: Option<Arc<dyn Held>>,
    /// Our random value: proves ownership to the compare-and-X scripts.
    pub(crate) value: String,
    /// The TTL the lock was taken with; auto-extension renews to it.
    pub(crate) ttl: Duration,
    /// Taken after waiting: its release asks whether others wait.
    pub(crate) contended: bool,
    /// Where it stands, and everything about it that changes while it is
    /// held, under one mutex (`standing.rs`).
    pub(crate) state: Standing,
    /// How the telemetry counts it (held, released, lost).
    pub(crate) holding: Holding,
    /// Keeps the nodes' clocks read while the lock is held
    /// ([`Quorum::probe_while_held`](crate::quorum::Quorum::probe_while_held)).
    pub(crate) _clock_probe: Arc<()>,
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
        if self.state.renewing() || st.released || st.lost || clock::now() < st.valid_until {
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
                .then(|| self.state.token(0))
                .flatten();
        };
        let i = all.iter().position(|r| r == resource)?;
        self.state.token(i)
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
        let held = (self.key.as_str(), self.value.as_str());
        self.redlock
            .release_round(held, self.contended, &self.line, self.held.as_deref())
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
    /// round started (a restart, an eviction, a flush: `node/trust/vigil.rs`), so
    /// that those left are fewer than a quorum, the keys may be gone from a
    /// quorum already: the validity ends at the round's start (it is over).
    ///
    /// And where a quorum of nodes ran their clocks ahead of ours since
    /// then, the odd clock is ours (stalled, or slow beyond the allowance):
    /// nothing it counts can be trusted, so the validity ends at the round's
    /// start too ([`Shared::our_clock_odd`]).
    pub(crate) fn clock_bound(&self, basis: &Basis) -> Instant {
        clock_bound(&self.redlock, basis)
    }

    /// Whether a quorum of nodes ran their clocks ahead of ours since
    /// `basis`'s round started (see [`our_clock_odd`]).
    pub(crate) fn our_clock_odd(&self, basis: &Basis) -> bool {
        our_clock_odd(&self.redlock, basis)
    }

    /// Says that a clock that ran ahead cut the validity by `by`.
    pub(crate) fn cut_by_clock(&self, by: Duration) {
        let basis = self.state.basis();
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
        let basis = self.state.basis();
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
        // From here the extension may take effect on any node: the lock is
        // ours at most until what it would leave.
        let bound = start + ttl.saturating_sub(drift);
        let Some(sent) = self.state.extending(start, bound) else {
            // Never extend a lock that has already expired: someone else
            // may hold it by now, and we could not tell.
            return Err(Error::Expired {
                resource: self.resource.clone(),
            });
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
            (Some(true), Some(until)) if now < sent.before => {
                let basis = Basis::new(tally.yes, start, ttl, until);
                let cut = self.clock_bound(&basis);
                if cut < until {
                    self.cut_by_clock(until - cut);
                }
                let took = now.saturating_duration_since(start) + drift;
                self.state.extended(sent.seq, basis, cut, took);
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

/// [`Shared::clock_bound`] for a lock of `redlock`'s counted from `basis`.
pub(crate) fn clock_bound(redlock: &Redlock, basis: &Basis) -> Instant {
    let nodes = redlock.nodes();
    if our_clock_odd(redlock, basis) {
        return basis.start;
    }
    let lost = nodes.lost_since(basis.held, basis.start);
    if lost != 0 && ((basis.held & !lost).count_ones() as usize) < nodes.needed() {
        return basis.start;
    }
    let at_rate = basis
        .ttl
        .checked_sub(redlock.drift_on(basis.ttl, basis.held))
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
pub(crate) fn our_clock_odd(redlock: &Redlock, basis: &Basis) -> bool {
    let nodes = redlock.nodes();
    crate::quorum::probe::ours_is_odd(nodes.ran_ahead_after(basis.start), nodes.needed())
}
