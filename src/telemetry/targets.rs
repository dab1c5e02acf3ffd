//! The targets of our log events: what a `tracing` filter (`RUST_LOG`)
//! selects. They name what happened, not the module that says it, so a
//! filter written against them holds when the code moves. Every event at
//! `info` or above carries one of these (`tests/layout.rs` checks);
//! `debug` and `trace` events keep their module's path.
//!
//! ```
//! // The CLI's own filter: warnings, but not what it says itself.
//! let filter = format!(
//!     "warn,{}=off,{}=off,{}=off",
//!     redquorum::targets::LOST,
//!     redquorum::targets::QUARANTINE,
//!     redquorum::targets::LINT
//! );
//! assert_eq!(filter, "warn,redquorum::lost=off,redquorum::quarantine=off,redquorum::lint=off");
//! ```

/// A held lock, permit, leadership or read lease cut or ended by what was
/// found of its nodes (a clock that ran ahead, data lost), or our own
/// clock found to be the odd one.
pub const LOST: &str = "redquorum::lost";

/// A renewal that failed (tried again while validity is left), renewed
/// again, or gave up: the lock lost.
pub const RENEWAL: &str = "redquorum::renewal";

/// Work run with a lock held (`.run(f)` of an acquisition): cancelled because
/// the lock was lost, or its release afterwards failed.
pub const WORK: &str = "redquorum::work";

/// A node out of lock quorums for a while, found by a connection's check
/// (a restart, data lost, a process swapped in), and its return.
pub const QUARANTINE: &str = "redquorum::quarantine";

/// A loss found while connected (keys evicted or flushed, our marker
/// gone, slots received by a shard): the node sits out lock quorums.
pub const LOSS: &str = "redquorum::loss";

/// A node's clock that ran ahead, stepped back, or runs fast beyond the
/// drift allowance.
pub const CLOCK: &str = "redquorum::clock";

/// Settings that make a node unsafe for locks: no append-only file, a
/// `maxmemory-policy` that can evict our keys.
pub const LINT: &str = "redquorum::lint";

/// A node the operator must fix: a wrong password, a server that is not
/// Redis, an ACL that refuses a command we need.
pub const MISCONFIGURED: &str = "redquorum::misconfigured";

/// The client's own set-up: a single or even number of nodes, an amnesia
/// tolerance.
pub const SETUP: &str = "redquorum::setup";

/// A counter's lock not released (it expires by itself).
pub const COUNTER: &str = "redquorum::counter";
