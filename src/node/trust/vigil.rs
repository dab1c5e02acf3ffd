//! Evidence read while a connection stays open.
//!
//! A connection's check (`amnesia.rs`) reads what a node shows of its
//! history when the connection is made. A node can also drop our keys while
//! our connections to it stay open, and then nothing else looks:
//!
//! * **Eviction**, on a node whose `maxmemory-policy` can evict (any but
//!   `noeviction`, with a memory limit; see `evidence.rs`), at any moment.
//!   Every key we write has a TTL, so `volatile-*` policies evict exactly
//!   ours. On such a node every request that asks for a vote carries an
//!   `INFO stats` behind its `TIME`, in the same write, and its
//!   `evicted_keys` is read before the vote is counted: a count above the
//!   last one this client read (`counts::dropped`) means a key may have gone
//!   before the request ran, so the node is quarantined from now, as after
//!   a restart, and that very vote does not count. The key an attempt found
//!   free was evicted before the attempt's command ran, and the `INFO` ran
//!   after it on the same connection, so the count it reads includes that
//!   eviction.
//! * **A flush or a delete**, on any node: every request that asks for a
//!   vote carries, in its own pipeline behind its `TIME`, an `HMGET` of
//!   our marker's `run`, `loss` and `seen`, read before the vote is
//!   counted. A flush (`FLUSHALL`, `FLUSHDB`, `SWAPDB`, from a script too)
//!   takes the marker with our keys, and the first client to check the
//!   node after it writes the marker anew with a damage count that
//!   includes the flush; so a marker gone, or written anew since this
//!   client last saw or wrote it, is a loss before the request ran
//!   (`counts::remarked`): the node is quarantined from now and that vote
//!   does not count. Only where this client knows which writing names the
//!   process (after its check read or wrote it).
//! * **A look a second old or more**: a request made then carries `INFO
//!   stats` and `INFO commandstats` the same way, read before its vote
//!   counts: evictions, flushes (the damage count, `evidence.rs`) and
//!   statistics reset (`total_commands_processed`, or the `TIME` calls in
//!   `INFO commandstats`, below the last reading: `CONFIG RESETSTAT` could
//!   hide either; commands of other kinds padded after a reset bring the
//!   first back, not the second) are found in that very round
//!   (`counts::dropped`, `counts::reset`).
//! * **Everything the connection's check reads** (a flush, our marker
//!   deleted, a promotion, slots taken over, and the policy and memory
//!   limit, which `CONFIG SET` changes at run time): the whole check runs
//!   again on the open connection, behind the first request made at least
//!   [`RECHECK`] after the last check, which does not wait for it. So a
//!   node whose policy is changed to one that evicts has its evictions read
//!   in every round from at most [`RECHECK`] (plus a round trip) after the
//!   change on: an eviction within that first second is found by the next
//!   check, not by the round it happened before.
//!   A re-check the node does not answer, or answers only with a refusal
//!   for the moment (`CLUSTERDOWN` for our marker's slot), makes a new
//!   connection, checked as any new one before it carries a request.
//! * **Another process behind the address** (a name that now leads
//!   elsewhere, a virtual IP, a proxy) always comes with a new connection,
//!   which is checked when made.
//!
//! A loss found either way quarantines the node (`Trust`), and tells this
//! client's held locks: one whose quorum needed that node's yes is cut (see
//! `Shared::clock_bound` in `lock/shared.rs`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::Value;

use crate::node::clock::clockwatch::ClockWatch;
use crate::node::trust::amnesia::{AmnesiaCheck, Cause};
use crate::node::trust::check;
use crate::node::trust::evidence::{self, read_marker_id, MARKER_ID_FIELDS};
use crate::node::trust::Trust;

/// How long after a connection's check (or the last re-check) the check
/// runs again on the open connection, behind the next request.
pub(crate) const RECHECK: Duration = Duration::from_secs(1);

/// What a request reads of its node beside its `TIME` (see
/// [`Vigil::extras`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Extras {
    /// `INFO stats`, for `evicted_keys` and `total_commands_processed`:
    /// on a node that can evict, or whose evidence is stale.
    pub(crate) stats: bool,
    /// `INFO commandstats`, for the flushes in the damage count (with
    /// `stats`): where the evidence is stale.
    pub(crate) damage: bool,
    /// `HMGET` of our marker's `run`, `loss` and `seen`, where this client
    /// knows which writing of it names the process: in every round (a
    /// flush or a delete takes it, and the client that finds that first
    /// writes it anew, with another damage count and loss).
    pub(crate) marker: bool,
}

impl Extras {
    /// Our marker's read alone: the usual case on a node that cannot
    /// evict, checked less than [`RECHECK`] ago.
    pub(crate) const fn marker_only() -> Self {
        Self {
            stats: false,
            damage: false,
            marker: true,
        }
    }

    /// How many replies these reads add.
    pub(crate) fn count(self) -> usize {
        usize::from(self.stats) + usize::from(self.damage) + usize::from(self.marker)
    }
}

/// What a link watches on its node while connected: the node's clock
/// (`clockwatch.rs`) and its evictions, and when its check runs again.
#[derive(Debug)]
pub(crate) struct Vigil {
    /// The node, for logs.
    index: usize,
    /// The node's clock, read from the `TIME` behind every request.
    pub(crate) clock: Arc<ClockWatch>,
    /// What the checks found, and where a loss is recorded.
    trust: Arc<Trust>,
    /// How a check is made (`None`: never; nothing is watched then).
    check: Option<AmnesiaCheck>,
    /// Where our marker lives on the node.
    marker: String,
    /// When this vigil was made: the zero of `due`.
    born: Instant,
    /// When the next re-check is due, in ns after `born`.
    due: AtomicU64,
    /// A re-check is in flight.
    rechecking: AtomicBool,
}

impl Vigil {
    /// Watches node `index` with `clock`, recording in `trust`, checking
    /// as `check` says, our marker at `marker`.
    pub(crate) fn new(
        index: usize,
        clock: Arc<ClockWatch>,
        trust: &Arc<Trust>,
        check: Option<AmnesiaCheck>,
        marker: &str,
    ) -> Self {
        Self {
            index,
            clock,
            trust: Arc::clone(trust),
            check,
            marker: marker.to_owned(),
            born: Instant::now(),
            due: AtomicU64::new(0),
            rechecking: AtomicBool::new(false),
        }
    }

    /// What a request that asks for a vote reads of the node in the same
    /// round, beside its `TIME`: our marker alone, on a node that cannot
    /// evict and was checked less than [`RECHECK`] ago (the usual case).
    pub(crate) fn extras(&self) -> Extras {
        if self.check.is_none() {
            return Extras::default();
        }
        let stale = self.due();
        Extras {
            stats: stale || self.trust.evicts(),
            damage: stale,
            marker: self.trust.expects_marker(),
        }
    }

    /// Where our marker lives on the node.
    pub(crate) fn marker(&self) -> &str {
        &self.marker
    }

    /// Adds the commands `extras` asks for to `pipe`; how many.
    pub(crate) fn add(&self, pipe: &mut redis::Pipeline, extras: Extras) -> usize {
        if extras.stats {
            pipe.cmd("INFO").arg("stats");
        }
        if extras.damage {
            pipe.cmd("INFO").arg("commandstats");
        }
        if extras.marker {
            pipe.cmd("HMGET").arg(&self.marker).arg(&MARKER_ID_FIELDS);
        }
        extras.count()
    }

    /// Takes in the replies to `extras` from the end of `values` (a
    /// request sent at `sent` and answered at `recv`, on our clock), and
    /// removes them. Runs before the request's own reply is passed on, so
    /// a vote that comes with a loss is not counted. `false` if `values`
    /// is too short.
    pub(crate) fn read(
        &self,
        values: &mut Vec<Value>,
        extras: Extras,
        (sent, recv): (tokio::time::Instant, tokio::time::Instant),
    ) -> bool {
        let Some(check) = &self.check else {
            // Nothing is watched (and nothing asked for by `extras`):
            // the replies go unread, but are removed all the same.
            let Some(kept) = values.len().checked_sub(extras.count()) else {
                return false;
            };
            values.truncate(kept);
            return true;
        };
        let quarantine = Duration::from_secs(check.quarantine_secs.saturating_add(1));
        if extras.marker {
            let Some(found) = values.pop() else {
                return false;
            };
            if self.trust.marker_moved(read_marker_id(&found).as_ref()) {
                self.lost(Instant::now(), quarantine, Cause::MarkerGone);
            }
        }
        let text = |v: Value| redis::from_redis_value::<String>(v).ok();
        let commands = if extras.damage {
            let Some(commands) = values.pop() else {
                return false;
            };
            text(commands)
        } else {
            None
        };
        if extras.stats {
            let Some(stats) = values.pop() else {
                return false;
            };
            let stats = text(stats);
            let stats = stats.as_deref();
            let damage = extras
                .damage
                .then(|| evidence::damage(stats?, commands.as_deref()?));
            let dropped = self.trust.counts_read(
                (sent, recv),
                stats.and_then(evidence::evicted_keys),
                damage,
                (
                    stats.and_then(evidence::commands_processed),
                    commands.as_deref().and_then(evidence::time_calls),
                ),
            );
            if dropped {
                self.lost(Instant::now(), quarantine, Cause::Dropped);
            }
        }
        true
    }

    /// A loss found while connected: the node out of lock quorums for
    /// `quarantine` from `at`, logged once, and the full check next.
    fn lost(&self, at: Instant, quarantine: Duration, cause: Cause) {
        if self.trust.dropped_while_connected(at, quarantine, cause) {
            tracing::warn!(
                target: crate::telemetry::targets::LOSS,
                node = self.index,
                "node {} {} while we were connected: it does not count toward a lock quorum \
                 for {}s, until no lock it may have lost can still be valid",
                self.index,
                cause.describe(),
                quarantine.as_secs()
            );
        }
        // The full check behind the next request: it brings our marker up
        // to date with what was found.
        self.due.store(0, Ordering::Relaxed);
    }

    /// A connection was just made and checked.
    pub(crate) fn checked(&self) {
        self.schedule();
    }

    /// Whether the connection's check is due again (see [`RECHECK`]).
    pub(crate) fn due(&self) -> bool {
        self.check.is_some() && self.nanos(Instant::now()) >= self.due.load(Ordering::Relaxed)
    }

    /// Runs the connection's check again on `conn`, in the background,
    /// unless one is in flight; `addr` as for the check when the connection
    /// was made, each reply bounded by `timeout`. A check the node does not
    /// answer, or answers only with a refusal for the moment (a cluster
    /// down, a slot not served, a script running), calls `unread`: what only
    /// the check reads (a promotion, a policy that now evicts) would go
    /// unread while the connection kept voting, so the link makes a new
    /// connection, whose own check keeps the node out until it answers.
    pub(crate) fn recheck(
        self: &Arc<Self>,
        conn: &MultiplexedConnection,
        addr: &str,
        timeout: Duration,
        unread: impl FnOnce() + Send + 'static,
    ) {
        if self.rechecking.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.rechecking.store(false, Ordering::Release);
            return;
        };
        let (vigil, mut conn) = (Arc::clone(self), conn.clone());
        let addr = addr.to_owned();
        runtime.spawn(async move {
            if let Some(check) = &vigil.check {
                let node = (vigil.index, addr.as_str());
                let marker = &vigil.marker;
                let checked =
                    check::check(&mut conn, check, &vigil.trust, node, timeout, marker).await;
                if let Err(e) = checked {
                    tracing::debug!(
                        node = vigil.index,
                        error = %e,
                        "re-check not answered: a new connection"
                    );
                    unread();
                }
            }
            vigil.schedule();
            vigil.rechecking.store(false, Ordering::Release);
        });
    }

    /// The next re-check is due [`RECHECK`] from now.
    fn schedule(&self) {
        let next = self.nanos(Instant::now() + RECHECK);
        self.due.store(next, Ordering::Relaxed);
    }

    /// `at` in ns after `born`.
    fn nanos(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.born)
            .as_nanos()
            .min(u128::from(u64::MAX)) as u64
    }
}
