//! Opening one connection to a node: the redis-rs settings every link uses,
//! and the check for lost writes that runs on it before anything of ours
//! goes out.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, RedisError, RedisResult, Value};

use crate::lua::Lua;
use crate::node::connection::queue::PIPELINE_BUFFER;
use crate::node::connection::scriptcache::Abilities;
use crate::node::connection::wire::link_broken;
use crate::node::trust::amnesia::AmnesiaCheck;
use crate::node::trust::check;
use crate::node::trust::evidence::{info_field, MARKER_KEY};
use crate::node::trust::Trust;

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
    /// For one shard of a member that is a Redis Cluster: where our marker
    /// lives on it (a key in a slot it serves). `None` for a member that is
    /// one node, whose marker is [`MARKER_KEY`] and which must hold every
    /// slot.
    pub(crate) shard_marker: Option<&'a str>,
}

impl Opener<'_> {
    /// Opens a connection and checks it; an error if either failed (also
    /// for a member given as one node that is one shard of a Redis Cluster
    /// with several: it holds only part of the key space). With it, whether
    /// what the node runs for us (`scriptcache.rs`).
    pub(crate) async fn open(&self) -> RedisResult<(MultiplexedConnection, Abilities)> {
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
        // Before anything of ours goes out on it: what is the node, and may
        // it have lost writes?
        let marker = self.shard_marker.unwrap_or(MARKER_KEY);
        let whole = self.shard_marker.is_none();
        let abilities = ask_first(&mut conn, self.timeout, whole, marker).await?;
        if let Some((check, trust)) = self.amnesia {
            let addr = self.client.get_connection_info().addr().to_string();
            let node = (self.index, addr.as_str());
            check::check(&mut conn, check, trust, node, self.timeout, marker).await?;
        }
        Ok((conn, abilities))
    }
}

/// What a connection asks first, in one round trip: whether the node runs
/// `EVALSHA` for us (a one-line script run in full, then by its digest:
/// neither reply is an error where it does, and an error count is what
/// operators watch; where an ACL refuses it, scripts always go in full),
/// whether it runs Valkey's `DELIFEQ` and `SET … IFEQ` for us
/// ([`NATIVES`]), and whether it is a Redis Cluster node (`INFO cluster`).
/// Where the member was given as one node (`whole`), a cluster node is then
/// asked how many shards serve the key space: such a member must hold all
/// of it, so one shard of several is refused here, in words, before its
/// quarantine check could mistake the marker's `MOVED` for damage.
async fn ask_first(
    conn: &mut MultiplexedConnection,
    limit: Duration,
    whole: bool,
    marker: &str,
) -> RedisResult<Abilities> {
    static PROBE: Lua = Lua::new("return 0");
    let mut pipe = redis::pipe();
    pipe.cmd("EVAL").arg(PROBE.src).arg(0);
    pipe.cmd("EVALSHA").arg(PROBE.sha()).arg(0);
    pipe.cmd("INFO").arg("cluster");
    pipe.cmd("EVAL")
        .arg(NATIVES.src)
        .arg(1)
        .arg(format!("{marker}:probe"));
    // Errors (a refused command) come back as values; one that does not is
    // taken as "no" to every question, unless the connection broke.
    let replies = answered(limit, conn.send_packed_commands(&pipe, 0, 4))
        .await
        .or_else(|e| {
            if link_broken(&e) {
                Err(e)
            } else {
                Ok(Vec::new())
            }
        })?;
    let evalsha = matches!(replies.get(1), Some(Value::Int(0)));
    let natives = match replies.get(3) {
        Some(Value::Array(both)) => (
            matches!(both.first(), Some(Value::Int(1))),
            matches!(both.get(1), Some(Value::Int(1))),
        ),
        _ => (false, false),
    };
    let cluster = replies
        .get(2)
        .and_then(|v| redis::from_redis_value_ref::<String>(v).ok())
        .is_some_and(|info| info_field(&info, "cluster_enabled") == Some("1"));
    if cluster && whole {
        let mut ask = redis::cmd("CLUSTER");
        ask.arg("INFO");
        // Refused (an ACL): not known here; a `MOVED` reply says it later.
        let info = answered(limit, conn.send_packed_command(&ask))
            .await
            .or_else(|e| {
                if link_broken(&e) {
                    Err(e)
                } else {
                    Ok(Value::Nil)
                }
            })?;
        let shards = redis::from_redis_value_ref::<String>(&info)
            .ok()
            .and_then(|info| info_field(&info, "cluster_size")?.parse::<u64>().ok());
        if let Some(shards @ 2..) = shards {
            return Err(RedisError::from((
                redis::ErrorKind::Server(redis::ServerErrorKind::Moved),
                "one shard",
                format!("one of {shards} shards of a Redis Cluster"),
            )));
        }
    }
    Ok(Abilities {
        evalsha,
        del_if_eq: natives.0,
        set_if_eq: natives.1,
    })
}

/// Whether the node runs Valkey's own forms of our release and extension
/// for us, asked as the node itself answers, not from a version number:
/// `{1, 1}` where `DELIFEQ` runs (the ACL allows it) and `SET` takes
/// `IFEQ`. Only a node that lists `DELIFEQ` is asked to run anything (an
/// unknown command, even caught in a script, counts as an error in Redis's
/// `INFO errorstats`, which operators watch); both run on KEYS[1], a key of
/// ours that never exists, in a slot the node serves, and change nothing:
/// `DELIFEQ` of a missing key deletes nothing and answers 0, `SET … IFEQ`
/// never creates a key and answers nil.
static NATIVES: Lua = Lua::new(
    r#"local del, set = 0, 0
if redis.call("COMMAND", "INFO", "DELIFEQ")[1] then
  if redis.pcall("DELIFEQ", KEYS[1], "") == 0 then del = 1 end
  if redis.pcall("SET", KEYS[1], "", "IFEQ", "", "PX", 1) == false then set = 1 end
end
return {del, set}"#,
);

/// `request`'s reply within `limit`; a connection error or no reply is an
/// error (the connection is of no use then).
async fn answered<T>(
    limit: Duration,
    request: impl std::future::Future<Output = RedisResult<T>>,
) -> RedisResult<T> {
    match tokio::time::timeout(limit, request).await {
        Ok(reply) => reply,
        Err(_) => Err(RedisError::from((
            redis::ErrorKind::Io,
            "no answer to the connection's first questions within the connect timeout",
        ))),
    }
}

/// `(host, port)` as an address with the settings of `like` (TLS or not):
/// a shard or seed of a member that is a Redis Cluster.
pub(crate) fn addr_like(
    like: &redis::ConnectionAddr,
    (host, port): (String, u16),
) -> redis::ConnectionAddr {
    match like {
        redis::ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => redis::ConnectionAddr::TcpTls {
            host,
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => redis::ConnectionAddr::Tcp(host, port),
    }
}

/// A client for `info` with Nagle off (`None` if it does not open). Lock
/// requests are tiny and latency-bound, and many share one multiplexed
/// connection: never let Nagle hold one back waiting for the ACK of
/// another.
pub(crate) fn nodelay(info: redis::ConnectionInfo) -> Option<redis::Client> {
    let tcp = info.tcp_settings().clone().set_nodelay(true);
    redis::Client::open(info.set_tcp_settings(tcp)).ok()
}
