//! Opening one connection to a node: the redis-rs settings every link uses,
//! and the check for lost writes that runs on it before anything of ours
//! goes out.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, RedisResult};

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
    /// Opens a connection and checks it; an error if either failed.
    pub(crate) async fn open(&self) -> RedisResult<MultiplexedConnection> {
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
        Ok(conn)
    }
}
