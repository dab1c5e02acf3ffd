//! The client's clock for every deadline that guards safety (a lock's
//! validity, the start of a round it is counted from): tokio's monotonic
//! [`Instant`], moved on by the time the machine spent suspended.
//!
//! On Linux, `Instant` reads `CLOCK_MONOTONIC`, which stops while the
//! machine is suspended (a laptop's lid closed, a virtual machine paused
//! and resumed): a holder suspended longer than its validity would wake
//! believing its lock still valid, while the nodes' keys expired and
//! another client took it. `CLOCK_BOOTTIME` keeps counting through a
//! suspend; the difference of the two grows by exactly the time spent
//! suspended. [`now`] adds that growth (since this process first asked) to
//! the monotonic instant, so a validity computed before a suspend ends as
//! many seconds earlier as the suspend lasted. Timers still run on tokio's
//! clock: [`timer`] turns one of our instants back into one of tokio's.
//! Elsewhere (no `CLOCK_BOOTTIME`) the difference is taken as zero.

use std::sync::OnceLock;
use std::time::Duration;

use tokio::time::Instant;

/// `CLOCK_BOOTTIME - CLOCK_MONOTONIC` when this process first asked.
static BASE: OnceLock<Duration> = OnceLock::new();

/// The instant now, on our clock: monotonic plus the time suspended.
pub(crate) fn now() -> Instant {
    Instant::now() + suspended()
}

/// How long the machine was suspended since this process first asked.
pub(crate) fn suspended() -> Duration {
    let gap = boot_minus_monotonic();
    gap.saturating_sub(*BASE.get_or_init(|| gap))
}

/// The tokio instant a timer for our instant `at` waits for (earlier by
/// the time suspended so far).
pub(crate) fn timer(at: Instant) -> Instant {
    at.checked_sub(suspended()).unwrap_or(at)
}

#[cfg(target_os = "linux")]
fn boot_minus_monotonic() -> Duration {
    read(libc::CLOCK_BOOTTIME).saturating_sub(read(libc::CLOCK_MONOTONIC))
}

#[cfg(not(target_os = "linux"))]
fn boot_minus_monotonic() -> Duration {
    Duration::ZERO
}

/// Clock `id`'s reading (zero if it cannot be read).
#[cfg(target_os = "linux")]
fn read(id: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through the pointer, which
    // points to a live, writable one.
    if unsafe { libc::clock_gettime(id, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u32::try_from(ts.tv_nsec).unwrap_or(0).min(999_999_999);
    Duration::new(secs, nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_suspend_our_clock_is_tokios() {
        let before = Instant::now();
        let ours = now();
        let after = Instant::now();
        // No suspend here: the two differ by no more than the readings'
        // own spacing (well under a millisecond).
        assert!(ours >= before);
        assert!(ours <= after + Duration::from_millis(1));
        let at = ours + Duration::from_secs(5);
        assert!(timer(at) <= at && timer(at) + Duration::from_millis(1) >= at);
    }
}
