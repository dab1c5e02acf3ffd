//! Where a resource's waiting list lives on the nodes.

use crate::keys::{self, Kind};

/// The keys of a resource's waiting list on every node.
#[derive(Clone, Debug)]
pub(crate) struct WaitKeys {
    /// Waiter ids by ticket.
    pub(crate) queue: String,
    /// Waiter ids by the node-clock instant their lease ends.
    pub(crate) leases: String,
}

impl WaitKeys {
    /// The waiting-list keys for the lock at `key` (whose key prefix is
    /// `prefix`): in our reserved namespace, in the lock key's hash slot
    /// (see `keys.rs`), with the same prefix, so key-pattern ACLs that
    /// allow the lock allow them too.
    pub(crate) fn of(prefix: &str, key: &str) -> Self {
        Self {
            queue: keys::internal(prefix, Kind::Waiters, key),
            leases: keys::internal(prefix, Kind::Leases, key),
        }
    }
}
