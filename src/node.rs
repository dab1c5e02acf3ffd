//! One Redis node: its lazily opened, self-healing connection and the way a
//! single request is sent to it, in order.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Cmd, RedisError, RedisResult, Value};
use tokio::sync::oneshot;
use tokio::task::Unconstrained;

use crate::scripts::Lua;

/// Requests that may wait in one connection's queue before its writer
/// pushes back (redis-rs defaults to 50).
const PIPELINE_BUFFER: usize = 1024;

/// A request ready to go to every node: built once per round and shared, so a
/// five-node round encodes its arguments once, not five times.
#[derive(Debug)]
pub(crate) struct Request {
    /// The command as sent first (for scripts: `EVALSHA`).
    cmd: Cmd,
    /// For scripts, the source to fall back to when a node answers NOSCRIPT
    /// (a restarted node has an empty script cache).
    script_src: Option<&'static str>,
    /// Sent even if the round stopped waiting for it (a release).
    cleanup: bool,
}

impl Request {
    /// A plain command.
    pub(crate) fn plain(cmd: Cmd) -> Arc<Self> {
        Arc::new(Self {
            cmd,
            script_src: None,
            cleanup: false,
        })
    }

    /// `EVALSHA` of `script` with its keys and args already added by `fill`,
    /// or `EVAL` with the full source for a [cleanup](Lua::cleanup) script.
    pub(crate) fn script(script: &'static Lua, fill: impl FnOnce(&mut Cmd)) -> Arc<Self> {
        // Sized for the script and a few short keys and args, so building
        // it does not grow the buffers step by step.
        let (mut cmd, script_src) = if script.cleanup {
            let mut cmd = Cmd::with_capacity(8, script.src.len() + 128);
            cmd.arg("EVAL").arg(script.src);
            (cmd, None)
        } else {
            let mut cmd = Cmd::with_capacity(8, 40 + 128);
            cmd.arg("EVALSHA").arg(script.sha());
            (cmd, Some(script.src))
        };
        fill(&mut cmd);
        Arc::new(Self {
            cmd,
            script_src,
            cleanup: script.cleanup,
        })
    }

    /// The `EVAL` form of a script request: same keys and args, full source.
    fn eval_form(&self, src: &str) -> Cmd {
        let mut eval = redis::cmd("EVAL");
        eval.arg(src);
        for arg in self.cmd.args_iter().skip(2) {
            if let redis::Arg::Simple(bytes) = arg {
                eval.arg(bytes);
            }
        }
        eval
    }
}

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
struct Link {
    /// For log fields.
    index: usize,
    /// False after the node failed or timed out, true again after any reply.
    /// Rounds that like to hear from every node (the counter) do not wait
    /// for a node known to be unresponsive.
    healthy: AtomicBool,
    /// How to connect.
    client: redis::Client,
    /// Limit on one connection attempt.
    connect_timeout: Duration,
    /// The state, changed only under this lock, never across an await.
    state: Mutex<LinkState>,
}

/// What [`Link::state`] guards.
struct LinkState {
    /// The connection, or the attempt to make one.
    conn: Conn,
    /// Requests dispatched so far: a request that finds the count unchanged
    /// when its connection breaks knows nothing was sent after it, and may be
    /// sent again on the next connection without overtaking anything.
    dispatched: u64,
}

/// The state of the connection.
enum Conn {
    /// Not connected. After a failed attempt, requests fail at once with its
    /// error until `retry_at`, so a dead node costs no time per round.
    Down {
        /// Why the last attempt failed (`None`: no attempt yet, or the
        /// connection dropped and a new one may be tried at once).
        error: Option<RedisError>,
        /// When a new attempt may start.
        retry_at: Instant,
    },
    /// An attempt is running; requests queue here in the order made.
    Connecting(Vec<Waiting>),
    /// Open.
    Up {
        /// The connection.
        conn: MultiplexedConnection,
        /// Tells connections apart, so that a failure seen on an old one
        /// does not tear down its replacement.
        id: u64,
        /// Requests and batches sent and not yet answered (or given up on).
        outstanding: usize,
        /// Requests waiting for one of those to finish, in order.
        queue: Vec<Waiting>,
    },
}

/// A request waiting to be sent.
struct Waiting {
    /// The request.
    req: Arc<Request>,
    /// Where its reply goes. Closed if the round gave up on it; it is then
    /// not sent at all, unless it is a cleanup.
    reply: oneshot::Sender<RedisResult<Value>>,
    /// Already sent once on a connection that broke under it: a second
    /// break fails it instead of sending it yet again.
    resent: bool,
}

impl Waiting {
    /// Whether it still has to be sent.
    fn wanted(&self) -> bool {
        self.req.cleanup || !self.reply.is_closed()
    }
}

/// A request in flight: sent, waiting in a queue, or already done.
enum Pending {
    /// Handed to the connection on its own.
    Sent {
        /// The rest of the exchange.
        reply: SendFuture,
        /// Marks the link idle when dropped.
        outstanding: Outstanding,
        /// [`LinkState::dispatched`] right after it.
        seq: u64,
    },
    /// Queued, for a batch or for the connection to open.
    Queued(Unconstrained<oneshot::Receiver<RedisResult<Value>>>),
    /// Decided without a reply (taken once).
    Done(Option<RedisResult<Value>>),
}

/// A request or batch outstanding on connection `id`: when it is answered or
/// given up on (dropped), the requests queued behind it go out.
struct Outstanding {
    /// The link.
    link: Arc<Link>,
    /// The connection it went out on.
    id: u64,
}

impl Drop for Outstanding {
    fn drop(&mut self) {
        self.link.finished(self.id);
    }
}

/// One request's send, boxed so it can be polled once where it is made and
/// then moved into the round.
type SendFuture = Pin<Box<dyn Future<Output = RedisResult<Value>> + Send>>;

/// A batch's send, polled once where it is made, then awaited by a task.
type BatchFuture = Pin<Box<dyn Future<Output = RedisResult<Vec<Value>>> + Send>>;

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

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Node")
            .field("index", &self.index)
            .field("addr", &self.addr)
            .finish()
    }
}

impl Node {
    /// Wraps a client; connects to nothing yet.
    pub(crate) fn new(index: usize, client: redis::Client, connect_timeout: Duration) -> Self {
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
            link: Arc::new(Link {
                index,
                healthy: AtomicBool::new(true),
                client,
                connect_timeout,
                state: Mutex::new(LinkState {
                    conn: Conn::Down {
                        error: None,
                        retry_at: Instant::now(),
                    },
                    dispatched: 0,
                }),
            }),
        }
    }

    /// Whether the node answered its last request.
    pub(crate) fn is_healthy(&self) -> bool {
        self.link.healthy.load(Ordering::Relaxed)
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
        let link = Arc::clone(&self.link);
        let pending = link.dispatch(req);
        Call {
            pending,
            link,
            req: Arc::clone(req),
        }
    }
}

/// One request to one node, from hand-over to reply. A plain state machine
/// (no allocation of its own, `Unpin`), so a round keeps its calls side by
/// side and polls them directly.
pub(crate) struct Call {
    /// Where the request is.
    pending: Pending,
    /// The node's link, for a resend after a broken connection and for the
    /// node's health.
    link: Arc<Link>,
    /// The request, for a resend.
    req: Arc<Request>,
}

impl Call {
    /// The node's reply, once it is there. Call again after `Ready` and it
    /// answers "not sent".
    ///
    /// Replies are not subject to tokio's cooperative budget: they are plain
    /// waiting, and a late reply drained in the background should not be
    /// held back by it.
    pub(crate) fn poll_reply(&mut self, cx: &mut Context<'_>) -> Poll<RedisResult<Value>> {
        let result = loop {
            match &mut self.pending {
                Pending::Sent { reply, .. } => {
                    let result = match reply.as_mut().poll(cx) {
                        Poll::Ready(result) => result,
                        Poll::Pending => return Poll::Pending,
                    };
                    let Pending::Sent {
                        outstanding, seq, ..
                    } = std::mem::replace(&mut self.pending, Pending::Done(None))
                    else {
                        unreachable!("matched above");
                    };
                    match result {
                        Err(e) if link_broken(&e) => {
                            // Move what queued behind it to the new connection
                            // before this one's slot frees up.
                            let resent = self.link.resend(outstanding.id, seq, &self.req);
                            drop(outstanding);
                            match resent {
                                Some(rx) => self.pending = Pending::Queued(rx),
                                None => break Err(e),
                            }
                        }
                        result => break result,
                    }
                }
                Pending::Queued(rx) => match Pin::new(rx).poll(cx) {
                    Poll::Ready(result) => break result.unwrap_or_else(|_| Err(not_sent())),
                    Poll::Pending => return Poll::Pending,
                },
                Pending::Done(result) => break result.take().unwrap_or_else(|| Err(not_sent())),
            }
        };
        self.pending = Pending::Done(None);
        // Any answer, a server error included, shows the node is alive;
        // recorded here so that late replies drained in the background count
        // too.
        let alive = match &result {
            Ok(_) => true,
            Err(e) => matches!(e.kind(), redis::ErrorKind::Server(_)),
        };
        self.link.healthy.store(alive, Ordering::Relaxed);
        Poll::Ready(result)
    }
}

impl Link {
    /// Locks the state, also after a panic elsewhere (every change to it is
    /// a single assignment, so it is never half made).
    fn state(&self) -> MutexGuard<'_, LinkState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Hands `req` to the connection, or queues it.
    fn dispatch(self: &Arc<Self>, req: &Arc<Request>) -> Pending {
        let mut st = self.state();
        st.dispatched += 1;
        let seq = st.dispatched;
        match &mut st.conn {
            Conn::Up {
                conn,
                id,
                outstanding,
                queue,
            } if queue.is_empty() && *outstanding < MAX_OUTSTANDING => {
                let id = *id;
                match hand_over(conn.clone(), Arc::clone(req)) {
                    Ok(reply) => {
                        *outstanding += 1;
                        Pending::Sent {
                            reply,
                            outstanding: Outstanding {
                                link: Arc::clone(self),
                                id,
                            },
                            seq,
                        }
                    }
                    // The connection had closed (the node restarted or went
                    // away) and nothing was sent: queue it for a new one.
                    Err(e) if link_broken(&e) => {
                        tracing::debug!(node = self.index, error = %e, "connection closed");
                        self.connect(&mut st, Vec::new());
                        enqueue(&mut st, req)
                    }
                    Err(e) => Pending::Done(Some(Err(e))),
                }
            }
            Conn::Up { .. } | Conn::Connecting(_) => enqueue(&mut st, req),
            Conn::Down {
                error: Some(e),
                retry_at,
            } if Instant::now() < *retry_at => Pending::Done(Some(Err(e.clone()))),
            Conn::Down { .. } => {
                self.connect(&mut st, Vec::new());
                enqueue(&mut st, req)
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
                } if *current == id => {
                    *outstanding -= 1;
                    queue.retain(Waiting::wanted);
                    if queue.is_empty() {
                        None
                    } else {
                        match hand_batch(conn, std::mem::take(queue)) {
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
    /// [`hand_batch`], and passes each on.
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
            // Dropped as soon as the replies are in (what queued behind the
            // batch then goes out), or after a script was sent again.
            let mut outstanding = Some(outstanding);
            match sent.await {
                Ok(values) if values.len() == batch.len() => {
                    let noscript =
                        |v: &Value| matches!(v, Value::ServerError(e) if e.code() == "NOSCRIPT");
                    if !values.iter().any(noscript) {
                        // Nothing to resend: the next batch goes out before
                        // these replies are passed on.
                        outstanding = None;
                    }
                    for (w, v) in batch.into_iter().zip(values) {
                        let r = match (v.extract_error(), w.req.script_src) {
                            (Err(e), Some(src)) if is_noscript(&e) => {
                                // Rare (the node's script cache was emptied):
                                // the full script goes out on its own, before
                                // anything queued after it.
                                match link.connection(id) {
                                    Some(mut c) => c
                                        .send_packed_command(&w.req.eval_form(src))
                                        .await
                                        .and_then(Value::extract_error),
                                    None => Err(e),
                                }
                            }
                            (r, _) => r,
                        };
                        let _ = w.reply.send(r);
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

    /// Connection `id`, if it is still the current one.
    fn connection(&self, id: u64) -> Option<MultiplexedConnection> {
        match &self.state().conn {
            Conn::Up {
                conn, id: current, ..
            } if *current == id => Some(conn.clone()),
            _ => None,
        }
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
    fn resend(
        self: &Arc<Self>,
        id: u64,
        seq: u64,
        req: &Arc<Request>,
    ) -> Option<Unconstrained<oneshot::Receiver<RedisResult<Value>>>> {
        self.lost(id);
        let mut st = self.state();
        if st.dispatched != seq {
            return None;
        }
        if !matches!(st.conn, Conn::Connecting(_)) {
            self.connect(&mut st, Vec::new());
        }
        match enqueue(&mut st, req) {
            Pending::Queued(rx) => Some(rx),
            _ => None,
        }
    }

    /// Starts a connection attempt in the background, with `waiting` first
    /// in its queue.
    fn connect(self: &Arc<Self>, st: &mut LinkState, waiting: Vec<Waiting>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            let e =
                RedisError::from((redis::ErrorKind::Client, "no tokio runtime to connect from"));
            fail_all(waiting, &e);
            st.conn = Conn::Down {
                error: Some(e),
                retry_at: Instant::now(),
            };
            return;
        };
        st.conn = Conn::Connecting(waiting);
        let link = Arc::clone(self);
        runtime.spawn(async move {
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(link.connect_timeout))
                // We time requests out ourselves, once per round for all
                // nodes.
                .set_response_timeout(None)
                // Room for many concurrent rounds before a slow node pushes
                // back.
                .set_pipeline_buffer_size(PIPELINE_BUFFER);
            let result = link
                .client
                .get_multiplexed_async_connection_with_config(&config)
                .await;
            link.connected(result);
        });
    }

    /// Ends a connection attempt: sends the queue as the first batch, or
    /// fails it.
    fn connected(self: &Arc<Self>, result: RedisResult<MultiplexedConnection>) {
        let mut st = self.state();
        let mut waiting = match &mut st.conn {
            Conn::Connecting(waiting) => std::mem::take(waiting),
            // Only the attempt itself leaves `Connecting`.
            _ => return,
        };
        match result {
            Ok(conn) => {
                tracing::debug!(node = self.index, "connected");
                let id = CONNECTIONS.fetch_add(1, Ordering::Relaxed);
                waiting.retain(Waiting::wanted);
                // The queue goes out first, before the link is open to
                // anything newer.
                let batch = if waiting.is_empty() {
                    None
                } else {
                    match hand_batch(&conn, waiting) {
                        Ok(batch) => Some(batch),
                        Err(batch) => {
                            // Closed as soon as it opened: back off.
                            let e = RedisError::from((
                                redis::ErrorKind::Io,
                                "connection closed as soon as it opened",
                            ));
                            fail_all(batch, &e);
                            st.conn = Conn::Down {
                                error: Some(e),
                                retry_at: Instant::now() + RECONNECT_BACKOFF,
                            };
                            return;
                        }
                    }
                };
                st.conn = Conn::Up {
                    conn,
                    id,
                    outstanding: usize::from(batch.is_some()),
                    queue: Vec::new(),
                };
                drop(st);
                if let Some(batch) = batch {
                    self.await_batch(id, batch);
                }
            }
            Err(e) => {
                tracing::debug!(node = self.index, error = %e, "connect failed");
                fail_all(waiting, &e);
                st.conn = Conn::Down {
                    error: Some(e),
                    retry_at: Instant::now() + RECONNECT_BACKOFF,
                };
            }
        }
    }
}

/// Queues `req` behind the outstanding request, or for the connection being
/// made. A queue that reaches [`PIPELINE_BUFFER`] first drops what nobody
/// waits for; if it is still full, the node is not keeping up and the
/// request fails at once.
fn enqueue(st: &mut LinkState, req: &Arc<Request>) -> Pending {
    let queue = match &mut st.conn {
        Conn::Connecting(queue) | Conn::Up { queue, .. } => queue,
        // The attempt could not start; `connect` left the reason.
        Conn::Down { error: Some(e), .. } => return Pending::Done(Some(Err(e.clone()))),
        Conn::Down { .. } => return Pending::Done(Some(Err(not_sent()))),
    };
    if queue.len() >= PIPELINE_BUFFER {
        queue.retain(Waiting::wanted);
        if queue.len() >= PIPELINE_BUFFER {
            return Pending::Done(Some(Err(RedisError::from((
                redis::ErrorKind::Io,
                "request not sent: the node is not keeping up",
            )))));
        }
    }
    let (reply, rx) = oneshot::channel();
    queue.push(Waiting {
        req: Arc::clone(req),
        reply,
        resent: false,
    });
    Pending::Queued(tokio::task::unconstrained(rx))
}

/// Starts sending `req` on `conn` and polls it once, which puts it in the
/// connection's queue: from here on it is ordered before anything sent after
/// it. Returns the rest of the exchange, or the error if it ended at once (a
/// closed connection fails on this first poll, before sending).
fn hand_over(conn: MultiplexedConnection, req: Arc<Request>) -> RedisResult<SendFuture> {
    // Unconstrained: out of cooperative budget, the first poll would return
    // without handing the request over. (Under load that queued a task's
    // release after its next SET: 380 of 3200 attempts failed in the stress
    // test with two nodes hung; none since.)
    let mut fut: SendFuture = Box::pin(tokio::task::unconstrained(async move {
        let mut conn = conn;
        send(&mut conn, &req).await
    }));
    let mut cx = Context::from_waker(futures::task::noop_waker_ref());
    match fut.as_mut().poll(&mut cx) {
        Poll::Ready(Err(e)) => Err(e),
        Poll::Ready(Ok(v)) => Ok(Box::pin(std::future::ready(Ok(v)))),
        Poll::Pending => Ok(fut),
    }
}

/// Sends `batch` as one pipeline on `conn`: polls it once, which puts it in
/// the connection's queue, ordered before anything sent after. The rest of
/// the exchange is for [`Link::await_batch`]. Gives the batch back, unsent,
/// if the connection turns out to be closed.
#[allow(clippy::type_complexity)]
fn hand_batch(
    conn: &MultiplexedConnection,
    batch: Vec<Waiting>,
) -> Result<(BatchFuture, Vec<Waiting>), Vec<Waiting>> {
    let mut pipe = redis::Pipeline::with_capacity(batch.len());
    for w in &batch {
        pipe.add_command(w.req.cmd.clone());
    }
    let (mut conn, n) = (conn.clone(), batch.len());
    // Unconstrained for the same reason as in `hand_over`.
    let mut sent: BatchFuture = Box::pin(tokio::task::unconstrained(async move {
        conn.send_packed_commands(&pipe, 0, n).await
    }));
    let mut cx = Context::from_waker(futures::task::noop_waker_ref());
    match sent.as_mut().poll(&mut cx) {
        Poll::Ready(Err(e)) if link_broken(&e) => Err(batch),
        Poll::Ready(result) => Ok((Box::pin(std::future::ready(result)), batch)),
        Poll::Pending => Ok((sent, batch)),
    }
}

/// Answers every request of `batch` with `e`.
fn fail_all(batch: Vec<Waiting>, e: &RedisError) {
    for w in batch {
        let _ = w.reply.send(Err(e.clone()));
    }
}

/// Whether `e` means the connection is gone (rather than a reply).
fn link_broken(e: &RedisError) -> bool {
    e.is_connection_dropped() || e.is_io_error() || e.is_connection_refusal()
}

/// The error of a request that was never sent.
fn not_sent() -> RedisError {
    RedisError::from((redis::ErrorKind::Io, "request not sent: no connection"))
}

/// Sends one request, falling back from EVALSHA to EVAL on NOSCRIPT.
async fn send(conn: &mut MultiplexedConnection, req: &Request) -> RedisResult<Value> {
    // Server errors arrive as `Value::ServerError`; `extract_error` turns
    // them (also nested in arrays) into `Err`.
    let result = conn
        .send_packed_command(&req.cmd)
        .await
        .and_then(Value::extract_error);
    match (&result, req.script_src) {
        (Err(e), Some(src)) if is_noscript(e) => conn
            .send_packed_command(&req.eval_form(src))
            .await
            .and_then(Value::extract_error),
        _ => result,
    }
}

/// True for the NOSCRIPT reply to an unknown EVALSHA.
fn is_noscript(e: &RedisError) -> bool {
    e.code() == Some("NOSCRIPT")
}
