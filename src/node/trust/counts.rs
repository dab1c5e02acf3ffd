//! The rules on what a round reads that tells of keys dropped while
//! connected (`vigil.rs`), pure: a count of drops that moved, a count that
//! only grows found lower (the statistics were reset), and our marker gone
//! or written anew.

use crate::node::trust::evidence::MarkerId;

/// The rule, pure: whether a count that only changes when keys are
/// dropped (evictions, flushes) reads `read` where the client last read
/// `before` (`None`: not read or unreadable, and then it may have). A
/// count that went down was reset (`CONFIG RESETSTAT`), which may hide
/// drops.
pub(crate) fn dropped(before: Option<u64>, read: Option<u64>) -> bool {
    match (before, read) {
        (Some(b), Some(r)) => r != b,
        _ => true,
    }
}

/// The rule, pure: whether a count that only grows (commands run) went
/// down from `before` to `read`: the statistics were reset, which may
/// hide evictions and flushes before it. Nothing to tell without both.
pub(crate) fn reset(before: Option<u64>, read: Option<u64>) -> bool {
    matches!((before, read), (Some(b), Some(r)) if r < b)
}

/// The rule, pure: takes in a reading `read` of a count that only grows
/// (commands run), sent at `sent` and answered at `recv` (one clock),
/// against `last`, the reading kept (its value, and when its reply came
/// in). Returns whether the statistics were reset, and the reading to
/// keep.
///
/// Only a reading sent after the kept one's reply came in ran after it on
/// the node, and is judged ([`reset`]) and kept. Readings in flight
/// together are taken in in any order, so one sent earlier may run before
/// or after the kept one: it is not judged, and is kept only where it
/// read more (a reading sent after its reply came in ran after it, so with
/// no reset reads at least that). Keeping it whatever it read would let a
/// reading that ran after a reset become the measure, and the reset would
/// never show; moving the kept reply's time on with it would leave no
/// reading judged while requests keep overlapping.
pub(crate) fn grown<T: Ord + Copy>(
    last: Option<(u64, T)>,
    read: Option<u64>,
    (sent, recv): (T, T),
) -> (bool, Option<(u64, T)>) {
    let Some(read) = read else {
        return (false, last);
    };
    match last {
        None => (false, Some((read, recv))),
        Some((before, at)) if sent > at => (reset(Some(before), Some(read)), Some((read, recv))),
        Some((before, _)) if read > before => (false, Some((read, recv))),
        Some(_) => (false, last),
    }
}

/// The rule, pure: whether our marker as a round found it (`found`;
/// `None`: gone or unreadable) tells of a loss since this client last saw
/// or wrote `expected`. A flush takes the marker; the first client to
/// check the node after it writes it anew, with the damage count that
/// includes the flush (and a new loss), so a marker that is merely there
/// tells nothing: it must be the same writing. Written since for another
/// process, another damage count or another loss is a loss; the same
/// writing with its loss cleared (a quarantine that ended) is not.
pub(crate) fn remarked(expected: &MarkerId, found: Option<&MarkerId>) -> bool {
    match found {
        None => true,
        Some(f) => {
            f.run != expected.run
                || f.seen != expected.seen
                || (f.loss.is_some() && f.loss != expected.loss)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writing(run: &str, loss: Option<u64>, seen: Option<u64>) -> MarkerId {
        MarkerId {
            run: run.to_owned(),
            loss,
            seen,
        }
    }

    #[test]
    fn only_a_reading_sent_after_the_kept_one_came_in_is_judged_or_kept() {
        // Kept: 100, its reply in at 10.
        let kept = Some((100, 10));
        // Sent after it came in, lower: reset; kept from now.
        assert_eq!(grown(kept, Some(3), (11, 12)), (true, Some((3, 12))));
        assert_eq!(grown(kept, Some(150), (11, 12)), (false, Some((150, 12))));
        // Sent before it came in (in flight together), lower: it may have
        // run before the kept one, or after a reset; neither judged nor
        // kept, so the next reading sent after the kept one came in is
        // judged against 100, though its reply came in before this one's.
        let (was_reset, after) = grown(kept, Some(3), (9, 12));
        assert!(!was_reset);
        assert_eq!(after, kept);
        assert!(grown(after, Some(5), (11, 13)).0);
        // Higher and in flight together: kept, with its own reply's time.
        assert_eq!(grown(kept, Some(120), (9, 8)), (false, Some((120, 8))));
        // The first reading is kept; nothing read keeps what was.
        assert_eq!(grown(None, Some(7), (1, 2)), (false, Some((7, 2))));
        assert_eq!(grown(kept, None, (11, 12)), (false, kept));
    }

    #[test]
    fn a_marker_gone_or_written_anew_tells_of_a_loss_and_the_same_writing_does_not() {
        let seen = writing("p", None, Some(2));
        assert!(!remarked(&seen, Some(&seen)));
        assert!(remarked(&seen, None), "gone");
        // Written anew after a flush: the damage count includes it, and a
        // loss is recorded.
        assert!(remarked(&seen, Some(&writing("p", Some(9), Some(3)))));
        // The same damage count (statistics reset before the flush), a new
        // loss: still a loss.
        assert!(remarked(&seen, Some(&writing("p", Some(9), Some(2)))));
        assert!(remarked(&seen, Some(&writing("q", None, Some(2)))));
        // A loss whose quarantine ended, cleared: nothing dropped since.
        let lost = writing("p", Some(9), Some(3));
        assert!(!remarked(&lost, Some(&writing("p", None, Some(3)))));
        assert!(remarked(&lost, Some(&writing("p", Some(12), Some(3)))));
    }
}
