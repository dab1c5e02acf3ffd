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
