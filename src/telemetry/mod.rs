//! What this client counts and reports about itself: the hooks the layers
//! above call at each event (an acquisition decided, a waiter woken, a
//! node's reply, a quorum round, a lock lost...), which update the
//! always-on counters behind [`Redlock::stats`](crate::Redlock::stats)
//! ([`stats`]) and, with the `metrics` feature, record the same events
//! through the `metrics` facade ([`metrics`], where every name is
//! documented).
//!
//! Nothing here is a safety input and nothing here can fail: a hook is a
//! few relaxed atomic additions, plus the facade's calls when the feature
//! is on (cheap with no recorder installed).

pub(crate) mod labels;
pub(crate) mod metrics;
pub(crate) mod stats;
pub mod targets;

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, NodeErrorKind};
use crate::telemetry::labels::{Decided, LostReason, Mode, Primitive, Woken};
use crate::telemetry::stats::Counters;

/// Maps a resource name to the class its metrics are labelled with (see
/// [`RedlockBuilder::metric_class`](crate::RedlockBuilder::metric_class)).
pub type ClassFn = Arc<dyn Fn(&str) -> String + Send + Sync>;

/// One client's counters and its metric labels' settings.
pub(crate) struct Telemetry {
    /// The counters behind `stats()`.
    pub(crate) counters: Counters,
    /// The user's resource-to-class mapping, if any: without it no metric
    /// carries anything derived from a resource name.
    class: Option<ClassFn>,
}

impl fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Telemetry")
            .field("class", &self.class.as_ref().map(|_| "custom"))
            .finish_non_exhaustive()
    }
}

impl Telemetry {
    /// Counters for `nodes` nodes; metrics labelled by `class` if given.
    pub(crate) fn new(nodes: usize, class: Option<ClassFn>) -> Self {
        Self {
            counters: Counters::new(nodes),
            class,
        }
    }

    /// The metric class of `resource`: none without a mapping, or without
    /// the `metrics` feature (nothing would read it).
    pub(crate) fn class_of(&self, resource: &str) -> Option<String> {
        let class = self.class.as_ref().filter(|_| cfg!(feature = "metrics"));
        class.map(|f| f(resource))
    }

    /// Starts timing an acquisition of `resource` as `primitive`, `mode`.
    pub(crate) fn acquisition(
        &self,
        primitive: Primitive,
        mode: Mode,
        resource: &str,
    ) -> Acquisition<'_> {
        Acquisition {
            telemetry: self,
            primitive,
            mode,
            class: self.class_of(resource),
            started: Instant::now(),
            rounds: std::sync::atomic::AtomicU32::new(0),
        }
    }

    /// A waiter slept `slept` between attempts and `woken` ended it.
    pub(crate) fn woke(&self, woken: Woken, slept: Duration) {
        self.counters.woke(woken);
        metrics::woke(woken, slept);
    }

    /// Node `node` answered a request of a round after `took`, or failed
    /// it with `error` (a timeout, a refusal, a vote that did not count).
    pub(crate) fn node_reply(&self, node: usize, took: Duration, error: Option<&NodeErrorKind>) {
        let kind = error.map(labels::error_kind);
        if let Some(kind) = kind {
            self.counters.node_failed(node, kind);
        }
        metrics::node_reply(node, took, kind);
    }

    /// A request goes to node `node`.
    pub(crate) fn node_sent(&self, node: usize) {
        self.counters.node_sent(node);
    }

    /// A vote round for `op` ended after `took`, decided as `decided`; `up`
    /// counts the nodes answering in time at its end (asked only when a
    /// metric records it).
    pub(crate) fn round(
        &self,
        op: &'static str,
        decided: Decided,
        took: Duration,
        up: impl FnOnce() -> usize,
    ) {
        metrics::round(op, decided, took, up);
    }

    /// A semaphore attempt whose nodes took different slots made a move
    /// round, `won` or not.
    pub(crate) fn permit_moved(&self, won: bool) {
        self.counters.moved(won);
    }

    /// A node pushed a notification.
    pub(crate) fn notified(&self) {
        self.counters.notified();
    }

    /// An allocation from a quorum counter ended after `took` with
    /// `conflicts` lost compare-and-set rounds, `ok` or not.
    pub(crate) fn allocation(&self, took: Duration, conflicts: u32, ok: bool) {
        self.counters.allocation(conflicts, ok);
        metrics::allocation(took, conflicts, ok);
    }

    /// A lock extension ended after `took`, `ok` or not.
    pub(crate) fn extension(&self, primitive: Primitive, took: Duration, ok: bool) {
        self.counters.extension(ok);
        metrics::extension(primitive, took, ok);
    }
}

/// One acquisition being timed: counts its attempts, and records its
/// outcome when it ends.
#[derive(Debug)]
pub(crate) struct Acquisition<'a> {
    /// Where it is recorded.
    telemetry: &'a Telemetry,
    /// What is acquired.
    primitive: Primitive,
    /// How.
    mode: Mode,
    /// The resource's metric class.
    class: Option<String>,
    /// When it started.
    started: Instant,
    /// Attempts (quorum rounds on the lock keys) made.
    rounds: std::sync::atomic::AtomicU32,
}

impl Acquisition<'_> {
    /// One more attempt.
    pub(crate) fn attempted(&self) {
        self.rounds.fetch_add(1, Ordering::Relaxed);
    }

    /// The acquisition ended with `result`.
    pub(crate) fn finish<T>(self, result: &Result<T, Error>) {
        let outcome = labels::outcome(result);
        let rounds = self.rounds.load(Ordering::Relaxed);
        let took = self.started.elapsed();
        let span = tracing::Span::current();
        span.record("outcome", outcome);
        span.record("rounds", rounds);
        let t = self.telemetry;
        t.counters.acquired(outcome, rounds);
        metrics::acquired(
            self.primitive,
            self.mode,
            self.class.as_deref(),
            outcome,
            took,
            rounds,
        );
    }

    /// The holding record of a lock it won: counted as held from now.
    pub(crate) fn holding(&self) -> Holding {
        Holding::start(self.telemetry, self.primitive, self.class.clone())
    }
}

/// A held lock as the telemetry sees it: counted in the held gauge from
/// acquisition until it is released or lost, whichever comes first.
#[derive(Debug)]
pub(crate) struct Holding {
    /// What it is.
    primitive: Primitive,
    /// Its resource's metric class.
    class: Option<String>,
    /// When it was acquired.
    since: Instant,
    /// Still counted as held.
    live: AtomicBool,
    /// Counted at all (false for a lock made outside an acquisition).
    tracked: bool,
}

impl Holding {
    /// Counts a lock of `primitive` as held from now.
    fn start(telemetry: &Telemetry, primitive: Primitive, class: Option<String>) -> Self {
        telemetry.counters.held(primitive, 1);
        metrics::held(primitive, class.as_deref(), 1.0);
        Self {
            primitive,
            class,
            since: Instant::now(),
            live: AtomicBool::new(true),
            tracked: true,
        }
    }

    /// A holding not counted anywhere: a lock's until the acquisition that
    /// won it counts it (a lock an attempt takes and gives back at once,
    /// such as a semaphore's slot won on too few nodes, never is).
    pub(crate) fn untracked() -> Self {
        Self {
            primitive: Primitive::Internal,
            class: None,
            since: Instant::now(),
            live: AtomicBool::new(false),
            tracked: false,
        }
    }

    /// What it holds.
    pub(crate) fn primitive(&self) -> Primitive {
        self.primitive
    }

    /// Stops counting it as held; true the first time only.
    fn end(&self, telemetry: &Telemetry) -> bool {
        if !self.live.swap(false, Ordering::AcqRel) {
            return false;
        }
        telemetry.counters.held(self.primitive, -1);
        metrics::held(self.primitive, self.class.as_deref(), -1.0);
        true
    }

    /// It is being released with `validity_left` (zero: it had expired or
    /// was lost) after being held since acquisition.
    pub(crate) fn released(&self, telemetry: &Telemetry, validity_left: Duration) {
        if !self.tracked {
            return;
        }
        let was_live = self.end(telemetry);
        telemetry.counters.released();
        let held = self.since.elapsed();
        metrics::released(self.primitive, self.class.as_deref(), held, validity_left);
        if was_live && validity_left.is_zero() {
            self.lost_now(telemetry, LostReason::ExpiredWhileHeld);
        }
    }

    /// It was lost for `reason` (recorded once).
    pub(crate) fn lost(&self, telemetry: &Telemetry, reason: LostReason) {
        if self.end(telemetry) {
            self.lost_now(telemetry, reason);
        }
    }

    /// Records a loss.
    fn lost_now(&self, telemetry: &Telemetry, reason: LostReason) {
        telemetry.counters.lost();
        metrics::lost(self.primitive, self.class.as_deref(), reason);
    }
}
