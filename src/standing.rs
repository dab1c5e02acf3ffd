//! Where a held lock stands: the monotonic instant its validity ends,
//! whether it was lost (and why) or released, and the futures that wait for
//! its loss.
//!
//! All holders of one lock share one `Standing`. Its `watch` channel carries
//! the state, so a task waiting for loss re-arms when an extension moves the
//! deadline, and the auto-extend task stops when the lock is released.

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::clock;
use crate::error::{Error, Result};

/// A lock's state at one moment.
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

/// The shared, observable state of one lock.
#[derive(Debug)]
pub(crate) struct Standing {
    /// The state, published to loss waiters and the auto-extend task.
    state: watch::Sender<State>,
    /// Why the lock was marked lost, once it was.
    lost_because: Mutex<Option<Error>>,
}

impl Standing {
    /// A lock valid until `valid_until`.
    pub(crate) fn new(valid_until: Instant) -> Self {
        let (state, _) = watch::channel(State {
            valid_until,
            lost: false,
            released: false,
        });
        Self {
            state,
            lost_because: Mutex::new(None),
        }
    }

    /// The state now.
    pub(crate) fn now(&self) -> State {
        *self.state.borrow()
    }

    /// A receiver of every change.
    pub(crate) fn subscribe(&self) -> watch::Receiver<State> {
        self.state.subscribe()
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
        self.state.send_modify(|s| s.released = true);
    }

    /// Marks lost for `because` and wakes loss waiters.
    pub(crate) fn mark_lost(&self, because: Error) {
        if let Ok(mut slot) = self.lost_because.lock() {
            slot.get_or_insert(because);
        }
        self.state.send_modify(|s| s.lost = true);
    }

    /// Why the lock was marked lost, if it was.
    pub(crate) fn lost_because(&self) -> Option<Error> {
        self.lost_because.lock().ok().and_then(|slot| slot.clone())
    }

    /// Lowers the deadline to `bound` if that is earlier.
    pub(crate) fn lower_to(&self, bound: Instant) {
        self.state
            .send_modify(|s| s.valid_until = s.valid_until.min(bound));
    }

    /// Sets the deadline (a confirmed extension).
    pub(crate) fn set_until(&self, until: Instant) {
        self.state.send_modify(|s| s.valid_until = until);
    }

    /// Waits for loss: a failed extension, or validity running out,
    /// re-arming whenever an extension moves the deadline.
    pub(crate) fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.state.subscribe();
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
