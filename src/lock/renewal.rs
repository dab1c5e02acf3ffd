//! Auto-extension: the loop that renews a held lock (a lock, a permit, a
//! leadership, a read lease, a multi-resource lock) in the background.
//!
//! A renewal that fails for want of answers (nodes slow, paused, cut off)
//! is tried again while the lock's validity lasts: a failed extension never
//! raises the validity (`shared.rs` lowers it to what the extension would
//! leave before it is sent, and only a confirmed one raises it), so trying
//! again is as safe as the first try. The lock is lost only when its
//! validity runs out, or when the nodes say the key is gone or someone
//! else's ([`Error::Expired`]): that is final at once.

use std::sync::Weak;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{debug, error, info, warn};

use crate::clock;
use crate::error::Error;
use crate::lock::shared::Shared;
use crate::lock::standing::State;
use crate::telemetry::labels::LostReason;

/// The shortest pause before a failed renewal is tried again.
const RETRY_MIN: Duration = Duration::from_millis(20);

/// When a failed renewal is tried again: after an eighth of the validity
/// left (so that several tries fit before it ends, each bounded by the node
/// timeout), at least [`RETRY_MIN`], at most the renewal `interval`.
pub(crate) fn retry_after(left: Duration, interval: Duration) -> Duration {
    (left / 8).clamp(RETRY_MIN, interval.max(RETRY_MIN))
}

/// Whether a renewal's failure `e` ends the lock at once: the nodes said
/// the key is gone or someone else's, or the validity had run out.
pub(crate) fn is_final(e: &Error) -> bool {
    matches!(e, Error::Expired { .. })
}

/// The auto-extend loop. Holds only a `Weak`, so it stops by itself once the
/// lock is released or every holder dropped it.
///
/// A renewal starts `interval` after the previous one (or after the loop
/// started), or earlier where the validity left demands it: at least twice
/// the latest round's duration before the validity ends, so that a holder
/// whose round trip is a large part of its TTL (or whose acquisition took
/// several rounds, as a campaign's does) renews in time. A renewal that
/// failed without a final answer is tried again after [`retry_after`].
pub(crate) async fn watchdog(
    weak: Weak<Shared>,
    mut rx: watch::Receiver<State>,
    interval: Duration,
) {
    let mut last = clock::now();
    let mut retry: Option<Duration> = None;
    let mut failures = 0u32;
    loop {
        // Wake early if the lock is released, so the task does not linger,
        // and when its validity moves (another extension), to reschedule.
        loop {
            let st = *rx.borrow_and_update();
            if st.released || st.lost {
                return;
            }
            let Some(shared) = weak.upgrade() else { return };
            let lead = shared.state.round() * 2;
            drop(shared);
            let due = (last + interval).min(st.valid_until.checked_sub(lead).unwrap_or(last));
            let at = retry.map_or(due, |r| last + r);
            tokio::select! {
                () = tokio::time::sleep_until(clock::timer(at)) => break,
                changed = rx.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
            }
        }
        last = clock::now();
        let Some(shared) = weak.upgrade() else { return };
        let st = shared.state.now();
        if st.released || st.lost {
            return;
        }
        match shared.extend(shared.ttl).await {
            Ok(()) => {
                if failures > 0 {
                    info!(
                        target: crate::telemetry::targets::RENEWAL,
                        resource = %shared.resource,
                        failures,
                        "renewed after {failures} failed renewal(s)"
                    );
                }
                retry = None;
                failures = 0;
            }
            Err(e) => {
                if shared.state.now().released {
                    return;
                }
                let left = shared.validity();
                if is_final(&e) || left.is_zero() {
                    error!(target: crate::telemetry::targets::RENEWAL, resource = %shared.resource, error = %e, "auto-extend failed: lock lost");
                    shared.lose(e, LostReason::ExtendFailed);
                    return;
                }
                failures += 1;
                let pause = retry_after(left, interval);
                // Said once a run of failures; the rest at debug level.
                if failures == 1 {
                    warn!(
                        target: crate::telemetry::targets::RENEWAL,
                        resource = %shared.resource,
                        error = %e,
                        "renewal failed; trying again while validity is left ({})",
                        crate::error::rounded(left)
                    );
                } else {
                    debug!(resource = %shared.resource, error = %e, ?left, "renewal failed again");
                }
                retry = Some(pause);
            }
        }
        let _ = rx.borrow_and_update();
        if shared.validity().is_zero() {
            warn!(target: crate::telemetry::targets::RENEWAL, resource = %shared.resource, "lock validity ran out");
            let expired = Error::Expired {
                resource: shared.resource.clone(),
            };
            shared.lose(expired, LostReason::ValidityRanOut);
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_renewal_is_tried_again_within_the_validity_left() {
        let interval = Duration::from_secs(10);
        assert_eq!(
            retry_after(Duration::from_secs(20), interval),
            Duration::from_millis(2_500)
        );
        assert_eq!(retry_after(Duration::from_secs(200), interval), interval);
        assert_eq!(retry_after(Duration::from_millis(40), interval), RETRY_MIN);
        assert!(is_final(&Error::Expired {
            resource: "r".into()
        }));
        assert!(!is_final(&Error::Contended {
            resource: "r".into()
        }));
    }
}
