//! A lock's deadline as the guard (`guard.rs`) and we both count it: an
//! absolute reading of `CLOCK_BOOTTIME`, in nanoseconds.
//!
//! Why that clock: both processes read the same one, it never jumps (a step
//! of the wall clock moves no deadline), and it goes on counting while the
//! machine is suspended, as the library's lock arithmetic does and as the
//! nodes' key expiry does. Why an absolute value: it means the same in the
//! guard however late the guard reads it from the pipe. Why a `u64`: eight
//! bytes cross the pipe in one atomic write, and comparing it with the
//! clock takes only `clock_gettime`, which is async-signal-safe (the guard
//! is the child of a fork of a threaded process: it may not allocate, take
//! locks or use `std::time`).

use std::io;
use std::time::Duration;

/// An instant on `CLOCK_BOOTTIME`, in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Deadline(u64);

impl Deadline {
    /// `left()` from now. The clock is read before `left` is measured
    /// (hence a closure), so the moment between the two readings is taken
    /// off the deadline instead of added to it: it errs early, never late.
    pub fn after(left: impl FnOnce() -> Duration) -> io::Result<Self> {
        let now = now_ns().ok_or_else(io::Error::last_os_error)?;
        let left = u64::try_from(left().as_nanos()).unwrap_or(u64::MAX);
        Ok(Self(now.saturating_add(left)))
    }

    /// The deadline `ns` nanoseconds after the clock's origin.
    pub const fn from_ns(ns: u64) -> Self {
        Self(ns)
    }

    /// Nanoseconds after the clock's origin.
    pub const fn ns(self) -> u64 {
        self.0
    }

    /// This deadline moved `by` earlier (never before the clock's origin).
    pub const fn earlier_by(self, by: Duration) -> Self {
        // `as` cannot overflow a u64 for the few milliseconds used here;
        // saturating keeps a deadline near the origin at the origin.
        Self(self.0.saturating_sub(by.as_nanos() as u64))
    }

    /// Whether the clock reached this deadline; also true if the clock
    /// cannot be read (whoever asks then acts as if time ran out, the safe
    /// side for a lock). Async-signal-safe.
    pub fn passed(self) -> bool {
        now_ns().is_none_or(|now| now >= self.0)
    }
}

/// `CLOCK_BOOTTIME` now, in nanoseconds; `None` if it cannot be read.
/// Async-signal-safe.
pub fn now_ns() -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a pointer to a
    // live, writable one.
    if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) } != 0 {
        return None;
    }
    let secs = u64::try_from(ts.tv_sec).ok()?;
    let nanos = u64::try_from(ts.tv_nsec).ok()?;
    secs.checked_mul(1_000_000_000)?.checked_add(nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_counts_from_a_reading_taken_first() {
        let before = now_ns().unwrap();
        let d = Deadline::after(|| Duration::from_secs(5)).unwrap();
        let after = now_ns().unwrap();
        assert!(d.ns() >= before + 5_000_000_000);
        assert!(d.ns() <= after + 5_000_000_000);
        assert!(!d.passed());
        assert!(Deadline::from_ns(before).passed());
        assert_eq!(
            Deadline::from_ns(10)
                .earlier_by(Duration::from_secs(1))
                .ns(),
            0
        );
    }
}
