//! The values metric labels and statistics take: small fixed sets, so
//! every series stays low-cardinality.

// The label values are read by the `metrics` feature's records only.
#![cfg_attr(not(feature = "metrics"), allow(dead_code))]

use crate::error::{Error, NodeErrorKind};

/// What a lock stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Primitive {
    /// A caller's lock.
    Lock,
    /// A semaphore's permit (a lock on one of its slots).
    Semaphore,
    /// An election's leadership.
    Election,
    /// One of our own locks (a serial prefix's configuration).
    Internal,
}

impl Primitive {
    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Primitive::Lock => "lock",
            Primitive::Semaphore => "semaphore",
            Primitive::Election => "election",
            Primitive::Internal => "internal",
        }
    }
}

/// How an acquisition was asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// One attempt (`.try_once()`).
    Try,
    /// Waiting (`lock`, `.wait(d)`, `acquire`, ...).
    Wait,
    /// Waiting, then minting a fencing token (`.fenced()`, `campaign`...).
    Fenced,
}

impl Mode {
    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Mode::Try => "try",
            Mode::Wait => "wait",
            Mode::Fenced => "fenced",
        }
    }
}

/// What ended a waiter's sleep between two attempts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Woken {
    /// A node's notification that the key changed.
    Notification,
    /// The holder's TTL on a quorum of nodes, as the last attempt read it.
    Ttl,
    /// This client released the lock.
    OwnRelease,
    /// The retry cap, without news.
    Cap,
    /// The caller's patience ran out.
    Deadline,
    /// Nodes failed: a retry pause with jitter.
    Pause,
}

impl Woken {
    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Woken::Notification => "notification",
            Woken::Ttl => "ttl",
            Woken::OwnRelease => "own_release",
            Woken::Cap => "cap",
            Woken::Deadline => "deadline",
            Woken::Pause => "pause",
        }
    }
}

/// Why a held lock stopped being ours before its release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LostReason {
    /// An automatic extension failed.
    ExtendFailed,
    /// Its validity ran out while it was renewed automatically (the
    /// renewals came too late).
    ValidityRanOut,
    /// Its validity ran out while it was held and not renewed (counted when
    /// it ran out, or at a release after that): the work may have
    /// overlapped another holder.
    ExpiredWhileHeld,
}

impl LostReason {
    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            LostReason::ExtendFailed => "extend_failed",
            LostReason::ValidityRanOut => "validity_ran_out",
            LostReason::ExpiredWhileHeld => "expired_while_held",
        }
    }
}

/// How a quorum round ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decided {
    /// Before every node answered: the outcome was known.
    Early,
    /// After every node answered.
    All,
    /// At the node timeout, some nodes silent.
    Timeout,
}

impl Decided {
    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Decided::Early => "early",
            Decided::All => "all",
            Decided::Timeout => "timeout",
        }
    }
}

/// An acquisition's outcome, as its result says.
pub(crate) fn outcome<T>(result: &Result<T, Error>) -> &'static str {
    match result {
        Ok(_) => "acquired",
        Err(Error::Contended { .. }) => "contended",
        Err(Error::Timeout { .. }) => "timeout",
        Err(Error::NoQuorum { .. }) => "no_quorum",
        Err(Error::Expired { .. } | Error::TtlTooShort { .. }) => "expired",
        Err(Error::InvalidConfig(_)) => "invalid",
        Err(_) => "error",
    }
}

/// The kinds of node errors, in the order [`error_kind`] numbers them.
pub(crate) const ERROR_KINDS: [&str; 7] = [
    "timeout",
    "connection",
    "server",
    "unexpected_reply",
    "denied",
    "quarantined",
    "unrepaired",
];

/// A node error's kind (an index into [`ERROR_KINDS`]).
pub(crate) fn error_kind(kind: &NodeErrorKind) -> usize {
    match kind {
        NodeErrorKind::Timeout(_) => 0,
        NodeErrorKind::Redis(e) if e.is_timeout() => 0,
        NodeErrorKind::Redis(e) if matches!(e.kind(), redis::ErrorKind::Server(_)) => 2,
        NodeErrorKind::Redis(_) => 1,
        NodeErrorKind::UnexpectedReply => 3,
        NodeErrorKind::Denied { .. } => 4,
        NodeErrorKind::Quarantined { .. } => 5,
        NodeErrorKind::Unrepaired { .. } => 6,
    }
}
