//! `redquorum status`: one row per node (reachable, round trip, server,
//! clock offset and rate, persistence) and warnings where a node is unsafe.

use std::process::ExitCode;
use std::time::Duration;

use redquorum::{redis, NodeTrust};

use crate::client::build;
use crate::clockrate;
use crate::exit;
use crate::nodecheck::{check_client, NodeReport};
use crate::shards;

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
        "{:<4} {:<24} {:<9} {:>8} {:<13} {:>10} {:>8}  {:<24} trust",
        "node", "address", "reachable", "rtt", "server", "clock", "rate", "persistence"
    );
    for (i, r) in reports.iter().enumerate() {
        let standing = match trust.get(i) {
            Some(t) if r.reachable => describe(t),
            _ => "-".into(),
        };
        print_row(&i.to_string(), r, &standing);
        for (k, shard) in r.shards.iter().enumerate() {
            print_row(&format!(" {i}.{k}"), shard, "");
        }
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

/// One row of the table: `name` in the first column, `standing` in the
/// last.
fn print_row(name: &str, r: &NodeReport, standing: &str) {
    println!(
        "{:<4} {:<24} {:<9} {:>8} {:<13} {:>10} {:>8}  {:<24} {}",
        name,
        r.addr,
        if r.reachable { "yes" } else { "NO" },
        r.rtt
            .map_or("-".into(), |d| format!("{:.2}ms", d.as_secs_f64() * 1e3)),
        r.version,
        r.offset_ms.map_or("-".into(), |o| format!("{o:+}ms")),
        clockrate::cell(r.clock),
        r.detail,
        standing,
    );
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

async fn check_node(url: &str, timeout: Duration) -> NodeReport {
    if url.contains("+cluster://") {
        return shards::check_member(url, timeout).await;
    }
    match redis::Client::open(url) {
        Ok(client) => check_client(&client, timeout).await,
        Err(_) => NodeReport {
            detail: "invalid url".into(),
            ..NodeReport::new(url)
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(warnings: &[&str]) -> NodeReport {
        NodeReport {
            reachable: true,
            warnings: warnings.iter().map(|w| w.to_string()).collect(),
            ..NodeReport::new("")
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
}
