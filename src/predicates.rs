//! What callers ask of an [`Error`] so that they need not match on it:
//! may trying again help, did time run out, is it contention, is our lock
//! gone, must an operator act, and which nodes failed.

use crate::error::{Error, NodeError};

impl Error {
    /// True when trying again later may succeed: contention, missing quorum,
    /// timeouts, and counter contention; not when [`Error::needs_operator`].
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::Contended { .. }
                | Error::NoQuorum { .. }
                | Error::Timeout { .. }
                | Error::CounterContention { .. }
        ) && !self.needs_operator()
    }

    /// True when nodes refused us in ways only an operator can fix (a
    /// missing or wrong password, an unknown user, an ACL that refuses a
    /// command, an endpoint that is not a Redis server) and those nodes
    /// alone leave too few for a quorum: trying again cannot succeed.
    /// Waiting calls return such an error at once, never a timeout.
    pub fn needs_operator(&self) -> bool {
        match self {
            Error::NoQuorum {
                asked,
                needed,
                failures,
                ..
            } => {
                let refused = failures.iter().filter(|f| f.kind.needs_operator()).count();
                asked.saturating_sub(refused) < *needed
            }
            Error::Timeout { last, .. } => last.needs_operator(),
            Error::CrossSlot { .. } => true,
            _ => false,
        }
    }

    /// True when the operation gave up because time ran out: the overall wait
    /// deadline, or a quorum lost only to node timeouts.
    pub fn is_timeout(&self) -> bool {
        match self {
            Error::Timeout { .. } => true,
            Error::NoQuorum { failures, .. } => {
                !failures.is_empty() && failures.iter().all(NodeError::is_timeout)
            }
            _ => false,
        }
    }

    /// True when the lock is held by someone else (also behind a [`Error::Timeout`]).
    pub fn is_contended(&self) -> bool {
        match self {
            Error::Contended { .. } => true,
            Error::Timeout { last, .. } => last.is_contended(),
            _ => false,
        }
    }

    /// True when our lock expired or was lost (also one that expired
    /// while it was being taken, [`Error::TtlTooShort`]).
    pub fn is_expired(&self) -> bool {
        matches!(self, Error::Expired { .. } | Error::TtlTooShort { .. })
    }

    /// The per-node failures behind a [`Error::NoQuorum`] (also behind a
    /// [`Error::Timeout`]); empty for other errors.
    pub fn node_failures(&self) -> &[NodeError] {
        match self {
            Error::NoQuorum { failures, .. } => failures,
            Error::Timeout { last, .. } => last.node_failures(),
            _ => &[],
        }
    }
}
