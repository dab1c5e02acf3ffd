//! `redquorum status` for a member that is a Redis Cluster: a row per
//! shard master (checked as a node is), and what breaks the guarantees on
//! a cluster: slots no shard serves, `cluster-require-full-coverage yes`,
//! replicas that fail over on their own.

use std::time::Duration;

use redquorum::redis;

use crate::nodecheck::{check_client, NodeReport};

/// Slots in a Redis Cluster.
const SLOTS: u32 = 16384;

/// A shard master, as `CLUSTER SLOTS` names it: its address and how many
/// slots it serves.
struct Master {
    /// `host:port`.
    host: String,
    /// Port.
    port: u16,
    /// Slots served.
    slots: u32,
}

/// Checks the member at `url` (`redis+cluster://seed[,seed...]`): reads
/// its slot map from the first seed that answers, then checks every shard
/// master.
pub async fn check_member(url: &str, timeout: Duration) -> NodeReport {
    let (scheme, rest) = url.split_once("+cluster://").unwrap_or(("redis", url));
    let (auth, hosts) = match rest.rsplit_once('@') {
        Some((auth, hosts)) => (format!("{auth}@"), hosts),
        None => (String::new(), rest),
    };
    let seeds: Vec<String> = hosts
        .split(',')
        .map(|h| format!("{scheme}://{auth}{}", h.trim()))
        .collect();
    let mut report = NodeReport::new(&format!(
        "cluster {}",
        hosts.split(',').next().unwrap_or(hosts)
    ));
    let mut last = "no seed".to_owned();
    for seed in &seeds {
        let Ok(client) = redis::Client::open(seed.as_str()) else {
            report.detail = "invalid url".into();
            return report;
        };
        match tokio::time::timeout(timeout, read_masters(&client)).await {
            Ok(Ok(masters)) => return check_shards(report, &client, masters, timeout).await,
            Ok(Err(e)) => last = redquorum::explain(&e),
            Err(_) => last = format!("no answer within {}ms", timeout.as_millis()),
        }
    }
    report.detail = last;
    report
}

/// Checks each of `masters` with the settings of `client` (a seed's), and
/// lints the member.
async fn check_shards(
    mut report: NodeReport,
    client: &redis::Client,
    masters: Vec<Master>,
    timeout: Duration,
) -> NodeReport {
    let served: u32 = masters.iter().map(|m| m.slots).sum();
    let checks = masters.iter().map(|m| async move {
        let mut shard = match shard_client(client, m) {
            Some(c) => check_client(&c, timeout).await,
            None => NodeReport::new(&format!("{}:{}", m.host, m.port)),
        };
        if shard.reachable {
            lint_shard(&mut shard, client, m, timeout).await;
        }
        shard
    });
    report.shards = futures::future::join_all(checks).await;
    report.reachable = report.shards.iter().all(|s| s.reachable);
    let down = report.shards.iter().filter(|s| !s.reachable).count();
    report.detail = match down {
        0 => format!("cluster, {} shards", report.shards.len()),
        d => format!("cluster, {d} of {} shards down", report.shards.len()),
    };
    if served < SLOTS {
        report.warnings.push(format!(
            "serves {served} of {SLOTS} slots: resources in the others fail on this member"
        ));
    }
    for shard in &report.shards {
        for w in &shard.warnings {
            report.warnings.push(format!("shard {}: {w}", shard.addr));
        }
    }
    report
}

/// What breaks the guarantees on shard master `m`: a whole member refusing
/// every request for one dead shard, replicas that take over on their own
/// (each takeover quarantines the shard), and an ACL that hides from
/// clients the evidence of slots the shard took over.
async fn lint_shard(shard: &mut NodeReport, client: &redis::Client, m: &Master, timeout: Duration) {
    let Some(client) = shard_client(client, m) else {
        return;
    };
    let read = async {
        let mut conn = client.get_multiplexed_async_connection().await?;
        let coverage: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("cluster-require-full-coverage")
            .query_async(&mut conn)
            .await
            .unwrap_or_default();
        let replication: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut conn)
            .await?;
        let mut refused = Vec::new();
        for sub in ["NODES", "INFO"] {
            let reply = redis::cmd("CLUSTER")
                .arg(sub)
                .query_async::<redis::Value>(&mut conn)
                .await;
            if reply.is_err() {
                refused.push(format!("CLUSTER {sub}"));
            }
        }
        Ok::<_, redis::RedisError>((coverage, replication, refused))
    };
    let Ok(Ok((coverage, replication, refused))) = tokio::time::timeout(timeout, read).await else {
        return;
    };
    if !refused.is_empty() {
        shard.warnings.push(format!(
            "refuses {}: a client's connection check cannot see that this shard took slots \
             over (which may carry another shard's lost writes); let the user run \
             +cluster|nodes +cluster|info",
            refused.join(" and ")
        ));
    }
    if coverage.get(1).is_some_and(|v| v == "yes") {
        shard.warnings.push(
            "cluster-require-full-coverage yes: one dead shard makes the whole member refuse \
             every request (set it to no)"
                .into(),
        );
    }
    let replicas = replication
        .lines()
        .find_map(|l| l.strip_prefix("connected_slaves:"))
        .and_then(|n| n.trim().parse::<u32>().ok())
        .unwrap_or(0);
    if replicas > 0 {
        shard.warnings.push(format!(
            "{replicas} replica(s) may take over on their own: each takeover keeps this shard out \
             of lock quorums for the restart quarantine; where members may fail over together, \
             give clients an amnesia tolerance"
        ));
    }
    shard.detail = format!("{}, {} slots", shard.detail, m.slots);
}

/// A client for master `m` with the settings (credentials, TLS) of `seed`.
fn shard_client(seed: &redis::Client, m: &Master) -> Option<redis::Client> {
    let info = seed.get_connection_info().clone();
    let (host, port) = (m.host.clone(), m.port);
    let addr = match info.addr() {
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
    };
    redis::Client::open(info.set_addr(addr)).ok()
}

/// The shard masters, by `CLUSTER SLOTS` as the node `client` points at
/// answers it.
async fn read_masters(client: &redis::Client) -> redis::RedisResult<Vec<Master>> {
    let mut conn = client.get_multiplexed_async_connection().await?;
    let ranges: Vec<redis::Value> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(&mut conn)
        .await?;
    let asked = client.get_connection_info().addr().to_string();
    let mut masters: Vec<Master> = Vec::new();
    for range in ranges {
        let redis::Value::Array(parts) = range else {
            continue;
        };
        let int =
            |v: Option<&redis::Value>| v.and_then(|v| redis::from_redis_value_ref::<u32>(v).ok());
        let (Some(first), Some(last)) = (int(parts.first()), int(parts.get(1))) else {
            continue;
        };
        let Some(redis::Value::Array(master)) = parts.get(2) else {
            continue;
        };
        let host = master
            .first()
            .and_then(|h| redis::from_redis_value_ref::<String>(h).ok())
            .filter(|h| !h.is_empty() && h != "?")
            .unwrap_or_else(|| {
                asked
                    .rsplit_once(':')
                    .map_or(asked.clone(), |(h, _)| h.to_owned())
            });
        let Some(port) = int(master.get(1)).and_then(|p| u16::try_from(p).ok()) else {
            continue;
        };
        let slots = last.saturating_sub(first) + 1;
        match masters
            .iter_mut()
            .find(|m| m.host == host && m.port == port)
        {
            Some(m) => m.slots += slots,
            None => masters.push(Master { host, port, slots }),
        }
    }
    masters.sort_by(|a, b| (&a.host, a.port).cmp(&(&b.host, b.port)));
    Ok(masters)
}
