//! How fast a node's clock runs against ours, measured from the readings
//! `clockwatch.rs` takes (the node's `TIME` behind our requests), with the
//! bound our round trips leave.
//!
//! Between two readings `a` and `b`, the node's clock advanced `b.node -
//! a.node` while at least `b.sent - a.recv` and at most `b.recv - a.sent`
//! passed on ours: its rate lies between the advance over the most and
//! over the least. Two readings cannot tell a rate from a step, so a rate
//! is accepted only where two back-to-back spans of at least [`HALF`] each
//! agree (their ranges overlap): a step inside one of them makes them
//! disagree, and leaves the window once it slid past. The accepted rate is
//! the one over both spans, its upper bound the one used: a node found
//! running faster than the drift allowance is then judged, and its keys'
//! life counted, at its own rate ([`RateTrack::excess`]). Until a rate is
//! accepted (about a second of readings), the drift factor is all there is.

use std::time::Duration;

use tokio::time::Instant;

/// One reading of a node's clock: the node's `TIME` in microseconds, and
/// when (on our clock) the request went out and its reply came back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reading {
    /// When the request was handed to the connection.
    pub(crate) sent: Instant,
    /// When the reply was in.
    pub(crate) recv: Instant,
    /// The node's clock, µs since the Unix epoch.
    pub(crate) node_us: u64,
}

/// The shortest span a rate is measured over: our round trips' spread
/// (well under a millisecond on a LAN) is then a small part of it.
pub(crate) const HALF: Duration = Duration::from_millis(500);

/// How precise a span must be: its end readings' round trips together are
/// at most this part of it, so a rate's bounds are about that far apart.
/// A span is [`HALF`] on a LAN, longer where round trips are long (40 s at
/// 100 ms each): the rate's upper bound, which counts, is never the round
/// trips' doing (a 600 ms round trip over a 500 ms span would read 2.2).
pub(crate) const PRECISION: f64 = 0.005;

/// A node clock's rate against ours: how many of its seconds pass in one
/// of ours, between `lo` and `hi`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Rate {
    /// At least this.
    pub(crate) lo: f64,
    /// At most this.
    pub(crate) hi: f64,
}

impl Rate {
    /// The rate between readings `a` and `b` (`b` later), if at least some
    /// time surely passed between them.
    pub(crate) fn between(a: &Reading, b: &Reading) -> Option<Self> {
        let least = b.sent.checked_duration_since(a.recv)?.as_micros() as f64;
        let most = b.recv.checked_duration_since(a.sent)?.as_micros() as f64;
        if least <= 0.0 {
            return None;
        }
        // TIME's grain is a microsecond.
        let advance = b.node_us as f64 - a.node_us as f64;
        Some(Self {
            lo: (advance - 1.0) / most,
            hi: (advance + 1.0) / least,
        })
    }

    /// Whether the two ranges share a rate.
    fn agrees(&self, other: &Self) -> bool {
        self.lo <= other.hi && other.lo <= self.hi
    }
}

/// The measurement of one node's rate: a sliding window of two spans.
#[derive(Debug, Default)]
pub(crate) struct RateTrack {
    /// Where the window starts.
    anchor: Option<Reading>,
    /// The first reading a span after the anchor (see [`spans`]).
    mid: Option<Reading>,
    /// The latest rate two agreeing spans gave.
    accepted: Option<Rate>,
}

impl RateTrack {
    /// Takes in a reading, newer than every one before.
    pub(crate) fn observe(&mut self, r: Reading) {
        let Some(anchor) = self.anchor else {
            self.anchor = Some(r);
            return;
        };
        let Some(mid) = self.mid else {
            if spans(&anchor, &r) {
                self.mid = Some(r);
            } else if rtt(&r) < rtt(&anchor) && !spans_half(&anchor, &r) {
                // A closer start while the first span is young: a slow
                // reply (a busy moment) would make the span long.
                self.anchor = Some(r);
            }
            return;
        };
        if !spans(&mid, &r) {
            return;
        }
        if let (Some(first), Some(second)) = (Rate::between(&anchor, &mid), Rate::between(&mid, &r))
        {
            if first.agrees(&second) {
                self.accepted = Rate::between(&anchor, &r);
            }
        }
        self.anchor = Some(mid);
        self.mid = Some(r);
    }

    /// The accepted rate, if any.
    pub(crate) fn rate(&self) -> Option<Rate> {
        self.accepted
    }

    /// How much faster than ours the node's clock may run, by the accepted
    /// rate's upper bound (zero if none, or not faster).
    pub(crate) fn excess(&self) -> f64 {
        self.accepted.map_or(0.0, |r| (r.hi - 1.0).max(0.0))
    }
}

/// One reading of a node's clock, for [`NodeClock::from_readings`]: the
/// node's `TIME` in microseconds since the Unix epoch, and when (on this
/// machine's monotonic clock) the request went out and its reply came in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockReading {
    /// When `TIME` was sent.
    pub sent: std::time::Instant,
    /// When its reply came in.
    pub recv: std::time::Instant,
    /// The node's clock, µs since the Unix epoch.
    pub node_us: u64,
}

impl From<ClockReading> for Reading {
    fn from(r: ClockReading) -> Self {
        Self {
            sent: Instant::from_std(r.sent),
            recv: Instant::from_std(r.recv),
            node_us: r.node_us,
        }
    }
}

/// What readings of a node's clock show against ours, judged as a client
/// judges the replies it gets (`redquorum status` shows it).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum NodeClock {
    /// Its clock runs between `lo` and `hi` times as fast as ours.
    Rate {
        /// At least this.
        lo: f64,
        /// At most this.
        hi: f64,
    },
    /// The second span's advance differs from what the first span's rate
    /// allows by at least this many ms (positive: ahead): a step while the
    /// readings were taken.
    Jumped {
        /// The step, ms.
        ms: f64,
    },
}

impl NodeClock {
    /// What three readings, in order, show: a rate where the two spans
    /// between them agree (their ranges overlap), the step otherwise;
    /// `None` where no time surely passed between two of them.
    pub fn from_readings(r: &[ClockReading; 3]) -> Option<Self> {
        let [a, b, c] = r.map(Reading::from);
        let (first, second) = (Rate::between(&a, &b)?, Rate::between(&b, &c)?);
        if first.agrees(&second) {
            let Rate { lo, hi } = Rate::between(&a, &c)?;
            return Some(Self::Rate { lo, hi });
        }
        // The second span against what the first span's rate allows.
        let most = c.recv.duration_since(b.sent).as_micros() as f64;
        let least = c.sent.duration_since(b.recv).as_micros() as f64;
        let advance = c.node_us as f64 - b.node_us as f64;
        let ms = if second.lo > first.hi {
            (advance - most * first.hi) / 1e3
        } else {
            (advance - least * first.lo) / 1e3
        };
        Some(Self::Jumped { ms })
    }
}

/// Whether at least [`HALF`] surely passed from `a` to `b`, and their
/// round trips together are at most [`PRECISION`] of it.
fn spans(a: &Reading, b: &Reading) -> bool {
    let surely = b.sent.saturating_duration_since(a.recv);
    spans_half(a, b) && (rtt(a) + rtt(b)).as_secs_f64() <= surely.as_secs_f64() * PRECISION
}

/// Whether at least [`HALF`] surely passed from `a` to `b`.
fn spans_half(a: &Reading, b: &Reading) -> bool {
    b.sent
        .checked_duration_since(a.recv)
        .is_some_and(|d| d >= HALF)
}

/// A reading's round trip.
fn rtt(r: &Reading) -> Duration {
    r.recv.saturating_duration_since(r.sent)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reading at `ms` on our clock (a 0.2 ms round trip), the node's
    /// clock at `rate` and `step_ms` ahead.
    fn at(base: Instant, ms: u64, rate: f64, step_ms: u64) -> Reading {
        let sent = base + Duration::from_micros(ms * 1000);
        Reading {
            sent,
            recv: sent + Duration::from_micros(200),
            node_us: 1_000_000_000_000 + ((ms as f64 * rate) as u64 + step_ms) * 1000,
        }
    }

    #[test]
    fn a_steady_rate_is_accepted_after_two_agreeing_spans() {
        let t = Instant::now();
        let mut track = RateTrack::default();
        // Spans of at least 500 ms, each reading's round trip 0.2 ms: the
        // anchor at 0, the middle at 600, the end at 1200.
        for ms in (0..=1_200).step_by(100) {
            track.observe(at(t, ms, 1.05, 0));
        }
        let rate = track.rate().expect("accepted after 1.2 s");
        assert!(rate.lo <= 1.05 && 1.05 <= rate.hi, "{rate:?}");
        assert!(rate.hi - rate.lo < 0.002, "bound {rate:?}");
        assert!((track.excess() - 0.05).abs() < 0.002);
        // Not before: half a second of readings tells nothing.
        let mut early = RateTrack::default();
        for ms in (0..=600).step_by(100) {
            early.observe(at(t, ms, 1.05, 0));
        }
        assert_eq!(early.rate(), None);
        assert_eq!(early.excess(), 0.0);
    }

    #[test]
    fn a_step_is_never_taken_for_a_rate() {
        let t = Instant::now();
        let mut track = RateTrack::default();
        // A 30 s step at 700 ms, readings every 100 ms: the spans around
        // it disagree; once it slid out, the true rate (1.0) is accepted.
        for ms in (0..=3_000).step_by(100) {
            let step = if ms >= 700 { 30_000 } else { 0 };
            track.observe(at(t, ms, 1.0, step));
            if let Some(r) = track.rate() {
                assert!(r.hi < 1.01, "took a step for a rate at {ms} ms: {r:?}");
            }
        }
        assert!(track.rate().is_some());
    }

    #[test]
    fn three_readings_show_a_rate_or_a_step() {
        let t = std::time::Instant::now();
        let at = |ms: u64, node_ms: f64| {
            let sent = t + Duration::from_millis(ms);
            ClockReading {
                sent,
                recv: sent + Duration::from_micros(200),
                node_us: 1_700_000_000_000_000 + (node_ms * 1000.0) as u64,
            }
        };
        let fast = [at(0, 0.0), at(600, 630.0), at(1200, 1260.0)];
        let Some(NodeClock::Rate { lo, hi }) = NodeClock::from_readings(&fast) else {
            panic!("{:?}", NodeClock::from_readings(&fast))
        };
        assert!(lo <= 1.05 && 1.05 <= hi && hi - lo < 0.001, "{lo} {hi}");
        let step = [at(0, 0.0), at(600, 600.0), at(1200, 31_200.0)];
        let Some(NodeClock::Jumped { ms }) = NodeClock::from_readings(&step) else {
            panic!("{:?}", NodeClock::from_readings(&step))
        };
        assert!((29_990.0..=30_000.0).contains(&ms), "{ms}");
        let back = [at(0, 30_000.0), at(600, 30_600.0), at(1200, 1_200.0)];
        let shown = NodeClock::from_readings(&back);
        assert!(
            matches!(shown, Some(NodeClock::Jumped { ms }) if ms < -29_990.0),
            "{shown:?}"
        );
        assert_eq!(NodeClock::from_readings(&[at(0, 0.0); 3]), None);
    }

    #[test]
    fn round_trips_make_spans_longer_never_a_rate_faster() {
        let t = Instant::now();
        // 600 ms round trips, a reading every second, a true rate of 1.
        let far = |ms: u64| {
            let sent = t + Duration::from_millis(ms);
            Reading {
                sent,
                recv: sent + Duration::from_millis(600),
                node_us: 1_000_000_000_000 + (ms + 300) * 1000,
            }
        };
        let mut track = RateTrack::default();
        for ms in (0..=60_000).step_by(1_000) {
            track.observe(far(ms));
        }
        assert_eq!(track.rate(), None, "spans of 1.2 s round trips need 240 s");
        for ms in (61_000..=600_000).step_by(1_000) {
            track.observe(far(ms));
        }
        let rate = track.rate().expect("measured over 240 s spans");
        assert!(rate.hi < 1.0 + 2.0 * PRECISION, "{rate:?}");
        // A slow reply at the start does not hold the measurement up: the
        // next, closer reading starts the span.
        let mut track = RateTrack::default();
        track.observe(far(0));
        for ms in (100..=1_300).step_by(100) {
            track.observe(at(t, ms, 1.0, 0));
        }
        assert!(track.rate().is_some());
    }

    #[test]
    fn a_slow_clock_has_no_excess() {
        let t = Instant::now();
        let mut track = RateTrack::default();
        for ms in (0..=1_500).step_by(100) {
            track.observe(at(t, ms, 0.9, 0));
        }
        assert!(track.rate().is_some_and(|r| r.hi < 0.91));
        assert_eq!(track.excess(), 0.0);
    }
}
