//! What `redquorum status` tells of a node's clock against ours, from three
//! `TIME` readings 0.6 s apart: its rate (the advance over the least and
//! the most time that passed here bounds it) where the two spans agree,
//! or the jump that makes them disagree. The library measures the same
//! way from the replies a client already gets (its `NodeStats` and the
//! `redquorum.node.clock.rate` gauge); a one-shot command has only these.

use std::time::{Duration, Instant};

use redquorum::redis;

/// The gap between readings.
pub const SPAN: Duration = Duration::from_millis(600);

/// One reading: sent and answered on our monotonic clock, the node's clock
/// in µs.
#[derive(Clone, Copy, Debug)]
pub struct Reading {
    /// When `TIME` went out.
    pub sent: Instant,
    /// When its reply came in.
    pub recv: Instant,
    /// The node's clock, µs since the epoch.
    pub node_us: i64,
}

/// What three readings show.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Clock {
    /// Its clock runs between `lo` and `hi` times as fast as ours.
    Rate {
        /// At least.
        lo: f64,
        /// At most.
        hi: f64,
    },
    /// The second span's advance differs from the first's rate by this
    /// much at least (ms; positive: ahead): a step while we watched.
    Jumped(f64),
}

/// Reads the node's `TIME` once, within `timeout`.
pub async fn read(
    conn: &mut redis::aio::MultiplexedConnection,
    timeout: Duration,
) -> Option<Reading> {
    let sent = Instant::now();
    let cmd = redis::cmd("TIME");
    let time = cmd.query_async::<(i64, i64)>(conn);
    let (secs, micros) = tokio::time::timeout(timeout, time).await.ok()?.ok()?;
    Some(Reading {
        sent,
        recv: Instant::now(),
        node_us: secs.checked_mul(1_000_000)?.checked_add(micros)?,
    })
}

/// The rate between `a` and `b`: (at least, at most).
fn rate(a: &Reading, b: &Reading) -> Option<(f64, f64)> {
    let least = b.sent.checked_duration_since(a.recv)?.as_micros() as f64;
    let most = b.recv.checked_duration_since(a.sent)?.as_micros() as f64;
    if least <= 0.0 {
        return None;
    }
    let advance = (b.node_us - a.node_us) as f64;
    Some(((advance - 1.0) / most, (advance + 1.0) / least))
}

/// What readings `r` (in order) show.
pub fn judge(r: &[Reading; 3]) -> Option<Clock> {
    let (first, second) = (rate(&r[0], &r[1])?, rate(&r[1], &r[2])?);
    if first.0 <= second.1 && second.0 <= first.1 {
        let (lo, hi) = rate(&r[0], &r[2])?;
        return Some(Clock::Rate { lo, hi });
    }
    // The second span against what the first span's rate allows.
    let most = r[2].recv.duration_since(r[1].sent).as_micros() as f64;
    let least = r[2].sent.duration_since(r[1].recv).as_micros() as f64;
    let advance = (r[2].node_us - r[1].node_us) as f64;
    let ms = if second.0 > first.1 {
        (advance - most * first.1) / 1e3
    } else {
        (advance - least * first.0) / 1e3
    };
    Some(Clock::Jumped(ms))
}

/// The table's cell: `+5.06%` (how much faster than ours, at most; `0.00%`
/// within the measurement's bound), or `jumped +30000ms`.
pub fn cell(c: Option<Clock>) -> String {
    match c {
        None => "-".into(),
        Some(Clock::Rate { lo, hi }) if lo <= 1.0 && 1.0 <= hi => "0.00%".into(),
        Some(Clock::Rate { lo, hi }) if hi < 1.0 => format!("{:+.2}%", (lo - 1.0) * 100.0),
        Some(Clock::Rate { hi, .. }) => format!("{:+.2}%", (hi - 1.0) * 100.0),
        Some(Clock::Jumped(ms)) => format!("jumped {ms:+.0}ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(base: Instant, ms: u64, node_ms: f64) -> Reading {
        let sent = base + Duration::from_millis(ms);
        Reading {
            sent,
            recv: sent + Duration::from_micros(200),
            node_us: 1_700_000_000_000_000 + (node_ms * 1000.0) as i64,
        }
    }

    #[test]
    fn a_steady_fast_clock_is_a_rate_and_a_step_is_a_jump() {
        let t = Instant::now();
        let fast = [at(t, 0, 0.0), at(t, 600, 630.0), at(t, 1200, 1260.0)];
        let Some(Clock::Rate { lo, hi }) = judge(&fast) else {
            panic!("{:?}", judge(&fast))
        };
        assert!(lo <= 1.05 && 1.05 <= hi && hi - lo < 0.001, "{lo} {hi}");
        assert_eq!(cell(judge(&fast)).get(..3), Some("+5."));
        let same = [at(t, 0, 0.0), at(t, 600, 600.0), at(t, 1200, 1200.0)];
        assert_eq!(cell(judge(&same)), "0.00%");
        let step = [at(t, 0, 0.0), at(t, 600, 600.0), at(t, 1200, 31_200.0)];
        let Some(Clock::Jumped(ms)) = judge(&step) else {
            panic!("{:?}", judge(&step))
        };
        assert!((29_990.0..=30_000.0).contains(&ms), "{ms}");
        let back = [at(t, 0, 0.0), at(t, 600, 600.0), at(t, 1200, -28_800.0)];
        assert!(matches!(judge(&back), Some(Clock::Jumped(ms)) if ms < -29_990.0));
    }
}
