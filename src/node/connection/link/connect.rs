//! How a link (re)connects: the attempt in the background, after a
//! back-off where the last one failed, and what a new connection takes
//! over (the requests queued for it go out first, as one batch).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use redis::aio::MultiplexedConnection;
use redis::{RedisError, RedisResult};

use super::{nanos_since_epoch, Link, CONNECTIONS, RECONNECT_BACKOFF};
use crate::error::NodeErrorKind;
use crate::node::connection::open::Opener;
use crate::node::connection::queue::{fail_all, send_batch, Conn, LinkState, Waiting};
use crate::node::connection::scriptcache::{Abilities, ScriptCache};

impl Link {
    /// Starts a connection attempt in the background, with `waiting` first
    /// in its queue.
    pub(super) fn connect(self: &Arc<Self>, st: &mut LinkState, waiting: Vec<Waiting>) {
        self.connect_after(st, waiting, Instant::now());
    }

    /// [`Link::connect`], the attempt made no earlier than `at` (requests
    /// queue meanwhile).
    pub(super) fn connect_after(
        self: &Arc<Self>,
        st: &mut LinkState,
        waiting: Vec<Waiting>,
        at: Instant,
    ) {
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
            tokio::time::sleep_until(at.into()).await;
            let opener = Opener {
                client: &link.client,
                index: link.index,
                timeout: link.connect_timeout,
                amnesia: link.amnesia.as_ref().map(|check| (check, &link.trust)),
                shard_marker: link.shard_marker.as_deref(),
            };
            let result = opener.open().await;
            link.connected(result);
        });
    }

    /// Ends a connection attempt: sends the queue as the first batch, or
    /// fails it.
    pub(super) fn connected(
        self: &Arc<Self>,
        result: RedisResult<(MultiplexedConnection, Abilities)>,
    ) {
        let mut st = self.state();
        let mut waiting = match &mut st.conn {
            Conn::Connecting(waiting) => std::mem::take(waiting),
            // Only the attempt itself leaves `Connecting`.
            _ => return,
        };
        self.tried.store(true, Ordering::Relaxed);
        match result {
            Ok((conn, abilities)) => {
                tracing::debug!(node = self.index, "connected");
                self.vigil.checked();
                let mut scripts = ScriptCache::new(abilities);
                let now = nanos_since_epoch(Instant::now());
                self.connected_at.store(now, Ordering::Relaxed);
                let id = CONNECTIONS.fetch_add(1, Ordering::Relaxed);
                waiting.retain(Waiting::wanted);
                // The queue goes out first, before the link is open to
                // anything newer.
                let batch = if waiting.is_empty() {
                    None
                } else {
                    match send_batch(&conn, waiting, &mut scripts, &self.vigil) {
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
                    scripts,
                };
                drop(st);
                if let Some(batch) = batch {
                    self.await_batch(id, batch);
                }
            }
            Err(e) => {
                tracing::debug!(node = self.index, error = %e, "connect failed");
                self.warn_once(&NodeErrorKind::Redis(e.clone()));
                fail_all(waiting, &e);
                st.conn = Conn::Down {
                    error: Some(e),
                    retry_at: Instant::now() + RECONNECT_BACKOFF,
                };
            }
        }
    }
}
