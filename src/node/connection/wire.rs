//! Handing requests to a redis-rs multiplexed connection.
//!
//! Both hand-over functions poll the send once, right where the request is
//! made: that first poll puts the request in the connection's queue, so from
//! then on it is ordered before anything sent after it. The rest of the
//! exchange is a future for whoever waits for the reply.
//!
//! Every request but a cleanup (a release) goes out with a `TIME` right
//! behind it, in the same write (a batch, with one at its end): its reply
//! is read by the node's
//! [`ClockWatch`](crate::node::clock::clockwatch::ClockWatch) (before the request's own reply is
//! passed on) and never reaches the caller. What the node's [`Vigil`]
//! reads of it while connected (its evictions; our marker) follows the
//! `TIME` where it asks, read the same way.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use redis::aio::MultiplexedConnection;
use redis::{RedisError, RedisResult, Value};

use crate::clock;
use crate::node::connection::request::{Form, Request, Timed};
use crate::node::connection::scriptcache::{self, ScriptCache};
use crate::node::trust::vigil::{Extras, Vigil};

/// One request's send, boxed so it can be polled once where it is made and
/// then moved into the round.
pub(crate) type SendFuture = Pin<Box<dyn Future<Output = RedisResult<Value>> + Send>>;

/// A batch's send, polled once where it is made, then awaited by a task.
pub(crate) type BatchFuture = Pin<Box<dyn Future<Output = RedisResult<Vec<Value>>> + Send>>;

/// Starts sending `req` on `conn` and polls it once with `waker`, which puts
/// it in the connection's queue (and has `waker` woken when the reply
/// arrives). Returns the rest of the exchange, or the error if it ended at
/// once (a closed connection fails on this first poll, before sending).
/// `cache` says whether a script goes out in full or as its digest.
pub(crate) fn hand_over(
    conn: MultiplexedConnection,
    req: Arc<Request>,
    cache: &mut ScriptCache,
    waker: &Waker,
    vigil: &Arc<Vigil>,
) -> RedisResult<SendFuture> {
    let vigil = Arc::clone(vigil);
    let form = cache.form(&req);
    let heard = cache.heard();
    let sent = clock::now();
    // Unconstrained: out of cooperative budget, the first poll would return
    // without handing the request over. (Under load that queued a task's
    // release after its next SET: 380 of 3200 attempts failed in the stress
    // test with two nodes hung; none since.)
    let mut fut: SendFuture = Box::pin(tokio::task::unconstrained(async move {
        let mut conn = conn;
        let reply = send(&mut conn, &req, form, &vigil, sent).await;
        if let Err(e) = &reply {
            scriptcache::check(&heard, e.code(), form);
        }
        reply
    }));
    let mut cx = Context::from_waker(waker);
    match fut.as_mut().poll(&mut cx) {
        Poll::Ready(Err(e)) => Err(e),
        Poll::Ready(Ok(v)) => Ok(Box::pin(std::future::ready(Ok(v)))),
        Poll::Pending => Ok(fut),
    }
}

/// Sends `reqs` as one pipeline on `conn`, polled once as in [`hand_over`].
/// `None` if the connection turned out to be closed: nothing was sent.
pub(crate) fn hand_pipeline<'a>(
    conn: &MultiplexedConnection,
    reqs: impl ExactSizeIterator<Item = &'a Request>,
    cache: &mut ScriptCache,
    vigil: &Arc<Vigil>,
) -> Option<BatchFuture> {
    let n = reqs.len();
    let mut pipe = redis::Pipeline::with_capacity(n + 1);
    let mut timed = false;
    let mut forms = Vec::with_capacity(n);
    for req in reqs {
        let form = cache.form(req);
        let (cmd, with_time) = req.form(form);
        pipe.add_command(cmd.clone());
        timed |= with_time.is_some();
        forms.push(form);
    }
    let heard = cache.heard();
    let extras = if timed {
        pipe.add_command(redis::cmd("TIME"));
        vigil.extras()
    } else {
        Extras::default()
    };
    let mut conn = conn.clone();
    let vigil = Arc::clone(vigil);
    let at = clock::now();
    // Unconstrained for the same reason as in `hand_over`.
    let mut sent: BatchFuture = Box::pin(tokio::task::unconstrained(async move {
        let (mut values, recv) = with_extras(
            &mut conn,
            (&pipe, None),
            n + usize::from(timed),
            &vigil,
            extras,
            at,
        )
        .await?;
        if timed {
            match values.pop() {
                Some(time) if values.len() == n => vigil.clock.reading(at, recv, &time),
                _ => return Err(wrong_count()),
            }
        }
        for (v, form) in values.iter().zip(&forms) {
            if let Value::ServerError(e) = v {
                scriptcache::check(&heard, Some(e.code()), *form);
            }
        }
        Ok(values
            .into_iter()
            .zip(forms)
            .map(|(v, form)| as_script(form, v))
            .collect())
    }));
    let mut cx = Context::from_waker(futures::task::noop_waker_ref());
    match sent.as_mut().poll(&mut cx) {
        Poll::Ready(Err(e)) if link_broken(&e) => None,
        Poll::Ready(result) => Some(Box::pin(std::future::ready(result))),
        Poll::Pending => Some(sent),
    }
}

/// A reply to a request sent in `form`, as its script's would be.
fn as_script(form: Form, reply: Value) -> Value {
    match form {
        Form::Native(native) => native.reply(reply),
        _ => reply,
    }
}

/// Sends one request in `form`, sent at `sent`, with a `TIME` for
/// `vigil`'s clock (and its evictions where the node can evict).
async fn send(
    conn: &mut MultiplexedConnection,
    req: &Request,
    form: Form,
    vigil: &Vigil,
    sent: tokio::time::Instant,
) -> RedisResult<Value> {
    let (cmd, timed) = req.form(form);
    let Some(timed) = timed else {
        return conn
            .send_packed_command(cmd)
            .await
            .and_then(Value::extract_error)
            .map(|v| as_script(form, v));
    };
    let (mut values, recv) = with_extras(
        conn,
        (&timed.pipe, Some(timed)),
        2,
        vigil,
        vigil.extras(),
        sent,
    )
    .await?;
    let (Some(time), Some(reply), None) = (values.pop(), values.pop(), values.pop()) else {
        return Err(wrong_count());
    };
    vigil.clock.reading(sent, recv, &time);
    // Server errors arrive as `Value::ServerError`; `extract_error` turns
    // them (also nested in arrays) into `Err`.
    reply.extract_error().map(|v| as_script(form, v))
}

/// Sends `pipe` (`count` replies) on `conn`, and right behind it, on the
/// same connection, what `extras` asks of the node (our marker alone, the
/// usual case, in `pipe`'s own write, made once per request where `pipe`
/// is a request's [`Timed`]; the `INFO` sections, on a node that can evict
/// or with evidence a second old, as a second pipeline), whose replies
/// `vigil` reads before this returns. Returns `pipe`'s replies and when
/// they came in: a `TIME` in `pipe` is read against that, not against the
/// extras' (later) replies, which would widen its bound. Both go out on
/// the first poll, in that order (the multiplexed connection queues a
/// request when first polled), so the node runs the reads after `pipe`.
async fn with_extras(
    conn: &mut MultiplexedConnection,
    (pipe, timed): (&redis::Pipeline, Option<&Timed>),
    count: usize,
    vigil: &Vigil,
    extras: Extras,
    sent: tokio::time::Instant,
) -> RedisResult<(Vec<Value>, tokio::time::Instant)> {
    if extras == Extras::default() {
        let values = conn.send_packed_commands(pipe, 0, count).await?;
        return Ok((values, clock::now()));
    }
    if extras == Extras::marker_only() {
        // The usual case: one small read, in the request's own pipeline
        // (its reply comes with the `TIME`'s, and widens its bound by
        // nothing the node has to compute).
        let add = |p: &mut redis::Pipeline| {
            vigil.add(p, extras);
        };
        let both = match timed {
            Some(timed) => timed.marked(vigil.marker(), add),
            None => {
                let mut both = pipe.clone();
                add(&mut both);
                Cow::Owned(both)
            }
        };
        let k = extras.count();
        let mut values = conn.send_packed_commands(&both, 0, count + k).await?;
        let recv = clock::now();
        if values.len() != count + k || !vigil.read(&mut values, extras, (sent, recv)) {
            return Err(wrong_count());
        }
        return Ok((values, recv));
    }
    let mut reads = redis::pipe();
    let k = vigil.add(&mut reads, extras);
    let mut other = conn.clone();
    let main = async {
        let values = conn.send_packed_commands(pipe, 0, count).await;
        (values, clock::now())
    };
    let ((values, recv), read) =
        futures::future::join(main, other.send_packed_commands(&reads, 0, k)).await;
    let (values, mut read) = (values?, read?);
    if read.len() != k || !vigil.read(&mut read, extras, (sent, clock::now())) {
        return Err(wrong_count());
    }
    Ok((values, recv))
}

/// The error of a pipeline answered with the wrong number of replies.
fn wrong_count() -> RedisError {
    RedisError::from((
        redis::ErrorKind::Parse,
        "pipeline answered with the wrong number of replies",
    ))
}

/// Whether `e` means the connection is gone (rather than a reply).
pub(crate) fn link_broken(e: &RedisError) -> bool {
    e.is_connection_dropped() || e.is_io_error() || e.is_connection_refusal()
}

/// The error of a request that was never sent.
pub(crate) fn not_sent() -> RedisError {
    RedisError::from((redis::ErrorKind::Io, "request not sent: no connection"))
}
