//! Business serial numbers: `PREFIX` + period stamp + zero-padded counter,
//! e.g. `ORDER202611220001`, unique across every instance, on the quorum
//! counter (`counter.rs`).
//!
//! Concurrent calls in one process share one allocation round (group commit):
//! the first caller starts a background round for everyone waiting, and while
//! demand continues each round takes all callers that arrived during the
//! previous one. In the steady state that is one quorum round trip per batch.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, NaiveDate, NaiveDateTime, TimeZone, Utc};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::counter::{self, Record};
use crate::error::{Error, Result};
use crate::lock::Redlock;

/// Digits of the counter part by default: `0001` .. `9999` per period.
pub const DEFAULT_WIDTH: u8 = 4;

/// How far the local clock may be behind the latest issued period and still
/// issue numbers in that period. Instances' clocks differ by a little around
/// midnight; a clock further behind than this is broken, and issuing would
/// either go back in time or silently use somebody else's date.
pub const DEFAULT_CLOCK_TOLERANCE: Duration = Duration::from_secs(5);

/// Longest accepted prefix, in bytes.
pub const MAX_PREFIX_LEN: usize = 64;

/// After a lost compare-and-set, allocations take the counter's Redlock for
/// this long, so instances contending on one counter take turns instead of
/// invalidating each other's rounds.
const CONTENDED_FOR: Duration = Duration::from_secs(1);

/// TTL of the counter's Redlock while contended: an allocation is a round
/// trip or two, far below this.
const COUNTER_LOCK_TTL: Duration = Duration::from_secs(5);

/// A clock hook (tests inject one to cross midnight at will).
pub type ClockFn = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// When the counter restarts at 1; the stamp in the number follows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ResetPeriod {
    /// Stamp `yyyyMMddHHmmss`.
    Second,
    /// Stamp `yyyyMMddHHmm`.
    Minute,
    /// Stamp `yyyyMMddHH`.
    Hour,
    /// Stamp `yyyyMMdd` (the default).
    Day,
    /// Stamp `yyyyMM`.
    Month,
    /// Stamp `yyyy`.
    Year,
    /// No stamp; the counter never restarts.
    Never,
}

impl ResetPeriod {
    /// The chrono format of the stamp.
    fn format(self) -> &'static str {
        match self {
            ResetPeriod::Second => "%Y%m%d%H%M%S",
            ResetPeriod::Minute => "%Y%m%d%H%M",
            ResetPeriod::Hour => "%Y%m%d%H",
            ResetPeriod::Day => "%Y%m%d",
            ResetPeriod::Month => "%Y%m",
            ResetPeriod::Year => "%Y",
            ResetPeriod::Never => "",
        }
    }

    /// Short name, part of the counter's key so that periods never mix.
    fn name(self) -> &'static str {
        match self {
            ResetPeriod::Second => "second",
            ResetPeriod::Minute => "minute",
            ResetPeriod::Hour => "hour",
            ResetPeriod::Day => "day",
            ResetPeriod::Month => "month",
            ResetPeriod::Year => "year",
            ResetPeriod::Never => "never",
        }
    }
}

/// The time zone that decides the local date.
#[derive(Clone, Copy, Debug)]
enum Zone {
    /// The machine's local zone.
    Local,
    /// A named IANA zone.
    Named(chrono_tz::Tz),
}

impl Zone {
    /// The stamp of `now` for `period`.
    fn stamp(self, period: ResetPeriod, now: DateTime<Utc>) -> String {
        let fmt = period.format();
        match self {
            Zone::Local => now.with_timezone(&chrono::Local).format(fmt).to_string(),
            Zone::Named(tz) => now.with_timezone(&tz).format(fmt).to_string(),
        }
    }

    /// The first instant of the period a stamp names, in this zone. On a day
    /// whose midnight does not exist (a DST jump at 00:00) that is the first
    /// local time that does.
    fn start_of(self, period: ResetPeriod, stamp: &str) -> Option<DateTime<Utc>> {
        if period == ResetPeriod::Never || !stamp.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let padded = match stamp.len() {
            4 => format!("{stamp}0101000000"),
            6 => format!("{stamp}01000000"),
            8 => format!("{stamp}000000"),
            10 => format!("{stamp}0000"),
            12 => format!("{stamp}00"),
            14 => stamp.to_owned(),
            _ => return None,
        };
        let naive = NaiveDateTime::parse_from_str(&padded, "%Y%m%d%H%M%S").ok()?;
        // Walk forward over a DST gap (at most a few hours) to the first
        // local time that exists.
        (0..=24 * 60).find_map(|minutes| {
            let t = naive + chrono::Duration::minutes(minutes);
            match self {
                Zone::Local => chrono::Local
                    .from_local_datetime(&t)
                    .earliest()
                    .map(|d| d.with_timezone(&Utc)),
                Zone::Named(tz) => tz
                    .from_local_datetime(&t)
                    .earliest()
                    .map(|d| d.with_timezone(&Utc)),
            }
        })
    }
}

/// One issued serial number.
///
/// `to_string()` gives `PREFIX` + stamp + zero-padded number, e.g.
/// `ORDER202611220001`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Serial {
    /// The business prefix.
    prefix: Arc<str>,
    /// The period stamp (`yyyyMMdd` for daily numbers).
    stamp: Arc<str>,
    /// The counter value within the period, from 1.
    number: u64,
    /// Digits the number is padded to.
    width: u8,
}

impl Serial {
    /// The business prefix, e.g. `ORDER`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The period stamp, e.g. `20261122` (empty for [`ResetPeriod::Never`]).
    pub fn stamp(&self) -> &str {
        &self.stamp
    }

    /// The local date of the period, for periods of a day or finer.
    pub fn date(&self) -> Option<NaiveDate> {
        let day = self.stamp.get(..8)?;
        NaiveDate::parse_from_str(day, "%Y%m%d").ok()
    }

    /// The counter value within the period, from 1.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// The all-digit form (stamp then padded counter) as a number, for
    /// systems that want numeric, time-ordered IDs. `None` if the prefix is
    /// not empty or the digits do not fit a `u64`.
    pub fn as_u64(&self) -> Option<u64> {
        if !self.prefix.is_empty() {
            return None;
        }
        format!("{}{:0w$}", self.stamp, self.number, w = self.width as usize)
            .parse()
            .ok()
    }
}

impl fmt::Display for Serial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{}{:0w$}",
            self.prefix,
            self.stamp,
            self.number,
            w = self.width as usize
        )
    }
}

/// Issues serial numbers. Cheap to clone; share one per process.
///
/// # Examples
///
/// ```no_run
/// # async fn f(redlock: redquorum::Redlock) -> redquorum::Result<()> {
/// let serials = redquorum::SerialGenerator::builder(redlock)
///     .time_zone(chrono_tz::Asia::Shanghai)
///     .width(4)
///     .build()?;
/// let s = serials.next("ORDER").await?;
/// println!("{s}"); // ORDER202611220001
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct SerialGenerator {
    /// Shared state.
    inner: Arc<GenInner>,
}

/// What clones of a generator share.
struct GenInner {
    /// Nodes and lock.
    redlock: Redlock,
    /// The settings the builder checked.
    settings: Settings,
    /// Per-prefix allocation state.
    counters: Mutex<HashMap<String, Arc<CounterState>>>,
}

impl fmt::Debug for GenInner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GenInner")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// A generator's settings, as the builder collects them.
struct Settings {
    /// Zone for the stamp.
    zone: Zone,
    /// Counter digits.
    width: u8,
    /// When numbering restarts.
    period: ResetPeriod,
    /// How far behind the latest period our clock may be.
    tolerance: Duration,
    /// Where "now" comes from.
    clock: ClockFn,
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("zone", &self.zone)
            .field("width", &self.width)
            .field("period", &self.period)
            .field("tolerance", &self.tolerance)
            .finish_non_exhaustive()
    }
}

impl Settings {
    /// The largest number a period can hold at this width.
    fn max_number(&self) -> u64 {
        10u64.pow(u32::from(self.width)) - 1
    }
}

/// One prefix's group-commit queue and cached high-water mark.
struct CounterState {
    /// The business prefix this counter serves.
    prefix: String,
    /// Counter name (`serial:<period>:<prefix>`), also the lock's resource stem.
    name: String,
    /// The Redis key of the counter record.
    key: String,
    /// Callers waiting for numbers, and whether a round is running.
    queue: Mutex<Queue>,
    /// The record our last allocation wrote: the next proposal starts here,
    /// saving a round trip while we are the only allocator.
    hint: Mutex<Option<Record>>,
    /// Until when allocations take the counter's Redlock (after contention).
    contended_until: Mutex<Option<Instant>>,
}

/// What one caller gets from a round: the period stamp and its first number.
type Grant = (Arc<str>, u64);

/// Callers waiting for the next round.
#[derive(Default)]
struct Queue {
    /// Each waiter's count and where to send its first number.
    waiters: Vec<(u64, oneshot::Sender<Result<Grant>>)>,
    /// A round task is running and will pick up `waiters`.
    running: bool,
}

/// Builds a [`SerialGenerator`]. Get one with [`SerialGenerator::builder`].
#[must_use]
#[derive(Debug)]
pub struct SerialGeneratorBuilder {
    /// Nodes and lock.
    redlock: Redlock,
    /// The settings being built.
    settings: Settings,
}

impl SerialGeneratorBuilder {
    /// The IANA time zone whose local date goes into numbers. Defaults to the
    /// machine's local zone.
    pub fn time_zone(mut self, tz: chrono_tz::Tz) -> Self {
        self.settings.zone = Zone::Named(tz);
        self
    }

    /// Uses the machine's local time zone (the default).
    pub fn local_time_zone(mut self) -> Self {
        self.settings.zone = Zone::Local;
        self
    }

    /// Digits of the counter part, `1..=18`. Defaults to [`DEFAULT_WIDTH`].
    /// When a period's numbers run out, `next` returns [`Error::Exhausted`]:
    /// numbers never wrap and never widen.
    pub fn width(mut self, width: u8) -> Self {
        self.settings.width = width;
        self
    }

    /// When the counter restarts. Defaults to [`ResetPeriod::Day`].
    pub fn reset_period(mut self, period: ResetPeriod) -> Self {
        self.settings.period = period;
        self
    }

    /// How far the local clock may be behind the latest period numbers were
    /// issued in and still issue (in that period). Defaults to
    /// [`DEFAULT_CLOCK_TOLERANCE`].
    pub fn clock_tolerance(mut self, tolerance: Duration) -> Self {
        self.settings.tolerance = tolerance;
        self
    }

    /// Replaces the wall clock (for tests). Defaults to `Utc::now`.
    pub fn clock<F>(mut self, clock: F) -> Self
    where
        F: Fn() -> DateTime<Utc> + Send + Sync + 'static,
    {
        self.settings.clock = Arc::new(clock);
        self
    }

    /// Checks the settings and makes the generator.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for a width outside `1..=18`.
    pub fn build(self) -> Result<SerialGenerator> {
        if !(1..=18).contains(&self.settings.width) {
            return Err(Error::InvalidConfig(format!(
                "serial width {} is outside 1..=18",
                self.settings.width
            )));
        }
        Ok(SerialGenerator {
            inner: Arc::new(GenInner {
                redlock: self.redlock,
                settings: self.settings,
                counters: Mutex::new(HashMap::new()),
            }),
        })
    }
}

impl SerialGenerator {
    /// Starts configuring a generator on `redlock`'s nodes.
    pub fn builder(redlock: Redlock) -> SerialGeneratorBuilder {
        SerialGeneratorBuilder {
            redlock,
            settings: Settings {
                zone: Zone::Local,
                width: DEFAULT_WIDTH,
                period: ResetPeriod::Day,
                tolerance: DEFAULT_CLOCK_TOLERANCE,
                clock: Arc::new(Utc::now),
            },
        }
    }

    /// The client this generator issues through.
    pub fn redlock(&self) -> &Redlock {
        &self.inner.redlock
    }

    /// The largest number a period can hold at this width.
    pub fn max_number(&self) -> u64 {
        self.inner.settings.max_number()
    }

    /// Issues one number for `prefix`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for a bad prefix (over 64 bytes, or other
    /// than `A-Z a-z 0-9 _ -`; empty is fine), [`Error::Exhausted`] when the
    /// period's numbers ran out, [`Error::ClockBehind`] when this clock is
    /// behind the latest issued period by more than the tolerance,
    /// [`Error::NoQuorum`] when too few nodes answer.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(serials: redquorum::SerialGenerator) -> redquorum::Result<()> {
    /// let s = serials.next("ORDER").await?;
    /// assert!(s.to_string().starts_with("ORDER"));
    /// # Ok(()) }
    /// ```
    pub async fn next(&self, prefix: &str) -> Result<Serial> {
        let mut v = self.next_batch(prefix, 1).await?;
        // next_batch returns exactly `count` numbers.
        v.pop().ok_or(Error::Shutdown)
    }

    /// Issues `count` consecutive numbers for `prefix` in one allocation.
    ///
    /// # Errors
    ///
    /// As [`SerialGenerator::next`]; also [`Error::InvalidConfig`] for a
    /// count of zero or above the width's capacity.
    pub async fn next_batch(&self, prefix: &str, count: u64) -> Result<Vec<Serial>> {
        check_prefix(prefix)?;
        if count == 0 || count > self.max_number() {
            return Err(Error::InvalidConfig(format!(
                "count {count} is outside 1..={}",
                self.max_number()
            )));
        }
        let state = self.state(prefix);
        let (tx, rx) = oneshot::channel();
        let start_round = {
            let mut q = lock(&state.queue);
            q.waiters.push((count, tx));
            !std::mem::replace(&mut q.running, true)
        };
        if start_round {
            // The round runs in its own task, so a caller that gives up
            // (drops its future) never strands the others.
            tokio::spawn(run_rounds(Arc::clone(&self.inner), state));
        }
        let (stamp, first) = rx.await.map_err(|_| Error::Shutdown)??;
        let prefix: Arc<str> = Arc::from(prefix);
        Ok((first..first + count)
            .map(|number| Serial {
                prefix: Arc::clone(&prefix),
                stamp: Arc::clone(&stamp),
                number,
                width: self.inner.settings.width,
            })
            .collect())
    }

    /// The allocation state of one prefix.
    fn state(&self, prefix: &str) -> Arc<CounterState> {
        let mut map = lock(&self.inner.counters);
        let state = map.entry(prefix.to_owned()).or_insert_with(|| {
            let name = format!("serial:{}:{}", self.inner.settings.period.name(), prefix);
            Arc::new(CounterState {
                prefix: prefix.to_owned(),
                key: self.inner.redlock.key_for(&name),
                name,
                queue: Mutex::default(),
                hint: Mutex::default(),
                contended_until: Mutex::default(),
            })
        });
        Arc::clone(state)
    }
}

/// Locks a std mutex, recovering from poisoning (the data stays consistent:
/// every critical section here is a few assignments).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Rejects prefixes that would make numbers ambiguous or unsafe to print.
fn check_prefix(prefix: &str) -> Result<()> {
    if prefix.len() > MAX_PREFIX_LEN {
        return Err(Error::InvalidConfig(format!(
            "prefix is {} bytes; at most {MAX_PREFIX_LEN} are allowed",
            prefix.len()
        )));
    }
    if let Some(c) = prefix
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        return Err(Error::InvalidConfig(format!(
            "prefix contains {c:?}; only A-Z, a-z, 0-9, '_' and '-' are allowed"
        )));
    }
    Ok(())
}

/// Serves the queue of one prefix until it is empty: each round allocates
/// for every caller waiting when it starts.
async fn run_rounds(inner: Arc<GenInner>, state: Arc<CounterState>) {
    loop {
        // Let callers that were just woken (and callers on other workers)
        // queue up first: a bigger batch costs the same one round trip.
        tokio::task::yield_now().await;
        let waiters = {
            let mut q = lock(&state.queue);
            if q.waiters.is_empty() {
                q.running = false;
                return;
            }
            std::mem::take(&mut q.waiters)
        };
        let total: u64 = waiters.iter().map(|(k, _)| *k).sum();
        match allocate(&inner, &state, total).await {
            Ok((stamp, first)) => {
                let mut next = first;
                for (k, tx) in waiters {
                    let _ = tx.send(Ok((Arc::clone(&stamp), next)));
                    next += k;
                }
            }
            // Together they asked for more than is left; one at a time, the
            // earlier callers may still fit.
            Err(Error::Exhausted { .. }) if waiters.len() > 1 => {
                for (k, tx) in waiters {
                    let _ = tx.send(allocate(&inner, &state, k).await);
                }
            }
            Err(e) => {
                for (_, tx) in waiters {
                    let _ = tx.send(Err(e.clone()));
                }
            }
        }
    }
}

/// One allocation of `k` numbers: the stamp and the first number.
async fn allocate(inner: &GenInner, state: &CounterState, k: u64) -> Result<Grant> {
    let settings = &inner.settings;
    let (prefix, name, key) = (state.prefix.as_str(), &state.name, &state.key);
    let period = settings.period;
    let now = (settings.clock)();
    let today = settings.zone.stamp(period, now);
    let max = settings.max_number();
    let mut plan = |expected: &Record| -> Result<Record> {
        let (stamp, base) = match today.as_str().cmp(expected.period.as_str()) {
            std::cmp::Ordering::Greater => (today.clone(), 0),
            std::cmp::Ordering::Equal => (today.clone(), expected.n),
            std::cmp::Ordering::Less => {
                // Our clock is behind the latest issued period. Close to its
                // start (clocks differ a little around midnight) we issue in
                // it; further behind, refuse: never issue for an earlier
                // period than the high-water mark.
                let start = settings.zone.start_of(period, &expected.period);
                let close = start
                    .is_some_and(|s| (s - now).to_std().unwrap_or_default() <= settings.tolerance);
                if !close {
                    return Err(Error::ClockBehind {
                        counter: prefix.to_owned(),
                        local: today.clone(),
                        issued: expected.period.clone(),
                    });
                }
                (expected.period.clone(), expected.n)
            }
        };
        match base.checked_add(k) {
            Some(n) if n <= max => Ok(Record { period: stamp, n }),
            _ => Err(Error::Exhausted {
                counter: prefix.to_owned(),
                period: stamp,
                requested: k,
                max,
            }),
        }
    };
    let hint = lock(&state.hint).clone();
    let contended = lock(&state.contended_until).is_some_and(|t| Instant::now() < t);
    let result = if contended {
        // Take turns with the other instances through the counter's lock.
        let guard = inner
            .redlock
            .lock(&format!("{name}:lock"), COUNTER_LOCK_TTL)
            .await?;
        let r = counter::allocate(&inner.redlock, prefix, key, hint.clone(), &mut plan).await;
        if let Err(e) = guard.release().await {
            warn!(error = %e, "releasing the counter lock failed; it expires by itself");
        }
        r
    } else {
        counter::allocate(&inner.redlock, prefix, key, hint.clone(), &mut plan).await
    };
    let (expected, new) = result?;
    if hint.is_some_and(|h| h != expected) {
        // Somebody else allocated since our last round: serialise for a while.
        debug!(
            counter = prefix,
            "counter contended; using its lock for a while"
        );
        *lock(&state.contended_until) = Some(Instant::now() + CONTENDED_FOR);
    }
    let first = new.n - k + 1;
    let stamp: Arc<str> = Arc::from(new.period.as_str());
    *lock(&state.hint) = Some(new);
    Ok((stamp, first))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .map(|d| d.with_timezone(&Utc))
            .expect("valid time")
    }

    #[test]
    fn stamps_follow_the_zone_and_period() {
        let now = utc("2026-11-21T16:30:05Z"); // 00:30:05 on the 22nd in Shanghai
        let sh = Zone::Named(chrono_tz::Asia::Shanghai);
        assert_eq!(sh.stamp(ResetPeriod::Day, now), "20261122");
        assert_eq!(sh.stamp(ResetPeriod::Second, now), "20261122003005");
        assert_eq!(sh.stamp(ResetPeriod::Minute, now), "202611220030");
        assert_eq!(sh.stamp(ResetPeriod::Hour, now), "2026112200");
        assert_eq!(sh.stamp(ResetPeriod::Month, now), "202611");
        assert_eq!(sh.stamp(ResetPeriod::Year, now), "2026");
        assert_eq!(sh.stamp(ResetPeriod::Never, now), "");
        let utc_zone = Zone::Named(chrono_tz::UTC);
        assert_eq!(utc_zone.stamp(ResetPeriod::Day, now), "20261121");
    }

    #[test]
    fn day_starts_at_first_existing_instant() {
        // America/Santiago skips 00:00-01:00 when DST starts (2026-09-06).
        let z = Zone::Named(chrono_tz::America::Santiago);
        let start = z.start_of(ResetPeriod::Day, "20260906").expect("start");
        assert_eq!(start, utc("2026-09-06T04:00:00Z")); // 01:00 local, UTC-3
                                                        // The instant before it still belongs to the 5th.
        let before = start - chrono::Duration::seconds(1);
        assert_eq!(z.stamp(ResetPeriod::Day, before), "20260905");
        assert_eq!(z.stamp(ResetPeriod::Day, start), "20260906");
        let sh = Zone::Named(chrono_tz::Asia::Shanghai);
        assert_eq!(
            sh.start_of(ResetPeriod::Month, "202611"),
            Some(utc("2026-10-31T16:00:00Z"))
        );
        assert_eq!(sh.start_of(ResetPeriod::Never, ""), None);
    }

    #[test]
    fn serial_formatting() {
        let s = Serial {
            prefix: "ORDER".into(),
            stamp: "20261122".into(),
            number: 1,
            width: 4,
        };
        assert_eq!(s.to_string(), "ORDER202611220001");
        assert_eq!(s.date(), NaiveDate::from_ymd_opt(2026, 11, 22));
        assert_eq!(s.as_u64(), None);
        let n = Serial {
            prefix: "".into(),
            stamp: "20261122".into(),
            number: 42,
            width: 9,
        };
        assert_eq!(n.to_string(), "20261122000000042");
        assert_eq!(n.as_u64(), Some(20261122000000042));
        let too_big = Serial {
            prefix: "".into(),
            stamp: "20261122003005".into(),
            number: 1,
            width: 9,
        };
        assert_eq!(too_big.as_u64(), None); // 23 digits
    }

    #[test]
    fn prefix_rules() {
        assert!(check_prefix("").is_ok());
        assert!(check_prefix("ORDER_2-b").is_ok());
        assert!(check_prefix("ORDER 1").is_err());
        assert!(check_prefix("订单").is_err());
        assert!(check_prefix(&"A".repeat(64)).is_ok());
        assert!(check_prefix(&"A".repeat(65)).is_err());
    }
}
