//! One node's health for `status`: reachable, round trip, version, clock
//! offset and rate, persistence, and what makes it unsafe.

use std::time::{Duration, Instant};

use redquorum::{redis, NodeClock};

use crate::clockrate;

/// One node's health, as `status` prints it.
pub struct NodeReport {
    /// `host:port`.
    pub addr: String,
    /// Whether it answered as a Redis server.
    pub reachable: bool,
    /// PING round trip.
    pub rtt: Option<Duration>,
    /// The server and its version: `redis 7.0.15`, `valkey 9.1.2`.
    pub version: String,
    /// Its clock minus ours.
    pub offset_ms: Option<i64>,
    /// Its clock's rate against ours, or a jump seen (`clockrate.rs`).
    pub clock: Option<NodeClock>,
    /// What the last column says: the persistence, or why it is unreachable.
    pub detail: String,
    /// What makes it unsafe for locks and counters.
    pub warnings: Vec<String>,
    /// A member that is a Redis Cluster: each shard master's report.
    pub shards: Vec<NodeReport>,
}

impl NodeReport {
    /// A report on `addr` that found nothing yet.
    pub fn new(addr: &str) -> Self {
        Self {
            addr: addr.to_owned(),
            reachable: false,
            rtt: None,
            version: "-".into(),
            offset_ms: None,
            clock: None,
            detail: "-".into(),
            warnings: Vec::new(),
            shards: Vec::new(),
        }
    }
}

/// Why a node could not be checked, in a few words for the table.
fn unreachable(e: &redis::RedisError) -> String {
    if e.is_connection_refusal() {
        "connection refused".into()
    } else if e.is_timeout() {
        "no answer".into()
    } else if matches!(e.kind(), redis::ErrorKind::Parse) {
        // Something answered, but not in the Redis protocol.
        "not a Redis server".into()
    } else {
        // A password, an ACL, or what the node said, on one line.
        redquorum::explain(e)
    }
}

/// Checks the node `client` points at.
pub async fn check_client(client: &redis::Client, timeout: Duration) -> NodeReport {
    let mut r = NodeReport::new(&client.get_connection_info().addr().to_string());
    let work = async {
        let mut conn = client.get_multiplexed_async_connection().await?;
        let t0 = Instant::now();
        redis::cmd("PING").query_async::<String>(&mut conn).await?;
        let rtt = t0.elapsed();
        let before = std::time::SystemTime::now();
        let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(&mut conn).await?;
        let after = std::time::SystemTime::now();
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut conn)
            .await?;
        let persistence: String = redis::cmd("INFO")
            .arg("persistence")
            .query_async(&mut conn)
            .await?;
        let config = config_get(&mut conn, "appendfsync").await;
        let policy = config_get(&mut conn, "maxmemory-policy").await;
        Ok::<_, redis::RedisError>((
            conn,
            rtt,
            before,
            after,
            secs,
            micros,
            info,
            persistence,
            config,
            policy,
        ))
    };
    match tokio::time::timeout(timeout, work).await {
        Err(_) => r.detail = format!("no answer within {}ms", timeout.as_millis()),
        Ok(Err(e)) => r.detail = unreachable(&e),
        Ok(Ok((mut conn, rtt, before, after, secs, micros, info, pers, fsync, policy))) => {
            r.reachable = true;
            r.clock = watch_clock(&mut conn, timeout).await;
            match r.clock {
                Some(NodeClock::Rate { lo, hi }) if hi < 0.99 || lo > 1.01 => {
                    r.warnings.push(format!(
                        "clock runs {} against ours, beyond the default drift allowance (1%): \
                     clients count locks on it at its measured rate once they measured it",
                        clockrate::cell(r.clock)
                    ))
                }
                Some(NodeClock::Jumped { ms }) => r.warnings.push(format!(
                    "clock jumped {ms:+.0} ms while status watched: clients that see a jump \
                     ahead keep the node out of lock quorums for the restart quarantine"
                )),
                _ => {}
            }
            r.rtt = Some(rtt);
            r.version = server_version(&info);
            let to_us = |t: std::time::SystemTime| {
                t.duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_micros() as i64)
            };
            let local_mid = (to_us(before) + to_us(after)) / 2;
            let node = secs * 1_000_000 + micros;
            let offset = (node - local_mid) / 1000;
            r.offset_ms = Some(offset);
            if offset.abs() > 1000 {
                r.warnings
                    .push(format!("clock differs from ours by {offset} ms"));
            }
            let aof = field(&pers, "aof_enabled") == Some("1");
            let fsync = fsync.get(1).cloned().unwrap_or_else(|| "?".into());
            r.detail = if aof {
                format!("aof, appendfsync {fsync}")
            } else {
                "no aof".into()
            };
            if !aof {
                r.warnings.push(
                    "no AOF: a restart forgets locks and counters (unsafe unless restarts are delayed by the max TTL, and counters can repeat numbers)".into(),
                );
            } else if fsync != "always" {
                r.warnings.push(format!(
                    "appendfsync {fsync}: a crash can lose acknowledged writes (use appendfsync always)"
                ));
            }
            // Clients read an evicting node's evictions behind every
            // request that asks for a vote, and keep it out of lock
            // quorums after any: say what that costs, and the cure.
            let cost = "clients read its evictions with every lock request and keep it out of \
                        lock quorums for a quarantine after any eviction (use noeviction)";
            if let Some(p) = policy.get(1) {
                if p != "noeviction" && p != "volatile-ttl" && p.starts_with("allkeys") {
                    r.warnings.push(format!(
                        "maxmemory-policy {p} can evict lock and counter keys: {cost}"
                    ));
                } else if p.starts_with("volatile") {
                    r.warnings
                        .push(format!("maxmemory-policy {p} can evict lock keys: {cost}"));
                }
            }
        }
    }
    r
}

/// Three readings of the node's clock [`clockrate::SPAN`] apart, judged.
async fn watch_clock(
    conn: &mut redis::aio::MultiplexedConnection,
    timeout: Duration,
) -> Option<NodeClock> {
    let first = clockrate::read(conn, timeout).await?;
    tokio::time::sleep(clockrate::SPAN).await;
    let second = clockrate::read(conn, timeout).await?;
    tokio::time::sleep(clockrate::SPAN).await;
    let third = clockrate::read(conn, timeout).await?;
    NodeClock::from_readings(&[first, second, third])
}

/// `CONFIG GET name` as `[name, value]`; empty where the command is not
/// allowed (managed Redis often disables it).
async fn config_get(conn: &mut redis::aio::MultiplexedConnection, name: &str) -> Vec<String> {
    redis::cmd("CONFIG")
        .arg("GET")
        .arg(name)
        .query_async(conn)
        .await
        .unwrap_or_default()
}

/// The server and its own version from `INFO server`: Valkey names
/// itself (`server_name`) and its version (`valkey_version`), and gives a
/// compatible `redis_version` that is not its own.
fn server_version(info: &str) -> String {
    match field(info, "server_name") {
        Some(name) if !name.is_empty() => {
            let version = field(info, &format!("{name}_version"))
                .or_else(|| field(info, "redis_version"))
                .unwrap_or("?");
            format!("{name} {version}")
        }
        _ => format!("redis {}", field(info, "redis_version").unwrap_or("?")),
    }
}

/// A `key:value` field of an INFO reply.
fn field<'a>(info: &'a str, key: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_fields() {
        let info = "# Server\r\nredis_version:7.0.15\r\naof_enabled:1\r\n";
        assert_eq!(field(info, "redis_version"), Some("7.0.15"));
        assert_eq!(server_version(info), "redis 7.0.15");
        let valkey = "redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.1.2\r\n";
        assert_eq!(server_version(valkey), "valkey 9.1.2");
        assert_eq!(field(info, "aof_enabled"), Some("1"));
        assert_eq!(field(info, "nope"), None);
    }
}
