//! The place a directly sent request holds on its connection, given up the
//! moment its reply arrives, whether or not its caller is polling.
//!
//! A link lets one request (or batch) be outstanding at a time; what comes
//! meanwhile queues and goes out as one pipeline when that one is answered.
//! A request handed over on its own is followed by its caller's round, and
//! a round makes progress only when its caller polls it. If the place were
//! given up only then, one caller that stopped polling (a future kept
//! unpolled, a task starved of CPU) would hold every other caller's
//! requests to that node in the queue until they timed out. So the reply's
//! wake-up goes through a [`Slot`] first: the connection task that delivers
//! the reply wakes the slot, which gives the place up at once and then
//! wakes the caller.

use std::sync::{Arc, Mutex};
use std::task::{Context, Waker};

use futures::task::{waker_ref, ArcWake, AtomicWaker};

use crate::mutex;

/// A directly sent request's place on its connection (see the module docs):
/// `P` gives the place up when dropped (the link's `Outstanding`).
pub(crate) struct Slot<P> {
    /// The place, once armed; `Free` after it was given up.
    place: Mutex<Place<P>>,
    /// The caller's waker, woken after the place is given up.
    caller: AtomicWaker,
}

/// Where a slot's place stands.
enum Place<P> {
    /// Not armed yet: the request is being handed over under the link's
    /// lock, so a wake-up now must not give the place up (that takes the
    /// same lock).
    Unarmed,
    /// Woken before it was armed: [`Slot::arm`] gives the place up at once.
    WokenEarly,
    /// Held.
    Held(P),
    /// Given up.
    Free,
}

impl<P: Send + 'static> Slot<P> {
    /// A new, unarmed slot.
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            place: Mutex::new(Place::Unarmed),
            caller: AtomicWaker::new(),
        })
    }

    /// The waker to hand the request's exchange: it gives the place up.
    pub(crate) fn waker(self: &Arc<Self>) -> Waker {
        futures::task::waker(Arc::clone(self))
    }

    /// Holds `place`, after the link's lock was released. A reply that
    /// arrived meanwhile gives it up at once.
    pub(crate) fn arm(&self, place: P) {
        let mut p = self.lock();
        match *p {
            Place::Unarmed => *p = Place::Held(place),
            _ => {
                *p = Place::Free;
                drop(p);
                drop(place);
            }
        }
    }

    /// Gives the place up (idempotent): the requests queued behind it go
    /// out.
    pub(crate) fn free(&self) {
        let held = {
            let mut p = self.lock();
            match std::mem::replace(&mut *p, Place::Free) {
                Place::Unarmed => {
                    *p = Place::WokenEarly;
                    None
                }
                Place::Held(o) => Some(o),
                Place::WokenEarly | Place::Free => None,
            }
        };
        // Dropped outside the slot's lock: it takes the link's.
        drop(held);
    }

    /// Polls `f` (the exchange) for the caller whose context is `cx`: the
    /// exchange sees the slot's waker, the caller is woken through it.
    pub(crate) fn poll_with<T>(
        self: &Arc<Self>,
        cx: &Context<'_>,
        f: impl FnOnce(&mut Context<'_>) -> T,
    ) -> T {
        self.caller.register(cx.waker());
        let waker = waker_ref(self);
        f(&mut Context::from_waker(&waker))
    }

    /// The place, also after a panic elsewhere.
    fn lock(&self) -> std::sync::MutexGuard<'_, Place<P>> {
        mutex::lock(&self.place)
    }
}

impl<P: Send + 'static> ArcWake for Slot<P> {
    fn wake_by_ref(arc_self: &Arc<Self>) {
        arc_self.free();
        arc_self.caller.wake();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Counts how often its place was given up.
    struct Place(Arc<AtomicUsize>);
    impl Drop for Place {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_wake_gives_the_place_up_once_whoever_polls() {
        let freed = Arc::new(AtomicUsize::new(0));
        let slot = Slot::new();
        slot.arm(Place(Arc::clone(&freed)));
        assert_eq!(freed.load(Ordering::SeqCst), 0);
        slot.waker().wake_by_ref();
        assert_eq!(freed.load(Ordering::SeqCst), 1);
        slot.free();
        slot.waker().wake();
        assert_eq!(freed.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_wake_before_arming_gives_the_place_up_when_armed() {
        let freed = Arc::new(AtomicUsize::new(0));
        let slot = Slot::new();
        slot.waker().wake_by_ref();
        slot.arm(Place(Arc::clone(&freed)));
        assert_eq!(freed.load(Ordering::SeqCst), 1);
    }
}
