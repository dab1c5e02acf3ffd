//! The events of [`telemetry`](super) recorded through the `metrics`
//! facade, with the `metrics` feature (without it, every function here is
//! empty and the facade is not a dependency).
//!
//! [`METRICS`] is the one list of names, kinds, units and labels; the
//! table in docs/observability.md is checked against it. Labels are small fixed sets
//! (`labels.rs`) plus the node's index; a resource's name is never a label,
//! only the class a user's mapping gives it (`class`, present only with
//! [`RedlockBuilder::metric_class`](crate::RedlockBuilder::metric_class)).

#![cfg_attr(
    not(feature = "metrics"),
    allow(unused_variables, unused_imports, dead_code)
)]

use std::time::Duration;

use crate::telemetry::labels::{Decided, LostReason, Mode, Primitive, Woken, ERROR_KINDS};

/// One documented metric: name, kind, unit, labels, meaning.
pub(crate) type Described = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
);

/// Acquisition time, by outcome.
const ACQUIRE: &str = "redquorum.lock.acquire.duration";
/// Attempts per acquisition.
const ROUNDS: &str = "redquorum.lock.acquire.rounds";
/// A waiter's sleeps, by what woke it.
const WAIT: &str = "redquorum.lock.wait.duration";
/// Time held.
const HOLD: &str = "redquorum.lock.hold.duration";
/// Validity left at release.
const VALIDITY: &str = "redquorum.lock.release.validity";
/// Locks lost.
const LOST: &str = "redquorum.lock.lost";
/// Locks held now.
const HELD: &str = "redquorum.lock.held";
/// Extension time.
const EXTEND: &str = "redquorum.lock.extend.duration";
/// One node's answer time.
const REQUEST: &str = "redquorum.node.request.duration";
/// One node's failures.
const ERRORS: &str = "redquorum.node.errors";
/// Nodes answering.
const UP: &str = "redquorum.nodes.up";
/// A node's clock jumps, seen in the `TIME` behind our requests.
const CLOCK: &str = "redquorum.node.clock.jumps";
/// A node clock's measured rate against ours.
const RATE: &str = "redquorum.node.clock.rate";
/// Quorum rounds.
const ROUND: &str = "redquorum.quorum.round.duration";
/// Counter allocations.
const ALLOCATION: &str = "redquorum.counter.allocation.duration";
/// Lost compare-and-set rounds.
const CONFLICTS: &str = "redquorum.counter.conflicts";
/// Leading or not.
const LEADER: &str = "redquorum.election.leader";
/// Becoming or ceasing to be leader.
const TRANSITIONS: &str = "redquorum.election.transitions";

/// Every metric this crate records.
pub(crate) const METRICS: [Described; 18] = [
    (ACQUIRE, "histogram", "seconds", "primitive, mode, outcome, class", "time from the call to its result: a lock, permit or leadership, or the error"),
    (ROUNDS, "histogram", "count", "primitive, mode, outcome", "attempts (quorum rounds on the lock keys) one acquisition made"),
    (WAIT, "histogram", "seconds", "woken_by", "one sleep of a waiter between attempts, by what ended it: notification, ttl, own_release, cap, deadline, pause"),
    (HOLD, "histogram", "seconds", "primitive, class", "time from acquisition to release"),
    (VALIDITY, "histogram", "seconds", "primitive, class", "validity left when a lock was released (0: it had expired)"),
    (LOST, "counter", "count", "primitive, reason, class", "locks lost while held: extend_failed, validity_ran_out, expired_while_held"),
    (HELD, "gauge", "count", "primitive, class", "locks, permits and leaderships held now, neither released nor lost"),
    (EXTEND, "histogram", "seconds", "primitive, outcome", "one extension (by hand or automatic), ok or failed"),
    (REQUEST, "histogram", "seconds", "node", "one node's answer (or failure) to a request of a quorum round"),
    (ERRORS, "counter", "count", "node, kind", "a node's failures: timeout, connection, server, unexpected_reply, denied, quarantined, unrepaired"),
    (CLOCK, "counter", "count", "node, direction", "a node's clock ran ahead of ours beyond the drift allowance (ahead: it sits out lock quorums for the restart quarantine) or stepped back (behind)"),
    (RATE, "gauge", "ratio", "node", "how fast a node's clock runs against ours, measured over the last second or two (upper bound; 1 = same rate), set whenever a new rate is accepted; beyond 1 + drift_factor, its keys' life is counted at this rate"),
    (UP, "gauge", "count", "", "nodes whose last request was answered in time, after each round"),
    (ROUND, "histogram", "seconds", "op, decided", "one quorum round, by how it was decided: early (before every node answered), all, timeout"),
    (ALLOCATION, "histogram", "seconds", "outcome", "one allocation from a quorum counter (serial numbers, fencing tokens, terms), ok or failed"),
    (CONFLICTS, "counter", "count", "", "compare-and-set rounds lost to another client's allocation"),
    (LEADER, "gauge", "count", "class", "elections this client leads now (1 or 0 per class)"),
    (TRANSITIONS, "counter", "count", "to, class", "this client became leader (to=leader) or stopped leading (to=follower)"),
];

/// Registers every metric's description and unit with the installed
/// recorder (see [`crate::describe_metrics`]).
#[cfg(feature = "metrics")]
pub(crate) fn describe() {
    use ::metrics::Unit;
    for (name, kind, unit, _, help) in METRICS {
        let unit = if unit == "seconds" {
            Unit::Seconds
        } else {
            Unit::Count
        };
        match kind {
            "histogram" => ::metrics::describe_histogram!(name, unit, help),
            "gauge" => ::metrics::describe_gauge!(name, unit, help),
            _ => ::metrics::describe_counter!(name, unit, help),
        }
    }
}

/// `labels` plus the class, if there is one.
#[cfg(feature = "metrics")]
fn with_class(mut labels: Vec<::metrics::Label>, class: Option<&str>) -> Vec<::metrics::Label> {
    if let Some(class) = class {
        labels.push(::metrics::Label::new("class", class.to_owned()));
    }
    labels
}

/// A label from static strings.
#[cfg(feature = "metrics")]
fn label(key: &'static str, value: &'static str) -> ::metrics::Label {
    ::metrics::Label::from_static_parts(key, value)
}

/// See `Acquisition::finish`.
pub(crate) fn acquired(
    primitive: Primitive,
    mode: Mode,
    class: Option<&str>,
    outcome: &'static str,
    took: Duration,
    rounds: u32,
) {
    #[cfg(feature = "metrics")]
    {
        let base = vec![
            label("primitive", primitive.as_str()),
            label("mode", mode.as_str()),
            label("outcome", outcome),
        ];
        ::metrics::histogram!(ROUNDS, base.clone()).record(f64::from(rounds));
        ::metrics::histogram!(ACQUIRE, with_class(base, class)).record(took.as_secs_f64());
    }
}

/// See `Telemetry::woke`.
pub(crate) fn woke(woken: Woken, slept: Duration) {
    #[cfg(feature = "metrics")]
    ::metrics::histogram!(WAIT, "woken_by" => woken.as_str()).record(slept.as_secs_f64());
}

/// See `Telemetry::node_reply`.
pub(crate) fn node_reply(node: usize, took: Duration, kind: Option<usize>) {
    #[cfg(feature = "metrics")]
    {
        let node = node.to_string();
        ::metrics::histogram!(REQUEST, "node" => node.clone()).record(took.as_secs_f64());
        if let Some(k) = kind {
            ::metrics::counter!(ERRORS, "node" => node, "kind" => ERROR_KINDS[k]).increment(1);
        }
    }
}

/// A node's clock ran ahead of ours beyond the allowance (`ahead`) or
/// stepped back (see `node/clock/clockwatch.rs`).
pub(crate) fn clock_jump(node: usize, ahead: bool) {
    #[cfg(feature = "metrics")]
    {
        let direction = if ahead { "ahead" } else { "behind" };
        ::metrics::counter!(CLOCK, "node" => node.to_string(), "direction" => direction)
            .increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (node, ahead);
}

/// Node `node`'s clock was measured running at `rate` against ours (see
/// `node/clock/clockrate.rs`).
pub(crate) fn clock_rate(node: usize, rate: f64) {
    #[cfg(feature = "metrics")]
    ::metrics::gauge!(RATE, "node" => node.to_string()).set(rate);
    #[cfg(not(feature = "metrics"))]
    let _ = (node, rate);
}

/// See `Telemetry::round`.
pub(crate) fn round(
    op: &'static str,
    decided: Decided,
    took: Duration,
    up: impl FnOnce() -> usize,
) {
    #[cfg(feature = "metrics")]
    {
        ::metrics::histogram!(ROUND, "op" => op, "decided" => decided.as_str())
            .record(took.as_secs_f64());
        ::metrics::gauge!(UP).set(up() as f64);
    }
}

/// See `Telemetry::allocation`.
pub(crate) fn allocation(took: Duration, conflicts: u32, ok: bool) {
    #[cfg(feature = "metrics")]
    {
        let outcome = if ok { "ok" } else { "failed" };
        ::metrics::histogram!(ALLOCATION, "outcome" => outcome).record(took.as_secs_f64());
        if conflicts > 0 {
            ::metrics::counter!(CONFLICTS).increment(u64::from(conflicts));
        }
    }
}

/// See `Telemetry::extension`.
pub(crate) fn extension(primitive: Primitive, took: Duration, ok: bool) {
    #[cfg(feature = "metrics")]
    {
        let outcome = if ok { "ok" } else { "failed" };
        ::metrics::histogram!(EXTEND, "primitive" => primitive.as_str(), "outcome" => outcome)
            .record(took.as_secs_f64());
    }
}

/// See `Holding`: one more (`delta` 1) or one fewer (-1) held.
pub(crate) fn held(primitive: Primitive, class: Option<&str>, delta: f64) {
    #[cfg(feature = "metrics")]
    {
        let labels = with_class(vec![label("primitive", primitive.as_str())], class);
        ::metrics::gauge!(HELD, labels).increment(delta);
        if primitive == Primitive::Election {
            ::metrics::gauge!(LEADER, with_class(Vec::new(), class)).increment(delta);
            let to = if delta > 0.0 { "leader" } else { "follower" };
            ::metrics::counter!(TRANSITIONS, with_class(vec![label("to", to)], class)).increment(1);
        }
    }
}

/// See `Holding::released`.
pub(crate) fn released(
    primitive: Primitive,
    class: Option<&str>,
    held: Duration,
    validity_left: Duration,
) {
    #[cfg(feature = "metrics")]
    {
        let labels = with_class(vec![label("primitive", primitive.as_str())], class);
        ::metrics::histogram!(HOLD, labels.clone()).record(held.as_secs_f64());
        ::metrics::histogram!(VALIDITY, labels).record(validity_left.as_secs_f64());
    }
}

/// See `Holding::lost`.
pub(crate) fn lost(primitive: Primitive, class: Option<&str>, reason: LostReason) {
    #[cfg(feature = "metrics")]
    {
        let base = vec![
            label("primitive", primitive.as_str()),
            label("reason", reason.as_str()),
        ];
        ::metrics::counter!(LOST, with_class(base, class)).increment(1);
    }
}

#[cfg(test)]
mod tests {
    use super::METRICS;

    /// The table in docs/observability.md and [`METRICS`] name the same
    /// metrics, with the same kinds and labels.
    #[test]
    fn telemetry_the_readme_table_is_the_list_of_metrics() {
        let readme = include_str!("../../docs/observability.md");
        let rows: Vec<&str> = readme
            .lines()
            .filter(|l| l.starts_with("| `redquorum."))
            .collect();
        assert_eq!(
            rows.len(),
            METRICS.len(),
            "docs/observability.md rows: {rows:#?}"
        );
        for (name, kind, unit, labels, _) in METRICS {
            let row = rows
                .iter()
                .find(|r| r.starts_with(&format!("| `{name}` |")))
                .unwrap_or_else(|| panic!("docs/observability.md's table has no row for {name}"));
            let cells: Vec<&str> = row.split(" | ").collect();
            assert_eq!(cells[2], kind, "{row}");
            assert_eq!(cells[1].contains("_seconds"), unit == "seconds", "{row}");
            for label in labels.split(", ").filter(|l| !l.is_empty()) {
                assert!(cells[3].contains(&format!("`{label}`")), "{label} in {row}");
            }
        }
    }
}
