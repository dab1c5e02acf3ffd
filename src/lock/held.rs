//! What a lock stands on when it is more than one key with our value (a
//! multi-lock's keys, a reader's lease): how an attempt takes it and
//! undoes it, and how the held lock is extended, checked and released.
//! A plain lock, a permit and a leadership need none of it.

use std::fmt::Debug;
use std::sync::Arc;

use crate::node::request::Request;

/// How one kind of lock acts on the nodes (each request is one script per
/// node, all or nothing there).
pub(crate) trait Held: Debug + Send + Sync {
    /// An attempt to take it with `value` for `ttl_ms`: a plain one, or one
    /// by the waiter `(id, ticket, lease ms)`. The reply is a waiter's
    /// `{won, pttl, ahead}`.
    fn take_request(
        &self,
        value: &str,
        ttl_ms: u64,
        waiter: Option<(&str, u64, u64)>,
    ) -> Arc<Request>;
    /// Undoes `value`'s hold where it is ours; `telling`: the reply is 2
    /// (not 1) where a live waiter waits.
    fn release_request(&self, value: &str, telling: bool) -> Arc<Request>;
    /// Resets `value`'s hold to `ttl_ms` where it is still ours (1), else
    /// changes nothing (0).
    fn extend_request(&self, value: &str, ttl_ms: u64) -> Arc<Request>;
    /// Whether `value` holds it there (1 or 0).
    fn held_request(&self, value: &str) -> Arc<Request>;
    /// Whether a lock taken this way is held this way (a writer's attempt
    /// takes a plain key: once won, it is a plain lock).
    fn keeps(&self) -> bool {
        true
    }
    /// The resources held, where there are several.
    fn resources(&self) -> Option<&[String]> {
        None
    }
}
