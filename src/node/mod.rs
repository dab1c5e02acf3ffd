//! One Redis node: its lazily opened, self-healing connection and the way a
//! single request is sent to it, in order.
//!
//! Bottom to top: [`request`] encodes a command once per round; [`wire`]
//! hands it (or a pipeline) to a redis-rs multiplexed connection; [`queue`]
//! is the link's state and the requests queued in it; [`open`] opens and
//! checks one connection; [`scriptcache`] is what a connection knows of the
//! node's script cache (a script goes in full once, then by digest);
//! [`link`] is the state machine that connects, keeps requests in order and
//! batches them; [`slot`] is a directly sent
//! request's place on its connection, given up when the reply arrives;
//! [`call`] follows one request to its reply for the round that polls it.

pub(crate) mod amnesia;
pub(crate) mod call;
pub(crate) mod channels;
pub(crate) mod clockrate;
pub(crate) mod clockwatch;
pub(crate) mod evidence;
pub(crate) mod link;
pub(crate) mod open;
pub(crate) mod push;
pub(crate) mod queue;
pub(crate) mod request;
pub(crate) mod scriptcache;
pub(crate) mod slot;
pub(crate) mod watch;
pub(crate) mod wire;

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::node::amnesia::{AmnesiaCheck, Cause, TrustState};
use crate::node::call::Call;
use crate::node::clockwatch::ClockNews;
use crate::node::link::Link;
use crate::node::request::Request;

/// One Redis node of the quorum.
pub(crate) struct Node {
    /// Position in the configured list; errors and logs name nodes by it.
    pub(crate) index: usize,
    /// `host:port` for messages; never contains the password.
    pub(crate) addr: String,
    /// The connection, shared with the calls in flight and the task that
    /// connects.
    link: Arc<Link>,
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Node")
            .field("index", &self.index)
            .field("addr", &self.addr)
            .finish()
    }
}

impl Node {
    /// Wraps a client; connects to nothing yet. `clock` is the drift
    /// factor its clock is judged by and where a jump ahead is told
    /// (`clockwatch.rs`).
    pub(crate) fn new(
        index: usize,
        client: redis::Client,
        connect_timeout: Duration,
        amnesia: Option<AmnesiaCheck>,
        clock: (f64, &ClockNews),
    ) -> Self {
        let info = client.get_connection_info();
        let addr = info.addr().to_string();
        // Lock requests are tiny and latency-bound, and many share one
        // multiplexed connection: never let Nagle hold one back waiting for
        // the ACK of another.
        let tcp = info.tcp_settings().clone().set_nodelay(true);
        let client = redis::Client::open(info.clone().set_tcp_settings(tcp)).unwrap_or(client);
        Self {
            index,
            addr,
            link: Arc::new(Link::new(index, client, connect_timeout, amnesia, clock)),
        }
    }

    /// Whether the node answered its last request.
    pub(crate) fn is_healthy(&self) -> bool {
        self.link.healthy.load(Ordering::Relaxed)
    }

    /// Whether the node's connection was (re)made after `since` (a request
    /// sent before may have been sent twice).
    pub(crate) fn reconnected_after(&self, since: Instant) -> bool {
        self.link.connected_after(since)
    }

    /// The end of the node's quarantine, if it is in one at `now`: it may
    /// have lost locks that can still be valid, so its yes does not count
    /// toward a lock quorum. Logs the end of a quarantine once.
    pub(crate) fn quarantined(&self, now: Instant) -> Option<Instant> {
        let (until, ended) = self.link.trust.quarantined(now);
        if ended {
            tracing::info!(
                node = self.index,
                "node {} ({}) counts toward lock quorums again: no lock it may have lost can still be valid",
                self.index,
                self.addr
            );
        }
        until
    }

    /// What the connection checks found (see [`amnesia`]).
    pub(crate) fn trust(&self) -> TrustState {
        self.link.trust.snapshot()
    }

    /// An operator declared the node new (see [`amnesia::Trust::declared_new`]).
    pub(crate) fn declared_new(&self, run_id: &str) {
        self.link.trust.declared_new(run_id);
    }

    /// Why the node may have lost writes, in words for errors.
    pub(crate) fn loss_cause(&self) -> &'static str {
        let trust = self.trust();
        if trust.clock_ahead {
            return "ran its clock ahead of ours beyond the drift allowance, so keys there may \
                    expire before their time";
        }
        trust.cause.map_or("may have lost writes", Cause::describe)
    }

    /// How much a key set on the node at or after `since` may have lost
    /// of its life to its clock running ahead (see `clockwatch.rs`).
    pub(crate) fn ran_ahead_since(&self, since: tokio::time::Instant) -> Duration {
        self.link.clock.ran_ahead_since(since)
    }

    /// How much faster than ours the node's clock runs, by its measured
    /// rate (zero if not, or not known yet; see `clockrate.rs`).
    pub(crate) fn rate_excess(&self) -> f64 {
        self.link.clock.rate_excess()
    }

    /// The node clock's measured rate against ours, at most (`None` until
    /// one is known).
    pub(crate) fn clock_rate(&self) -> Option<f64> {
        self.link.clock.rate().map(|r| r.hi)
    }

    /// The node's clock offset from ours and its uncertainty, µs (see
    /// `ClockWatch::offset_us`).
    pub(crate) fn clock_offset_us(&self) -> Option<(i64, u64)> {
        self.link.clock.offset_us()
    }

    /// When the node's clock was last read (`None` before the first).
    pub(crate) fn clock_read_at(&self) -> Option<tokio::time::Instant> {
        self.link.clock.last_heard()
    }

    /// How often this client saw the node's clock run ahead of ours
    /// beyond the drift allowance, and step back.
    pub(crate) fn clock_jumps(&self) -> (u64, u64) {
        let watch = &self.link.clock;
        (
            watch.ahead.load(Ordering::Relaxed),
            watch.behind.load(Ordering::Relaxed),
        )
    }

    /// The process of a node that may have lost writes (see
    /// [`amnesia::Trust::suspect_run_id`]); `None` if it is trusted.
    pub(crate) fn suspect_run_id(&self) -> Option<String> {
        self.link.trust.suspect_run_id()
    }

    /// Marks the node unresponsive (it missed a round's deadline).
    pub(crate) fn mark_unresponsive(&self) {
        self.link.healthy.store(false, Ordering::Relaxed);
    }

    /// Sends `req`: the request is handed to the connection (or queued for
    /// it) before this returns, so requests reach the node in the order their
    /// calls were made. [`Call::poll_reply`] then yields the node's reply.
    /// The call owns everything it needs, so a round can carry it on in the
    /// background; dropping it before it was sent means it is never sent
    /// (unless it is a cleanup).
    ///
    /// A request whose connection turns out to be closed (the node was
    /// restarted) is sent again on a new connection if nothing was sent to
    /// the node after it, so a restart is usually invisible. Every command we
    /// send is safe to repeat: `SET NX` and the scripts are idempotent for
    /// the same value.
    pub(crate) fn call(&self, req: &Arc<Request>) -> Call {
        Call::start(&self.link, req)
    }
}
