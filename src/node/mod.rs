//! One Redis node: its lazily opened, self-healing connection and the way a
//! single request is sent to it, in order.
//!
//! In four groups, and a fifth for members that are Redis Clusters:
//! [`connection`] (a request encoded once, the ordered, batching link that
//! sends it, the reply it is followed to); [`trust`] (what a node shows of
//! its history, the table that decides whether it kept our writes, the
//! quarantine that follows, and what is read of it while connected);
//! [`clock`] (a node's clock from the `TIME` behind each request: jumps,
//! rates, a timer kept by it); [`notify`] (the notification connection that
//! tells waiters of changes); and [`cluster`] (a member's shards, requests
//! routed by hash slot).

pub(crate) mod clock;
pub(crate) mod cluster;
pub(crate) mod connection;
pub(crate) mod notify;
pub(crate) mod trust;

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::node::clock::clockwatch::ClockNews;
use crate::node::clock::tick;
use crate::node::cluster::shard_rules::{judges, Judges};
#[cfg(feature = "cluster")]
use crate::node::cluster::shards;
use crate::node::connection::call::Call;
use crate::node::connection::link::Link;
use crate::node::connection::open::nodelay;
use crate::node::connection::request::Request;
use crate::node::notify::watches;
use crate::node::trust::amnesia::{AmnesiaCheck, Cause};
use crate::node::trust::TrustState;
use crate::node::trust::{evidence, panel};

/// One member of the quorum: a Redis node, or (feature `cluster`) a Redis
/// Cluster whose shards each serve part of the key space.
pub(crate) struct Node {
    /// Position in the configured list; errors and logs name nodes by it.
    pub(crate) index: usize,
    /// `host:port` for messages (a cluster's first seed); never contains
    /// the password.
    pub(crate) addr: String,
    /// Where its requests go.
    route: Route,
}

/// Where a member's requests go.
enum Route {
    /// The node's connection, shared with the calls in flight and the task
    /// that connects.
    One(Arc<Link>),
    /// A Redis Cluster: to the shard serving each request's first key.
    #[cfg(feature = "cluster")]
    Cluster(Arc<shards::Shards>),
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
    /// factor its clock is judged by, where a jump ahead is told
    /// (`clockwatch.rs`) and where its readings go (`panel.rs`).
    pub(crate) fn new(
        index: usize,
        client: redis::Client,
        connect_timeout: Duration,
        amnesia: Option<AmnesiaCheck>,
        clock: (f64, &ClockNews, &Arc<panel::Panel>),
    ) -> Self {
        let info = client.get_connection_info();
        let addr = info.addr().to_string();
        let client = nodelay(info.clone()).unwrap_or(client);
        Self {
            index,
            addr,
            route: Route::One(Arc::new(Link::new(
                index,
                client,
                connect_timeout,
                amnesia,
                clock,
            ))),
        }
    }

    /// A member that is a Redis Cluster reached through `client`'s
    /// settings and the seed addresses `seeds` (the first is `client`'s);
    /// connects to nothing yet.
    #[cfg(feature = "cluster")]
    pub(crate) fn cluster(
        index: usize,
        client: &redis::Client,
        seeds: Vec<redis::ConnectionAddr>,
        settings: shards::LinkSettings,
    ) -> Self {
        let info = client.get_connection_info().clone();
        Self {
            index,
            addr: format!(
                "cluster {}",
                seeds.first().map(ToString::to_string).unwrap_or_default()
            ),
            route: Route::Cluster(shards::Shards::new(index, info, seeds, settings)),
        }
    }

    /// For a member that is a Redis Cluster, where each key is served now
    /// (its notification connections follow it: `watches.rs`).
    pub(crate) fn watch_route(&self) -> Option<watches::Route> {
        match &self.route {
            Route::One(_) => None,
            #[cfg(feature = "cluster")]
            Route::Cluster(shards) => {
                let shards = Arc::downgrade(shards);
                Some(Arc::new(move |key: &str| {
                    let slot = crate::keys::key_slot(key.as_bytes());
                    shards.upgrade()?.master_of(slot)
                }))
            }
        }
    }

    /// Whether the member is a Redis Cluster.
    #[cfg(feature = "cluster")]
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.route, Route::Cluster(_))
    }

    /// `f` of the member's links: its node's, or every shard's seen.
    fn with_links<R>(&self, f: impl FnOnce(&[Arc<Link>]) -> R) -> R {
        match &self.route {
            Route::One(link) => f(std::slice::from_ref(link)),
            #[cfg(feature = "cluster")]
            Route::Cluster(shards) => f(&shards.links()),
        }
    }

    /// `f` of the member's current links: its node's, or those of the
    /// shards its slot map names now.
    fn with_current_links<R>(&self, f: impl FnOnce(&[Arc<Link>]) -> R) -> R {
        match &self.route {
            Route::One(link) => f(std::slice::from_ref(link)),
            #[cfg(feature = "cluster")]
            Route::Cluster(shards) => f(&shards.current()),
        }
    }

    /// The links of the shards a cluster member's slot map names now
    /// (every shard seen while no map was read).
    #[cfg(feature = "cluster")]
    pub(crate) fn current_links(&self) -> Vec<Arc<Link>> {
        self.with_current_links(<[Arc<Link>]>::to_vec)
    }

    /// A timer on the node's clock (for a cluster member, on the first
    /// shard its slot map names; none before one is known).
    pub(crate) fn ticker(&self) -> Option<tick::Ticker> {
        self.with_current_links(|ls| ls.first().map(|l| l.ticker()))
    }

    /// How long a request to the node may wait while its first connection
    /// is set up (see [`Link::first_contact`]); `None` once one was tried
    /// (on a cluster member: its slot map read, and each shard it names).
    pub(crate) fn first_contact(&self) -> Option<Duration> {
        match &self.route {
            Route::One(link) => link.first_contact(),
            #[cfg(feature = "cluster")]
            Route::Cluster(shards) => shards.first_contact(),
        }
    }

    /// Whether the node (every shard the slot map names) answered its last
    /// request.
    pub(crate) fn is_healthy(&self) -> bool {
        self.with_current_links(|ls| ls.iter().all(|l| l.healthy.load(Ordering::Relaxed)))
    }

    /// Whether the node's connection (any shard's) was (re)made after
    /// `since` (a request sent before may have been sent twice).
    pub(crate) fn reconnected_after(&self, since: Instant) -> bool {
        self.with_links(|ls| ls.iter().any(|l| l.connected_after(since)))
    }

    /// The end of the node's quarantine, if it is in one at `now` (for a
    /// cluster, the latest of any shard's): it may have lost locks that
    /// can still be valid, so its yes does not count toward a lock quorum.
    /// Logs the end of a quarantine once.
    pub(crate) fn quarantined(&self, now: Instant) -> Option<Instant> {
        self.with_links(|ls| ls.iter().filter_map(|l| self.quarantine_of(l, now)).max())
    }

    /// [`Node::quarantined`] for a reply that came over `via` (the link
    /// its request went to; see [`judges`]).
    pub(crate) fn quarantined_via(&self, via: Option<&Arc<Link>>, now: Instant) -> Option<Instant> {
        match judges(via) {
            Judges::Sent(link) => self.quarantine_of(link, now),
            Judges::Every => self.quarantined(now),
        }
    }

    /// How errors name the node for a reply that came over `via`: a
    /// cluster member by its first seed and the shard that failed.
    pub(crate) fn addr_via(&self, via: Option<&Arc<Link>>) -> String {
        match (&self.route, via) {
            #[cfg(feature = "cluster")]
            (Route::Cluster(_), Some(link)) => format!("{} (shard {})", self.addr, link.addr()),
            _ => self.addr.clone(),
        }
    }

    /// `link`'s quarantine at `now`; logs its end once.
    fn quarantine_of(&self, link: &Link, now: Instant) -> Option<Instant> {
        let (until, ended) = link.trust.quarantined(now);
        if ended {
            tracing::info!(
                target: crate::telemetry::targets::QUARANTINE,
                node = self.index,
                "node {} ({}) counts toward lock quorums again: no lock it may have lost can still be valid",
                self.index,
                self.addr
            );
        }
        until
    }

    /// What the connection checks found (see [`amnesia`](crate::node::trust::amnesia)): for a cluster,
    /// a quarantined current shard's (one that was checked first), else a
    /// checked one's.
    pub(crate) fn trust(&self) -> TrustState {
        let now = Instant::now();
        self.with_current_links(|ls| {
            ls.iter()
                .map(|l| (l.trust.quarantined(now).0.is_some(), l.trust.snapshot()))
                .max_by_key(|(quarantined, t)| (*quarantined, t.probed))
                .map(|(_, t)| t)
                .unwrap_or_default()
        })
    }

    /// Where our markers live on the member: one per node (every shard
    /// seen, on a cluster).
    pub(crate) fn markers(&self) -> Vec<String> {
        self.with_links(|ls| ls.iter().map(|l| l.marker().to_owned()).collect())
    }

    /// What the connection checks of the node whose marker is at `marker`
    /// found (`None`: no such node).
    pub(crate) fn trust_at(&self, marker: &str) -> Option<TrustState> {
        self.with_links(|ls| {
            ls.iter()
                .find(|l| l.marker() == marker)
                .map(|l| l.trust.snapshot())
        })
    }

    /// An operator declared the node whose marker is at `marker` new, our
    /// marker naming `run_id` at damage count `seen` (see
    /// [`trust::Trust::declared_new`]).
    pub(crate) fn declared_new_at(&self, marker: &str, run_id: &str, seen: u64) {
        self.with_links(|ls| {
            for l in ls.iter().filter(|l| l.marker() == marker) {
                l.trust.declared_new(run_id, Some(seen));
            }
        });
    }

    /// The tag this client writes into our markers (see `tags.rs`);
    /// `None` where its checks keep no panel.
    pub(crate) fn tag(&self) -> Option<String> {
        self.with_links(|ls| {
            ls.iter()
                .find_map(|l| l.trust.panel())
                .map(|p| p.tags().tag())
        })
    }

    /// Why the node may have lost writes, in words for errors.
    pub(crate) fn loss_cause(&self) -> &'static str {
        let trust = self.trust();
        if trust.clock_ahead {
            return "ran its clock ahead of ours beyond the drift allowance, so keys there may \
                    expire before their time";
        }
        let told_unmarked = matches!(
            trust.last.as_ref().and_then(|p| p.marker.as_ref()),
            Some(evidence::Marker::Found { why: Some(w), .. }) if w == Cause::Unmarked.tag()
        );
        match trust.cause {
            // What the client that found it saw, and so the same advice.
            Some(Cause::Marked) if told_unmarked => {
                "carries none of our marks but the one a first look wrote (found by another \
                 client): new, restarted without its data, or a cluster's shard given slots \
                 (for nodes you know are new, not wiped: `redquorum init`)"
            }
            cause => cause.map_or("may have lost writes", Cause::describe),
        }
    }

    /// How much a key set on the node at or after `since` may have lost
    /// of its life to its clock running ahead (see `clockwatch.rs`); the
    /// most of any shard's.
    pub(crate) fn ran_ahead_since(&self, since: tokio::time::Instant) -> Duration {
        self.with_links(|ls| {
            ls.iter()
                .map(|l| l.clock.ran_ahead_since(since))
                .max()
                .unwrap_or_default()
        })
    }

    /// Whether a loss that may have taken keys set on the node before was
    /// found after `since` (on any shard: see `vigil.rs` and
    /// [`trust::TrustState::lost_at`]).
    pub(crate) fn lost_since(&self, since: tokio::time::Instant) -> bool {
        self.with_links(|ls| {
            ls.iter()
                .any(|l| l.trust.lost_at().is_some_and(|at| at > since))
        })
    }

    /// How much faster than ours the node's clock runs, by its measured
    /// rate (zero if not, or not known yet; see `clockrate.rs`); the most
    /// of any shard's.
    pub(crate) fn rate_excess(&self) -> f64 {
        self.with_links(|ls| ls.iter().map(|l| l.clock.rate_excess()).fold(0.0, f64::max))
    }

    /// The node clock's measured rate against ours, at most (`None` until
    /// one is known).
    pub(crate) fn clock_rate(&self) -> Option<f64> {
        self.with_links(|ls| {
            ls.iter()
                .filter_map(|l| l.clock.rate().map(|r| r.hi))
                .reduce(f64::max)
        })
    }

    /// The node's clock offset from ours and its uncertainty, µs (see
    /// `ClockWatch::offset_us`); a cluster's first shard's.
    pub(crate) fn clock_offset_us(&self) -> Option<(i64, u64)> {
        self.with_links(|ls| ls.first()?.clock.offset_us())
    }

    /// When the node's clock was last read (`None` before the first).
    pub(crate) fn clock_read_at(&self) -> Option<tokio::time::Instant> {
        self.with_links(|ls| ls.first()?.clock.last_heard())
    }

    /// How often this client saw the node's clock run ahead of ours
    /// beyond the drift allowance, and step back.
    pub(crate) fn clock_jumps(&self) -> (u64, u64) {
        self.with_links(|ls| {
            ls.iter().fold((0, 0), |(a, b), l| {
                (
                    a + l.clock.ahead.load(Ordering::Relaxed),
                    b + l.clock.behind.load(Ordering::Relaxed),
                )
            })
        })
    }

    /// The process of the node that may have lost writes (see
    /// [`trust::Trust::suspect_run_id`]) that a reply over `via` came
    /// from (see [`judges`]); `None` if it is trusted.
    pub(crate) fn suspect_run_id_via(&self, via: Option<&Arc<Link>>) -> Option<String> {
        match judges(via) {
            Judges::Sent(link) => link.trust.suspect_run_id(),
            // Not known which shard answered: suspect if any is, under no
            // process a stamp could name.
            Judges::Every => self
                .with_links(|ls| ls.iter().any(|l| l.trust.suspect_run_id().is_some()))
                .then(String::new),
        }
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
    /// the same value. On a cluster it goes to the shard serving its first
    /// key (see [`shards`]).
    pub(crate) fn call(&self, req: &Arc<Request>) -> Call {
        match &self.route {
            Route::One(link) => Call::start(link, req),
            #[cfg(feature = "cluster")]
            Route::Cluster(shards) => shards.call(req),
        }
    }
}
