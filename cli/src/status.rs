//! `redquorum status`: one row per node (reachable, round trip, version,
//! clock offset, persistence) and warnings where a node is unsafe.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use redquorum::redis;

use crate::client::build;
use crate::exit;

/// One node's health, as `status` prints it.
struct NodeReport {
    addr: String,
    reachable: bool,
    rtt: Option<Duration>,
    version: String,
    offset_ms: Option<i64>,
    persistence: String,
    warnings: Vec<String>,
}

/// Checks every node and prints the table; exit 0 with a quorum reachable.
pub async fn status(urls: &[String], timeout: Duration) -> ExitCode {
    // Validate the list the same way the library does.
    if let Err(code) = build(urls, timeout, "") {
        return code;
    }
    let checks = urls
        .iter()
        .map(|u| check_node(u, timeout.max(Duration::from_secs(1))));
    let reports = futures::future::join_all(checks).await;
    println!(
        "{:<4} {:<24} {:<9} {:>8} {:>8} {:>10}  persistence",
        "node", "address", "reachable", "rtt", "version", "clock"
    );
    let mut up = 0;
    for (i, r) in reports.iter().enumerate() {
        if r.reachable {
            up += 1;
        }
        println!(
            "{:<4} {:<24} {:<9} {:>8} {:>8} {:>10}  {}",
            i,
            r.addr,
            if r.reachable { "yes" } else { "NO" },
            r.rtt
                .map_or("-".into(), |d| format!("{:.2}ms", d.as_secs_f64() * 1e3)),
            r.version,
            r.offset_ms.map_or("-".into(), |o| format!("{o:+}ms")),
            r.persistence,
        );
        for w in &r.warnings {
            println!("     warning: {w}");
        }
    }
    let quorum = urls.len() / 2 + 1;
    if urls.len().is_multiple_of(2) {
        println!(
            "warning: {} nodes is an even count; it tolerates no more failures than {}",
            urls.len(),
            urls.len() - 1
        );
    }
    if up >= quorum {
        println!(
            "quorum: OK ({up} of {} reachable, {quorum} needed)",
            urls.len()
        );
        ExitCode::SUCCESS
    } else {
        println!(
            "quorum: UNAVAILABLE ({up} of {} reachable, {quorum} needed)",
            urls.len()
        );
        exit::code(exit::UNAVAILABLE)
    }
}

async fn check_node(url: &str, timeout: Duration) -> NodeReport {
    let mut r = NodeReport {
        addr: url.to_owned(),
        reachable: false,
        rtt: None,
        version: "-".into(),
        offset_ms: None,
        persistence: "-".into(),
        warnings: Vec::new(),
    };
    let client = match redis::Client::open(url) {
        Ok(c) => c,
        Err(e) => {
            r.warnings.push(format!("invalid url: {e}"));
            return r;
        }
    };
    r.addr = client.get_connection_info().addr().to_string();
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
        Err(_) => r.warnings.push(format!("no answer within {timeout:?}")),
        Ok(Err(e)) => r.warnings.push(format!("unreachable: {e}")),
        Ok(Ok((rtt, before, after, secs, micros, info, pers, fsync, policy))) => {
            r.reachable = true;
            r.rtt = Some(rtt);
            r.version = field(&info, "redis_version").unwrap_or("?").to_owned();
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
            r.persistence = if aof {
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
            if let Some(p) = policy.get(1) {
                if p != "noeviction" && p != "volatile-ttl" && p.starts_with("allkeys") {
                    r.warnings.push(format!(
                        "maxmemory-policy {p} can evict lock and counter keys"
                    ));
                } else if p.starts_with("volatile") {
                    r.warnings
                        .push(format!("maxmemory-policy {p} can evict lock keys"));
                }
            }
        }
    }
    r
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
        assert_eq!(field(info, "aof_enabled"), Some("1"));
        assert_eq!(field(info, "nope"), None);
    }
}
