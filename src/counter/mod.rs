//! The quorum counter: ranges of numbers that never overlap, shared by serial
//! numbers and fencing tokens.
//!
//! Every node keeps one record per counter, `(period, n)`: the period stamp
//! numbers were last issued in and the last number issued in it. No TTL: the
//! record is the high-water mark. To allocate `k` numbers, a client proposes
//! `expected -> new` to all nodes with an atomic compare-and-set (see
//! `scripts.rs`: `COUNTER_CAS`): a node accepts iff its record is `<= expected`.
//!
//! Why this is safe whatever clocks, pauses or the lock do: an allocation is
//! issued only if a quorum accepted it, any two quorums share a node, and a
//! node accepts a proposal only if its record is not above the proposal's
//! start, after which its record is the proposal's end. So of two allocations
//! that overlap, the shared node would have had to accept the second after the
//! first, which it refuses.
//!
//! Why it also survives a node that forgot its data (restarted without AOF): a
//! forgetful node accepts anything, so on its own the rule above could let a
//! stale proposal through it and two lagging nodes. So an allocation is also
//! refused if *any* node that answered refused it (a refusal proves some node
//! is ahead of `expected`), and the round waits for every node not known to
//! be unresponsive, not just the first quorum. The refusals carry the nodes'
//! records, so the retry proposes from the true maximum without a separate
//! read: in the steady state an allocation is one round trip.
//!
//! Repair, for nodes that did lose data: a node the connection check found
//! may have lost writes (see `node/trust/amnesia.rs`) is *suspect* for as long as
//! its process lives, and its acceptance counts for a counter only once
//! that counter's record there is *repaired*: stamped with the node's
//! `run_id` after a round that won without it. Such a round's quorum of
//! trusted acceptances shares a node with every earlier allocation's
//! quorum, so its `new` is above every number issued, and so is the
//! suspect node's record once it accepted that `new`. A round that every
//! node accepted also wins (a new counter on new nodes, or after an
//! upgrade): it holds while fewer than a quorum of nodes have lost data and
//! not been repaired. Time does not heal a counter.

pub(crate) mod batch;
pub(crate) mod mint;
pub(crate) mod scripts;
pub(crate) mod turns;

use std::cmp::Ordering;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use tokio::time::Instant;
use tracing::{debug, instrument};

use crate::error::{Error, NodeErrorKind, Result};
use crate::node::connection::request::Request;
use crate::quorum::fanout::Fanout;
use crate::quorum::tally::{node_bit, NodeSet, Tally, Vote};
use crate::quorum::{Counts, Quorum};

/// Fewest compare-and-set rounds one allocation tries before giving up.
pub(crate) const MIN_CAS_ATTEMPTS: u32 = 32;

/// How long one allocation keeps trying rounds (at least
/// [`MIN_CAS_ATTEMPTS`] of them) before giving up.
pub(crate) const CONTENTION_PATIENCE: Duration = Duration::from_secs(2);

/// A counter's high-water mark: `(period, n)`, ordered by period then n.
/// Period stamps are fixed-width digit strings (or empty for "never
/// resets"), so their string order is their time order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Record {
    /// Period stamp, e.g. `20261122`; empty before anything was issued.
    pub(crate) period: String,
    /// Last number issued in `period`.
    pub(crate) n: u64,
}

impl PartialOrd for Record {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Record {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.period.as_str(), self.n).cmp(&(other.period.as_str(), other.n))
    }
}

/// Where a counter's record lives on every node.
#[derive(Clone, Debug)]
pub(crate) struct CounterKeys {
    /// The counter's name, for errors and logs (a fencing counter's is the
    /// resource's, the shared counter's or the election's name).
    pub(crate) name: String,
    /// Its key, in our reserved namespace (see `keys.rs`).
    pub(crate) key: String,
    /// Where versions before the reserved namespace kept it, in the same
    /// hash slot: read (if it is a hash) while `key` does not exist yet, so
    /// numbering goes on from there after an upgrade; never written.
    pub(crate) legacy: String,
    /// The key of the lock this process's allocations take for a while
    /// after a lost round, so contending processes take turns.
    pub(crate) turns: String,
}

/// Outcome of one compare-and-set round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Round {
    /// A quorum accepted and nobody refused: the range is ours.
    Won,
    /// Somebody is ahead of `expected`: retry from this maximum.
    Stale(Record),
}

/// The rule every node applies (the `COUNTER_CAS` script): accept a
/// proposal that starts at `expected` iff the node's record is not above it.
/// A test runs the script on a real node against this function, and the
/// model checker's nodes apply it.
#[cfg(test)]
pub(crate) fn cas_accepts(current: &Record, expected: &Record) -> bool {
    current <= expected
}

/// When a round may stop counting: somebody refused (proof that some node
/// is ahead of `expected`), or failures make a quorum impossible, or a
/// quorum accepted and no node that still owes an answer is healthy (one
/// not known to be unresponsive). Waiting for every healthy node is what
/// keeps a node that forgot its data from helping a stale proposal through.
pub(crate) fn cas_finished(tally: &Tally, owed_by_healthy: bool) -> bool {
    if tally.no != 0 || tally.failures_prevent_quorum() {
        return true;
    }
    tally.yes_count() >= tally.quorum && !owed_by_healthy
}

/// [`cas_finished`] for a counter round. Of the tally's acceptances,
/// `untrusted` come from suspect nodes whose record is not repaired: they
/// do not count toward the quorum, but a round every node accepted wins,
/// so such a round waits for everyone it can.
pub(crate) fn counted_finished(tally: &Tally, untrusted: NodeSet, owed_by_healthy: bool) -> bool {
    if tally.no != 0 || tally.failures_prevent_quorum() {
        return true;
    }
    let trusted = (tally.yes & !untrusted).count_ones() as usize;
    let heard = tally.yes_count() + tally.failures.len();
    !owed_by_healthy && (trusted >= tally.quorum || heard >= tally.asked)
}

/// A finished round's outcome, given the highest record any refusal
/// carried: stale if anybody refused; won with a quorum of trusted
/// acceptances (not in `untrusted`), or with every node's; else `None`
/// (no quorum).
pub(crate) fn cas_outcome(
    tally: &Tally,
    untrusted: NodeSet,
    highest: Option<Record>,
) -> Option<Round> {
    let trusted = (tally.yes & !untrusted).count_ones() as usize;
    match highest {
        Some(max) => Some(Round::Stale(max)),
        None if trusted >= tally.quorum || tally.yes_count() == tally.asked => Some(Round::Won),
        None => None,
    }
}

/// Allocates numbers from the counter at `key`.
///
/// `plan` turns the best known high-water mark into the new record to
/// propose (applying period rollover, the clock rule and the width limit);
/// it may refuse with an error. Starts from `hint` (the last record this
/// process saw) to save a round trip. Returns `(expected, new)` of the
/// winning proposal: the numbers issued are `new.n - k + 1 ..= new.n` in
/// `new.period`.
///
/// # Errors
///
/// What `plan` returns, [`Error::NoQuorum`] when too few nodes answer, and
/// [`Error::CounterContention`] after [`MIN_CAS_ATTEMPTS`] lost rounds and
/// [`CONTENTION_PATIENCE`].
#[instrument(skip_all, fields(counter = name, outcome, conflicts, nodes))]
pub(crate) async fn allocate(
    nodes: &Quorum,
    name: &str,
    key: &CounterKeys,
    hint: Option<Record>,
    plan: &mut (dyn FnMut(&Record) -> Result<Record> + Send),
) -> Result<(Record, Record)> {
    let started = Instant::now();
    let mut conflicts = 0;
    let result = cas_rounds(nodes, name, key, hint, plan, &mut conflicts).await;
    let span = tracing::Span::current();
    span.record(
        "outcome",
        if result.is_ok() {
            "allocated"
        } else {
            "failed"
        },
    );
    span.record("conflicts", conflicts);
    let telemetry = &nodes.telemetry;
    telemetry.allocation(started.elapsed(), conflicts, result.is_ok());
    result
}

/// [`allocate`]'s compare-and-set rounds, counting those lost in
/// `conflicts`.
async fn cas_rounds(
    nodes: &Quorum,
    name: &str,
    key: &CounterKeys,
    hint: Option<Record>,
    plan: &mut (dyn FnMut(&Record) -> Result<Record> + Send),
    conflicts: &mut u32,
) -> Result<(Record, Record)> {
    let mut expected = hint.unwrap_or_default();
    let started = Instant::now();
    let mut attempt = 0;
    while attempt < MIN_CAS_ATTEMPTS || started.elapsed() < CONTENTION_PATIENCE {
        attempt += 1;
        let new = plan(&expected)?;
        match cas_round(nodes, name, key, &expected, &new).await? {
            Round::Won => return Ok((expected, new)),
            Round::Stale(max) => {
                debug!(counter = name, attempt, ?max, "counter moved on; retrying");
                *conflicts += 1;
                expected = expected.max(max);
            }
        }
    }
    Err(Error::CounterContention {
        counter: name.to_owned(),
        attempts: attempt,
    })
}

/// One compare-and-set round on all nodes.
async fn cas_round(
    quorum: &Quorum,
    name: &str,
    key: &CounterKeys,
    expected: &Record,
    new: &Record,
) -> Result<Round> {
    let req: Arc<Request> =
        Request::script(&scripts::COUNTER_CAS, [&key.key, &key.legacy], |cmd| {
            cmd.arg(&expected.period)
                .arg(expected.n)
                .arg(&new.period)
                .arg(new.n);
        });
    let mut highest: Option<Record> = None;
    // Acceptances by suspect nodes whose record here is not repaired, and
    // the process each one is (for the stamp).
    let untrusted = AtomicU64::new(0);
    let mut stamps: Vec<(usize, String)> = Vec::new();
    let classify = |i: usize, v: &Value, fan: &Fanout<'_>| {
        let (accepted, rec, stamp) = parse_cas_reply(v)?;
        if !accepted {
            highest = highest.take().max(Some(rec));
        } else if let Some(run_id) = fan.suspect_run_id(i) {
            // Repaired: stamped under the node's current process. A node
            // whose process is unknown (INFO refused) never is.
            let repaired = !run_id.is_empty() && stamp == run_id;
            if !repaired {
                untrusted.fetch_or(node_bit(i), Relaxed);
                if !run_id.is_empty() {
                    stamps.push((i, run_id));
                }
            }
        }
        Some(accepted)
    };
    let done = |tally: &Tally, fan: &Fanout<'_>| {
        counted_finished(tally, untrusted.load(Relaxed), fan.owed_by_healthy())
    };
    let (tally, fan) = quorum
        .vote_until_via(&req, "cas", Counts::All, classify, done)
        .await;
    let untrusted = untrusted.into_inner();
    match cas_outcome(&tally, untrusted, highest) {
        Some(Round::Won) => {
            // Let the proposal reach slow nodes too: it repairs lagging ones.
            fan.finish_in_background();
            // Suspect nodes that accepted now hold `new`, above every number
            // issued: stamp their record repaired (if it is still `new`).
            for (i, run_id) in stamps {
                let stamp = Request::script(&scripts::COUNTER_STAMP, [&key.key], |cmd| {
                    cmd.arg(&new.period).arg(new.n).arg(&run_id);
                });
                quorum.send_quietly(&stamp, node_bit(i));
            }
            Ok(Round::Won)
        }
        Some(stale) => Ok(stale),
        None => {
            let mut tally = tally;
            for (i, node) in quorum.nodes.iter().enumerate() {
                if untrusted & node_bit(i) != 0 {
                    tally.yes &= !node_bit(i);
                    let cause = node.loss_cause();
                    tally.record(
                        i,
                        &node.addr,
                        Vote::Failed(NodeErrorKind::Unrepaired { cause }),
                    );
                }
            }
            Err(tally.into_error(name, &key.key))
        }
    }
}

/// Parses the script's `{accepted, period, n, stamp}` reply (the stamp:
/// the `run_id` the record was repaired under, or empty).
fn parse_cas_reply(v: &Value) -> Option<(bool, Record, String)> {
    let Value::Array(items) = v else { return None };
    let [ok, period, n, stamp] = items.as_slice() else {
        return None;
    };
    let ok = match ok {
        Value::Int(1) => true,
        Value::Int(0) => false,
        _ => return None,
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let period = text(period)?;
    let n = text(n)?.parse().ok()?;
    Some((ok, Record { period, n }, text(stamp)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(p: &str, n: u64) -> Record {
        Record {
            period: p.into(),
            n,
        }
    }

    #[test]
    fn records_order_by_period_then_number() {
        assert!(rec("", 0) < rec("20261122", 0));
        assert!(rec("20261122", 9999) < rec("20261123", 1));
        assert!(rec("20261122", 5) < rec("20261122", 6));
        assert_eq!(
            rec("20261122", 5).max(rec("20261121", 9)),
            rec("20261122", 5)
        );
    }

    #[test]
    fn cas_rule_accepts_only_at_or_below_expected() {
        let expected = rec("20261122", 10);
        assert!(cas_accepts(&rec("", 0), &expected)); // empty / restarted node
        assert!(cas_accepts(&rec("20261122", 3), &expected)); // lagging node
        assert!(cas_accepts(&rec("20261122", 10), &expected));
        assert!(!cas_accepts(&rec("20261122", 11), &expected));
        assert!(!cas_accepts(&rec("20261123", 1), &expected));
    }

    #[test]
    fn two_overlapping_proposals_cannot_both_pass_a_shared_node() {
        // Both start from the same expected; the first one a node accepts
        // moves its record past the other's start.
        let expected = rec("20261122", 10);
        let a_new = rec("20261122", 15);
        let mut node = rec("20261122", 10);
        assert!(cas_accepts(&node, &expected));
        node = a_new;
        assert!(!cas_accepts(&node, &expected));
    }

    /// The script and [`cas_accepts`] agree on every pair of records, run
    /// on a real node (`redis-server` from `REDQUORUM_REDIS_SERVER` or
    /// PATH, as the test harness starts it).
    #[test]
    fn cas_script_and_rule_agree_on_a_real_node() {
        let (_node, mut conn) = crate::scratch::node();
        let records = [
            rec("", 0),
            rec("20261122", 9),
            rec("20261122", 10),
            rec("20261122", 11),
            rec("20261122", 100),
            rec("20261123", 1),
            rec("2026112", 50),
        ];
        let mut checked = 0;
        for current in &records {
            for expected in &records {
                let _: () = redis::cmd("DEL").arg("cas").query(&mut conn).expect("DEL");
                if *current != Record::default() {
                    let _: () = redis::cmd("HSET")
                        .arg("cas")
                        .arg("p")
                        .arg(&current.period)
                        .arg("n")
                        .arg(current.n)
                        .query(&mut conn)
                        .expect("HSET");
                }
                let reply: Value = redis::cmd("EVAL")
                    .arg(scripts::COUNTER_CAS.src)
                    .arg(1)
                    .arg("cas")
                    .arg(&expected.period)
                    .arg(expected.n)
                    .arg(&expected.period)
                    .arg(expected.n + 1)
                    .query(&mut conn)
                    .expect("EVAL");
                let (accepted, was, _) = parse_cas_reply(&reply).expect("a CAS reply");
                assert_eq!(
                    accepted,
                    cas_accepts(current, expected),
                    "node at {current:?}, proposal from {expected:?}"
                );
                assert_eq!(was, *current);
                checked += 1;
            }
        }
        assert_eq!(checked, records.len() * records.len());
        // A record an older version kept under the legacy key is where
        // numbering goes on, while ours does not exist; a legacy key of
        // another type (a user's lock) is ignored.
        let cas = |conn: &mut redis::Connection, expected: &Record| -> (bool, Record) {
            let reply: Value = redis::cmd("EVAL")
                .arg(scripts::COUNTER_CAS.src)
                .arg(2)
                .arg("cas")
                .arg("legacy")
                .arg(&expected.period)
                .arg(expected.n)
                .arg(&expected.period)
                .arg(expected.n + 1)
                .query(conn)
                .expect("EVAL");
            let (accepted, was, _) = parse_cas_reply(&reply).expect("a CAS reply");
            (accepted, was)
        };
        let _: () = redis::cmd("DEL").arg("cas").query(&mut conn).expect("DEL");
        let _: () = redis::cmd("HSET")
            .arg("legacy")
            .arg("p")
            .arg("20261122")
            .arg("n")
            .arg(9)
            .query(&mut conn)
            .expect("HSET");
        assert_eq!(
            cas(&mut conn, &Record::default()),
            (false, rec("20261122", 9))
        );
        assert_eq!(
            cas(&mut conn, &rec("20261122", 9)),
            (true, rec("20261122", 9))
        );
        // From now on ours decides.
        assert_eq!(
            cas(&mut conn, &rec("20261122", 9)),
            (false, rec("20261122", 10))
        );
        let _: () = redis::cmd("DEL")
            .arg("cas")
            .arg("legacy")
            .query(&mut conn)
            .expect("DEL");
        let _: () = redis::cmd("SET")
            .arg("legacy")
            .arg("v")
            .query(&mut conn)
            .expect("SET");
        assert_eq!(
            cas(&mut conn, &Record::default()),
            (true, Record::default())
        );
        // The repair stamp: set only while the record is what the won round
        // left, kept by later acceptances, and returned with every reply.
        let stamp = |conn: &mut redis::Connection, r: &Record| -> i64 {
            redis::cmd("EVAL")
                .arg(scripts::COUNTER_STAMP.src)
                .arg(1)
                .arg("cas")
                .arg(&r.period)
                .arg(r.n)
                .arg("run1")
                .query(conn)
                .expect("EVAL")
        };
        let now = rec("", 1);
        assert_eq!(stamp(&mut conn, &rec("", 2)), 0);
        assert_eq!(stamp(&mut conn, &now), 1);
        let reply: Value = redis::cmd("EVAL")
            .arg(scripts::COUNTER_CAS.src)
            .arg(1)
            .arg("cas")
            .arg(&now.period)
            .arg(now.n)
            .arg(&now.period)
            .arg(now.n + 1)
            .query(&mut conn)
            .expect("EVAL");
        assert_eq!(parse_cas_reply(&reply), Some((true, now, "run1".into())));
    }

    #[test]
    fn parses_replies() {
        let v = Value::Array(vec![
            Value::Int(0),
            Value::BulkString(b"20261122".to_vec()),
            Value::BulkString(b"42".to_vec()),
            Value::BulkString(b"run1".to_vec()),
        ]);
        assert_eq!(
            parse_cas_reply(&v),
            Some((false, rec("20261122", 42), "run1".into()))
        );
        assert_eq!(parse_cas_reply(&Value::Int(1)), None);
    }
}
