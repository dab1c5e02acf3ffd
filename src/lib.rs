//! # redquorum
//!
//! Agreement between many service instances through N independent Redis
//! nodes (odd N, 5 recommended, no replication between them):
//!
//! * [`Redlock`]: the Redlock distributed lock, done fully. Requests fan out
//!   to all nodes at once and the outcome is decided the moment a quorum is
//!   won or impossible, so a hung node adds no latency. Validity is computed on
//!   the monotonic clock with a drift allowance; locks release on all nodes,
//!   retry with jitter, extend, auto-extend with a "lock lost" signal, and can
//!   carry fencing tokens.
//! * [`SerialGenerator`]: business numbers like `ORDER202611220001` (prefix,
//!   local date, counter that restarts each day), never duplicated across
//!   instances, node failures or client clocks that jump back.
//!
//! ```no_run
//! # async fn f() -> redquorum::Result<()> {
//! use std::time::Duration;
//! let redlock = redquorum::Redlock::builder()
//!     .nodes(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])
//!     .build()?;
//! let lock = redlock.lock("orders", Duration::from_secs(10)).await?;
//! // ... work that must not overlap, within lock.validity() ...
//! lock.release().await?;
//! # Ok(()) }
//! ```
//!
//! ## How it is built
//!
//! In layers, each using only the ones below it: one Redis node's ordered,
//! batching connection (`node/`), the node set that fans a request out and
//! decides when a quorum agreed (`quorum/`), then the two protocols on top of
//! it, the lock (`redlock.rs`, `acquire.rs`, `guard.rs`) and the
//! compare-and-set counter (`counter.rs`), and serial numbers on the counter
//! (`serial/`). The source's `lib.rs` lists every file in its layer.
//!
//! ## Safety and limitations
//!
//! Redlock's guarantees rest on assumptions, spelled out in the README:
//! bounded clock drift between the client and the nodes (the drift factor),
//! no process pause longer than the remaining validity between checking it and
//! acting on it (fencing tokens close that gap where the storage can check
//! them), and nodes that do not forget acknowledged writes (AOF with
//! `appendfsync always`, or a restarted node kept out for one max TTL).

#![deny(missing_docs)]
#![warn(missing_debug_implementations)]
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::print_stdout
    )
)]

// Layout, for contributors. The modules form layers; each file imports
// only from files in layers below it (`tests/layout.rs` checks that there is
// no cycle, that no file passes 500 lines before its tests, and that every
// file is named here). Bottom to top:
//
// 1 error.rs            Error, Result, per-node NodeError.
//   scripts.rs          The Lua sources, each run atomically on one node.
// 2 node/request.rs     A command, encoded once per round.
//   node/wire.rs        Hands a request or a pipeline to a redis-rs connection.
//   node/queue.rs       A link's state and the requests queued in it.
//   node/link.rs        The connection state machine: connects, keeps our
//                       requests in order, batches them under load.
//   node/call.rs        Follows one request to its reply, for a round.
//   node/watch.rs       A node's notification connection (client tracking):
//                       tells waiters when a lock key changes.
//   node/mod.rs         Node: one Redis node.
// 3 quorum/tally.rs     The quorum decision, pure: votes, decided, NodeSet.
//   quorum/background.rs Rounds that finish later; what settle() waits for.
//   quorum/fanout.rs    One request to many nodes, decided early, deadline.
//   quorum/mod.rs       Quorum: the node set and its vote rounds.
// 4 config.rs           The lock's settings and DEFAULT_* constants.
//   counter.rs          The quorum compare-and-set counter (serials, fencing).
//   wait/plan.rs        When a waiter tries again, as a pure rule.
//   wait/queue.rs       This client's waiters in line per resource; news.
//   wait/mod.rs         Waiting: notification reads, the sleep between tries.
// 5 redlock.rs          Redlock, the client handle: key, release, validity.
// 6 guard.rs            Lock and LockHandle: extend, release, auto-extend.
// 7 attempt.rs          One attempt (plain SET NX, or as a queued waiter).
// 8 acquire.rs          try_lock, lock, lock_timeout, lock_fenced, with_lock:
//                       the waiting loop around attempts.
// 9 builder.rs          RedlockBuilder: checks settings, makes the node set.
// 10 serial/period.rs   Reset periods, stamps, the plan step of allocation.
//   serial/number.rs    Serial, one issued number.
//   serial/generator.rs SerialGenerator, its builder, group commit.
//   serial/mod.rs       The serial module's map.
// The CLI (the redquorum-cli package in cli/, its own map in cli/src/main.rs)
// uses the public API only.

mod acquire;
mod attempt;
mod builder;
mod config;
mod counter;
mod error;
mod guard;
mod node;
mod quorum;
mod redlock;
mod scripts;
mod serial;
mod wait;

pub use chrono;
pub use chrono_tz;
pub use redis;

pub use builder::RedlockBuilder;
pub use config::{
    DEFAULT_AUTO_EXTEND_FRACTION, DEFAULT_DRIFT_FACTOR, DEFAULT_NODE_TIMEOUT,
    DEFAULT_NOTIFICATIONS, DEFAULT_RETRY_COUNT, DEFAULT_RETRY_DELAY, DEFAULT_RETRY_JITTER,
    DEFAULT_WAIT_CAP, MAX_TTL,
};
pub use error::{Error, NodeError, NodeErrorKind, Result};
pub use guard::{Lock, LockHandle};
pub use redlock::Redlock;
pub use serial::generator::{
    ClockFn, SerialGenerator, SerialGeneratorBuilder, DEFAULT_CLOCK_TOLERANCE, DEFAULT_WIDTH,
    MAX_PREFIX_LEN,
};
pub use serial::number::Serial;
pub use serial::period::ResetPeriod;
