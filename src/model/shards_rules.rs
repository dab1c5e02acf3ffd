//! The rules the cluster-member model (`shards.rs`) checks: as shipped,
//! or one of them weakened (a mutant).

use crate::node::cluster::shard_rules::{judges, Judges};

/// How a client picks the links whose trust decides member 0's yes, from
/// the link the request went to (`None` if not known) and the link its
/// map names when the reply is counted.
pub(crate) type Judge = fn(Option<u8>, u8) -> Judges<u8>;

/// The crate's rule ([`judges`]).
pub(crate) fn shipped(sent: Option<u8>, _current: u8) -> Judges<u8> {
    judges(sent)
}

/// Mutant: a reply to a request made before the client had a slot map
/// (the link it went to not known) is judged by the member's seed, shard B
/// (link 1), instead of by every shard seen.
pub(crate) fn seed(sent: Option<u8>, _current: u8) -> Judges<u8> {
    Judges::Sent(sent.unwrap_or(1))
}

/// Mutant: every link of the member (a quarantine member-wide).
pub(crate) fn member_wide(_sent: Option<u8>, _current: u8) -> Judges<u8> {
    Judges::Every
}

/// The rules a run checks.
#[derive(Clone, Copy)]
pub(crate) struct Rules {
    /// Whose trust decides member 0's yes.
    pub(crate) judge: Judge,
    /// A yes from a quarantined link does not count (as shipped).
    pub(crate) quarantine: bool,
    /// A slot moved between two maps quarantines the link that took it
    /// ([`received`], as shipped).
    pub(crate) received: bool,
    /// Slots taken over count as damage in the connection check (as
    /// shipped: the cluster's epoch and `RESTORE-ASKING` calls,
    /// `evidence.rs`).
    pub(crate) imports: bool,
    /// How much shorter than one TTL the quarantine for a slot taken over
    /// is, ms (0 as shipped).
    pub(crate) short: u8,
    /// The connection check reads the slots a shard serves and compares
    /// them with those our marker recorded (as shipped: `slotset.rs`).
    pub(crate) slots: bool,
}

impl Rules {
    /// The rules as shipped.
    pub(crate) fn shipped() -> Self {
        Self {
            judge: shipped,
            quarantine: true,
            received: true,
            imports: true,
            short: 0,
            slots: true,
        }
    }
}
