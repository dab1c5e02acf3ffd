//! The connection's check: probes a node (see
//! [`evidence`](super::evidence)), decides by the table in
//! [`amnesia`](super::amnesia), and takes the verdict into the node's
//! [`Trust`]; then brings our marker up to date.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{RedisError, RedisResult, Value};

use crate::node::trust::amnesia::{assess, AmnesiaCheck, Assessment, Cause, Memory};
use crate::node::trust::evidence::{self, Marker, MarkerId, Probe};
use crate::node::trust::marker;
use crate::node::trust::tags;
use crate::node::trust::Trust;

/// Probes a new connection and takes in what it found; logs a quarantine
/// it starts, once, and brings our marker (at key `marker`) up to date. An
/// error if the node did not answer.
pub(crate) async fn check(
    conn: &mut MultiplexedConnection,
    check: &AmnesiaCheck,
    trust: &Arc<Trust>,
    (index, addr): (usize, &str),
    timeout: Duration,
    marker: &str,
) -> RedisResult<()> {
    let deployment = trust.deployment();
    let Some((probe, verdict, at, span)) = probe(
        conn,
        &trust.memory(),
        check.quarantine_secs,
        timeout,
        (marker, deployment.as_deref()),
    )
    .await
    else {
        return Err(RedisError::from((
            redis::ErrorKind::Io,
            "no reply to the connection's check (INFO, CONFIG GET)",
        )));
    };
    // Whose writes the process holds (`tags.rs`), judged by the tags a
    // majority of the members carry: waits for the other members' checks
    // where those are not known yet. A cluster's shards are not judged so;
    // their tags stand for their member's (any shard's that has some).
    let panel = trust.panel();
    let shard = probe.slots.is_some();
    let belongs = match (&panel, &probe.marker) {
        (Some(p), Some(Marker::Found { tags, .. })) if !shard => {
            p.tags().settle(index, tags.as_deref(), timeout).await
        }
        (Some(p), Some(Marker::Found { tags, .. })) => {
            p.tags()
                .record(index, Some(tags.clone().unwrap_or_default()));
            Some(true)
        }
        (Some(p), _) if !shard => {
            p.tags().record(index, None);
            Some(true)
        }
        _ => Some(true),
    };
    let verdict = tags::judged(
        verdict,
        &probe,
        &trust.memory(),
        check.quarantine_secs,
        belongs,
    );
    if let (None, Some(p), Some(Marker::Found { tags, .. }), Some(loss)) =
        (belongs, &panel, &probe.marker, verdict.loss)
    {
        // Foreign for want of the other members' tags: where they come
        // within its quarantine and tell it is ours, it counts from then.
        let (p, set, trust, run) = (
            Arc::clone(p),
            tags.clone(),
            Arc::downgrade(trust),
            probe.run_id.clone(),
        );
        let wait = Duration::from_secs(check.quarantine_secs);
        tokio::spawn(async move {
            if p.tags().told(set.as_deref(), wait).await == Some(true) {
                if let Some(t) = trust.upgrade() {
                    t.ours_after_all(&run, loss);
                }
            }
        });
    }
    let tag = panel.as_ref().map(|p| p.tags().tag());
    // Counts this client read of the same process that moved since
    // (evictions or flushes since its last look, statistics reset): keys
    // dropped from now, whatever the marker says (another client may have
    // recorded the drop already, or an operator reset the counts after it).
    let verdict = if trust.counts_moved(&probe, span) && verdict.loss != Some(probe.uptime) {
        Assessment {
            loss: Some(probe.uptime),
            cause: Some(Cause::Dropped),
            remaining: check.quarantine_secs,
        }
    } else {
        verdict
    };
    if trust.first_lint() {
        lint(&probe, index, addr);
    }
    // A foreign process's marker names it, and is left as it is: its loss
    // is this client's to serve (then our tag goes in), not a record for
    // clients of other node lists.
    let foreign = verdict.cause == Some(Cause::Foreign);
    let marked =
        foreign || marker::marker_is(probe.marker.as_ref(), &probe, verdict.loss, tag.as_deref());
    if let Some((remaining, cause)) = trust.record(&probe, &verdict, at, marked) {
        tracing::warn!(
            target: crate::telemetry::targets::QUARANTINE,
            node = index,
            "node {index} ({addr}) {}: it does not count toward a lock quorum for {}s, \
             until no lock it may have forgotten can still be valid",
            cause.describe(),
            remaining.as_secs()
        );
    }
    let watched = verdict
        .loss
        .is_some_and(|l| trust.served(&probe.run_id, l, Instant::now()));
    let vouched = trust.vouched();
    let served = serves(&verdict, marked, watched, vouched);
    let our_tag = tag.clone().unwrap_or_default();
    let set = deployment.and_then(|d| marker::marker_served(&probe, marker, (&d, &our_tag)));
    let set = match set.filter(|_| served) {
        Some(set) => Some(set),
        // A foreign process whose quarantine this client watched pass:
        // our tag goes into its marker, and later clients count it.
        None if foreign && watched && vouched && tag.is_some() => {
            Some(marker::marker_adopt(&probe, marker, &our_tag))
        }
        None => None,
    };
    if let Some(set) = set {
        // This client watched the loss's whole quarantine pass: later
        // clients may count the node at once. Not waited for.
        let mut conn = conn.clone();
        let (panel, tag) = (panel.clone(), our_tag.clone());
        tokio::spawn(async move {
            let wrote = tokio::time::timeout(timeout, conn.send_packed_command(&set)).await;
            if let (Ok(Ok(Value::Int(1))), Some(p)) = (wrote, panel) {
                p.tags().added(index, &tag);
            }
        });
    }
    if !probe.run_id.is_empty() && !marked {
        // Not waited for: the verdict is ours already, and the first
        // requests need not wait another round trip. Written only over the
        // marker as found (another client or an operator may have written
        // one meanwhile). The client remembers the process as marked once
        // the node said so, so that a marker that vanishes later is
        // evidence.
        let why = verdict.cause.map_or("kept", Cause::tag);
        let set = marker::marker_update(&probe, (verdict.loss, why), marker, &our_tag);
        let (mut conn, trust) = (conn.clone(), Arc::clone(trust));
        let written = MarkerId {
            run: probe.run_id.clone(),
            loss: verdict.loss,
            seen: Some(probe.seen().unwrap_or(0)),
        };
        tokio::spawn(async move {
            let wrote = tokio::time::timeout(timeout, conn.send_packed_command(&set)).await;
            if matches!(wrote, Ok(Ok(Value::Int(1)))) {
                trust.marker_written(written);
                if let Some(p) = panel {
                    p.tags().added(index, &our_tag);
                }
            }
        });
    }
    Ok(())
}

/// Says, once per node and client (at its first check), what makes the
/// node unsafe or costly to keep locks on: a restart that loses writes,
/// keys it may evict. Target `redquorum::lint`, for callers that report
/// the same their own way (the CLI's `status`).
fn lint(probe: &Probe, index: usize, addr: &str) {
    if probe.durable == Some(false) {
        tracing::warn!(
            target: crate::telemetry::targets::LINT,
            node = index,
            "node {index} ({addr}) runs without AOF and appendfsync always: a restart or \
             crash loses its locks and counter records (it then sits out lock quorums for the \
             restart quarantine)"
        );
    }
    if probe.evicts {
        tracing::warn!(
            target: crate::telemetry::targets::LINT,
            node = index,
            "node {index} ({addr}) may evict our keys (a maxmemory-policy other than \
             noeviction, with maxmemory): each request that asks for its vote also reads its \
             evictions, and any eviction keeps it out of lock quorums for the restart \
             quarantine (use noeviction)"
        );
    }
}

/// The rule, pure: whether a check whose verdict is `verdict` records in
/// our marker that its loss was served. Only where the marker names the
/// process and that loss (`marked`; the write compares them again) and
/// this client `watched` the loss's whole quarantine pass, counted from its
/// own first sight of it (`Trust::served`): a loss has no moment, so a
/// client that wrote it sooner would let the next one count the node before
/// a lock the node forgot could have expired (`model/served.rs`). And only
/// where others may take its word for it (`vouched`: a majority of its
/// members' clocks, two at least, show the quarantine over, `panel.rs`):
/// a client that reads the node's clock alone, its own clock and the
/// node's both fast, would see it over early, and every client of its
/// deployment would then count the node at once.
pub(crate) fn serves(verdict: &Assessment, marked: bool, watched: bool, vouched: bool) -> bool {
    marked && verdict.remaining > 0 && verdict.loss.is_some() && watched && vouched
}

/// Probes a freshly made connection: the probe, its assessment, when it
/// was taken, and when it was sent and answered on our clock; `None` if
/// the node did not answer, or is not serving its keys yet (loading its
/// data, a cluster still down): the connection is then of no use anyway. Our
/// marker is read at key `marker`, as a client of deployment `ours` (see
/// `panel.rs`).
pub(crate) async fn probe(
    conn: &mut MultiplexedConnection,
    seen: &Memory,
    quarantine: u64,
    timeout: Duration,
    (marker, ours): (&str, Option<&str>),
) -> Option<(
    Probe,
    Assessment,
    Instant,
    (tokio::time::Instant, tokio::time::Instant),
)> {
    let pipe = evidence::probe_pipeline(marker);
    let sent = crate::clock::now();
    // Errors (a renamed or forbidden command) come back as values.
    let replies: Vec<Value> = tokio::time::timeout(
        timeout,
        conn.send_packed_commands(&pipe, 0, evidence::PROBE_REPLIES),
    )
    .await
    .ok()?
    .ok()?;
    if evidence::marker_not_ready(&replies) {
        return None;
    }
    let at = Instant::now();
    let probe = evidence::read_probe(&replies, ours);
    let verdict = assess(&probe, seen, quarantine);
    Some((probe, verdict, at, (sent, crate::clock::now())))
}
