//! [`Serial`], one issued number, how it prints, and which prefixes it
//! may carry.

use std::fmt;
use std::sync::Arc;

use chrono::NaiveDate;

use crate::error::{Error, Result};

/// Longest accepted prefix, in bytes.
pub const MAX_PREFIX_LEN: usize = 64;

/// Most numbers one [`SerialGenerator::next_batch`](crate::SerialGenerator::next_batch) call issues: the numbers
/// come back in memory (a `Vec` of this many takes tens of MB), so a larger
/// count is refused before any node is asked.
pub const MAX_BATCH: u64 = 1_000_000;

/// Rejects prefixes that would make numbers ambiguous or unsafe to print.
pub(crate) fn check_prefix(prefix: &str) -> Result<()> {
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
    // The stamp and the number are digits: a prefix ending in one would
    // let two prefixes spell the same string (`A1` + `2026112400…` and
    // `A12026112400` + `…`). Ending in anything else, the prefix is all up
    // to the last non-digit, so strings of different prefixes differ.
    if prefix.ends_with(|c: char| c.is_ascii_digit()) {
        return Err(Error::InvalidConfig(format!(
            "prefix {prefix:?} ends in a digit, so its numbers could spell another prefix's; \
             end it with a letter, '_' or '-' (e.g. {:?})",
            format!("{prefix}-")
        )));
    }
    Ok(())
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
