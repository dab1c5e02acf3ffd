//! What a lock stands on when it is more than its one key with our value
//! (a multi-lock's keys, a reader's lease, a semaphore's slot with its
//! waiting list): how the held lock is extended, checked and released
//! ([`Held`]), and, for those the lock core's attempt takes, how an
//! attempt takes it and undoes it ([`Takes`]). A plain lock and a
//! leadership need none of it.

use std::fmt::Debug;
use std::sync::Arc;

use crate::node::connection::request::Request;

/// How a held lock of one kind acts on the nodes (each request is one
/// script per node, all or nothing there).
pub(crate) trait Held: Debug + Send + Sync {
    /// Undoes `value`'s hold where it is ours; `telling`: the reply is 2
    /// (not 1) where a live waiter waits.
    fn release_request(&self, value: &str, telling: bool) -> Arc<Request>;
    /// Resets `value`'s hold to `ttl_ms` where it is still ours (1), else
    /// changes nothing (0).
    fn extend_request(&self, value: &str, ttl_ms: u64) -> Arc<Request>;
    /// Whether `value` holds it there (1 or 0, or the key's value).
    fn held_request(&self, value: &str) -> Arc<Request>;
    /// The resources held, where there are several.
    fn resources(&self) -> Option<&[String]> {
        None
    }
}

/// A kind of lock the lock core's attempt takes (`acquire/attempt.rs`): its
/// take, and its undo ([`Held::release_request`]).
pub(crate) trait Takes: Held {
    /// An attempt to take it with `value` for `ttl_ms`: a plain one, or one
    /// by the waiter `(id, ticket, lease ms)`. The reply is a waiter's
    /// `{won, pttl, ahead}`.
    fn take_request(
        &self,
        value: &str,
        ttl_ms: u64,
        waiter: Option<(&str, u64, u64)>,
    ) -> Arc<Request>;
    /// Whether a lock taken this way is held this way (a writer's attempt
    /// takes a plain key: once won, it is a plain lock).
    fn keeps(&self) -> bool {
        true
    }
}
