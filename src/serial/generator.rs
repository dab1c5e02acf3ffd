//! [`SerialGenerator`]: issues numbers through the quorum counter, one
//! allocation round for every caller waiting (group commit).
//!
//! Concurrent calls in one process share one allocation round: the first
//! caller starts a background round for everyone waiting, and while demand
//! continues each round takes all callers that arrived during the previous
//! one. In the steady state that is one quorum round trip per batch. After a
//! lost compare-and-set, rounds take the counter's Redlock for a while, so
//! instances contending on one counter take turns.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::oneshot;
use tracing::debug;

use crate::acquire::patience::Patience;
use crate::client::redlock::Redlock;
use crate::counter::batch::Batch;
use crate::counter::{CounterKeys, Record};
use crate::error::{Error, Result};
use crate::keys::Kind;
use crate::mutex::lock;
use crate::pin;
use crate::serial::number::{check_prefix, Serial, MAX_BATCH};
use crate::serial::period::{PeriodRules, ResetPeriod, Zone};

/// Digits of the counter part by default: `0001` .. `9999` per period.
pub const DEFAULT_WIDTH: u8 = 4;

/// How far the local clock may be behind the latest issued period and still
/// issue numbers in that period. Instances' clocks differ by a little around
/// midnight; a clock further behind than this is broken, and issuing would
/// either go back in time or silently use somebody else's date.
pub const DEFAULT_CLOCK_TOLERANCE: Duration = Duration::from_secs(5);

/// A clock hook (tests inject one to cross midnight at will).
pub type ClockFn = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

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

    /// The rules the plan step of an allocation follows.
    fn rules(&self) -> PeriodRules {
        PeriodRules {
            zone: self.zone,
            period: self.period,
            tolerance: self.tolerance,
            max: self.max_number(),
        }
    }
}

/// One prefix's group-commit queue and what this process knows of its
/// counter.
struct CounterState {
    /// The business prefix this counter serves.
    prefix: String,
    /// The Redis keys of the counter record (of `serial:<period>:<prefix>`;
    /// named after the prefix in errors and logs).
    key: CounterKeys,
    /// Callers waiting for numbers, and the counter's turns.
    batch: Batch<Waiter>,
    /// The key of the prefix's pinned configuration (`pin.rs`).
    pin_key: String,
    /// Set once our configuration was pinned (or found pinned) on a quorum.
    pinned: AtomicBool,
}

/// What one caller gets from a round: the period stamp and its first number.
type Grant = (Arc<str>, u64);

/// A caller waiting for a round: its count and where its first number goes.
type Waiter = (u64, oneshot::Sender<Result<Grant>>);

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
    /// than `A-Z a-z 0-9 _ -`, or ending in a digit; empty is fine), [`Error::Exhausted`] when the
    /// period's numbers ran out, [`Error::ClockBehind`] when this clock is
    /// behind the latest issued period by more than the tolerance,
    /// [`Error::NoQuorum`] when too few nodes answer for as long as
    /// `lock()` would keep trying (a round short of a quorum is tried again
    /// after a retry pause, `retry_count` times: about 2 s by default).
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
    /// count of zero, above the width's capacity or above [`MAX_BATCH`],
    /// before any node is asked.
    pub async fn next_batch(&self, prefix: &str, count: u64) -> Result<Vec<Serial>> {
        check_prefix(prefix)?;
        let (width, most) = (self.inner.settings.width, self.max_number());
        if count == 0 || count > most.min(MAX_BATCH) {
            let why = if count > most {
                format!(
                    "a width of {width} digits numbers at most {most} a period: widen it, \
                     or issue fewer"
                )
            } else {
                format!(
                    "at most {MAX_BATCH} a call (one call returns its numbers in memory: \
                     issue more in several calls)"
                )
            };
            return Err(Error::InvalidConfig(format!(
                "count {count} is outside 1..={}: {why}",
                most.min(MAX_BATCH)
            )));
        }
        let state = self.state(prefix);
        let (tx, rx) = oneshot::channel();
        if lock(&state.batch.queue).join((count, tx)) {
            // The round runs in its own task, so a caller that gives up
            // (drops its future) never strands the others.
            tokio::spawn(run_rounds(Arc::clone(&self.inner), state));
        }
        let (stamp, first) = rx.await.map_err(|_| Error::Shutdown)??;
        let prefix: Arc<str> = Arc::from(prefix);
        Ok((first..first + count)
            .map(|number| {
                Serial::new(
                    Arc::clone(&prefix),
                    Arc::clone(&stamp),
                    number,
                    self.inner.settings.width,
                )
            })
            .collect())
    }

    /// The allocation state of one prefix.
    fn state(&self, prefix: &str) -> Arc<CounterState> {
        let mut map = lock(&self.inner.counters);
        let state = map.entry(prefix.to_owned()).or_insert_with(|| {
            let name = format!("serial:{}:{}", self.inner.settings.period.name(), prefix);
            let redlock = &self.inner.redlock;
            Arc::new(CounterState {
                prefix: prefix.to_owned(),
                key: CounterKeys {
                    name: prefix.to_owned(),
                    ..redlock.counter_keys(Kind::Serial, &name)
                },
                batch: Batch::default(),
                pin_key: redlock
                    .counter_keys(Kind::SerialPin, &format!("serial:{prefix}"))
                    .key,
                pinned: AtomicBool::new(false),
            })
        });
        Arc::clone(state)
    }
}

/// Serves the queue of one prefix until it is empty: each round allocates
/// for every caller waiting when it starts.
async fn run_rounds(inner: Arc<GenInner>, state: Arc<CounterState>) {
    loop {
        // Let callers that were just woken (and callers on other workers)
        // queue up first: a bigger batch costs the same one round trip.
        tokio::task::yield_now().await;
        let Some(waiters) = lock(&state.batch.queue).next_round() else {
            return;
        };
        let total: u64 = waiters.iter().map(|(k, _)| *k).sum();
        match allocate_patiently(&inner, &state, total).await {
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

/// [`allocate`], tried again after a retry pause while a round finds too
/// few nodes (one paused, one restarting: usually over in a moment), for
/// as long as `lock()` would keep trying (`retry_count` pauses). A round
/// short of a quorum raised no number anyone was given, so trying again is
/// a fresh round like any other; every other error is final.
async fn allocate_patiently(inner: &GenInner, state: &CounterState, k: u64) -> Result<Grant> {
    let patience = Patience::default_for(&inner.redlock);
    loop {
        match allocate(inner, state, k).await {
            Err(e @ Error::NoQuorum { .. }) if !e.needs_operator() => {
                let pause = inner.redlock.retry_pause();
                if !patience.allows_pause(pause) {
                    return Err(e);
                }
                debug!(counter = state.prefix, error = %e, "round short of a quorum; trying again");
                tokio::time::sleep(pause).await;
            }
            other => return other,
        }
    }
}

/// One allocation of `k` numbers: the stamp and the first number.
async fn allocate(inner: &GenInner, state: &CounterState, k: u64) -> Result<Grant> {
    let settings = &inner.settings;
    let prefix = state.prefix.as_str();
    if !state.pinned.load(Ordering::Acquire) {
        let config = format!("{}/{}", settings.period.name(), settings.width);
        let conflict = |pinned| Error::SerialConfigConflict {
            counter: prefix.to_owned(),
            pinned,
            asked: config.clone(),
            key: state.pin_key.clone(),
        };
        let pinned = (prefix, state.pin_key.as_str());
        pin::pin(inner.redlock.nodes(), pinned, &config, conflict).await?;
        state.pinned.store(true, Ordering::Release);
    }
    let now = (settings.clock)();
    let rules = settings.rules();
    let today = rules.stamp(now);
    let mut plan = |expected: &Record| rules.plan(prefix, now, &today, expected, k);
    let redlock = &inner.redlock;
    let (_, new) = redlock
        .allocate_in_turn(&state.key, &state.batch.turns, &mut plan)
        .await?;
    let first = new.n - k + 1;
    let stamp: Arc<str> = Arc::from(new.period.as_str());
    Ok((stamp, first))
}
