//! One Redis node: its lazily opened, self-healing connection and the way a
//! single request is sent to it.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, RedisError, RedisResult, Value};

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
}

impl Request {
    /// A plain command.
    pub(crate) fn plain(cmd: Cmd) -> Arc<Self> {
        Arc::new(Self {
            cmd,
            script_src: None,
        })
    }

    /// `EVALSHA` of `script` with its keys and args already added by `fill`.
    pub(crate) fn script(script: &'static Lua, fill: impl FnOnce(&mut Cmd)) -> Arc<Self> {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(script.sha());
        fill(&mut cmd);
        Arc::new(Self {
            cmd,
            script_src: Some(script.src),
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
    /// How to (re)connect.
    client: redis::Client,
    /// False after the node failed or timed out, true again after any reply.
    /// Rounds that like to hear from every node (the counter) do not wait
    /// for a node known to be unresponsive.
    healthy: Arc<AtomicBool>,
    /// Made on first use, inside the runtime: the manager spawns a task, so it
    /// cannot be made in the synchronous `build()`. It reconnects by itself
    /// after a failure, so a restarted node is picked up again.
    conn: OnceLock<ConnectionManager>,
}

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
    pub(crate) fn new(index: usize, client: redis::Client) -> Self {
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
            client,
            healthy: Arc::new(AtomicBool::new(true)),
            conn: OnceLock::new(),
        }
    }

    /// Whether the node answered its last request.
    pub(crate) fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// Marks the node unresponsive (it missed a round's deadline).
    pub(crate) fn mark_unresponsive(&self) {
        self.healthy.store(false, Ordering::Relaxed);
    }

    /// The node's connection manager, created on first use.
    fn manager(&self) -> RedisResult<ConnectionManager> {
        if let Some(m) = self.conn.get() {
            return Ok(m.clone());
        }
        let config = ConnectionManagerConfig::new()
            // We time requests out ourselves, once per round for all nodes.
            .set_response_timeout(None)
            // Do not retry a failed connect inside the manager: the next
            // request triggers a fresh attempt, and a round never waits on a
            // backoff it does not control.
            .set_number_of_retries(0)
            // Room for many concurrent rounds before a slow node pushes back.
            .set_pipeline_buffer_size(PIPELINE_BUFFER);
        let m = ConnectionManager::new_lazy_with_config(self.client.clone(), config)?;
        Ok(self.conn.get_or_init(|| m).clone())
    }

    /// Sends `req` and returns the node's reply. The future owns everything it
    /// needs, so a round can leave it to finish in the background.
    ///
    /// A request that fails because the connection had dropped (the node was
    /// restarted) is sent once more on the fresh connection the manager opens,
    /// so the first request after a restart does not count as a failure. Every
    /// command we send is safe to repeat: SET NX and the scripts are
    /// idempotent for the same value.
    pub(crate) fn call(
        &self,
        req: &Arc<Request>,
    ) -> impl Future<Output = (usize, RedisResult<Value>)> + Send + 'static {
        let index = self.index;
        let req = Arc::clone(req);
        let conn = self.manager();
        let healthy = Arc::clone(&self.healthy);
        // Unconstrained: tokio's cooperative budget must not hold a call back
        // behind calls made after it. A busy task that ran out of budget used
        // to queue its release for a node after its next SET there, leaving a
        // stale key of its own (380 of 3200 attempts failed in the stress
        // test with two nodes hung; none since). Calls a round stops waiting
        // for are still carried to the end in the background.
        tokio::task::unconstrained(async move {
            let mut conn = match conn {
                Ok(c) => c,
                Err(e) => return (index, Err(e)),
            };
            let mut result = send(&mut conn, &req).await;
            if matches!(&result, Err(e) if e.is_connection_dropped() || e.is_connection_refusal()) {
                result = send(&mut conn, &req).await;
            }
            // Any answer, a server error included, shows the node is alive;
            // recorded here so that late replies drained in the background
            // count too.
            let alive = match &result {
                Ok(_) => true,
                Err(e) => matches!(e.kind(), redis::ErrorKind::Server(_)),
            };
            healthy.store(alive, Ordering::Relaxed);
            (index, result)
        })
    }
}

/// Sends one request, falling back from EVALSHA to EVAL on NOSCRIPT.
async fn send(conn: &mut ConnectionManager, req: &Request) -> RedisResult<Value> {
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
