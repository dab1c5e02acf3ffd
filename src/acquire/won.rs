//! A lock just won, before it is shared: the whole record of what every
//! holder will share is made here, then it is counted and handed out
//! ([`Won::counted`]) with nothing patched in afterwards.

use std::sync::Arc;
use std::time::Duration;

use crate::client::redlock::Redlock;
use crate::clock;
use crate::lock::guard::Lock;
use crate::lock::held::Held;
use crate::lock::shared::{clock_bound, Shared};
use crate::lock::standing::{Basis, Standing};
use crate::telemetry::Holding;

/// A lock an attempt won, not yet handed out. The attempt's caller counts
/// it at once, with nothing awaited between (an attempt dropped before it
/// won undoes its take itself: `acquire/attempt.rs`).
#[must_use = "a won lock is counted and handed out at once"]
#[derive(Debug)]
pub(crate) struct Won {
    /// The record.
    shared: Shared,
    /// Where its background work runs.
    runtime: tokio::runtime::Handle,
}

/// What a won lock is on: its key, the line its waiters line up on (the
/// key, or the semaphore's), and what it stands on where that is more than
/// the key ([`Held`]: a multi-lock's keys, a reader's lease, a permit's
/// slot with its waiting list).
#[derive(Debug)]
pub(crate) struct Place<'a> {
    /// The key (a multi-lock's first).
    pub(crate) key: &'a str,
    /// The line its waiters line up on.
    pub(crate) line: &'a str,
    /// What it stands on, where more than `key`.
    pub(crate) held: Option<Arc<dyn Held>>,
}

impl Won {
    /// The lock on `place` named `resource`, taken with `value` for `ttl`,
    /// valid as `basis` says (less what clocks seen running ahead took
    /// from it); `contended`: taken after waiting.
    pub(crate) fn new(
        redlock: Redlock,
        resource: &str,
        place: Place<'_>,
        value: String,
        ttl: Duration,
        basis: Basis,
        contended: bool,
    ) -> Self {
        let probe = Arc::downgrade(&redlock.inner);
        let clock_probe = redlock.nodes().probe_while_held(probe, |i| &i.quorum, ttl);
        let bound = clock_bound(&redlock, &basis);
        // The acquisition's round, with the drift: what the TTL lost
        // before the validity began.
        let round = ttl.saturating_sub(basis.until.saturating_duration_since(clock::now()));
        let shared = Shared {
            redlock,
            resource: resource.to_owned(),
            key: place.key.to_owned(),
            line: place.line.to_owned(),
            held: place.held,
            value,
            ttl,
            contended,
            state: Standing::new(basis, bound, round),
            holding: Holding::untracked(),
            _clock_probe: clock_probe,
        };
        if bound < basis.until {
            shared.cut_by_clock(basis.until - bound);
        }
        Self {
            shared,
            runtime: tokio::runtime::Handle::current(),
        }
    }

    /// Counts it as `holding` says and hands it out.
    pub(crate) fn counted(self, holding: Holding) -> Lock {
        let Self {
            mut shared,
            runtime,
        } = self;
        shared.holding = holding;
        Lock::start(shared, runtime)
    }
}
