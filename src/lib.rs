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
//! * [`Semaphore`]: at most K holders at once, for any K, with a minority of
//!   nodes down; and [`Election`]: one leader at a time with strictly
//!   increasing terms. Both wait fairly and are woken by the nodes, as the
//!   lock is.
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
//! ## Which call do I want?
//!
//! | you want to | call |
//! |---|---|
//! | run something only if nobody else is, else skip | [`Redlock::lock`]`(name, ttl).try_once()`: one attempt, [`Error::Contended`] if held |
//! | wait your turn (a couple of seconds by default) | [`Redlock::lock`]`(name, ttl)`, awaited: waits in arrival order, woken by the nodes the moment the lock is free |
//! | wait at most a given time | `.wait(d)` on any acquisition ([`Acquire::wait`]): [`Error::Timeout`] when the time runs out |
//! | hold a lock for work of unknown length | `.run(f)` on any acquisition ([`Acquire::run`]): renewed in the background, the work cancelled if the lock is lost |
//! | protect writes to storage that can check a number | `.fenced()` on any acquisition ([`Acquire::fenced`]): a [fencing token](Lock::fencing_token) larger than every earlier holder's |
//! | issue business numbers like `ORDER202611220001` | [`SerialGenerator`]: never repeats, across instances and node failures |
//! | take several resources together (a transfer between two accounts) | [`Redlock::lock_all`]: all or none, in any order without deadlock (fenced: a token per resource) |
//! | let many read while nobody writes, and writers in turn | [`Redlock::rw_lock`], then [`RwLock::read`] or [`RwLock::write`]: phase-fair, each reader with a lease of its own |
//! | let at most K run at once (licences, a pool of workers) | [`Redlock::semaphore`], then [`Semaphore::acquire`]: a [`Permit`] is a lock on one of K slots |
//! | have exactly one active instance (a scheduler, a cron runner) | [`Redlock::election`], then [`Election::campaign`]: a [`Leadership`] with a [term](Leadership::term) larger than every earlier leader's |
//! | see who holds a lock and for how long, without taking it | [`Redlock::inspect`] ([`Semaphore::inspect`] for permits, [`RwLock::inspect`] for readers and the writer, [`Election::leader`]) |
//! | know who leads, and each change | [`Election::leader`] (agreed by a quorum), [`Election::observe`] (pushed by the nodes) |
//! | see contention, losses and failing nodes | [`Redlock::stats`]: a snapshot of counters and gauges; the `metrics` feature: the same events through the `metrics` facade |
//!
//! A held [`Lock`] can be checked ([`Lock::ensure_valid`]), extended,
//! auto-extended with a "lock lost" signal ([`Lock::lost`]) and released;
//! dropping it releases it in the background. [`Error`]'s predicates tell
//! contention from outages ([`Error::is_contended`], [`Error::node_failures`]).
//!
//! ## Features
//!
//! * `tls`: `rediss://` node URLs (rustls with the ring provider, installed
//!   when the first such URL is built, so TLS never panics). Off by default.
//! * `metrics`: records acquisitions, waits, losses, node requests, quorum
//!   rounds and counter allocations through the `metrics` facade (see
//!   `describe_metrics`, which the feature adds). Off by default;
//!   [`Redlock::stats`] needs no feature.
//! * `cluster`: quorum members that are Redis Clusters of several shards,
//!   given as `redis+cluster://host:port[,host:port...]` (seeds; the shards
//!   are read from `CLUSTER SLOTS`). Each request goes to the shard serving
//!   its key; each shard is checked for lost writes on its own, so a shard
//!   whose master changed is kept out of lock quorums for that member and
//!   shard alone. Off by default.
//!
//! The `redquorum` command (`redquorum lock RESOURCE -- command`, serial
//! numbers, a node safety check) is the separate `redquorum-cli` package:
//! `cargo install redquorum-cli`. Depending on this library pulls none of
//! its dependencies.
//!
//! ## Safety and limitations
//!
//! * **Clocks.** Lock validity assumes the nodes' clocks run at most the
//!   drift factor (1 %) faster than ours; all lock math is on the monotonic
//!   clock, so wall-clock jumps on the client do not matter. Serial numbers
//!   use the wall clock for their date and refuse ([`Error::ClockBehind`])
//!   rather than issue a number for an earlier period.
//! * **Pauses.** A holder that stops (GC, swap, SIGSTOP) longer than its
//!   remaining validity between checking and acting can act after its lock
//!   expired. Check [`Lock::ensure_valid`] right before a guarded write and,
//!   where the storage can check it, pass the fencing token.
//! * **Nodes that lose data.** Each new connection to a node checks, from
//!   evidence on the node and never from its persistence settings, whether
//!   it may have lost writes: our marker naming its process proves it did
//!   not; a restart (any restart: a replay looks like an old backup), a
//!   promoted replica, a flush or an eviction, or our marker gone say it
//!   may have. Such a node does not count toward lock quorums for
//!   [`restart_quarantine`](RedlockBuilder::restart_quarantine) (default
//!   60 s, also the longest TTL accepted) from that moment, and its counter
//!   records count only once repaired; see [`NodeTrust`]. Nodes just
//!   started empty are quarantined too, unless declared new once with
//!   [`Redlock::init_new_nodes`] (`redquorum init`). The evidence is read
//!   while connected too: a node that can evict keys (`maxmemory-policy`)
//!   has its evictions read in every round that asks for its vote, every
//!   node is checked again about once a second, and a held lock whose
//!   quorum needed a node found to have lost data is cut ([`Lock::lost`]
//!   resolves).
//! * **Independence.** Point it at independent masters, not at one
//!   replicated deployment; for members that fail over, see
//!   [`amnesia_tolerance`](RedlockBuilder::amnesia_tolerance).
//! * **Waiting** is fair and fast among clients of this crate: the longest
//!   registered waiter goes next, ahead of the releasing client and of
//!   clients that have seen the resource contended; a client's first plain
//!   attempt on a resource it has not seen contended, and clients of other
//!   Redlock libraries (excluded as usual), do not queue.
//! * **Extensions.** A failed [`Lock::extend`] may still have been applied
//!   on slow nodes: validity never exceeds what the last extension sent
//!   would leave.
//! * **Our keys** live under `redquorum:` after the key prefix, in each
//!   lock key's hash slot (a member may be a one-shard Redis Cluster);
//!   resource names may not start with it.
//!
//! The repository's `docs/guarantees.md` states the exact limits, and `docs/DESIGN.md`
//! the algorithms.

#![cfg_attr(docsrs, feature(doc_cfg))]
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

// Layout, for contributors. The folders say what is where: one Redis
// node (node/), grouped by its ordered, batching connection (connection/),
// what decides whether it kept our writes (trust/), its clock as we see it
// (clock/), how it tells us of changes (notify/) and members that are
// Redis Clusters (cluster/); the node set that fans a request out and
// decides when a quorum agreed (quorum/); waiting (wait/) and the
// compare-and-set counter with what is minted from it (counter/); the
// client handle, its settings and builder (client/) and the acquisition
// every primitive shares (acquire/: one attempt, the waiting loop, the
// builder); then the coordination primitives, each its own folder with its
// Lua: the lock (lock/), the semaphore (semaphore/), the election
// (election/) and the read-write lock (rwlock/), all built from locks; and
// serial numbers on the counter (serial/). A folder is not a layer: the
// layers below say what may use what. Each file imports only from files in
// its own layer or the layers below it (`tests/layout.rs` checks that, that
// there is no cycle, that no file passes 500 lines before its tests, and
// that every file is named here: a new file's line, indented two spaces
// past the layer's number, puts it in that layer). Bottom to top:
//
// 1 explain.rs                      What a node's error means, in one line
//                                   with the fix.
//   error.rs                        Error, Result, per-node NodeError.
//   predicates.rs                   What callers ask of an Error (retry?
//                                   operator?).
//   lua.rs                          Script<KEYS>: a script with the keys it
//                                   takes, how it is sent, the commands it
//                                   runs.
//   keys.rs                         Our keys: the reserved namespace, hash
//                                   slots.
//   fenced_writes.rs                The storage side of fencing for data in
//                                   Redis: a write lands only past the fence
//                                   beside its key.
//   fenced_postgres.rs              The same for data in PostgreSQL (feature
//                                   `postgres`): a fence check in the caller's
//                                   transaction.
//   mutex.rs                        Our one policy for a mutex a panicked
//                                   holder left: take what it holds.
//   clock.rs                        Our clock for safety deadlines: monotonic
//                                   plus the time the machine spent suspended
//                                   (CLOCK_BOOTTIME).
//   extensions.rs                   A held lock's extensions in flight: the
//                                   rule that bounds its validity, pure.
//   telemetry/labels.rs             The values of metric labels, small fixed
//                                   sets.
//   telemetry/stats.rs              Stats, the snapshot, and the counters
//                                   behind it.
//   telemetry/metrics.rs            The metrics facade's names and records
//                                   (feature `metrics`).
//   telemetry/mod.rs                Telemetry: the hooks every layer calls at
//                                   its events.
//   telemetry/targets.rs            The targets of our log events, by what
//                                   happened.
// 2 node/connection/request.rs      A command, encoded once per round.
//   node/connection/scriptcache.rs  Which scripts a connection's node has
//                                   cached: a script goes in full once, then
//                                   by digest.
//   node/trust/evidence.rs          What a node shows of its own history
//                                   (INFO, our marker), read when a connection
//                                   is made.
//   node/trust/amnesia.rs           The table that decides from it whether a
//                                   node may have lost writes, and the
//                                   quarantine that follows.
//   node/trust/marker.rs            Our marker, written: each script a compare
//                                   on what the check found.
//   node/trust/tags.rs              Whose writes a node holds: the
//                                   deployments' tags in our marker; another
//                                   node list's marker is foreign.
//   node/trust/nodebound.rs         A quarantine's end on the node's clock
//                                   too, so a client clock running fast cannot
//                                   end it early.
//   node/trust/panel.rs             The members' clocks together: a majority
//                                   must show a quarantine over too (one
//                                   node's clock may lie).
//   node/trust/counts.rs            The rules on a node's counts of drops and
//                                   commands (a drop, a statistics reset),
//                                   pure.
//   node/trust/truststate.rs        The state read off the hot path: a
//                                   quarantine's start and end, on our clock
//                                   and the node's.
//   node/trust/mod.rs               What a client knows of a node's trust
//                                   (quarantine, suspicion, when a loss was
//                                   found, from when).
//   node/trust/check.rs             The connection's check that fills it in
//                                   and keeps our marker up to date.
//   node/clock/clockrate.rs         A node clock's rate against ours, from two
//                                   agreeing spans of readings, with its
//                                   bound.
//   node/clock/clockwatch.rs        A node's clock from the TIME behind each
//                                   request: a jump ahead keeps it out of lock
//                                   quorums and cuts its holders' validity; a
//                                   rate is counted.
//   node/clock/mod.rs               A node's clock as this client sees it: the
//                                   files below.
//   node/trust/vigil.rs             What is read of a node while connected:
//                                   its evictions in the round that asks for a
//                                   vote, the connection's check made again
//                                   each second.
//   node/connection/wire.rs         Hands a request or a pipeline to a redis-
//                                   rs connection.
//   node/connection/queue.rs        A link's state and the requests queued in
//                                   it.
//   node/connection/open.rs         Opens one connection to a node and checks
//                                   it for lost writes before anything of ours
//                                   goes out.
//   node/connection/link.rs         The connection state machine: connects,
//                                   keeps our requests in order, batches them
//                                   under load.
//   node/connection/link/connect.rs How a link (re)connects, and what a new
//                                   connection takes over.
//   node/clock/tick.rs              A timer kept by a node's clock (WAIT on a
//                                   connection of its own).
//   node/cluster/slotset.rs         The slots a cluster's shard serves, as our
//                                   marker records them; whether it took one
//                                   over since.
//   node/connection/slot.rs         A directly sent request's place on its
//                                   connection, given up when its reply
//                                   arrives, polled or not.
//   node/connection/call.rs         Follows one request to its reply, for a
//                                   round.
//   node/connection/mod.rs          A node's connection: the files below, in
//                                   order.
//   node/notify/armed.rs            What a waiter's read of a key found: its
//                                   PTTL, or free (a value named free).
//   node/notify/push.rs             What a node's pushes say (the keys
//                                   invalidated).
//   node/notify/channels.rs         The channels one notification connection
//                                   hears.
//   node/notify/watch.rs            A node's notification connection (client
//                                   tracking, channels): tells waiters when a
//                                   lock key changes.
//   node/notify/watches.rs          A member's notification connections: a
//                                   cluster's per shard, picked by the key's
//                                   slot.
//   node/notify/mod.rs              How a node tells this client of changes:
//                                   the files below.
//   node/cluster/shard_rules.rs     Whose trust a cluster member's yes rests
//                                   on (the shard it came from; a slot's new
//                                   shard), pure.
//   node/cluster/shards.rs          A member that is a Redis Cluster (feature
//                                   `cluster`): a link per shard, requests
//                                   routed by hash slot.
//   node/cluster/mod.rs             A member that is a Redis Cluster: the
//                                   files below.
//   node/mod.rs                     Node: one Redis node.
// 3 quorum/tally.rs                 The quorum decision, pure: votes, decided,
//                                   NodeSet.
//   quorum/background.rs            Rounds that finish later; what settle()
//                                   waits for.
//   quorum/fanout.rs                One request to many nodes, decided early,
//                                   deadline.
//   quorum/mod.rs                   Quorum: the node set and its vote rounds.
//   quorum/probe.rs                 While anything is held: the nodes' clocks
//                                   read, paced by ours and by a node's timer
//                                   (a stalled clock of ours).
// 4 counter/scripts.rs              The counter's Lua: compare-and-set, repair
//                                   stamp.
//   counter/mod.rs                  The quorum compare-and-set counter
//                                   (serials, fencing, terms).
//   counter/batch.rs                Group commit: a counter's queue of
//                                   callers, and what this process knows of
//                                   the counter (Turns).
//   pin.rs                          A configuration pinned on the nodes once
//                                   (a serial prefix's period and width, a
//                                   semaphore's permits), and its script.
//   wait/scripts.rs                 The Lua every waiting list shares: join,
//                                   leave, the node's time, live waiters told.
//   wait/list.rs                    Where a resource's waiting list lives on
//                                   the nodes.
//   wait/named.rs                   Named wake-ups: a semaphore's release
//                                   names the waiters it lets in; whom a
//                                   message names.
//   wait/plan.rs                    When a waiter tries again, as a pure rule.
//   wait/signal.rs                  News for the front waiter of one line:
//                                   changes nodes reported, our releases,
//                                   which rounds count.
//   wait/queue.rs                   This client's waiters in line per
//                                   resource, and observers; news from the
//                                   nodes.
//   wait/mod.rs                     Waiting: notification reads, the sleep
//                                   between tries.
// 5 lock/scripts.rs                 The lock's Lua: compare-and-delete,
//                                   -pexpire, the waiter's SET NX, inspect
//                                   (Redlock-compatible keys).
//   lock/multi_scripts.rs           The multi-resource lock's Lua: every key
//                                   or none.
//   client/config.rs                The lock's settings and DEFAULT_*
//                                   constants.
//   client/redlock.rs               Redlock, the client handle: key, release,
//                                   validity.
//   lock/standing.rs                Where a held lock stands, and all of it
//                                   that changes: one mutex, one watch that
//                                   publishes.
//   lock/shared.rs                  What a lock's holders share: the extension
//                                   round, release and loss bookkeeping.
//   acquire/won.rs                  A lock just won: its shared record made
//                                   whole, then counted and handed out.
//   lock/renewal.rs                 The auto-extend loop: a failed renewal is
//                                   tried again while validity is left.
//   lock/guard.rs                   Lock and LockHandle: extend, release,
//                                   auto-extend.
//   acquire/patience.rs             Patience: how long an acquisition keeps
//                                   trying.
//   acquire/waiter.rs               A caller's entry in the nodes' waiting
//                                   lists: id, ticket, lease; joining and
//                                   leaving.
//   acquire/attempt.rs              One attempt (plain SET NX, or as a queued
//                                   waiter); Attempts, what the waiting loop
//                                   attempts.
//   acquire/waiting.rs              The waiting loop around attempts (locks,
//                                   permits, leaderships): line up, try,
//                                   listen, sleep.
//   counter/turns.rs                Counter allocation in turns: the counter's
//                                   lock while other processes allocate too.
//   counter/mint.rs                 Fencing tokens, terms, permit tokens:
//                                   group- committed mints.
//   acquire/acquisition.rs          Acquire: one builder for every primitive's
//                                   acquisition (wait, try_once, fenced, run).
//   acquire/onelock.rs              Redlock::lock and the older forms: fenced
//                                   acquisition.
//   acquire/mod.rs                  The acquisition module's map.
//   client/urls.rs                  Member URLs: one node, or a Redis
//                                   Cluster's seeds; messages that never echo
//                                   a password.
//   client/builder.rs               RedlockBuilder: checks settings, makes the
//                                   node set.
//   lock/inspect.rs                 Redlock::inspect: a lock's holder, time
//                                   left and waiters, read without taking it.
//   lock/held.rs                    Held, Takes: how a lock standing on more
//                                   than its key (several keys, a reader's
//                                   lease, a permit's slot) is kept, and
//                                   taken.
//   lock/keyset.rs                  Several resources locked together: their
//                                   keys and waiting lists in one order, the
//                                   requests on all.
//   lock/multi.rs                   lock_all (and its older forms): the lock
//                                   on several resources.
//   lock/mod.rs                     The lock module's map.
//   client/trust.rs                 NodeTrust: what the connection checks
//                                   found; init_new_nodes.
//   client/connect.rs               Redlock::connect: every member (every
//                                   shard) connected and checked up front.
//   client/mod.rs                   The client module's map.
// 6 semaphore/scripts.rs            The semaphore's Lua: take a slot, move,
//                                   undo.
//   semaphore/slots.rs              Which slot a semaphore attempt won, pure.
//   semaphore/keys.rs               A semaphore's keys and channel; a held
//                                   permit's requests (its release names
//                                   waiters).
//   semaphore/handle.rs             Semaphore: its name, slot keys, waiting
//                                   list.
//   semaphore/attempt.rs            One attempt at a permit (a free slot per
//                                   node, and a move round after a split).
//   semaphore/permit.rs             Permit, a lock on one slot.
//   semaphore/mod.rs                acquire (and its older forms).
//   election/scripts.rs             The election's Lua: the leader's published
//                                   value.
//   election/leadership.rs          Leadership, the election's lock with its
//                                   term.
//   election/mod.rs                 Election: campaign, the leadership record,
//                                   leader().
//   election/observe.rs             Observer: each change of leader, woken by
//                                   the nodes.
//   rwlock/scripts.rs               The read-write lock's Lua: readers'
//                                   leases, the writer's key, who is admitted.
//   rwlock/keys.rs                  A read-write lock's keys; a reader's lease
//                                   and a writer's key as attempts take and
//                                   guards keep them.
//   rwlock/attempt.rs               One attempt, as a reader or as a writer.
//   rwlock/inspect.rs               Reading a read-write lock: its writer and
//                                   readers.
//   rwlock/mod.rs                   RwLock: read, write and their forms.
// 7 serial/period.rs                Reset periods, stamps, the plan step of
//                                   allocation.
//   serial/number.rs                Serial, one issued number.
//   serial/generator.rs             SerialGenerator, its builder, group
//                                   commit.
//   serial/mod.rs                   The serial module's map.
// 8 scratch.rs        (tests only) A throwaway redis-server for script tests.
//   scripts.rs          (tests only) Every script the crate sends, checked
//                       together: declared keys, the docs' ACL.
//   model/ (tests only) The model checker's models of the protocols, run on
//                       the decision code above: model/counter_state.rs and
//                       model/counter.rs (the quorum counter),
//                       model/lock_state.rs, model/lock_symmetry.rs
//                       (its alike nodes and clients), model/lock_rules.rs,
//                       model/lock_connected.rs (reads while connected),
//                       model/counts.rs (a count that only grows, read
//                       with replies taken in in any order),
//                       model/fast_view.rs (a fast client's view of a
//                       quarantine, by the crate's TrustState) and
//                       model/lock.rs (the lock), model/detection.rs (the
//                       node-loss table as the models' detection step),
//                       model/served.rs (a loss handed on through our
//                       marker: `served` only after a whole quarantine),
//                       model/loss_seen.rs (a loss found, as a held lock
//                       sees it, on the crate's Trust),
//                       model/mint.rs (group-committed mints' order),
//                       model/multilock.rs (the multi-resource lock's
//                       exclusion and freedom from wait cycles),
//                       model/rwlock_state.rs and model/rwlock.rs (the
//                       read-write lock: exclusion, leases of their own,
//                       phase fairness, the name's plain lock as writer),
//                       model/pin.rs (a serial
//                       prefix's pinned configuration),
//                       model/semaphore_state.rs and model/semaphore.rs
//                       (K slots and the move round),
//                       model/permits_state.rs and model/permits_name.rs
//                       (a name's permits and its plain lock exclude each
//                       other), model/election.rs
//                       (terms over the fenced lock),
//                       model/shards_state.rs, model/shards_rules.rs and
//                       model/shards.rs (a member that is a Redis Cluster:
//                       failover, reshard, whose trust a yes rests on),
//                       model/mod.rs.
// The CLI (the redquorum-cli package in cli/, its own map in cli/src/main.rs)
// uses the public API only.

mod acquire;
mod client;
mod clock;
mod counter;
mod election;
mod error;
mod explain;
mod extensions;
#[cfg(feature = "postgres")]
mod fenced_postgres;
mod fenced_writes;
mod keys;
mod lock;
mod lua;
#[cfg(test)]
mod model;
mod mutex;
mod node;
mod pin;
mod predicates;
mod quorum;
mod rwlock;
#[cfg(test)]
mod scratch;
#[cfg(test)]
mod scripts;
mod semaphore;
mod serial;
mod telemetry;
mod wait;

pub use chrono;
pub use chrono_tz;
pub use redis;

pub use acquire::acquisition::{Acquirable, Acquire};
pub use acquire::onelock::OneLock;
pub use client::builder::RedlockBuilder;
pub use client::config::{
    DEFAULT_AMNESIA_TOLERANCE, DEFAULT_AUTO_EXTEND_FRACTION, DEFAULT_DRIFT_FACTOR,
    DEFAULT_NODE_TIMEOUT, DEFAULT_NOTIFICATIONS, DEFAULT_RESTART_QUARANTINE, DEFAULT_RETRY_COUNT,
    DEFAULT_RETRY_DELAY, DEFAULT_RETRY_JITTER, DEFAULT_STRICT_FIFO, DEFAULT_WAIT_CAP, MAX_TTL,
};
pub use client::redlock::Redlock;
pub use client::trust::{NodeInit, NodeTrust, Serving};
pub use client::urls::split_node_list;
pub use election::leadership::Leadership;
pub use election::observe::Observer;
pub use election::{Candidacy, Election, Leader};
pub use error::{explain, Error, NodeError, NodeErrorKind, Result};
#[cfg(feature = "postgres")]
pub use fenced_postgres::{PgFence, FENCE_SCHEMA};
pub use fenced_writes::{Fence, FenceError, FencedRedis};
pub use lock::guard::{Lock, LockHandle};
pub use lock::inspect::{Holder, LockState};
pub use lock::keyset::MAX_RESOURCES;
pub use lock::multi::AllLocks;
pub use node::clock::clockrate::{ClockReading, NodeClock};
pub use rwlock::inspect::RwState;
pub use rwlock::{RwAccess, RwLock};
pub use semaphore::handle::{Semaphore, MAX_PERMITS};
pub use semaphore::permit::Permit;
pub use semaphore::PermitOf;
pub use serial::generator::{
    ClockFn, SerialGenerator, SerialGeneratorBuilder, DEFAULT_CLOCK_TOLERANCE, DEFAULT_WIDTH,
};
pub use serial::number::{Serial, MAX_BATCH, MAX_PREFIX_LEN};
pub use serial::period::ResetPeriod;
pub use telemetry::stats::{NodeStats, Stats};
pub use telemetry::targets;
pub use telemetry::ClassFn;

/// Registers the description and unit of every metric this crate records
/// with the installed `metrics` recorder; call it once, after installing
/// the recorder. The names, kinds, units and labels are in the table of the
/// repository's `docs/observability.md`.
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub fn describe_metrics() {
    telemetry::metrics::describe();
}
