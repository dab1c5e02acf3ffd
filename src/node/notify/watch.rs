//! One node's notification connection: a RESP3 connection with
//! server-assisted client tracking (`CLIENT TRACKING ON`, Redis 6+), on
//! which a waiter reads the lock key it waits for. From then on the node
//! pushes an `invalidate` message the moment anyone changes or deletes that
//! key: a release by any client (ours, or redsync's plain compare-and-
//! delete), a new holder's `SET`, an extension, or the server expiring it.
//!
//! It needs no server configuration. Tracking is one-shot (a key is tracked
//! again once read again) and lost with the connection; both are fine,
//! because a waiter reads the key again before each wait, unless the key is
//! still tracked on this connection (read, and no news of it since): then
//! its next change is told anyway, and the read is skipped. Notifications are
//! hints, never a safety input: the `SET NX` quorum still decides. A node
//! that cannot do this (older than 6, `HELLO 3` refused, connection lost)
//! just gives no hints, and waiters fall back to timed retries.
//!
//! The same connection hears a semaphore's channel, where its releases
//! name the waiters they let in (`wait/named.rs`): subscribed on first
//! use, again on a new connection (a subscription is lost with its
//! connection), and dropped once no waiter of ours asked for it for a
//! while and a message comes.

use std::collections::HashSet;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ProtocolVersion, PushInfo, PushKind, RedisResult, Value};
use tokio::time::Instant;

use crate::mutex;
use crate::node::notify::armed;
use crate::node::notify::channels::Channels;
use crate::node::notify::push::invalidated_keys;

/// How long a node whose notification connection failed is left alone
/// before the next waiter tries again (it waits with timed retries
/// meanwhile).
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// A channel no waiter of ours asked for in this long is dropped when a
/// message comes on it.
const CHANNEL_IDLE: Duration = Duration::from_secs(30);

/// What a node told us.
#[derive(Debug)]
pub(crate) enum Heard<'a> {
    /// These keys changed.
    Keys(&'a [Vec<u8>]),
    /// Anything may have changed: the node flushed, or the connection (and
    /// with it every tracked key and every subscription) is gone.
    All,
    /// A message on a channel we hear.
    Message {
        /// The channel.
        channel: &'a [u8],
        /// What it says.
        payload: &'a [u8],
    },
}

/// Where invalidations go: `(node index, what changed)`. Called on the
/// connection's reader task: it must not block.
pub(crate) type Sink = Arc<dyn Fn(usize, Heard<'_>) + Send + Sync>;

/// One node's notification connection, opened on first use. Cheap to
/// clone (a handle).
#[derive(Clone)]
pub(crate) struct Watch {
    /// The node's position, passed to the sink.
    index: usize,
    /// The shared part, also seen (weakly) by the connection's push handler.
    inner: Arc<WatchInner>,
}

/// What the push handler shares with the [`Watch`].
struct WatchInner {
    /// A RESP3 client for the node.
    client: redis::Client,
    /// Limit on one connection attempt.
    connect_timeout: Duration,
    /// Limit on one read.
    read_timeout: Duration,
    /// Where invalidations go.
    sink: Sink,
    /// The connection and its generation, or when to try again.
    slot: tokio::sync::Mutex<Slot>,
    /// The newest generation whose connection is known to be gone.
    lost: AtomicU64,
    /// Numbers connections, so a late "disconnected" of an old one does not
    /// condemn its replacement.
    generations: AtomicU64,
    /// Keys tracked on the connection of the generation given: read there,
    /// with no news of them since.
    tracked: Mutex<(u64, HashSet<String>)>,
    /// Channels heard on the connection of a generation.
    channels: Mutex<Channels>,
}

impl WatchInner {
    /// Marks `key` as tracked on the connection of `generation`; false if
    /// it already was. Marked before the read is sent, so news that
    /// overtakes the read's reply unmarks it rather than being lost (at
    /// worst a later read is not skipped).
    fn mark(&self, key: &str, generation: u64) -> bool {
        let mut tracked = mutex::lock(&self.tracked);
        if tracked.0 != generation {
            *tracked = (generation, HashSet::new());
        }
        tracked.1.insert(key.to_owned())
    }

    /// The channels heard (poisoning ignored: every critical section is a
    /// few assignments).
    fn channels(&self) -> std::sync::MutexGuard<'_, Channels> {
        mutex::lock(&self.channels)
    }

    /// Whether `channel`, heard on the connection of `generation`, went
    /// unasked for [`CHANNEL_IDLE`]; if so it is taken off the list (the
    /// caller unsubscribes).
    fn idle(&self, channel: &[u8], generation: u64) -> bool {
        self.channels().take_idle(channel, generation, CHANNEL_IDLE)
    }

    /// `keys` are no longer tracked (`None`: no key is).
    fn unmark(&self, keys: Option<&[Vec<u8>]>) {
        let mut tracked = mutex::lock(&self.tracked);
        match keys {
            Some(keys) => {
                for key in keys {
                    if let Ok(key) = std::str::from_utf8(key) {
                        tracked.1.remove(key);
                    }
                }
            }
            None => tracked.1.clear(),
        }
    }
}

/// The connection, if any.
#[derive(Default)]
struct Slot {
    /// Open connection and its generation.
    conn: Option<(MultiplexedConnection, u64)>,
    /// After a failed attempt: not before this instant.
    retry_at: Option<Instant>,
    /// The last attempt failed (cleared when one succeeds).
    failing: bool,
}

impl Slot {
    /// Whether it holds a connection newer than `lost`, the newest
    /// generation known to be gone.
    fn open(&self, lost: u64) -> bool {
        self.conn
            .as_ref()
            .is_some_and(|(_, generation)| *generation > lost)
    }
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

impl Watch {
    /// A notification connection to the node `client` points at (opened on
    /// first use, within `connect_timeout`; reads within `read_timeout`),
    /// sending what it hears to `sink`.
    pub(crate) fn new(
        index: usize,
        client: &redis::Client,
        connect_timeout: Duration,
        read_timeout: Duration,
        sink: Sink,
    ) -> Self {
        let info = client.get_connection_info().clone();
        let resp3 = info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        let client = redis::Client::open(info.set_redis_settings(resp3)).unwrap_or(client.clone());
        Self {
            index,
            inner: Arc::new(WatchInner {
                client,
                connect_timeout,
                read_timeout,
                sink,
                slot: tokio::sync::Mutex::default(),
                lost: AtomicU64::new(0),
                generations: AtomicU64::new(0),
                tracked: Mutex::default(),
                channels: Mutex::default(),
            }),
        }
    }

    /// Whether the connection is open (false while it is being made).
    pub(crate) fn connected(&self) -> bool {
        let lost = self.inner.lost.load(Ordering::Acquire);
        self.inner.slot.try_lock().is_ok_and(|slot| slot.open(lost))
    }

    /// Whether a read may arm a notification now: the connection is open,
    /// or is not and did not fail within the last [`RETRY_AFTER`] (a read
    /// opens it).
    pub(crate) fn usable(&self) -> bool {
        let lost = self.inner.lost.load(Ordering::Acquire);
        self.inner.slot.try_lock().map_or(true, |slot| {
            slot.open(lost) || slot.retry_at.is_none_or(|t| Instant::now() >= t)
        })
    }

    /// The node's position.
    pub(crate) fn index(&self) -> usize {
        self.index
    }

    /// Reads `key`'s remaining TTL on the notification connection, which
    /// makes the node tell us of its next change. Returns the PTTL (-2: no
    /// key, -1: no expiry), or `None` without reading when the key is still
    /// tracked here (its next change is told anyway); an error means no
    /// notification is armed. A key that holds `free` reads as none.
    pub(crate) async fn arm(&self, key: &str, free: Option<&str>) -> RedisResult<Option<i64>> {
        let (mut conn, generation) = self.connection().await?;
        if !self.inner.mark(key, generation) {
            return Ok(None);
        }
        let mut pipe = redis::pipe();
        if free.is_some() {
            pipe.cmd("GET").arg(key);
        }
        let read = pipe.cmd("PTTL").arg(key).query_async(&mut conn);
        let result = self.answered(read).await;
        let result = result.and_then(|replies: Vec<Option<String>>| armed::pttl(&replies, free));
        if result.is_err() {
            self.inner.unmark(Some(&[key.as_bytes().to_vec()]));
        }
        result.map(Some)
    }

    /// Reads who is listed in the waiting list `queue`, in order (the first
    /// only, unless `all`), on the notification connection (which makes
    /// the node tell of the list's next change, as [`Watch::arm`] does for
    /// a key, news only to the lines that hear the list). `None` without
    /// reading when the list is still tracked here (unchanged since the
    /// last read).
    pub(crate) async fn listed(&self, queue: &str, all: bool) -> RedisResult<Option<Vec<String>>> {
        let (mut conn, generation) = self.connection().await?;
        if !self.inner.mark(queue, generation) {
            return Ok(None);
        }
        let mut cmd = redis::cmd("ZRANGE");
        cmd.arg(queue).arg(0).arg(if all { -1 } else { 0 });
        let result = self
            .answered(cmd.query_async::<Vec<String>>(&mut conn))
            .await;
        if result.is_err() {
            self.inner.unmark(Some(&[queue.as_bytes().to_vec()]));
        }
        result.map(Some)
    }

    /// Whether the open connection hears `channel` already (or is being
    /// subscribed to it); if so, notes that a waiter asked for it now.
    pub(crate) fn hears(&self, channel: &str) -> bool {
        self.hearing(channel, |asked| *asked = Instant::now())
    }

    /// [`Watch::hears`] without noting anything.
    pub(crate) fn heard(&self, channel: &str) -> bool {
        self.hearing(channel, |_| {})
    }

    /// Whether the open connection hears `channel`; if so, `touch` its
    /// last-asked instant.
    fn hearing(&self, channel: &str, touch: impl FnOnce(&mut Instant)) -> bool {
        let lost = self.inner.lost.load(Ordering::Acquire);
        let mut channels = self.inner.channels();
        if channels.generation <= lost {
            return false;
        }
        channels.heard.get_mut(channel).map(touch).is_some()
    }

    /// Hears `channel` from now on: subscribes to it unless this
    /// connection already does. Returns whether it subscribed now (news
    /// sent before this may have been missed); an error means the channel
    /// is not heard (and a refusal is not asked again on this connection).
    pub(crate) async fn listen(&self, channel: &str) -> RedisResult<bool> {
        let (mut conn, generation) = self.connection().await?;
        {
            let mut channels = self.inner.channels();
            let channels = channels.of(generation);
            if channels.refused {
                return Err(redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "the node refused a subscription on this connection",
                )));
            }
            if channels
                .heard
                .insert(channel.to_owned(), Instant::now())
                .is_some()
            {
                return Ok(false);
            }
        }
        let result = self.answered(conn.subscribe(channel)).await;
        if let Err(e) = &result {
            let mut channels = self.inner.channels();
            let channels = channels.of(generation);
            channels.heard.remove(channel);
            channels.refused |= crate::explain::is_denied(e);
        } else {
            self.forget_when_idle(channel.to_owned(), generation);
        }
        result.map(|()| true)
    }

    /// Unsubscribes `channel` once it went [`CHANNEL_IDLE`] without a
    /// waiter asking for it, whether or not a message arrives (a semaphore
    /// nobody waits on any more publishes nothing). Ends when the channel
    /// is forgotten or its connection replaced; holds only a `Weak`.
    fn forget_when_idle(&self, channel: String, generation: u64) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (index, weak) = (self.index, Arc::downgrade(&self.inner));
        runtime.spawn(async move {
            loop {
                let due = {
                    let Some(inner) = weak.upgrade() else { return };
                    let channels = inner.channels();
                    if channels.generation != generation {
                        return;
                    }
                    match channels.heard.get(&channel) {
                        Some(asked) => *asked + CHANNEL_IDLE,
                        None => return,
                    }
                };
                tokio::time::sleep_until(due).await;
                let Some(inner) = weak.upgrade() else { return };
                if inner.idle(channel.as_bytes(), generation) {
                    Watch { index, inner }.forget(channel, generation).await;
                    return;
                }
            }
        });
    }

    /// `request`'s reply, or an error if it takes longer than the read
    /// timeout.
    async fn answered<T>(&self, request: impl Future<Output = RedisResult<T>>) -> RedisResult<T> {
        match tokio::time::timeout(self.inner.read_timeout, request).await {
            Ok(result) => result,
            Err(_) => Err(redis::RedisError::from((
                redis::ErrorKind::Io,
                "notification connection did not answer in time",
            ))),
        }
    }

    /// Stops hearing `channel` on the connection of `generation`, if it is
    /// still the open one.
    async fn forget(&self, channel: String, generation: u64) {
        let mut conn = {
            let slot = self.inner.slot.lock().await;
            match &slot.conn {
                Some((conn, g)) if *g == generation => conn.clone(),
                _ => return,
            }
        };
        let unsubscribe = conn.unsubscribe(&channel);
        let _ = tokio::time::timeout(self.inner.read_timeout, unsubscribe).await;
    }

    /// The open connection, connecting if there is none (at most once per
    /// [`RETRY_AFTER`] after a failure).
    /// Returns it with its generation.
    async fn connection(&self) -> RedisResult<(MultiplexedConnection, u64)> {
        let inner = &self.inner;
        let mut slot = inner.slot.lock().await;
        if let Some((conn, generation)) = &slot.conn {
            if *generation > inner.lost.load(Ordering::Acquire) {
                return Ok((conn.clone(), *generation));
            }
            slot.conn = None;
        }
        if slot.retry_at.is_some_and(|t| Instant::now() < t) {
            return Err(redis::RedisError::from((
                redis::ErrorKind::Io,
                "notification connection failed recently",
            )));
        }
        let generation = inner.generations.fetch_add(1, Ordering::AcqRel) + 1;
        match tokio::time::timeout(inner.connect_timeout, self.connect(generation)).await {
            Ok(Ok(conn)) => {
                slot.conn = Some((conn.clone(), generation));
                slot.retry_at = None;
                slot.failing = false;
                Ok((conn, generation))
            }
            Ok(Err(e)) => {
                tracing::debug!(node = self.index, error = %e, "no notification connection; waiting with timed retries");
                self.failed(&mut slot);
                Err(e)
            }
            Err(_) => {
                self.failed(&mut slot);
                Err(redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "notification connection timed out",
                )))
            }
        }
    }

    /// A connection attempt failed: the next is not before [`RETRY_AFTER`],
    /// and the first failure after a success (or of the first attempt) is
    /// told to the sink as [`Heard::All`], as a lost connection is: whoever
    /// waited to hear from this node learns it will not (a node that died
    /// while its connection was being made is news once, not never).
    fn failed(&self, slot: &mut Slot) {
        slot.retry_at = Some(Instant::now() + RETRY_AFTER);
        if !std::mem::replace(&mut slot.failing, true) {
            (self.inner.sink)(self.index, Heard::All);
        }
    }

    /// Opens a RESP3 connection with tracking on; its pushes go to the sink.
    async fn connect(&self, generation: u64) -> RedisResult<MultiplexedConnection> {
        let index = self.index;
        let weak: Weak<WatchInner> = Arc::downgrade(&self.inner);
        let on_push = move |push: PushInfo| -> Result<(), ()> {
            let Some(inner) = weak.upgrade() else {
                return Err(());
            };
            match push.kind {
                PushKind::Invalidate => {
                    let keys = invalidated_keys(&push.data);
                    inner.unmark(keys.as_deref());
                    match keys {
                        Some(keys) => (inner.sink)(index, Heard::Keys(&keys)),
                        None => (inner.sink)(index, Heard::All),
                    }
                }
                PushKind::Message => {
                    if let [Value::BulkString(channel), Value::BulkString(payload)] =
                        push.data.as_slice()
                    {
                        (inner.sink)(index, Heard::Message { channel, payload });
                        if inner.idle(channel, generation) {
                            let watch = Watch {
                                index,
                                inner: Arc::clone(&inner),
                            };
                            let channel = String::from_utf8_lossy(channel).into_owned();
                            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                                runtime
                                    .spawn(async move { watch.forget(channel, generation).await });
                            }
                        }
                    }
                }
                PushKind::Disconnection => {
                    inner.lost.fetch_max(generation, Ordering::AcqRel);
                    inner.unmark(None);
                    (inner.sink)(index, Heard::All);
                }
                _ => {}
            }
            Ok(())
        };
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.inner.connect_timeout))
            .set_push_sender(on_push);
        let mut conn = self
            .inner
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        redis::cmd("CLIENT")
            .arg("TRACKING")
            .arg("ON")
            .query_async::<()>(&mut conn)
            .await?;
        Ok(conn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection that cannot be made is news once: its first failure
    /// tells the sink "everything", its retries do not.
    #[tokio::test]
    async fn a_failed_connection_is_news_once() {
        use std::sync::atomic::AtomicUsize;
        let told = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&told);
        let sink: Sink = Arc::new(move |_, what| {
            if matches!(what, Heard::All) {
                count.fetch_add(1, Ordering::SeqCst);
            }
        });
        let client = redis::Client::open("redis://127.0.0.1:1").expect("url");
        let d = Duration::from_millis(500);
        let watch = Watch::new(0, &client, d, d, sink);
        assert!(watch.arm("k", None).await.is_err());
        assert_eq!(told.load(Ordering::SeqCst), 1, "the first failure is told");
        assert!(
            watch.arm("k", None).await.is_err(),
            "not retried within a second"
        );
        watch.inner.slot.lock().await.retry_at = None;
        assert!(
            watch.arm("k", None).await.is_err(),
            "retried, and failed again"
        );
        assert_eq!(told.load(Ordering::SeqCst), 1, "told once");
    }
}
