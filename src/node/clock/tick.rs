//! A timer kept by a node's clock, not ours: `WAIT` for more replicas than
//! the node can have, with a timeout, on a connection of its own, returns
//! when the node has counted the timeout.
//!
//! Every timer of ours runs on our own clock. Where that clock stalls (a
//! virtual machine whose clock source stops, a process whose clocks are
//! frozen), none of them fires: a holder's validity never runs out, its
//! renewal never runs, and no request goes out whose `TIME` could show
//! the nodes' clocks moving on without ours. A reply is the one thing that
//! reaches us without our clock: this one comes when the node's clock has
//! counted the period, so a holder hears from the nodes at least once a
//! period, however its own clock behaves (`quorum/mod.rs` then reads every
//! node's clock, and `node/clock/clockwatch.rs` judges the readings).
//!
//! `WAIT` names no key (any shard of a cluster member runs it), changes
//! nothing, and blocks only the connection it came on; the node asks its
//! replicas, if any, for one acknowledgement per period. A node that
//! refuses it (an ACL without `+wait`, a replica) is not asked again by
//! this client.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, RedisResult};

/// More replicas than any node has: `WAIT` returns at its timeout.
const NEVER_ENOUGH: i64 = i32::MAX as i64;

/// A timer on one node's clock.
pub(crate) struct Ticker {
    /// The node's position.
    pub(crate) index: usize,
    /// How to connect to it.
    client: redis::Client,
    /// Limit on connecting.
    connect_timeout: Duration,
    /// The connection, once made (dropped after an error).
    conn: Option<MultiplexedConnection>,
    /// The node refused `WAIT`: not asked again.
    pub(crate) refused: bool,
}

impl Ticker {
    /// A timer on node `index`, reached through `client` within
    /// `connect_timeout`; connects to nothing yet.
    pub(crate) fn new(index: usize, client: redis::Client, connect_timeout: Duration) -> Self {
        Self {
            index,
            client,
            connect_timeout,
            conn: None,
            refused: false,
        }
    }

    /// Returns once the node's clock has counted `period` (or at once
    /// with the error: a connection that failed, a refusal), connecting
    /// first where needed.
    pub(crate) async fn tick(&mut self, period: Duration) -> RedisResult<()> {
        let conn = match &mut self.conn {
            Some(conn) => conn,
            None => {
                // No reply timeout: ours would run on the clock this timer
                // stands in for, and the wait is the node's to end. (A node
                // that never answers is left by the caller: `quorum/`.)
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(self.connect_timeout))
                    .set_response_timeout(None);
                let conn = self
                    .client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?;
                self.conn.insert(conn)
            }
        };
        let ms = u64::try_from(period.as_millis()).unwrap_or(u64::MAX).max(1);
        let mut wait = redis::cmd("WAIT");
        wait.arg(NEVER_ENOUGH).arg(ms);
        let reply: RedisResult<redis::Value> = wait.query_async(conn).await;
        match reply {
            Ok(_) => Ok(()),
            Err(e) => {
                // The node answered no (`NOPERM`, a replica's refusal): it
                // will answer no again.
                self.refused = matches!(e.kind(), redis::ErrorKind::Server(_));
                self.conn = None;
                Err(e)
            }
        }
    }
}
