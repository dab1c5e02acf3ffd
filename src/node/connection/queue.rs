//! The state a node's link keeps: the connection (or the attempt to make
//! one) and the requests queued for it, in the order they were made.

use std::sync::Arc;
use std::time::Instant;

use redis::aio::MultiplexedConnection;
use redis::{RedisError, RedisResult, Value};
use tokio::sync::oneshot;
use tokio::task::Unconstrained;

use crate::node::connection::request::Request;
use crate::node::connection::scriptcache::ScriptCache;
use crate::node::connection::wire::{hand_pipeline, not_sent, BatchFuture};
use crate::node::trust::vigil::Vigil;

/// Requests that may wait in one connection's queue (and in redis-rs's
/// writer, which defaults to 50) before the node counts as not keeping up.
pub(crate) const PIPELINE_BUFFER: usize = 1024;

/// Requests that may wait in one connection's queue before even a cleanup
/// (a release, an undo) is refused. A cleanup refused leaves a key of ours
/// on the node for its whole TTL, refusing everyone there; a node that
/// fell behind for a moment (descheduled on a busy machine) while the
/// other nodes carried the rounds gets a release for every round it
/// missed, and must not lose them. Only a node that does not answer at
/// all reaches this: the bound keeps its queue's memory in check.
pub(crate) const CLEANUP_BUFFER: usize = 16 * PIPELINE_BUFFER;

/// Where a queued request's reply arrives. Not subject to tokio's
/// cooperative budget: it is plain waiting, and a late reply drained in the
/// background should not be held back by it.
pub(crate) type ReplyRx = Unconstrained<oneshot::Receiver<RedisResult<Value>>>;

/// What the link's mutex guards.
pub(crate) struct LinkState {
    /// The connection, or the attempt to make one.
    pub(crate) conn: Conn,
    /// Requests dispatched so far: a request that finds the count unchanged
    /// when its connection breaks knows nothing was sent after it, and may be
    /// sent again on the next connection without overtaking anything.
    pub(crate) dispatched: u64,
}

/// The state of the connection.
pub(crate) enum Conn {
    /// Not connected. After a failed attempt, the next attempt waits until
    /// `retry_at` (requests queue for it), so a dead node is tried at most
    /// once per back-off, and a restarting one is found again by the first
    /// request after it came back.
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
        /// Which scripts the node has cached, as far as this connection
        /// knows.
        scripts: ScriptCache,
    },
}

/// A request waiting to be sent.
pub(crate) struct Waiting {
    /// The request.
    pub(crate) req: Arc<Request>,
    /// Where its reply goes. Closed if the round gave up on it; it is then
    /// not sent at all, unless it is a cleanup.
    pub(crate) reply: oneshot::Sender<RedisResult<Value>>,
    /// Already sent once on a connection that broke under it: a second
    /// break fails it instead of sending it yet again.
    pub(crate) resent: bool,
}

impl Waiting {
    /// Whether it still has to be sent.
    pub(crate) fn wanted(&self) -> bool {
        self.req.cleanup || !self.reply.is_closed()
    }
}

impl LinkState {
    /// A link that has not connected yet.
    pub(crate) fn new() -> Self {
        Self {
            conn: Conn::Down {
                error: None,
                retry_at: Instant::now(),
            },
            dispatched: 0,
        }
    }

    /// Queues `req` behind the outstanding request, or for the connection
    /// being made. A queue that reaches each multiple of
    /// [`PIPELINE_BUFFER`] first drops what nobody waits for (at most once
    /// per that many requests queued, so a long queue of cleanups is not
    /// scanned on every request); while it is still that long, the node is
    /// not keeping up and the request fails at once, unless it is a cleanup
    /// and the queue is shorter than [`CLEANUP_BUFFER`].
    pub(crate) fn enqueue(&mut self, req: &Arc<Request>) -> RedisResult<ReplyRx> {
        let queue = match &mut self.conn {
            Conn::Connecting(queue) | Conn::Up { queue, .. } => queue,
            // The attempt could not start; `connect` left the reason.
            Conn::Down { error: Some(e), .. } => return Err(e.clone()),
            Conn::Down { .. } => return Err(not_sent()),
        };
        if queue.len() >= PIPELINE_BUFFER && queue.len() % PIPELINE_BUFFER == 0 {
            queue.retain(Waiting::wanted);
        }
        let limit = if req.cleanup {
            CLEANUP_BUFFER
        } else {
            PIPELINE_BUFFER
        };
        if queue.len() >= limit {
            return Err(RedisError::from((
                redis::ErrorKind::Io,
                "request not sent: the node is not keeping up",
            )));
        }
        let (reply, rx) = oneshot::channel();
        queue.push(Waiting {
            req: Arc::clone(req),
            reply,
            resent: false,
        });
        Ok(tokio::task::unconstrained(rx))
    }
}

/// Answers every request of `batch` with `e`.
pub(crate) fn fail_all(batch: Vec<Waiting>, e: &RedisError) {
    for w in batch {
        let _ = w.reply.send(Err(e.clone()));
    }
}

/// Sends `batch` as one pipeline on `conn` (see `wire::hand_pipeline`). Gives
/// the batch back, unsent, if the connection turns out to be closed.
#[allow(clippy::type_complexity)]
pub(crate) fn send_batch(
    conn: &MultiplexedConnection,
    batch: Vec<Waiting>,
    scripts: &mut ScriptCache,
    vigil: &Arc<Vigil>,
) -> Result<(BatchFuture, Vec<Waiting>), Vec<Waiting>> {
    match hand_pipeline(conn, batch.iter().map(|w| &*w.req), scripts, vigil) {
        Some(sent) => Ok((sent, batch)),
        None => Err(batch),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use redis::Cmd;

    use super::{Conn, LinkState, ReplyRx, CLEANUP_BUFFER, PIPELINE_BUFFER};
    use crate::lua::Script;
    use crate::node::connection::request::Request;

    /// A cleanup, as a release is.
    static CLEANUP: Script<1> = Script::cleanup("return redis.call('DEL', KEYS[1])");

    fn vote() -> Arc<Request> {
        Request::plain(Cmd::new().arg("SET").arg("k").arg("v").to_owned())
    }

    fn cleanup() -> Arc<Request> {
        Request::script(&CLEANUP, ["k"], |_| {})
    }

    #[test]
    fn a_queue_that_no_longer_takes_votes_still_takes_cleanups() {
        let mut st = LinkState::new();
        st.conn = Conn::Connecting(Vec::new());
        // Rounds still waiting for their replies: nothing to drop.
        let mut waiting: Vec<ReplyRx> = (0..PIPELINE_BUFFER)
            .map(|_| st.enqueue(&vote()).expect("room for votes"))
            .collect();
        assert!(st.enqueue(&vote()).is_err(), "a full queue took a vote");
        // A release for a round the other nodes carried goes in.
        waiting.push(st.enqueue(&cleanup()).expect("a cleanup refused"));
        // Up to the cleanups' own bound, and no further.
        for i in waiting.len()..CLEANUP_BUFFER {
            assert!(st.enqueue(&cleanup()).is_ok(), "cleanup {i} refused");
        }
        assert!(st.enqueue(&cleanup()).is_err(), "no bound on cleanups");
        // Once the rounds gave up on their votes, the next multiple of the
        // buffer drops them (the cleanups stay), and cleanups go in again.
        drop(waiting);
        assert!(st.enqueue(&cleanup()).is_ok(), "given-up votes kept");
        let Conn::Connecting(queue) = &st.conn else {
            unreachable!()
        };
        assert_eq!(queue.len(), CLEANUP_BUFFER - PIPELINE_BUFFER + 1);
        assert!(queue.iter().all(|w| w.req.cleanup));
    }
}
