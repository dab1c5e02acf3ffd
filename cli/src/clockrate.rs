//! What `redquorum status` tells of a node's clock against ours, from three
//! `TIME` readings 0.6 s apart: its rate (the advance over the least and
//! the most time that passed here bounds it) where the two spans agree,
//! or the jump that makes them disagree, judged by the library
//! ([`NodeClock::from_readings`]), which measures the same way from the
//! replies a client already gets (its `NodeStats` and the
//! `redquorum.node.clock.rate` gauge); a one-shot command has only these.

use std::time::{Duration, Instant};

use redquorum::{redis, ClockReading, NodeClock};

/// The gap between readings.
pub const SPAN: Duration = Duration::from_millis(600);

/// Reads the node's `TIME` once, within `timeout`.
pub async fn read(
    conn: &mut redis::aio::MultiplexedConnection,
    timeout: Duration,
) -> Option<ClockReading> {
    let sent = Instant::now();
    let cmd = redis::cmd("TIME");
    let time = cmd.query_async::<(u64, u64)>(conn);
    let (secs, micros) = tokio::time::timeout(timeout, time).await.ok()?.ok()?;
    Some(ClockReading {
        sent,
        recv: Instant::now(),
        node_us: secs.checked_mul(1_000_000)?.checked_add(micros)?,
    })
}

/// The table's cell: `+5.06%` (how much faster than ours, at most; `0.00%`
/// within the measurement's bound), or `jumped +30000ms`.
pub fn cell(c: Option<NodeClock>) -> String {
    match c {
        None => "-".into(),
        Some(NodeClock::Rate { lo, hi }) if lo <= 1.0 && 1.0 <= hi => "0.00%".into(),
        Some(NodeClock::Rate { lo, hi }) if hi < 1.0 => format!("{:+.2}%", (lo - 1.0) * 100.0),
        Some(NodeClock::Rate { hi, .. }) => format!("{:+.2}%", (hi - 1.0) * 100.0),
        Some(NodeClock::Jumped { ms }) => format!("jumped {ms:+.0}ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_say_how_much_faster_or_the_jump() {
        let rate = |lo, hi| Some(NodeClock::Rate { lo, hi });
        assert_eq!(cell(rate(1.0504, 1.0506)), "+5.06%");
        assert_eq!(cell(rate(0.9999, 1.0001)), "0.00%");
        assert_eq!(cell(rate(0.95, 0.9502)), "-5.00%");
        assert_eq!(
            cell(Some(NodeClock::Jumped { ms: 29_998.4 })),
            "jumped +29998ms"
        );
        assert_eq!(cell(None), "-");
    }
}
