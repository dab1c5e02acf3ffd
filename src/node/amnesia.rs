//! Whether a node may have lost writes we were told it made, learnt each
//! time a connection to it is made (a restart always breaks connections),
//! and the rule that keeps such a node from counting for a while.
//!
//! Signals, all read in one pipeline right after connecting, before any
//! request of ours goes out on the new connection:
//!
//! * `INFO server`: `run_id` (a new one per process) and
//!   `uptime_in_seconds` (when the process began, on the node's own clock).
//! * `CONFIG GET appendonly` and `appendfsync`: only `yes` and `always` keep
//!   every acknowledged write across a crash. Where `CONFIG` is renamed away
//!   or not allowed, the node is taken to be not durable.
//! * A marker hash of ours, with no TTL: `run`, the process we last saw
//!   there, and `loss`, the uptime second from which it may lack writes
//!   (`-` for none). A marker written by another process (restart, or a
//!   replica promoted in its place) or no marker at all says what the
//!   `INFO` fields cannot; its loss moment lets every client, also one that
//!   starts later, keep the same quarantine.
//!
//! The rule ([`assess`]): a node that may lack writes from uptime second
//! `l` does not count toward a lock quorum until its uptime reaches
//! `l + quarantine + 1`, by which time every lock it may have forgotten has
//! expired (no client uses a TTL above the quarantine). The extra second is
//! the uptime's grain: Redis reports it as the difference of two wall-clock
//! readings, each cut to a whole second, so it may run up to (not
//! including) one second ahead of the time that passed. A node started at
//! x.97 s reports an uptime of 1 at (x+1).02 s, 50 ms later; without the
//! margin, its quarantine would end almost a second early. For the counter,
//! time does not heal: such a node is *suspect* for as long as its process
//! lives, and its replies count for a counter key only once that key's
//! record there was raised from a quorum of trusted nodes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{RedisError, RedisResult, Value};

/// What one connection's set-up learnt about the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Probe {
    /// The process's `run_id`; empty if `INFO` was refused.
    pub(crate) run_id: String,
    /// Whole seconds the process has run (`INFO` truncates).
    pub(crate) uptime: u64,
    /// `appendonly yes` with `appendfsync always`; `None` if `CONFIG GET`
    /// was refused.
    pub(crate) durable: Option<bool>,
    /// The marker as found: the process that wrote it, and its loss moment.
    pub(crate) marker: Option<(String, Option<u64>)>,
}

/// Why a node may lack writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cause {
    /// A new process, without durable persistence, whose marker is gone.
    RestartedEmpty,
    /// A new process, without durable persistence, that reloaded older data.
    RestartedNotDurable,
    /// A long-running process we have not marked before: first use, or its
    /// data was flushed or a replica took its place.
    Unmarked,
    /// A long-running process other than the one we marked: a replica
    /// promoted in its place, or a restart nobody saw.
    Replaced,
    /// `INFO` was refused: nothing about the node can be told.
    Unknown,
    /// An earlier client found one of the above (the marker says so).
    Marked,
}

impl Cause {
    /// Words for logs and errors.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Cause::RestartedEmpty => "restarted without durable persistence and lost its data",
            Cause::RestartedNotDurable => {
                "restarted without durable persistence (appendonly yes, appendfsync always)"
            }
            Cause::Unmarked => "has none of our marks: new to us, flushed, or replaced",
            Cause::Replaced => "is not the process we saw before (a failover or restart)",
            Cause::Unknown => "may not run INFO, so a restart cannot be seen",
            Cause::Marked => "may have lost writes (found by another client)",
        }
    }
}

/// What the rule concludes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Assessment {
    /// The uptime second from which the node may lack writes, if any.
    pub(crate) loss: Option<u64>,
    /// Why, when `loss` is set.
    pub(crate) cause: Option<Cause>,
    /// Seconds of quarantine left, counted from the probe (0: counts now).
    pub(crate) remaining: u64,
}

/// The rule, pure: what `probe` means with `quarantine` seconds of
/// quarantine. See the module docs.
pub(crate) fn assess(probe: &Probe, quarantine: u64) -> Assessment {
    let durable = probe.durable == Some(true);
    let recent = probe.uptime < quarantine;
    let (loss, cause) = if probe.run_id.is_empty() {
        // Nothing can be told: the worst, from now.
        (Some(probe.uptime), Some(Cause::Unknown))
    } else {
        match &probe.marker {
            Some((id, loss)) if *id == probe.run_id => (*loss, loss.map(|_| Cause::Marked)),
            // Another process that started recently and reloaded our marker
            // from disk: a durable one lost nothing in its restart, but
            // keeps what the process before it may have lost.
            Some((_, None)) if durable && recent => (None, None),
            Some(_) if durable && recent => (Some(0), Some(Cause::Marked)),
            Some(_) if recent => (Some(0), Some(Cause::RestartedNotDurable)),
            // Another process that has run longer than any client took to
            // mark it: a replica promoted in its place (which may lack the
            // last writes, whatever its persistence).
            Some(_) => (Some(probe.uptime), Some(Cause::Replaced)),
            // No marker. A durable node that started recently loaded all it
            // ever acknowledged, and none of it was ours: first use.
            None if durable && recent => (None, None),
            None if recent => (Some(0), Some(Cause::RestartedEmpty)),
            None => (Some(probe.uptime), Some(Cause::Unmarked)),
        }
    };
    // One second more than the readings say: see the module docs.
    let remaining = loss.map_or(0, |l| (l + quarantine + 1).saturating_sub(probe.uptime));
    Assessment {
        loss,
        cause,
        remaining,
    }
}

/// How a link checks its new connections.
#[derive(Clone, Debug)]
pub(crate) struct AmnesiaCheck {
    /// Our marker key on the node.
    pub(crate) marker_key: String,
    /// The quarantine, in whole seconds (rounded up).
    pub(crate) quarantine_secs: u64,
}

/// What a client knows of a node's trust, from its latest connection.
#[derive(Debug, Default)]
pub(crate) struct Trust {
    /// Whether a quarantine may be on: read on every lock vote, so the
    /// common case takes no lock.
    active: AtomicBool,
    /// Whether the node may have lost writes in its current process: read
    /// on every counter acceptance, so kept apart from the rest too.
    suspect: AtomicBool,
    /// The rest, changed when a connection is made.
    state: Mutex<TrustState>,
}

/// The part of [`Trust`] read off the hot path.
#[derive(Clone, Debug, Default)]
pub(crate) struct TrustState {
    /// Whether a probe ever completed.
    pub(crate) probed: bool,
    /// The node's process, as of the last probe.
    pub(crate) run_id: String,
    /// Why the node may lack writes, if it may.
    pub(crate) cause: Option<Cause>,
    /// The end of its quarantine (also after it passed).
    pub(crate) until: Option<Instant>,
    /// Whether its end was logged.
    left_logged: bool,
}

impl Trust {
    /// Takes in what a new connection's probe found. Returns the quarantine
    /// it starts, if it starts one (for the caller to log once).
    pub(crate) fn record(
        &self,
        probe: &Probe,
        verdict: &Assessment,
        at: Instant,
    ) -> Option<(Duration, Cause)> {
        let until = (verdict.remaining > 0).then(|| at + Duration::from_secs(verdict.remaining));
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let new = until.is_some() && (st.until.is_none_or(|u| u < at) || st.run_id != probe.run_id);
        st.probed = true;
        st.run_id.clone_from(&probe.run_id);
        st.cause = verdict.cause;
        if until.is_some() {
            st.until = until;
            st.left_logged = false;
        }
        self.active.store(until.is_some(), Ordering::Release);
        self.suspect
            .store(verdict.cause.is_some(), Ordering::Release);
        drop(st);
        match (new, until, verdict.cause) {
            (true, Some(u), Some(cause)) => Some((u - at, cause)),
            _ => None,
        }
    }

    /// The quarantine's end if it is still on at `now`; and whether this
    /// call found it just over (true once, for the caller to log).
    pub(crate) fn quarantined(&self, now: Instant) -> (Option<Instant>, bool) {
        if !self.active.load(Ordering::Acquire) {
            return (None, false);
        }
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match st.until {
            Some(u) if u > now => (Some(u), false),
            _ => {
                self.active.store(false, Ordering::Release);
                let first = !st.left_logged;
                st.left_logged = true;
                (None, first)
            }
        }
    }

    /// The process of a node that may have lost writes (empty if `INFO`
    /// was refused); `None` for a trusted node, without taking the lock.
    pub(crate) fn suspect_run_id(&self) -> Option<String> {
        if !self.suspect.load(Ordering::Acquire) {
            return None;
        }
        let st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        st.cause.map(|_| st.run_id.clone())
    }

    /// A copy of what is known.
    pub(crate) fn snapshot(&self) -> TrustState {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Reads the marker's fields (`HMGET run loss`); `None` for anything else
/// (no marker, or not ours: treated as absent).
fn parse_marker(v: &Value) -> Option<(String, Option<u64>)> {
    let [run, loss] = redis::from_redis_value_ref::<[Option<String>; 2]>(v).ok()?;
    let loss = match loss?.as_str() {
        "-" => None,
        l => Some(l.parse().ok()?),
    };
    Some((run?, loss))
}

/// One field of an `INFO` reply.
fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines().find_map(|l| {
        l.strip_prefix(name)
            .and_then(|r| r.strip_prefix(':'))
            .map(str::trim)
    })
}

/// The second element of a `CONFIG GET` reply (a two-element array, or a
/// map under RESP3).
fn config_value(v: &Value) -> Option<String> {
    let text = |v: &Value| redis::from_redis_value_ref::<String>(v).ok();
    match v {
        Value::Array(a) if a.len() == 2 => text(&a[1]),
        Value::Map(m) if m.len() == 1 => text(&m[0].1),
        _ => None,
    }
}

/// Reads the probe's four replies.
fn read_probe(replies: &[Value]) -> Probe {
    let text = |v: &Value| redis::from_redis_value_ref::<String>(v).ok();
    let info = replies.first().and_then(text).unwrap_or_default();
    let run_id = info_field(&info, "run_id").unwrap_or_default().to_owned();
    let uptime = info_field(&info, "uptime_in_seconds")
        .and_then(|u| u.parse().ok())
        .unwrap_or(0);
    let aof = replies.get(1).and_then(config_value);
    let fsync = replies.get(2).and_then(config_value);
    let durable = match (aof, fsync) {
        (Some(a), Some(f)) => Some(a == "yes" && f == "always"),
        _ => None,
    };
    let marker = replies.get(3).and_then(parse_marker);
    Probe {
        run_id,
        uptime,
        durable,
        marker,
    }
}

/// Probes a new connection (see [`probe`]) and takes in what it found;
/// logs a quarantine it starts, once. An error if the node did not answer.
pub(crate) async fn check(
    conn: &mut MultiplexedConnection,
    check: &AmnesiaCheck,
    trust: &Trust,
    (index, addr): (usize, &str),
    timeout: Duration,
) -> RedisResult<()> {
    let Some((probe, verdict, at)) =
        probe(conn, &check.marker_key, check.quarantine_secs, timeout).await
    else {
        return Err(RedisError::from((
            redis::ErrorKind::Io,
            "no reply to the connection's check (INFO, CONFIG GET)",
        )));
    };
    if let Some((remaining, cause)) = trust.record(&probe, &verdict, at) {
        tracing::warn!(
            node = index,
            "node {index} ({addr}) {}: it does not count toward a lock quorum for {}s, \
             until no lock it may have forgotten can still be valid",
            cause.describe(),
            remaining.as_secs()
        );
    }
    Ok(())
}

/// Probes a freshly made connection and keeps the marker up to date.
/// Returns the probe, its assessment and when it was taken; `None` if the
/// node did not answer (the connection is then of no use anyway).
pub(crate) async fn probe(
    conn: &mut MultiplexedConnection,
    marker_key: &str,
    quarantine: u64,
    timeout: Duration,
) -> Option<(Probe, Assessment, Instant)> {
    let mut pipe = redis::pipe();
    pipe.cmd("INFO").arg("server");
    pipe.cmd("CONFIG").arg("GET").arg("appendonly");
    pipe.cmd("CONFIG").arg("GET").arg("appendfsync");
    pipe.cmd("HMGET").arg(marker_key).arg("run").arg("loss");
    // Errors (a renamed or forbidden command) come back as values.
    let replies: Vec<Value> = tokio::time::timeout(timeout, conn.send_packed_commands(&pipe, 0, 4))
        .await
        .ok()?
        .ok()?;
    let at = Instant::now();
    let probe = read_probe(&replies);
    let verdict = assess(&probe, quarantine);
    let found = probe.marker.clone();
    if !probe.run_id.is_empty() && found != Some((probe.run_id.clone(), verdict.loss)) {
        let loss = verdict.loss.map_or("-".to_owned(), |l| l.to_string());
        let set = redis::cmd("HSET")
            .arg(marker_key)
            .arg("run")
            .arg(&probe.run_id)
            .arg("loss")
            .arg(loss)
            .to_owned();
        // Best effort, and not waited for: the verdict is already ours, and
        // the first requests need not wait another round trip after a
        // restart (a node that refuses it is assessed again next time).
        let mut conn = conn.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(timeout, conn.send_packed_command(&set)).await;
        });
    }
    Some((probe, verdict, at))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(
        run_id: &str,
        uptime: u64,
        durable: Option<bool>,
        marker: Option<(&str, Option<u64>)>,
    ) -> Probe {
        Probe {
            run_id: run_id.into(),
            uptime,
            durable,
            marker: marker.map(|(id, l)| (id.into(), l)),
        }
    }

    #[test]
    fn a_node_we_marked_counts() {
        let a = assess(&probe("r1", 5, Some(false), Some(("r1", None))), 60);
        assert_eq!((a.loss, a.remaining), (None, 0));
    }

    #[test]
    fn a_restart_without_durable_persistence_is_quarantined_from_its_start() {
        let a = assess(&probe("r2", 5, Some(false), None), 60);
        assert_eq!(
            (a.loss, a.cause, a.remaining),
            (Some(0), Some(Cause::RestartedEmpty), 56)
        );
        let a = assess(&probe("r2", 5, Some(false), Some(("r1", None))), 60);
        assert_eq!(
            (a.loss, a.cause, a.remaining),
            (Some(0), Some(Cause::RestartedNotDurable), 56)
        );
        // Unknown persistence counts as not durable.
        assert_eq!(assess(&probe("r2", 5, None, None), 60).remaining, 56);
    }

    #[test]
    fn a_durable_restart_loses_nothing() {
        let a = assess(&probe("r2", 5, Some(true), Some(("r1", None))), 60);
        assert_eq!((a.loss, a.remaining), (None, 0));
        // ... but keeps what the process before it may have lost: still
        // quarantined (counted from its start), and suspect after.
        let a = assess(&probe("r2", 5, Some(true), Some(("r1", Some(30)))), 60);
        assert_eq!(
            (a.loss, a.cause, a.remaining),
            (Some(0), Some(Cause::Marked), 56)
        );
        // A durable process we never marked that has run longer than the
        // quarantine took another's place: a promoted replica.
        let a = assess(&probe("r2", 500, Some(true), Some(("r1", None))), 60);
        assert_eq!(
            (a.loss, a.cause, a.remaining),
            (Some(500), Some(Cause::Replaced), 61)
        );
        // First start of a durable node: nothing of ours was there.
        assert_eq!(assess(&probe("r2", 5, Some(true), None), 60).loss, None);
    }

    #[test]
    fn a_long_running_node_without_our_marker_is_quarantined_from_now() {
        let a = assess(&probe("r1", 1000, Some(true), None), 60);
        assert_eq!(
            (a.loss, a.cause, a.remaining),
            (Some(1000), Some(Cause::Unmarked), 61)
        );
        let a = assess(&probe("r9", 1000, Some(false), Some(("r1", None))), 60);
        assert_eq!(
            (a.loss, a.cause, a.remaining),
            (Some(1000), Some(Cause::Replaced), 61)
        );
    }

    #[test]
    fn a_later_client_keeps_the_quarantine_the_marker_records() {
        let a = assess(&probe("r2", 20, Some(false), Some(("r2", Some(0)))), 60);
        assert_eq!(
            (a.loss, a.cause, a.remaining),
            (Some(0), Some(Cause::Marked), 41)
        );
        // Over, but still suspect for the counter.
        let a = assess(&probe("r2", 90, Some(false), Some(("r2", Some(0)))), 60);
        assert_eq!((a.loss, a.remaining), (Some(0), 0));
    }

    /// Redis's uptime at wall-clock instant `at_ms` of a process started
    /// at `start_ms`: the difference of the two instants, each cut to a
    /// whole second.
    fn uptime(start_ms: u64, at_ms: u64) -> u64 {
        at_ms / 1000 - start_ms / 1000
    }

    #[test]
    fn the_quarantine_never_ends_early_whatever_the_uptime_grain() {
        // Every start within a second (10 ms steps), every probe up to 5 s
        // later (7 ms steps): the quarantine a probe computes ends no
        // earlier than `quarantine` after the loss. Without the margin
        // second, a start at 0.99 s probed at 1.0 s ends it 0.99 s early.
        let q = 3;
        for start in (0..1000).step_by(10) {
            for delay in (1..5000).step_by(7) {
                let at = start + delay;
                // Restarted empty: lost everything from its start.
                let a = assess(&probe("r2", uptime(start, at), Some(false), None), q);
                assert!(
                    at + a.remaining * 1000 >= start + q * 1000,
                    "started at {start} ms, probed at {at} ms: {} s left",
                    a.remaining
                );
                // Unmarked at `at`: lost what it may from then on; a later
                // client reads the loss second from the marker.
                let loss = uptime(start, at);
                for later in [at + 1, at + 333, at + 999, at + 1500] {
                    let marker = Some(("r1", Some(loss)));
                    let b = assess(&probe("r1", uptime(start, later), Some(false), marker), q);
                    assert!(
                        later + b.remaining * 1000 >= at + q * 1000,
                        "marked at {at} ms, probed at {later} ms: {} s left",
                        b.remaining
                    );
                }
            }
        }
    }

    #[test]
    fn without_info_nothing_is_trusted() {
        let a = assess(&probe("", 0, None, None), 60);
        assert_eq!((a.cause, a.remaining), (Some(Cause::Unknown), 61));
    }

    #[test]
    fn replies_are_read() {
        let info = Value::BulkString(
            b"# Server\r\nredis_version:7.0.15\r\nrun_id:abc\r\nuptime_in_seconds:42\r\n".to_vec(),
        );
        let pair = |k: &str, v: &str| {
            Value::Array(vec![
                Value::BulkString(k.as_bytes().to_vec()),
                Value::BulkString(v.as_bytes().to_vec()),
            ])
        };
        let refused = redis::parse_redis_value(b"-ERR unknown command 'CONFIG'\r\n").unwrap();
        assert!(matches!(refused, Value::ServerError(_)));
        let p = read_probe(&[
            info.clone(),
            pair("appendonly", "yes"),
            pair("appendfsync", "always"),
            Value::Array(vec![
                Value::BulkString(b"abc".to_vec()),
                Value::BulkString(b"3".to_vec()),
            ]),
        ]);
        assert_eq!(p, probe("abc", 42, Some(true), Some(("abc", Some(3)))));
        let none = Value::Array(vec![Value::Nil, Value::Nil]);
        let p = read_probe(&[info, refused.clone(), refused.clone(), none]);
        assert_eq!(p, probe("abc", 42, None, None));
        assert_eq!(parse_marker(&refused), None);
        let clean = Value::Array(vec![
            Value::BulkString(b"id".to_vec()),
            Value::BulkString(b"-".to_vec()),
        ]);
        assert_eq!(parse_marker(&clean), Some(("id".into(), None)));
    }
}
