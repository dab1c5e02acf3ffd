//! The rules on a node's statistics counts that tell of keys dropped while
//! connected (`vigil.rs`), pure: a count of drops that moved, and a count
//! that only grows found lower (the statistics were reset).

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
