//! Rounds that finish in the background (stragglers of a release, the rest
//! of a won `SET`), counted so a short-lived program can wait for them
//! before it exits.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

/// Tracks rounds still finishing in the background, so a short-lived program
/// can wait for them before it exits (`Redlock::settle`).
#[derive(Debug, Default)]
pub(crate) struct Background {
    /// Rounds in flight.
    pending: AtomicUsize,
    /// Woken when `pending` drops to zero.
    idle: Notify,
}

/// Held by one background round; its drop marks the round done.
pub(crate) struct BackgroundToken(Arc<Background>);

impl Background {
    /// Registers one background round.
    pub(crate) fn enter(this: &Arc<Self>) -> BackgroundToken {
        this.pending.fetch_add(1, Ordering::AcqRel);
        BackgroundToken(Arc::clone(this))
    }

    /// Waits until no round is pending.
    pub(crate) async fn settled(&self) {
        loop {
            let idle = self.idle.notified();
            if self.pending.load(Ordering::Acquire) == 0 {
                return;
            }
            idle.await;
        }
    }
}

impl Drop for BackgroundToken {
    fn drop(&mut self) {
        if self.0.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}
