//! A node's clock, watched from the replies we already get: every request
//! goes out with a `TIME` pipelined behind it (same write, same round trip),
//! so each reply tells what the node's clock read when it ran our command,
//! between when we sent it and when the answer came back.
//!
//! Redis expires keys by its own wall clock, so a node whose clock steps
//! forward (an NTP step, a virtual machine resumed, an operator fixing the
//! date) or runs fast drops our keys before their time: a lock held there
//! may be taken by someone else while its holder still counts it valid.
//! From two readings `a` and `b` of one node, the node's clock advanced
//! `b.node - a.node`, while at most `b.recv - a.sent` passed on ours (our
//! clock counts a suspend of this machine too: `clock.rs`). An advance
//! beyond that times `1 + drift_factor` (or the node's own rate, where one
//! was measured beyond it: `clockrate.rs`), plus [`SLACK`], is an excess `E`
//! the node's clock ran ahead: every key there may have lost up to `E` of
//! its life ([`judge`]).
//!
//! What an excess costs: the node's yes does not count toward a lock quorum
//! for the restart quarantine (the longest TTL any client uses), as after a
//! restart. Not only for `E`: a holder that took the lock before the jump
//! counts on its key there until its own validity ends, up to a whole TTL
//! later, and it learns of the jump only when its own client next hears
//! from the node; a quarantine of `E` would let a second client take the
//! lock in between. That holder's own client cuts the lock's validity by
//! the excesses seen since its keys were last set, where the node's yes
//! counted for it ([`ClockWatch::ran_ahead_since`]; `lock/shared.rs`), and
//! reads the clocks of idle nodes once a second while it holds a lock
//! (`quorum/mod.rs`), so it is told within about a second. A backward step only
//! keeps keys longer: reported, nothing else. A counter's records are not
//! touched by a clock (its rounds compare values, not times), so a jump
//! does not make the node suspect for counters.
//!
//! What it cannot see: a jump before this client's first reply from the
//! node (no reading to compare with: the configured drift factor is all
//! there is), and a jump smaller than the allowance over the time since
//! the last reply (`drift_factor` of an idle minute is 0.6 s).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::Value;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::mutex;
use crate::node::clock::clockrate::{Rate, RateTrack, Reading};
use crate::node::trust::amnesia::AmnesiaCheck;
use crate::node::trust::panel::Seat;
use crate::node::trust::Trust;
use crate::telemetry::metrics;

/// What two readings of a node's clock may differ by beyond the rate
/// allowance: the drift allowance's own constant (2 ms), which also covers
/// `TIME`'s microsecond grain.
pub(crate) const SLACK: Duration = Duration::from_millis(2);

/// How many jumps ahead a node's watch remembers for the locks held there
/// (a lock asks about those seen since its keys were last set).
const JUMPS_KEPT: usize = 64;

/// News that some node's clock ran ahead: a count every watch of one
/// client bumps, so that its held locks look at the jumps (see
/// [`ClockWatch::ran_ahead_since`]).
pub(crate) type ClockNews = Arc<watch::Sender<u64>>;

/// What two readings show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Within the allowance.
    Steady,
    /// The node's clock ran ahead of ours by at least this much beyond the
    /// allowance.
    Ahead(Duration),
    /// The node's clock fell behind by at least this much beyond the
    /// allowance (a step back: keys live longer; safe).
    Behind(Duration),
}

/// The rule, pure: what reading `b` says against an earlier reading `a`
/// (either order of arrival), with `allowance` the drift factor.
pub(crate) fn judge(a: &Reading, b: &Reading, allowance: f64) -> Verdict {
    let advance = i128::from(b.node_us) - i128::from(a.node_us);
    let slack = SLACK.as_micros() as i128;
    // Between the two readings at most this much passed on our clock, and
    // at least that (negative where `b` may have been read first).
    let most = signed_micros(a.sent, b.recv);
    let least = signed_micros(a.recv, b.sent);
    let (fast, slow) = (1.0 + allowance, 1.0 - allowance);
    let scaled = |us: i128, rate: f64| (us as f64 * rate) as i128;
    let ceiling = scaled(most, if most >= 0 { fast } else { slow }) + slack;
    let floor = scaled(least, if least >= 0 { slow } else { fast }) - slack;
    let micros = |d: i128| Duration::from_micros(u64::try_from(d).unwrap_or(u64::MAX));
    if advance > ceiling {
        Verdict::Ahead(micros(advance - ceiling))
    } else if advance < floor {
        Verdict::Behind(micros(floor - advance))
    } else {
        Verdict::Steady
    }
}

/// `to - from` in microseconds, negative when `to` is earlier.
fn signed_micros(from: Instant, to: Instant) -> i128 {
    if to >= from {
        (to - from).as_micros() as i128
    } else {
        -((from - to).as_micros() as i128)
    }
}

/// A node's `TIME` reply as microseconds since the epoch.
pub(crate) fn node_micros(v: &Value) -> Option<u64> {
    let Value::Array(parts) = v else { return None };
    let [secs, micros] = parts.as_slice() else {
        return None;
    };
    let num = |v: &Value| match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse::<u64>().ok(),
        Value::Int(i) => u64::try_from(*i).ok(),
        _ => None,
    };
    num(secs)?.checked_mul(1_000_000)?.checked_add(num(micros)?)
}

/// A node's clock as this client watched it.
#[derive(Debug)]
pub(crate) struct ClockWatch {
    /// The node, for logs.
    index: usize,
    /// The drift factor: how much faster than ours a node's clock may run.
    allowance: f64,
    /// How long a node whose clock ran ahead stays out of lock quorums
    /// (`None`: never; a quarantine of zero trusts every node).
    quarantine: Option<Duration>,
    /// Where that quarantine is kept.
    trust: Arc<Trust>,
    /// The latest reading (by arrival), and the rate measured.
    last: Mutex<Track>,
    /// The jumps ahead this watch remembers (see [`Jumps`]).
    jumps: Mutex<Jumps>,
    /// Where a jump ahead is told.
    news: ClockNews,
    /// Where each reading goes, for quarantines' ends (`panel.rs`).
    seat: Seat,
    /// The accepted rate's excess ([`RateTrack::excess`]) as `f64` bits,
    /// read on every acquisition without taking the lock.
    excess: AtomicU64,
    /// Jumps ahead seen.
    pub(crate) ahead: AtomicU64,
    /// Steps back seen.
    pub(crate) behind: AtomicU64,
}

impl ClockWatch {
    /// Watches node `index`'s clock with the drift factor `allowance`,
    /// quarantining it in `trust` for the restart quarantine of `check`
    /// after a jump ahead (never without a check), telling `news` and
    /// putting each reading on `seat`.
    pub(crate) fn new(
        index: usize,
        allowance: f64,
        check: Option<&AmnesiaCheck>,
        trust: &Arc<Trust>,
        (news, seat): (&ClockNews, Seat),
    ) -> Self {
        Self {
            index,
            allowance,
            quarantine: check.map(|c| Duration::from_secs(c.quarantine_secs)),
            trust: Arc::clone(trust),
            last: Mutex::default(),
            jumps: Mutex::default(),
            news: Arc::clone(news),
            seat,
            excess: AtomicU64::new(0.0_f64.to_bits()),
            ahead: AtomicU64::new(0),
            behind: AtomicU64::new(0),
        }
    }

    /// Takes in the node's `TIME` reply `time` for a request sent at `sent`
    /// and answered at `recv`. A reply that is not a time (a `TIME` the
    /// node's ACL refuses) is ignored. Runs before the request's own reply
    /// is passed on, so a vote that comes with a jump is not counted.
    pub(crate) fn reading(&self, sent: Instant, recv: Instant, time: &Value) {
        let Some(node_us) = node_micros(time) else {
            self.seat.refused();
            return;
        };
        let now = Reading {
            sent,
            recv,
            node_us,
        };
        let (before, allowance, accepted, grew) = {
            let mut track = mutex::lock(&self.last);
            let before = track.last;
            // Judged by the rate known before this reading.
            let allowance = self.allowance.max(track.rate.excess());
            let (mut accepted, mut grew) = (None, false);
            if before.is_none_or(|b| b.recv <= recv) {
                track.last = Some(now);
                let std = |r: &Reading| (r.recv.into_std(), r.node_us);
                self.trust
                    .node_time(before.as_ref().map(std), std(&now), self.allowance);
                self.seat.reading(recv.into_std(), node_us, allowance);
                let was = track.rate.rate();
                track.rate.observe(now);
                if let Some(rate) = track.rate.rate().filter(|r| Some(*r) != was) {
                    let excess = track.rate.excess();
                    let old = self.excess.swap(excess.to_bits(), Ordering::Relaxed);
                    grew = excess > f64::from_bits(old);
                    // Said once each time it goes beyond the allowance.
                    let beyond = rate.hi > 1.0 + self.allowance;
                    accepted = Some((rate, beyond && !track.beyond));
                    track.beyond = beyond;
                }
            }
            (before, allowance, accepted, grew)
        };
        if let Some((rate, newly_beyond)) = accepted {
            self.rate_accepted(rate, newly_beyond);
        }
        if grew {
            // Keys set here before live less than their holders counted.
            self.news.send_modify(|n| *n += 1);
        }
        let Some(before) = before else { return };
        match judge(&before, &now, allowance) {
            Verdict::Steady => {}
            Verdict::Ahead(excess) => {
                self.ahead.fetch_add(1, Ordering::Relaxed);
                metrics::clock_jump(self.index, true);
                if let Some(q) = self.quarantine {
                    self.trust.clock_ran_ahead(std::time::Instant::now() + q);
                }
                let jumps = &self.jumps;
                mutex::lock(jumps).push(recv, excess);
                self.news.send_modify(|n| *n += 1);
                tracing::warn!(
                    target: crate::telemetry::targets::CLOCK,
                    node = self.index,
                    "node {}'s clock ran {:.1} ms ahead of ours beyond the drift allowance \
                     (a step, or a clock running fast): keys there may expire early, so it \
                     does not count toward lock quorums for {}",
                    self.index,
                    excess.as_secs_f64() * 1e3,
                    self.quarantine
                        .map_or("any time (quarantine off)".to_owned(), |q| format!(
                            "{} s",
                            q.as_secs()
                        ))
                );
            }
            Verdict::Behind(by) => {
                self.behind.fetch_add(1, Ordering::Relaxed);
                metrics::clock_jump(self.index, false);
                tracing::info!(
                    target: crate::telemetry::targets::CLOCK,
                    node = self.index,
                    "node {}'s clock stepped back {:.1} ms against ours (keys there live longer: \
                     safe)",
                    self.index,
                    by.as_secs_f64() * 1e3
                );
            }
        }
    }
}

/// A watch's readings: the latest, and the rate they show.
#[derive(Debug, Default)]
struct Track {
    /// The latest reading (by arrival).
    last: Option<Reading>,
    /// The rate measured.
    rate: RateTrack,
    /// The accepted rate is beyond the drift allowance (said once).
    beyond: bool,
}

impl ClockWatch {
    /// When the latest reading came in (`None` before the first).
    pub(crate) fn last_heard(&self) -> Option<Instant> {
        let track = mutex::lock(&self.last);
        track.last.map(|r| r.recv)
    }

    /// How far the node's wall clock is ahead of ours (negative: behind),
    /// in µs, from the latest reading (its `TIME` taken as read halfway
    /// through the round trip, moved on by our clock since), and the
    /// reading's uncertainty, half that round trip; `None` before the
    /// first reading.
    pub(crate) fn offset_us(&self) -> Option<(i64, u64)> {
        let last = mutex::lock(&self.last).last?;
        let half = last.recv.duration_since(last.sent) / 2;
        let since = crate::clock::now().saturating_duration_since(last.sent + half);
        let node = i128::from(last.node_us) + since.as_micros() as i128;
        let ours = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?
            .as_micros() as i128;
        let offset = i64::try_from(node - ours).ok()?;
        Some((offset, half.as_micros() as u64))
    }

    /// The node clock's accepted rate against ours (`None` until one is).
    pub(crate) fn rate(&self) -> Option<Rate> {
        let track = mutex::lock(&self.last);
        track.rate.rate()
    }

    /// How much faster than ours the node's clock runs beyond the drift
    /// factor, by its accepted rate (zero if it does not): a key set there
    /// with a TTL lives that fraction less of it on our clock.
    pub(crate) fn rate_excess(&self) -> f64 {
        f64::from_bits(self.excess.load(Ordering::Relaxed))
    }

    /// A new rate was accepted: the gauge, and a warning when it went
    /// beyond the drift allowance.
    fn rate_accepted(&self, rate: Rate, newly_beyond: bool) {
        metrics::clock_rate(self.index, rate.hi);
        if newly_beyond {
            tracing::warn!(
                target: crate::telemetry::targets::CLOCK,
                node = self.index,
                rate = rate.hi,
                "node {}'s clock runs {:.2} % faster than ours, beyond the drift allowance of \
                 {:.2} %: keys there live that much less, and locks counted on it are valid \
                 that much less",
                self.index,
                (rate.hi - 1.0) * 100.0,
                self.allowance * 100.0
            );
        }
    }

    /// How much a key set on the node at or after `since` may have lost of
    /// its life to the jumps ahead seen since (zero if none; see
    /// [`Jumps::since`]).
    pub(crate) fn ran_ahead_since(&self, since: Instant) -> Duration {
        // Never ran ahead (the usual case): no lock taken. A jump counted
        // after this read is recorded, and its news sent, after it.
        if self.ahead.load(Ordering::Relaxed) == 0 {
            return Duration::ZERO;
        }
        let jumps = mutex::lock(&self.jumps);
        jumps.since(since)
    }
}

/// A node's latest jumps ahead, each with when it was seen (the reply that
/// showed it came in) and the sum of the excesses seen before it.
#[derive(Debug, Default)]
pub(crate) struct Jumps {
    /// Oldest first: (seen at, the total before it).
    kept: VecDeque<(Instant, Duration)>,
    /// Every excess seen, summed.
    total: Duration,
    /// When the latest jump no longer kept was seen.
    forgotten: Option<Instant>,
}

impl Jumps {
    /// Records a jump ahead by `excess` seen at `at`.
    pub(crate) fn push(&mut self, at: Instant, excess: Duration) {
        if self.kept.len() == JUMPS_KEPT {
            self.forgotten = self.kept.pop_front().map(|(at, _)| at);
        }
        self.kept.push_back((at, self.total));
        self.total = self.total.saturating_add(excess);
    }

    /// What the jumps seen after `since` add up to: each one took its
    /// excess off the life of every key there, so two steps of 10 s cost a
    /// key 20 s. Where jumps seen after `since` were no longer kept, all
    /// of its life ([`Duration::MAX`]).
    pub(crate) fn since(&self, since: Instant) -> Duration {
        if self.forgotten.is_some_and(|at| at > since) {
            return Duration::MAX;
        }
        self.kept
            .iter()
            .find(|(at, _)| *at > since)
            .map_or(Duration::ZERO, |(_, before)| {
                self.total.saturating_sub(*before)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(base: Instant, sent_ms: u64, recv_ms: u64, node_ms: u64) -> Reading {
        Reading {
            sent: base + Duration::from_millis(sent_ms),
            recv: base + Duration::from_millis(recv_ms),
            node_us: 1_000_000_000_000 + node_ms * 1000,
        }
    }

    #[test]
    fn a_clock_within_the_allowance_is_steady() {
        let t = Instant::now();
        let a = reading(t, 0, 1, 0);
        // 10 s later, the node 0.5 % fast (half the default allowance).
        let b = reading(t, 10_000, 10_001, 10_050);
        assert_eq!(judge(&a, &b, 0.01), Verdict::Steady);
        // Taken in either order: the same.
        assert_eq!(judge(&b, &a, 0.01), Verdict::Steady);
        // Overlapping requests: nothing to tell.
        let c = reading(t, 0, 3, 2);
        assert_eq!(judge(&a, &c, 0.01), Verdict::Steady);
        assert_eq!(judge(&c, &a, 0.01), Verdict::Steady);
    }

    #[test]
    fn a_jump_ahead_is_the_advance_beyond_the_most_that_passed() {
        let t = Instant::now();
        let a = reading(t, 0, 1, 0);
        let b = reading(t, 1_000, 1_001, 31_000);
        // At most 1001 ms passed; 1001 * 1.01 + 2 = 1013.01 ms allowed.
        let Verdict::Ahead(e) = judge(&a, &b, 0.01) else {
            panic!("not seen")
        };
        assert!((29_986..=29_987).contains(&e.as_millis()), "{e:?}");
        // Five per cent fast over 4 s: 0.2 s, beyond 1 % + 2 ms.
        let fast = reading(t, 4_000, 4_001, 4_200);
        assert!(matches!(judge(&a, &fast, 0.01), Verdict::Ahead(_)));
    }

    #[test]
    fn a_step_back_is_told_apart() {
        let t = Instant::now();
        let a = reading(t, 0, 1, 10_000);
        let b = reading(t, 1_000, 1_001, 5_000);
        assert!(matches!(judge(&a, &b, 0.01), Verdict::Behind(_)));
    }

    #[test]
    fn jumps_since_a_key_was_set_add_up() {
        let t = Instant::now();
        let ms = Duration::from_millis;
        let mut jumps = Jumps::default();
        assert_eq!(jumps.since(t), Duration::ZERO);
        jumps.push(t + ms(10), ms(300));
        jumps.push(t + ms(20), ms(200));
        // A key set before both lost both; one set between, the second.
        assert_eq!(jumps.since(t), ms(500));
        assert_eq!(jumps.since(t + ms(15)), ms(200));
        assert_eq!(jumps.since(t + ms(20)), Duration::ZERO);
        // Past what is kept: a key set before a forgotten jump lost all.
        for i in 0..JUMPS_KEPT as u64 {
            jumps.push(t + ms(100 + i), ms(1));
        }
        assert_eq!(jumps.since(t + ms(15)), Duration::MAX);
        assert_eq!(jumps.since(t + ms(100)), ms(JUMPS_KEPT as u64 - 1));
    }

    #[test]
    fn time_replies_are_read_or_ignored() {
        let v = Value::Array(vec![
            Value::BulkString(b"1764000000".to_vec()),
            Value::BulkString(b"123456".to_vec()),
        ]);
        assert_eq!(node_micros(&v), Some(1_764_000_000_123_456));
        assert_eq!(node_micros(&Value::Nil), None);
        let huge = Value::Array(vec![
            Value::BulkString(u64::MAX.to_string().into_bytes()),
            Value::BulkString(b"0".to_vec()),
        ]);
        assert_eq!(node_micros(&huge), None, "no overflow");
    }
}
