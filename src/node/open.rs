//! Opening one connection to a node: the redis-rs settings every link uses,
//! and the check for lost writes that runs on it before anything of ours
//! goes out.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, RedisError, RedisResult};

use crate::lua::Lua;
use crate::node::amnesia::{self, AmnesiaCheck, Trust};
use crate::node::queue::PIPELINE_BUFFER;

/// What a connection is opened with.
pub(crate) struct Opener<'a> {
    /// How to connect.
    pub(crate) client: &'a redis::Client,
    /// The node's position, for logs.
    pub(crate) index: usize,
    /// Limit on the attempt, and on the check after it.
    pub(crate) timeout: Duration,
    /// How the new connection is checked for lost writes (`None`: never),
    /// and where what the check finds goes.
    pub(crate) amnesia: Option<(&'a AmnesiaCheck, &'a Arc<Trust>)>,
}

impl Opener<'_> {
    /// Opens a connection and checks it; an error if either failed. With
    /// it, whether the node lets us send `EVALSHA` (`scriptcache.rs`).
    pub(crate) async fn open(&self) -> RedisResult<(MultiplexedConnection, bool)> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            // We time requests out ourselves, once per round for all nodes.
            .set_response_timeout(None)
            // Room for many concurrent rounds before a slow node pushes back.
            .set_pipeline_buffer_size(PIPELINE_BUFFER);
        let mut conn = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        // Before anything of ours goes out on it: may the node have lost
        // writes?
        if let Some((check, trust)) = self.amnesia {
            let addr = self.client.get_connection_info().addr().to_string();
            let node = (self.index, addr.as_str());
            amnesia::check(&mut conn, check, trust, node, self.timeout).await?;
        }
        let evalsha = evalsha_allowed(&mut conn, self.timeout).await?;
        Ok((conn, evalsha))
    }
}

/// Whether the node runs `EVALSHA` for us: asked by running a one-line
/// script in full and then by its digest, so that neither reply is an
/// error where `EVALSHA` is allowed (a node's error counts are what
/// operators watch); where an ACL refuses it, scripts always go in full.
async fn evalsha_allowed(conn: &mut MultiplexedConnection, limit: Duration) -> RedisResult<bool> {
    static PROBE: Lua = Lua::new("return 0");
    let mut pipe = redis::pipe();
    pipe.cmd("EVAL").arg(PROBE.src).arg(0);
    pipe.cmd("EVALSHA").arg(PROBE.sha()).arg(0);
    let ask = pipe.query_async::<Vec<redis::Value>>(conn);
    match tokio::time::timeout(limit, ask).await {
        Err(_) => Err(RedisError::from((
            redis::ErrorKind::Io,
            "no answer to EVALSHA within the connect timeout",
        ))),
        Ok(Err(e)) if crate::node::wire::link_broken(&e) => Err(e),
        Ok(Ok(replies)) => Ok(matches!(replies.get(1), Some(redis::Value::Int(0)))),
        Ok(Err(_)) => Ok(false),
    }
}
