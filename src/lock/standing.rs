//! Where a held lock stands, and everything about it that changes while
//! it is held: the monotonic instant its validity ends, whether it was lost
//! (and why) or released, the extensions in flight, what the validity was
//! last counted from, the latest round's duration, whether it renews
//! itself, and its fencing tokens.
//!
//! All holders of one lock share one `Standing`: the changing state is one
//! record under one mutex, each change made whole under it; a `watch`
//! channel only publishes the [`State`] after each change, so that a task
//! waiting for loss re-arms when an extension moves the deadline, and the
//! auto-extend task stops when the lock is released.

use std::future::Future;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::clock;
use crate::error::{Error, Result};
use crate::extensions::Extensions;
use crate::mutex;
use crate::quorum::tally::NodeSet;

/// A lock's state at one moment, as published.
#[derive(Clone, Copy, Debug)]
pub(crate) struct State {
    /// The lock is ours until this instant (monotonic clock).
    pub(crate) valid_until: Instant,
    /// The nodes said the lock is gone or someone else's, or its validity
    /// ran out: it must be treated as gone.
    pub(crate) lost: bool,
    /// Released (or being released); background tasks stop.
    pub(crate) released: bool,
}

/// What a lock's validity was counted from: the round that last set its
/// keys (the acquisition, then each confirmed extension), for `ttl`. A
/// node among `held` whose clock was seen running ahead after `start`
/// drops its key that much early, and one whose clock was since measured
/// running faster than the validity allowed for drops it at that rate: the
/// validity is cut by as much (`Shared::clock_bound`).
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

/// Everything that changes while a lock is held.
#[derive(Debug)]
struct Changing {
    /// What is published.
    state: State,
    /// Why the lock was marked lost, once it was.
    lost_because: Option<Error>,
    /// Extensions sent and not yet overtaken by a confirmed later one: what
    /// bounds the validity (see `extensions.rs`).
    extensions: Extensions,
    /// What the validity was last counted from.
    basis: Basis,
    /// How long the latest round on the nodes took (the acquisition, then
    /// each confirmed extension), with the drift allowance: the auto-extend
    /// task starts a renewal at least twice that before the validity ends,
    /// so the renewal lands while the lock is still ours.
    round: Duration,
    /// Whether an auto-extend task was started (there is only one).
    renewing: bool,
    /// The fencing tokens, one per resource in the lock's order (one for a
    /// lock on one resource); empty: taken without.
    tokens: Vec<u64>,
}

/// The shared state of one held lock.
#[derive(Debug)]
pub(crate) struct Standing {
    /// The changing state.
    changing: Mutex<Changing>,
    /// Publishes `changing.state` after each change, to loss waiters and
    /// the auto-extend task.
    published: watch::Sender<State>,
}

/// An extension about to be sent (see [`Standing::extending`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sent {
    /// Its number among the lock's extensions.
    pub(crate) seq: u64,
    /// The validity before it.
    pub(crate) before: Instant,
}

impl Standing {
    /// A lock counted from `basis`, valid until `basis.until` or `bound`,
    /// whichever is earlier, whose acquisition took `round` (with the
    /// drift allowance).
    pub(crate) fn new(basis: Basis, bound: Instant, round: Duration) -> Self {
        let state = State {
            valid_until: basis.until.min(bound),
            lost: false,
            released: false,
        };
        let (published, _) = watch::channel(state);
        Self {
            changing: Mutex::new(Changing {
                state,
                lost_because: None,
                extensions: Extensions::default(),
                basis,
                round,
                renewing: false,
                tokens: Vec::new(),
            }),
            published,
        }
    }

    /// The changing state, also after a panic elsewhere (each change to it
    /// is made whole under the lock).
    fn changing(&self) -> MutexGuard<'_, Changing> {
        mutex::lock(&self.changing)
    }

    /// Changes the state with `f`, and publishes it.
    fn change<R>(&self, f: impl FnOnce(&mut Changing) -> R) -> R {
        let mut changing = self.changing();
        let r = f(&mut changing);
        self.published.send_replace(changing.state);
        r
    }

    /// The state now.
    pub(crate) fn now(&self) -> State {
        self.changing().state
    }

    /// A receiver of every change.
    pub(crate) fn subscribe(&self) -> watch::Receiver<State> {
        self.published.subscribe()
    }

    /// Validity left, zero if lost.
    pub(crate) fn validity(&self) -> Duration {
        let st = self.now();
        if st.lost {
            return Duration::ZERO;
        }
        st.valid_until.saturating_duration_since(clock::now())
    }

    /// The instant validity ends by our count, lost or not.
    pub(crate) fn deadline(&self) -> Instant {
        self.now().valid_until
    }

    /// See `Lock::ensure_valid`.
    pub(crate) fn ensure_valid(&self, resource: &str, min_remaining: Duration) -> Result<Duration> {
        let left = self.validity();
        if left.is_zero() {
            return Err(Error::Expired {
                resource: resource.to_owned(),
            });
        }
        if left < min_remaining {
            return Err(Error::ValidityTooShort {
                resource: resource.to_owned(),
                left,
                needed: min_remaining,
            });
        }
        Ok(left)
    }

    /// Marks released so the auto-extend task stops.
    pub(crate) fn mark_released(&self) {
        self.change(|c| c.state.released = true);
    }

    /// Marks lost for `because` and wakes loss waiters.
    pub(crate) fn mark_lost(&self, because: Error) {
        self.change(|c| {
            c.lost_because.get_or_insert(because);
            c.state.lost = true;
        });
    }

    /// Why the lock was marked lost, if it was.
    pub(crate) fn lost_because(&self) -> Option<Error> {
        self.changing().lost_because.clone()
    }

    /// Lowers the deadline to `bound` if that is earlier.
    pub(crate) fn lower_to(&self, bound: Instant) {
        self.change(|c| c.state.valid_until = c.state.valid_until.min(bound));
    }

    /// What the validity was last counted from.
    pub(crate) fn basis(&self) -> Basis {
        self.changing().basis
    }

    /// The latest round's duration, with the drift allowance.
    pub(crate) fn round(&self) -> Duration {
        self.changing().round
    }

    /// Records that an auto-extend task starts; false if one already did.
    pub(crate) fn start_renewing(&self) -> bool {
        let mut changing = self.changing();
        !std::mem::replace(&mut changing.renewing, true)
    }

    /// Whether an auto-extend task was started.
    pub(crate) fn renewing(&self) -> bool {
        self.changing().renewing
    }

    /// An extension started at `start` is about to be sent that, if it
    /// takes effect, leaves the lock valid until `bound`: unless the lock
    /// is lost or its validity ended by `start` (`None`: never extend a
    /// lock that may be someone else's by now), the validity is lowered to
    /// `bound` if that is earlier, and the extension numbered (see
    /// `extensions.rs`).
    pub(crate) fn extending(&self, start: Instant, bound: Instant) -> Option<Sent> {
        self.change(|c| {
            let before = c.state.valid_until;
            if c.state.lost || start >= before {
                return None;
            }
            c.state.valid_until = before.min(bound);
            Some(Sent {
                seq: c.extensions.send(bound),
                before,
            })
        })
    }

    /// Extension `seq`, counted from `basis` (`basis.until`, less what
    /// clocks took: `until`), was confirmed by a quorum after a round that
    /// took `round`: the validity rises as the extensions' rule allows,
    /// and the basis is the extension's where it governs.
    pub(crate) fn extended(&self, seq: u64, basis: Basis, until: Instant, round: Duration) {
        self.change(|c| {
            if let Some(until) = c.extensions.confirm(seq, until) {
                c.basis = basis;
                c.state.valid_until = until;
            }
            c.round = round;
        });
    }

    /// Attaches the fencing tokens, one per resource in the lock's order
    /// (right after acquisition; once).
    pub(crate) fn set_tokens(&self, tokens: Vec<u64>) {
        let mut changing = self.changing();
        if changing.tokens.is_empty() {
            changing.tokens = tokens;
        }
    }

    /// The fencing token of the lock's `i`th resource, if it was fenced.
    pub(crate) fn token(&self, i: usize) -> Option<u64> {
        self.changing().tokens.get(i).copied()
    }

    /// Waits for loss: a failed extension, or validity running out,
    /// re-arming whenever an extension moves the deadline.
    pub(crate) fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.published.subscribe();
        async move {
            loop {
                let st = *rx.borrow_and_update();
                if st.lost {
                    return;
                }
                tokio::select! {
                    changed = rx.changed() => {
                        if changed.is_err() {
                            // Every holder is gone; nothing can extend it now.
                            tokio::time::sleep_until(clock::timer(st.valid_until)).await;
                            return;
                        }
                    }
                    () = tokio::time::sleep_until(clock::timer(st.valid_until)) => return,
                }
            }
        }
    }
}
