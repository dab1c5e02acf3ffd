//! `redquorum status`: one row per node (reachable, round trip, version,
//! clock offset and rate, persistence) and warnings where a node is unsafe.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use redquorum::{redis, NodeClock, NodeTrust};

use crate::client::build;
use crate::clockrate;
use crate::exit;

/// One node's health, as `status` prints it.
struct NodeReport {
    /// `host:port`.
    addr: String,
    /// Whether it answered as a Redis server.
    reachable: bool,
    /// PING round trip.
    rtt: Option<Duration>,
    /// `redis_version`.
    version: String,
    /// Its clock minus ours.
    offset_ms: Option<i64>,
    /// Its clock's rate against ours, or a jump seen (`clockrate.rs`).
    clock: Option<NodeClock>,
    /// What the last column says: the persistence, or why it is unreachable.
    detail: String,
    /// What makes it unsafe for locks and counters.
    warnings: Vec<String>,
}

/// Checks every node and prints the table (stdout) and the warnings
/// (stderr, each once with the nodes it concerns); exits 0 when a quorum
/// is reachable and counts for locks (see `exit::status_codes`).
pub async fn status(urls: &[String], times: (Duration, Duration)) -> ExitCode {
    // Validate the list the same way the library does.
    let redlock = match build(urls, times, "") {
        Ok(redlock) => redlock,
        Err(code) => return code,
    };
    let timeout = times.0;
    let checks = urls
        .iter()
        .map(|u| check_node(u, timeout.max(Duration::from_secs(1))));
    let (reports, trust) =
        futures::future::join(futures::future::join_all(checks), redlock.node_trust()).await;
    println!(
        "{:<4} {:<24} {:<9} {:>8} {:>8} {:>10} {:>8}  {:<24} trust",
        "node", "address", "reachable", "rtt", "version", "clock", "rate", "persistence"
    );
    for (i, r) in reports.iter().enumerate() {
        println!(
            "{:<4} {:<24} {:<9} {:>8} {:>8} {:>10} {:>8}  {:<24} {}",
            i,
            r.addr,
            if r.reachable { "yes" } else { "NO" },
            r.rtt
                .map_or("-".into(), |d| format!("{:.2}ms", d.as_secs_f64() * 1e3)),
            r.version,
            r.offset_ms.map_or("-".into(), |o| format!("{o:+}ms")),
            clockrate::cell(r.clock),
            r.detail,
            match trust.get(i) {
                Some(t) if r.reachable => describe(t),
                _ => "-".into(),
            },
        );
    }
    for (warning, nodes) in grouped(&reports) {
        let list: Vec<String> = nodes.iter().map(usize::to_string).collect();
        let which = if nodes.len() == 1 { "node" } else { "nodes" };
        eprintln!("warning: {which} {}: {warning}", list.join(", "));
    }
    let up = reports.iter().filter(|r| r.reachable).count();
    let quorum = urls.len() / 2 + 1;
    if urls.len().is_multiple_of(2) {
        eprintln!(
            "warning: {} nodes is an even count; it tolerates no more failures than {}",
            urls.len(),
            urls.len() - 1
        );
    }
    let counting = trust
        .iter()
        .filter(|t| matches!(t, NodeTrust::Trusted | NodeTrust::Suspect { .. }))
        .count();
    // The quarantines still to run out, shortest first.
    let mut waits: Vec<Duration> = trust
        .iter()
        .zip(&reports)
        .filter_map(|(t, r)| match t {
            NodeTrust::Quarantined { remaining, .. } if r.reachable => Some(*remaining),
            _ => None,
        })
        .collect();
    waits.sort();
    let quarantined = waits.len();
    if up < quorum {
        println!(
            "quorum: UNAVAILABLE ({up} of {} reachable, {quorum} needed)",
            urls.len()
        );
        return exit::code(exit::UNAVAILABLE);
    }
    println!(
        "quorum: OK ({up} of {} reachable, {quorum} needed)",
        urls.len()
    );
    if counting >= quorum {
        if quarantined > 0 {
            println!(
                "lock votes: OK ({counting} of {} nodes count, {quorum} needed; {quarantined} in \
                 quarantine)",
                urls.len()
            );
        }
        return ExitCode::SUCCESS;
    }
    // Locks can be taken once enough quarantines ran out.
    let when = waits.get(quorum - counting - 1).map_or_else(
        || "not until more nodes are reachable".to_owned(),
        |d| format!("in about {}s", d.as_secs_f64().ceil()),
    );
    println!(
        "lock votes: UNAVAILABLE ({counting} of {} nodes count, {quorum} needed; {quarantined} in \
         quarantine): locks can be taken {when}",
        urls.len()
    );
    exit::code(exit::NO_LOCK_VOTES)
}

/// A node's standing for the table's last column.
fn describe(t: &NodeTrust) -> String {
    match t {
        NodeTrust::Trusted => "trusted".into(),
        NodeTrust::Quarantined {
            remaining, cause, ..
        } => format!(
            "QUARANTINED for {}s more, no lock vote (it {cause})",
            remaining.as_secs_f64().ceil()
        ),
        NodeTrust::Suspect { cause } => {
            format!("suspect: counters repaired one by one (it {cause})")
        }
        _ => "unknown (not checked)".into(),
    }
}

/// Each distinct warning with the nodes it concerns, in order of first
/// appearance.
fn grouped(reports: &[NodeReport]) -> Vec<(&str, Vec<usize>)> {
    let mut out: Vec<(&str, Vec<usize>)> = Vec::new();
    for (i, r) in reports.iter().enumerate() {
        for w in &r.warnings {
            match out.iter_mut().find(|(seen, _)| seen == w) {
                Some((_, nodes)) => nodes.push(i),
                None => out.push((w, vec![i])),
            }
        }
    }
    out
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

async fn check_node(url: &str, timeout: Duration) -> NodeReport {
    let mut r = NodeReport {
        addr: url.to_owned(),
        reachable: false,
        rtt: None,
        version: "-".into(),
        offset_ms: None,
        clock: None,
        detail: "-".into(),
        warnings: Vec::new(),
    };
    // A member that is a Redis Cluster: its first seed.
    let first = match url.split_once("+cluster://") {
        Some((scheme, rest)) => format!("{scheme}://{}", rest.split(',').next().unwrap_or(rest)),
        None => url.to_owned(),
    };
    let client = match redis::Client::open(first.as_str()) {
        Ok(c) => c,
        Err(_) => {
            r.detail = "invalid url".into();
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

/// A `key:value` field of an INFO reply.
fn field<'a>(info: &'a str, key: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(warnings: &[&str]) -> NodeReport {
        NodeReport {
            addr: String::new(),
            reachable: true,
            rtt: None,
            version: String::new(),
            offset_ms: None,
            clock: None,
            detail: String::new(),
            warnings: warnings.iter().map(|w| w.to_string()).collect(),
        }
    }

    #[test]
    fn a_warning_shared_by_nodes_is_listed_once() {
        let reports = [
            report(&["no AOF"]),
            report(&[]),
            report(&["no AOF", "clock"]),
        ];
        assert_eq!(
            grouped(&reports),
            [("no AOF", vec![0, 2]), ("clock", vec![2])]
        );
    }

    #[test]
    fn info_fields() {
        let info = "# Server\r\nredis_version:7.0.15\r\naof_enabled:1\r\n";
        assert_eq!(field(info, "redis_version"), Some("7.0.15"));
        assert_eq!(field(info, "aof_enabled"), Some("1"));
        assert_eq!(field(info, "nope"), None);
    }
}
