//! A node's connection, opened on first use and again after it breaks: the
//! state machine that keeps our requests to the node in order and batches
//! them under load.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use redis::{RedisError, RedisResult, Value};

use crate::error::{NodeError, NodeErrorKind};
use crate::mutex;
use crate::node::clock::clockwatch::{ClockNews, ClockWatch};
use crate::node::connection::queue::{fail_all, send_batch, Conn, LinkState, ReplyRx, Waiting};
use crate::node::connection::request::Request;
use crate::node::connection::slot::Slot;
use crate::node::connection::wire::{hand_over, link_broken, BatchFuture, SendFuture};
use crate::node::trust::amnesia::AmnesiaCheck;
use crate::node::trust::panel::Panel;
use crate::node::trust::vigil::Vigil;
use crate::node::trust::Trust;

mod connect;

/// A node's connection, opened on first use and again after it breaks.
///
/// The rule that keeps our requests to a node in order: a request is handed
/// to the connection when its call is made, or it joins a queue that is
/// handed over in order before anything made after it. Nothing is sent later
/// out of turn. (When requests waited for a connection each in its own task,
/// a release could go out before the `SET` it undoes: a stale key of ours for
/// a whole TTL.)
///
/// Requests are also batched: while [`MAX_OUTSTANDING`] requests or batches
/// are outstanding on the connection, new requests queue, and the queue goes
/// out as one pipeline (one write for the client and for the server) as soon
/// as one of them is answered. Requests go out at once while the node keeps
/// up; under load, many rounds share each write.
pub(crate) struct Link {
    /// For log fields.
    pub(crate) index: usize,
    /// False after the node failed or timed out, true again after any reply.
    /// Rounds that like to hear from every node (the counter) do not wait
    /// for a node known to be unresponsive.
    pub(crate) healthy: AtomicBool,
    /// When the current connection was made, in ns after [`epoch`]: a
    /// request resent on it after the old one broke may find what its first
    /// sending did (a `SET` then finds our own key and answers nil).
    connected_at: AtomicU64,
    /// Set once a connection attempt ended, made or failed: until then a
    /// round waits for the connection's set-up (see [`Link::first_contact`]).
    tried: AtomicBool,
    /// How to connect.
    client: redis::Client,
    /// Limit on one connection attempt.
    connect_timeout: Duration,
    /// The state, changed only under this lock, never across an await.
    state: Mutex<LinkState>,
    /// Set once a failure only an operator can fix (not Redis, a password,
    /// an ACL) was logged: it is logged once per node, whether or not any
    /// round was still waiting for the reply that showed it.
    misconfigured: AtomicBool,
    /// How each new connection is checked for lost writes (`None`: never).
    amnesia: Option<AmnesiaCheck>,
    /// What those checks found.
    pub(crate) trust: Arc<Trust>,
    /// The node's clock, read from the `TIME` behind every request.
    pub(crate) clock: Arc<ClockWatch>,
    /// What is read of the node while connected: its clock, its evictions,
    /// the check made again (`vigil.rs`).
    pub(crate) vigil: Arc<Vigil>,
    /// Where our marker lives on a shard of a member that is a Redis
    /// Cluster (`None`: a member that is one node).
    shard_marker: Option<String>,
    /// Told of trouble on a shard's request (a redirection, a broken
    /// connection, a missed deadline): the member reads its slot map again.
    trouble: Option<Box<dyn Fn() + Send + Sync>>,
}

/// A request in flight: sent, waiting in a queue, or already done.
pub(crate) enum Pending {
    /// Handed to the connection on its own.
    Sent {
        /// The rest of the exchange.
        reply: SendFuture,
        /// Its place on the connection, given up when the reply arrives.
        slot: Arc<Slot<Outstanding>>,
        /// The connection it went out on.
        id: u64,
        /// [`LinkState::dispatched`] right after it.
        seq: u64,
    },
    /// Queued, for a batch or for the connection to open.
    Queued(ReplyRx),
    /// Decided without a reply (taken once).
    Done(Option<RedisResult<Value>>),
}

/// A request or batch outstanding on connection `id`: when it is answered or
/// given up on (dropped), the requests queued behind it go out.
pub(crate) struct Outstanding {
    /// The link.
    pub(crate) link: Arc<Link>,
    /// The connection it went out on.
    pub(crate) id: u64,
}

impl Drop for Outstanding {
    fn drop(&mut self) {
        self.link.finished(self.id);
    }
}

/// Requests or batches in flight on one connection before new requests
/// queue for the next batch. One (auto-pipelining): a request waits at most
/// one round trip for the one ahead of it, and under load everything that
/// arrived meanwhile goes out in one write. Measured against 2 and 4 in
/// `make bench` (b): 34-44 against 40-53 µs of client CPU per lock+release,
/// 1.50-1.63 against 1.27-1.44 x rslock's throughput; (a) unchanged within
/// noise.
const MAX_OUTSTANDING: usize = 1;

/// How long requests to a node fail at once after a failed connection
/// attempt, before the next request tries again.
const RECONNECT_BACKOFF: Duration = Duration::from_millis(50);

/// Numbers connections, to tell an old one's failure from a new one's.
static CONNECTIONS: AtomicU64 = AtomicU64::new(0);

impl Link {
    /// A link to the node `client` points at; connects to nothing yet.
    pub(crate) fn new(
        index: usize,
        client: redis::Client,
        connect_timeout: Duration,
        amnesia: Option<AmnesiaCheck>,
        (allowance, news, panel): (f64, &ClockNews, &Arc<Panel>),
    ) -> Self {
        let trust = Arc::new(Trust::telling(news, panel));
        let clock = Arc::new(ClockWatch::new(
            index,
            allowance,
            amnesia.as_ref(),
            &trust,
            (news, panel.seat(index)),
        ));
        let marker = crate::node::trust::evidence::MARKER_KEY;
        let vigil = Vigil::new(index, Arc::clone(&clock), &trust, amnesia.clone(), marker);
        Self {
            vigil: Arc::new(vigil),
            clock,
            amnesia,
            trust,
            index,
            healthy: AtomicBool::new(true),
            connected_at: AtomicU64::new(0),
            tried: AtomicBool::new(false),
            client,
            connect_timeout,
            state: Mutex::new(LinkState::new()),
            misconfigured: AtomicBool::new(false),
            shard_marker: None,
            trouble: None,
        }
    }

    /// A link to one shard of a member that is a Redis Cluster, whose
    /// marker lives at `marker` (a key in a slot the shard serves) and
    /// whose trouble is told to `trouble`.
    #[cfg(feature = "cluster")]
    pub(crate) fn with_shard(
        mut self,
        marker: String,
        trouble: Box<dyn Fn() + Send + Sync>,
    ) -> Self {
        let vigil = Vigil::new(
            self.index,
            Arc::clone(&self.clock),
            &self.trust,
            self.amnesia.clone(),
            &marker,
        );
        self.vigil = Arc::new(vigil);
        self.shard_marker = Some(marker);
        self.trouble = Some(trouble);
        self
    }

    /// The node's address (with the member's settings).
    #[cfg(feature = "cluster")]
    pub(crate) fn addr(&self) -> &redis::ConnectionAddr {
        self.client.get_connection_info().addr()
    }

    /// A timer on the node's clock, on a connection of its own (see
    /// `tick.rs`).
    pub(crate) fn ticker(&self) -> crate::node::clock::tick::Ticker {
        crate::node::clock::tick::Ticker::new(self.index, self.client.clone(), self.connect_timeout)
    }

    /// Where our marker lives on the node.
    pub(crate) fn marker(&self) -> &str {
        self.shard_marker
            .as_deref()
            .unwrap_or(crate::node::trust::evidence::MARKER_KEY)
    }

    /// Runs the connection's check again on `conn` (connection `id`) if it
    /// is due (see `vigil.rs`); one it cannot read makes a new connection.
    fn recheck_if_due(self: &Arc<Self>, conn: &redis::aio::MultiplexedConnection, id: u64) {
        if self.vigil.due() {
            let addr = self.client.get_connection_info().addr().to_string();
            let link = Arc::downgrade(self);
            let unread = move || {
                if let Some(link) = link.upgrade() {
                    link.lost(id);
                }
            };
            self.vigil
                .recheck(conn, &addr, self.connect_timeout, unread);
        }
    }

    /// Tells a shard's member of trouble on a request (see `trouble`).
    pub(crate) fn trouble(&self) {
        if let Some(trouble) = &self.trouble {
            trouble();
        }
    }

    /// Logs a failure only an operator can fix, once per node: while a
    /// quorum survives it, no error would ever name it.
    pub(crate) fn warn_once(&self, kind: &NodeErrorKind) {
        if kind.needs_operator() && !self.misconfigured.swap(true, Ordering::Relaxed) {
            let error = NodeError {
                index: self.index,
                addr: self.client.get_connection_info().addr().to_string(),
                kind: kind.clone(),
            };
            tracing::warn!(target: crate::telemetry::targets::MISCONFIGURED, node = self.index, "{error}");
        }
    }

    /// The connect timeout while no connection attempt has ended: the first
    /// request to a node waits for its connection's set-up (several round
    /// trips), which the per-node timeout is not meant to cover.
    pub(crate) fn first_contact(&self) -> Option<Duration> {
        (!self.tried.load(Ordering::Relaxed)).then_some(self.connect_timeout)
    }

    /// Whether the connection was (re)made after `since`.
    pub(crate) fn connected_after(&self, since: Instant) -> bool {
        self.connected_at.load(Ordering::Relaxed) > nanos_since_epoch(since)
    }

    /// Locks the state, also after a panic elsewhere (every change to it is
    /// a single assignment, so it is never half made).
    fn state(&self) -> MutexGuard<'_, LinkState> {
        mutex::lock(&self.state)
    }

    /// Hands `req` to the connection, or queues it.
    pub(crate) fn dispatch(self: &Arc<Self>, req: &Arc<Request>) -> Pending {
        let mut st = self.state();
        let pending = self.dispatch_locked(&mut st, req);
        drop(st);
        if let Pending::Sent { slot, id, .. } = &pending {
            // Armed with the link's lock released: a reply that is already
            // in gives the place up at once, which takes that lock.
            slot.arm(Outstanding {
                link: Arc::clone(self),
                id: *id,
            });
        }
        pending
    }

    /// [`Link::dispatch`] under the link's lock.
    fn dispatch_locked(self: &Arc<Self>, st: &mut LinkState, req: &Arc<Request>) -> Pending {
        st.dispatched += 1;
        let seq = st.dispatched;
        match &mut st.conn {
            Conn::Up {
                conn,
                id,
                outstanding,
                queue,
                scripts,
            } if queue.is_empty() && *outstanding < MAX_OUTSTANDING => {
                let id = *id;
                let slot = Slot::new();
                let (req2, waker) = (Arc::clone(req), slot.waker());
                self.recheck_if_due(conn, id);
                match hand_over(conn.clone(), req2, scripts, &waker, &self.vigil) {
                    Ok(reply) => {
                        *outstanding += 1;
                        Pending::Sent {
                            reply,
                            slot,
                            id,
                            seq,
                        }
                    }
                    // The connection had closed (the node restarted or went
                    // away) and nothing was sent: queue it for a new one.
                    Err(e) if link_broken(&e) => {
                        tracing::debug!(node = self.index, error = %e, "connection closed");
                        self.connect(st, Vec::new());
                        queued(st.enqueue(req))
                    }
                    Err(e) => Pending::Done(Some(Err(e))),
                }
            }
            Conn::Up { .. } | Conn::Connecting(_) => queued(st.enqueue(req)),
            // Within the back-off after a failed attempt, the next one
            // waits for its end rather than failing the request at once:
            // a node that is restarting is usually back by then, and the
            // round's own timeout still bounds the wait.
            Conn::Down { retry_at, .. } => {
                let at = *retry_at;
                self.connect_after(st, Vec::new(), at);
                queued(st.enqueue(req))
            }
        }
    }

    /// A request or batch on connection `id` is done: send what queued
    /// behind it as the next batch.
    fn finished(self: &Arc<Self>, id: u64) {
        let batch = {
            let mut st = self.state();
            match &mut st.conn {
                Conn::Up {
                    conn,
                    id: current,
                    outstanding,
                    queue,
                    scripts,
                } if *current == id => {
                    *outstanding -= 1;
                    queue.retain(Waiting::wanted);
                    if queue.is_empty() {
                        None
                    } else {
                        self.recheck_if_due(conn, id);
                        match send_batch(conn, std::mem::take(queue), scripts, &self.vigil) {
                            Ok(batch) => {
                                *outstanding += 1;
                                Some(batch)
                            }
                            // The connection had closed: nothing was sent,
                            // the batch goes first on a new one.
                            Err(batch) => {
                                self.connect(&mut st, batch);
                                None
                            }
                        }
                    }
                }
                _ => None,
            }
        };
        // Awaited with the lock released: the batch's guard takes it again.
        if let Some(batch) = batch {
            self.await_batch(id, batch);
        }
    }

    /// Waits, in a task of its own, for the replies to a batch handed over by
    /// [`send_batch`], and passes each on.
    fn await_batch(self: &Arc<Self>, id: u64, (sent, batch): (BatchFuture, Vec<Waiting>)) {
        let outstanding = Outstanding {
            link: Arc::clone(self),
            id,
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime left: nothing will be answered any more.
            std::mem::forget(outstanding);
            return;
        };
        let link = Arc::clone(self);
        runtime.spawn(tokio::task::unconstrained(async move {
            // Dropped as soon as the replies are in: what queued behind the
            // batch goes out before these replies are passed on.
            let mut outstanding = Some(outstanding);
            match sent.await {
                Ok(values) if values.len() == batch.len() => {
                    outstanding = None;
                    for (w, v) in batch.into_iter().zip(values) {
                        let _ = w.reply.send(v.extract_error());
                    }
                }
                Ok(_) => {
                    let e = RedisError::from((
                        redis::ErrorKind::Parse,
                        "pipeline answered with the wrong number of replies",
                    ));
                    fail_all(batch, &e);
                }
                Err(e) => {
                    let failed = if link_broken(&e) {
                        link.lost_batch(id, batch)
                    } else {
                        batch
                    };
                    fail_all(failed, &e);
                }
            }
            drop(outstanding);
        }));
    }

    /// Connection `id` broke under a batch: the batch goes out again first
    /// on a new connection (the commands are safe to repeat), then what
    /// queued behind it. Returns the requests to fail: those already resent
    /// once, or all of them if the link had moved on.
    fn lost_batch(self: &Arc<Self>, id: u64, batch: Vec<Waiting>) -> Vec<Waiting> {
        let mut st = self.state();
        let queue = match &mut st.conn {
            Conn::Up {
                id: current, queue, ..
            } if *current == id => std::mem::take(queue),
            _ => return batch,
        };
        let (mut again, failed): (Vec<Waiting>, Vec<Waiting>) =
            batch.into_iter().partition(|w| !w.resent && w.wanted());
        for w in &mut again {
            w.resent = true;
        }
        again.extend(queue);
        self.connect(&mut st, again);
        failed
    }

    /// Connection `id` broke: requests queued on it were never sent, so they
    /// move, in order, to a new connection.
    fn lost(self: &Arc<Self>, id: u64) {
        let mut st = self.state();
        if let Conn::Up {
            id: current, queue, ..
        } = &mut st.conn
        {
            if *current == id {
                let queue = std::mem::take(queue);
                self.connect(&mut st, queue);
            }
        }
    }

    /// Called when request `seq`, sent on connection `id`, failed because
    /// the connection broke. Marks it broken and, if nothing was dispatched
    /// after the request, queues it again for the next connection.
    pub(crate) fn resend(
        self: &Arc<Self>,
        id: u64,
        seq: u64,
        req: &Arc<Request>,
    ) -> Option<ReplyRx> {
        self.lost(id);
        let mut st = self.state();
        if st.dispatched != seq {
            return None;
        }
        if !matches!(st.conn, Conn::Connecting(_)) {
            self.connect(&mut st, Vec::new());
        }
        st.enqueue(req).ok()
    }
}

/// A fixed instant early in the process, to keep instants in atomics.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// `at` in ns after [`epoch`] (0 before it).
fn nanos_since_epoch(at: Instant) -> u64 {
    at.saturating_duration_since(epoch())
        .as_nanos()
        .min(u128::from(u64::MAX)) as u64
}

/// The outcome of queueing a request, as a call's state.
fn queued(result: RedisResult<ReplyRx>) -> Pending {
    match result {
        Ok(rx) => Pending::Queued(rx),
        Err(e) => Pending::Done(Some(Err(e))),
    }
}
