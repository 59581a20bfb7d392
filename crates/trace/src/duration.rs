//! Durations as people write them: `"250ms"`, `"3y"`, `17` (nanoseconds).
//!
//! Owns the harness's one duration parser ([`parse`]), its inverse for labels ([`format()`]), the unit
//! table both share, and the unit constants ([`SECOND`] ... [`YEAR`]); scenario files (through
//! [`DurationNs`]) and the float-vs-rational grid's horizons both parse with it.
//!
//! Promises: a year is 365 days, everywhere; a duration that does not fit in `u64` nanoseconds is an
//! error, never a wrapped or saturated value; every error says what was given and what was expected.

use std::fmt;

use bucketproof_limiter::{NANOS_PER_SECOND, Nanos};
use serde::{Deserialize, Deserializer, Serialize};

/// A TOML integer (always signed) as a whole number; `what` names it in the error.
pub fn whole<E: serde::de::Error>(v: i64, what: &str) -> Result<u64, E> {
    u64::try_from(v).map_err(|_| E::custom(format!("{what} cannot be negative ({v})")))
}

/// One second.
pub const SECOND: Nanos = NANOS_PER_SECOND;
/// One minute.
pub const MINUTE: Nanos = 60 * SECOND;
/// One hour.
pub const HOUR: Nanos = 60 * MINUTE;
/// One day.
pub const DAY: Nanos = 24 * HOUR;
/// One (365-day) year: durations written with `y`, the runner's `long_idle` and `near_clock_end`.
pub const YEAR: Nanos = 365 * DAY;

/// The units, largest first (the order [`format()`] tries them in).
const UNITS: [(&str, Nanos); 8] = [
    ("y", YEAR),
    ("d", DAY),
    ("h", HOUR),
    ("min", MINUTE),
    ("s", SECOND),
    ("ms", 1_000_000),
    ("us", 1_000),
    ("ns", 1),
];

/// The unit names, for messages.
const UNIT_NAMES: &str = "ns, us, ms, s, min, h, d or y";

/// Why a duration did not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DurationError {
    /// No whole number of units in front.
    #[error("expected a duration like \"250ms\" or \"3y\", found {0:?}")]
    NotANumber(String),
    /// A unit that is not in the table.
    #[error("unknown duration unit {unit:?} in {input:?}; use {UNIT_NAMES}")]
    UnknownUnit {
        /// The unit given.
        unit: String,
        /// The whole input.
        input: String,
    },
    /// More than `u64::MAX` nanoseconds.
    #[error("duration {0:?} does not fit in u64 nanoseconds")]
    TooLong(String),
}

/// Parses `"<n><unit>"` (unit `ns`, `us`, `ms`, `s`, `min`, `h`, `d` or `y`) or a bare whole number of
/// nanoseconds; spaces around the number and the unit are ignored.
pub fn parse(input: &str) -> Result<Nanos, DurationError> {
    let text = input.trim();
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (count, unit) = text.split_at(digits_end);
    let count: u64 = count
        .parse()
        .map_err(|_| DurationError::NotANumber(text.to_owned()))?;
    let unit = unit.trim();
    let unit_ns = match unit {
        "" => 1,
        _ => UNITS
            .iter()
            .find(|(name, _)| *name == unit)
            .map(|&(_, ns)| ns)
            .ok_or_else(|| DurationError::UnknownUnit {
                unit: unit.to_owned(),
                input: text.to_owned(),
            })?,
    };
    count
        .checked_mul(unit_ns)
        .ok_or_else(|| DurationError::TooLong(text.to_owned()))
}

/// True if `input` names its unit (`"10s"`, not `"10"`): where a bare number would be ambiguous.
pub fn has_unit(input: &str) -> bool {
    input
        .trim()
        .chars()
        .last()
        .is_some_and(|c| !c.is_ascii_digit())
}

/// A duration in the largest unit that divides it, for labels: `"100 y"`, `"1 s"`, `"1500 ms"`.
pub fn format(ns: Nanos) -> String {
    UNITS
        .iter()
        .find(|&&(_, unit)| ns >= unit && ns.is_multiple_of(unit))
        .map_or_else(
            || format!("{ns} ns"),
            |&(name, unit)| format!("{} {name}", ns / unit),
        )
}

/// A duration (or, for `clock.start`, an instant) of whole nanoseconds as written in a scenario: an
/// integer of nanoseconds or a string [`parse`] accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Default)]
pub struct DurationNs(pub Nanos);

impl<'de> Deserialize<'de> for DurationNs {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = DurationNs;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration: an integer of nanoseconds or a string like \"250ms\"")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<DurationNs, E> {
                whole(v, "a duration").map(DurationNs)
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<DurationNs, E> {
                Ok(DurationNs(v))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<DurationNs, E> {
                parse(v).map(DurationNs).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse("250ms"), Ok(250_000_000));
        assert_eq!(parse("3y"), Ok(3 * YEAR));
        assert_eq!(parse(" 2 min "), Ok(2 * MINUTE));
        assert_eq!(parse("17"), Ok(17));
        assert!(matches!(parse("999999y"), Err(DurationError::TooLong(_))));
        assert!(matches!(parse("ms"), Err(DurationError::NotANumber(_))));
        assert!(matches!(
            parse("5 parsecs"),
            Err(DurationError::UnknownUnit { .. })
        ));
    }

    #[test]
    fn labels_use_the_largest_unit_that_divides_and_parse_back() {
        for (ns, label) in [
            (100 * YEAR, "100 y"),
            (SECOND, "1 s"),
            (1_500_000_000, "1500 ms"),
            (7, "7 ns"),
            (0, "0 ns"),
        ] {
            assert_eq!(format(ns), label);
            assert_eq!(parse(&label.replace(' ', "")), Ok(ns), "{label}");
        }
        assert!(has_unit("10s") && !has_unit("10") && !has_unit(""));
    }
}
