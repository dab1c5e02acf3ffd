//! [`Serial`], one issued number, and how it prints.

use std::fmt;
use std::sync::Arc;

use chrono::NaiveDate;

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

    /// The period stamp, e.g. `20261122` (empty for [`ResetPeriod::Never`](crate::ResetPeriod::Never)).
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

impl Serial {
    /// A number as the generator hands it out.
    pub(crate) fn new(prefix: Arc<str>, stamp: Arc<str>, number: u64, width: u8) -> Self {
        Self {
            prefix,
            stamp,
            number,
            width,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
