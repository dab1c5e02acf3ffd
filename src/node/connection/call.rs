//! One request to one node, from hand-over to reply: what a round polls.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use redis::{RedisResult, Value};

use crate::node::connection::link::{Link, Pending};
use crate::node::connection::request::{failure_of, Request};
use crate::node::connection::wire::{link_broken, not_sent};

/// One request to one node, from hand-over to reply. A plain state machine
/// (no allocation of its own, `Unpin`), so a round keeps its calls side by
/// side and polls them directly.
pub(crate) struct Call {
    /// Where the request is.
    pending: Pending,
    /// The node's link, for a resend after a broken connection and for the
    /// node's health (`None` for a request to a member that is a Redis
    /// Cluster made before its slot map was read: sent and followed by the
    /// member, which passes the reply on).
    link: Option<Arc<Link>>,
    /// The request, for a resend.
    req: Arc<Request>,
}

impl Call {
    /// Hands `req` to `link` (or queues it there) and follows it.
    pub(crate) fn start(link: &Arc<Link>, req: &Arc<Request>) -> Self {
        Self {
            pending: link.dispatch(req),
            link: Some(Arc::clone(link)),
            req: Arc::clone(req),
        }
    }

    /// A call whose reply comes from `rx` (see `link`).
    #[cfg(feature = "cluster")]
    pub(crate) fn queued(req: &Arc<Request>, rx: crate::node::connection::queue::ReplyRx) -> Self {
        Self {
            pending: Pending::Queued(rx),
            link: None,
            req: Arc::clone(req),
        }
    }

    /// A call that failed before it was sent, with `e`.
    #[cfg(feature = "cluster")]
    pub(crate) fn failed(req: &Arc<Request>, e: redis::RedisError) -> Self {
        Self {
            pending: Pending::Done(Some(Err(e))),
            link: None,
            req: Arc::clone(req),
        }
    }

    /// The link the request went to (`None` for a request to a member
    /// that is a Redis Cluster made before its slot map was read, or one
    /// that failed before it was sent).
    pub(crate) fn link(&self) -> Option<&Arc<Link>> {
        self.link.as_ref()
    }

    /// The node missed the round's deadline: marks it unresponsive (and
    /// tells a shard's member, which reads its slot map again).
    pub(crate) fn unresponsive(&self) {
        if let Some(link) = &self.link {
            link.healthy.store(false, Ordering::Relaxed);
            link.trouble();
        }
    }

    /// The node's reply, once it is there. Call again after `Ready` and it
    /// answers "not sent".
    ///
    /// Replies are not subject to tokio's cooperative budget: they are plain
    /// waiting, and a late reply drained in the background should not be
    /// held back by it.
    pub(crate) fn poll_reply(&mut self, cx: &mut Context<'_>) -> Poll<RedisResult<Value>> {
        let result = loop {
            match &mut self.pending {
                Pending::Sent { reply, slot, .. } => {
                    // Polled through the slot, so the reply frees the
                    // connection for others even if we are not polled.
                    let result = match slot.poll_with(cx, |cx| reply.as_mut().poll(cx)) {
                        Poll::Ready(result) => result,
                        Poll::Pending => return Poll::Pending,
                    };
                    let Pending::Sent { slot, id, seq, .. } =
                        std::mem::replace(&mut self.pending, Pending::Done(None))
                    else {
                        unreachable!("matched above");
                    };
                    match result {
                        Err(e) if link_broken(&e) => {
                            // Move what queued behind it to the new connection
                            // before this one's place frees up (if it has not
                            // already).
                            let resent = self
                                .link
                                .as_ref()
                                .and_then(|link| link.resend(id, seq, &self.req));
                            slot.free();
                            match resent {
                                Some(rx) => self.pending = Pending::Queued(rx),
                                None => break Err(e),
                            }
                        }
                        result => {
                            slot.free();
                            break result;
                        }
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
        let Some(link) = &self.link else {
            return Poll::Ready(result);
        };
        link.healthy.store(alive, Ordering::Relaxed);
        if let Err(e) = &result {
            link.warn_once(&failure_of(e.clone(), self.req.script));
            // A script's own error says nothing of where the key lives.
            if !matches!(
                e.kind(),
                redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError)
            ) {
                link.trouble();
            }
        }
        Poll::Ready(result)
    }
}
