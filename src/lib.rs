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
//! ## Layout
//!
//! * `error.rs`: [`Error`], [`Result`], per-node [`NodeError`].
//! * `config.rs`: [`RedlockBuilder`] and the `DEFAULT_*` constants.
//! * `node.rs`: one Redis node: lazy, self-healing connection that keeps our
//!   requests in order and batches them under load, script calls.
//! * `quorum.rs`: fan-out to all nodes, decide at quorum won / impossible.
//! * `scripts.rs`: the Lua sources.
//! * `lock.rs`: [`Redlock`]: acquire (with retries), the shared vote rounds.
//! * `guard.rs`: [`Lock`] and [`LockHandle`]: validity, extend, release,
//!   auto-extend, lost-lock signal.
//! * `counter.rs`: the quorum compare-and-set counter (serials, fencing).
//! * `serial.rs`: [`SerialGenerator`] and [`Serial`]: stamps, time zones,
//!   periods, group commit.
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

mod config;
mod counter;
mod error;
mod guard;
mod lock;
mod node;
mod quorum;
mod scripts;
mod serial;

pub use redis;

pub use config::{
    RedlockBuilder, DEFAULT_AUTO_EXTEND_FRACTION, DEFAULT_DRIFT_FACTOR, DEFAULT_NODE_TIMEOUT,
    DEFAULT_RETRY_COUNT, DEFAULT_RETRY_DELAY, DEFAULT_RETRY_JITTER, MAX_TTL,
};
pub use error::{Error, NodeError, NodeErrorKind, Result};
pub use guard::{Lock, LockHandle};
pub use lock::Redlock;
pub use serial::{
    ClockFn, ResetPeriod, Serial, SerialGenerator, SerialGeneratorBuilder, DEFAULT_CLOCK_TOLERANCE,
    DEFAULT_WIDTH, MAX_PREFIX_LEN,
};
