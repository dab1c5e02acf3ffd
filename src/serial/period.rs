//! Periods and stamps: when a counter restarts, the stamp a number carries
//! (the local date in the configured zone), and the plan step of an
//! allocation: from the highest record known to the record to propose
//! (period rollover, the clock rule, the width limit).

use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, TimeZone, Utc};

use crate::counter::Record;
use crate::error::{Error, Result};

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
    pub(crate) fn name(self) -> &'static str {
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
pub(crate) enum Zone {
    /// The machine's local zone.
    Local,
    /// A named IANA zone.
    Named(chrono_tz::Tz),
}

impl Zone {
    /// The zone's name, for messages.
    pub(crate) fn name(self) -> String {
        match self {
            Zone::Local => "the machine's local zone".into(),
            Zone::Named(tz) => tz.name().to_owned(),
        }
    }

    /// The stamp of `now` for `period`.
    pub(crate) fn stamp(self, period: ResetPeriod, now: DateTime<Utc>) -> String {
        let fmt = period.format();
        match self {
            Zone::Local => now.with_timezone(&chrono::Local).format(fmt).to_string(),
            Zone::Named(tz) => now.with_timezone(&tz).format(fmt).to_string(),
        }
    }

    /// The first instant of the period a stamp names, in this zone. On a day
    /// whose midnight does not exist (a DST jump at 00:00) that is the first
    /// local time that does.
    pub(crate) fn start_of(self, period: ResetPeriod, stamp: &str) -> Option<DateTime<Utc>> {
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

/// The rules that turn a high-water mark into the next proposal.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PeriodRules {
    /// Zone for the stamp.
    pub(crate) zone: Zone,
    /// When numbering restarts.
    pub(crate) period: ResetPeriod,
    /// How far behind the latest period our clock may be.
    pub(crate) tolerance: Duration,
    /// The largest number a period holds (from the width).
    pub(crate) max: u64,
}

impl PeriodRules {
    /// The stamp of `now`.
    pub(crate) fn stamp(&self, now: DateTime<Utc>) -> String {
        self.zone.stamp(self.period, now)
    }

    /// The record to propose for `k` more numbers of `counter`, when the
    /// highest record known is `expected`, the clock says `now` and `today`
    /// is its stamp ([`PeriodRules::stamp`]).
    ///
    /// A later period starts again at 1. A clock behind the latest issued
    /// period issues in that period if the period began at most `tolerance`
    /// ago by our clock (instances' clocks differ a little around midnight),
    /// and is refused with [`Error::ClockBehind`] otherwise: never a number
    /// for an earlier period than the high-water mark. Numbers past `max`
    /// are [`Error::Exhausted`]: they never wrap and never widen.
    pub(crate) fn plan(
        &self,
        counter: &str,
        now: DateTime<Utc>,
        today: &str,
        expected: &Record,
        k: u64,
    ) -> Result<Record> {
        let (stamp, base) = match today.cmp(expected.period.as_str()) {
            std::cmp::Ordering::Greater => (today.to_owned(), 0),
            std::cmp::Ordering::Equal => (today.to_owned(), expected.n),
            std::cmp::Ordering::Less => {
                let start = self.zone.start_of(self.period, &expected.period);
                let close =
                    start.is_some_and(|s| (s - now).to_std().unwrap_or_default() <= self.tolerance);
                if !close {
                    // Less than a day ahead: a generator in a time zone
                    // ahead of ours, far likelier than a clock that wrong.
                    let zone_hint = start.is_some_and(|s| s - now < chrono::Duration::hours(26));
                    return Err(Error::ClockBehind {
                        counter: counter.to_owned(),
                        local: today.to_owned(),
                        issued: expected.period.clone(),
                        hint: zone_hint.then(|| {
                            format!(
                                "that period began {} min from now by this clock: was it \
                                 issued in another time zone (this generator uses {})? Every \
                                 generator of a prefix must use the same one",
                                (start.unwrap_or(now) - now).num_minutes(),
                                self.zone.name()
                            )
                        }),
                    });
                }
                (expected.period.clone(), expected.n)
            }
        };
        match base.checked_add(k) {
            Some(n) if n <= self.max => Ok(Record { period: stamp, n }),
            _ => Err(Error::Exhausted {
                counter: counter.to_owned(),
                period: stamp,
                requested: k,
                max: self.max,
            }),
        }
    }
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
    fn plan_rolls_over_refuses_a_clock_behind_and_never_passes_the_width() {
        let rules = PeriodRules {
            zone: Zone::Named(chrono_tz::Asia::Shanghai),
            period: ResetPeriod::Day,
            tolerance: Duration::from_secs(5),
            max: 9999,
        };
        let rec = |p: &str, n| Record {
            period: p.into(),
            n,
        };
        let plan = |at: &str, expected: &Record, k| {
            let now = utc(at);
            rules.plan("ORDER", now, &rules.stamp(now), expected, k)
        };
        // 10:00 on the 22nd in Shanghai.
        let day = "2026-11-22T02:00:00Z";
        assert_eq!(plan(day, &rec("", 0), 1).ok(), Some(rec("20261122", 1)));
        assert_eq!(
            plan(day, &rec("20261122", 7), 3).ok(),
            Some(rec("20261122", 10))
        );
        // A new day starts again at 1.
        assert_eq!(
            plan(day, &rec("20261121", 42), 1).ok(),
            Some(rec("20261122", 1))
        );
        // 2 s before midnight (within tolerance of the 23rd): issue in it.
        let late = "2026-11-22T15:59:58Z";
        assert_eq!(
            plan(late, &rec("20261123", 4), 1).ok(),
            Some(rec("20261123", 5))
        );
        // A minute behind: refused, never a number for an earlier day.
        let behind = "2026-11-22T15:59:00Z";
        assert!(matches!(
            plan(behind, &rec("20261123", 4), 1),
            Err(Error::ClockBehind { .. })
        ));
        assert!(matches!(
            plan(day, &rec("20261122", 9999), 1),
            Err(Error::Exhausted { max: 9999, .. })
        ));
        assert!(matches!(
            plan(day, &rec("20261122", u64::MAX), 1),
            Err(Error::Exhausted { .. })
        ));
    }
}
