//! Refill rates as exact fractions of tokens per second.
//!
//! A [`Rate`] is always stored reduced, `p/q` with `1 <= q <= 2^32`, so that one token is exactly
//! `q * 10^9` integer *units* and one nanosecond of refill adds exactly `p` units (see [`crate::units`]).
//! Nothing here rounds: a rate that cannot be represented inside those bounds is an error, not an
//! approximation.

use std::fmt;
use std::num::{IntErrorKind, ParseIntError};
use std::str::FromStr;
use std::time::Duration;

use crate::NANOS_PER_SECOND;
use crate::error::ConfigError;

/// The largest denominator a [`Rate`] may have once reduced: `2^32`.
///
/// It keeps `capacity * q * 10^9` below `2^126`, so every balance fits a `u128` with room to add.
pub const MAX_RATE_DENOMINATOR: u64 = 1 << 32;

/// Tokens per second as a reduced fraction `numer / denom`.
///
/// ```
/// use bucketproof_limiter::Rate;
/// let rate: Rate = "3/2s".parse().unwrap();
/// assert_eq!((rate.numer(), rate.denom()), (3, 2));
/// assert_eq!(Rate::per_second(100), "100/s".parse().unwrap());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rate {
    numer: u64,
    denom: u64,
}

impl Rate {
    /// No refill at all: a bucket with this rate never gains tokens, and denials say `Never`.
    pub const ZERO: Rate = Rate { numer: 0, denom: 1 };

    /// `numer / denom` tokens per second, reduced.
    ///
    /// Errors: a zero denominator, or a reduced denominator above [`MAX_RATE_DENOMINATOR`].
    pub fn new(numer: u64, denom: u64) -> Result<Rate, ConfigError> {
        Self::from_u128(numer as u128, denom as u128)
    }

    /// An already reduced, in-bounds `numer / denom` (one taken apart from a valid rate).
    pub(crate) const fn from_reduced(numer: u64, denom: u64) -> Rate {
        Rate { numer, denom }
    }

    /// `n` tokens per second.
    pub const fn per_second(n: u64) -> Rate {
        Rate { numer: n, denom: 1 }
    }

    /// `n` tokens per `period` (nanosecond precision), reduced: `Rate::per(5, 60s)` is `1/12` per second.
    pub fn per(n: u64, period: Duration) -> Result<Rate, ConfigError> {
        let period_ns = period.as_nanos();
        if period_ns == 0 {
            return Err(ConfigError::ZeroRatePeriod);
        }
        Self::from_u128(n as u128 * NANOS_PER_SECOND as u128, period_ns)
    }

    fn from_u128(numer: u128, denom: u128) -> Result<Rate, ConfigError> {
        if denom == 0 {
            return Err(ConfigError::ZeroRateDenominator);
        }
        let divisor = gcd(numer, denom);
        let (numer, denom) = if numer == 0 {
            (0, 1)
        } else {
            (numer / divisor, denom / divisor)
        };
        if denom > MAX_RATE_DENOMINATOR as u128 || numer > u64::MAX as u128 {
            return Err(ConfigError::RateOutOfRange {
                numer,
                denom,
                max_denom: MAX_RATE_DENOMINATOR,
            });
        }
        Ok(Rate {
            numer: numer as u64,
            denom: denom as u64,
        })
    }

    /// The reduced numerator `p`: also the number of units one nanosecond of refill adds.
    pub const fn numer(self) -> u64 {
        self.numer
    }

    /// The reduced denominator `q`, `1 <= q <= 2^32`.
    pub const fn denom(self) -> u64 {
        self.denom
    }

    /// True for [`Rate::ZERO`].
    pub const fn is_zero(self) -> bool {
        self.numer == 0
    }
}

/// Formats as the parser reads it back: `"p/s"` when `q == 1`, else `"p/qs"`.
impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.denom == 1 {
            write!(f, "{}/s", self.numer)
        } else {
            write!(f, "{}/{}s", self.numer, self.denom)
        }
    }
}

/// Parses `"<tokens>/<period>"`, where the period is an optional whole count followed by a unit:
/// `ns`, `us`, `ms`, `s`, `min` (or `m`), `h`, `d`, `y` (365 days, as the harness's durations count
/// it). The token count is a whole number in `[0, 2^64 - 1]`. Examples: `"100/s"`, `"5/min"`,
/// `"1/h"`, `"3/2s"`.
impl FromStr for Rate {
    type Err = ConfigError;

    fn from_str(input: &str) -> Result<Rate, ConfigError> {
        let bad = |reason: &'static str| ConfigError::ParseRate {
            input: input.to_owned(),
            reason,
        };
        let (tokens, period) = input
            .trim()
            .split_once('/')
            .ok_or_else(|| bad("expected <tokens>/<period>, e.g. \"100/s\""))?;
        let tokens: u64 = tokens.trim().parse().map_err(|e: ParseIntError| {
            bad(match e.kind() {
                IntErrorKind::PosOverflow => "the token count is above 2^64 - 1",
                _ if tokens.trim().starts_with('-') => "the token count is negative",
                _ => "the token count is not a whole number",
            })
        })?;
        let period = period.trim();
        let digits_end = period
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(period.len());
        let (count, unit) = period.split_at(digits_end);
        let count: u128 = if count.is_empty() {
            1
        } else {
            count.parse().map_err(|e: ParseIntError| {
                bad(match e.kind() {
                    IntErrorKind::PosOverflow => "the period count is above 2^128 - 1",
                    _ => "the period count is not a whole number",
                })
            })?
        };
        let unit_ns: u128 = match unit.trim() {
            "ns" => 1,
            "us" | "µs" => 1_000,
            "ms" => 1_000_000,
            "s" | "sec" => NANOS_PER_SECOND as u128,
            "m" | "min" => 60 * NANOS_PER_SECOND as u128,
            "h" => 3_600 * NANOS_PER_SECOND as u128,
            "d" => 86_400 * NANOS_PER_SECOND as u128,
            "y" => 365 * 86_400 * NANOS_PER_SECOND as u128,
            _ => return Err(bad("unknown unit; use ns, us, ms, s, min, h, d or y")),
        };
        let period_ns = count
            .checked_mul(unit_ns)
            .filter(|&ns| ns > 0)
            .ok_or_else(|| bad("the period must be positive and below 2^128 ns"))?;
        Rate::from_u128(tokens as u128 * NANOS_PER_SECOND as u128, period_ns)
    }
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_forms() {
        assert_eq!("100/s".parse::<Rate>().unwrap(), Rate::per_second(100));
        assert_eq!("5/min".parse::<Rate>().unwrap(), Rate::new(1, 12).unwrap());
        assert_eq!("1/h".parse::<Rate>().unwrap(), Rate::new(1, 3600).unwrap());
        assert_eq!("3/2s".parse::<Rate>().unwrap(), Rate::new(3, 2).unwrap());
        assert_eq!("0/s".parse::<Rate>().unwrap(), Rate::ZERO);
        assert_eq!(
            "7/500ms".parse::<Rate>().unwrap(),
            Rate::per_second(14),
            "sub-second periods scale up"
        );
    }

    #[test]
    fn each_malformed_rate_names_its_own_mistake() {
        let reason = |input: &str| match input.parse::<Rate>() {
            Err(ConfigError::ParseRate { reason, .. }) => reason,
            other => panic!("{input:?} gave {other:?}"),
        };
        assert_eq!(
            reason("99999999999999999999999999999/s"),
            "the token count is above 2^64 - 1"
        );
        assert_eq!(reason("-2/5s"), "the token count is negative");
        assert_eq!(reason("x/s"), "the token count is not a whole number");
        assert_eq!(
            reason("1/999999999999999999999999999999999999999999s"),
            "the period count is above 2^128 - 1"
        );
        assert_eq!(
            reason("1/fortnight"),
            "unknown unit; use ns, us, ms, s, min, h, d or y"
        );
        // A year is 365 days, as in the harness's durations.
        assert_eq!(
            "365/2y".parse::<Rate>().unwrap(),
            "1/2d".parse::<Rate>().unwrap()
        );
    }

    #[test]
    fn rejects_malformed_rates_with_a_reason() {
        for bad in ["", "100", "x/s", "1/0s", "1/fortnight", "-1/s", "1/s/s"] {
            let err = bad.parse::<Rate>().unwrap_err();
            assert!(
                matches!(
                    err,
                    ConfigError::ParseRate { .. } | ConfigError::RateOutOfRange { .. }
                ),
                "{bad:?} gave {err:?}"
            );
        }
    }

    #[test]
    fn reduces_and_bounds_the_denominator() {
        assert_eq!(Rate::new(6, 4).unwrap(), Rate::new(3, 2).unwrap());
        assert_eq!(Rate::new(0, 7).unwrap(), Rate::ZERO);
        assert!(matches!(
            Rate::new(1, 0),
            Err(ConfigError::ZeroRateDenominator)
        ));
        assert!(Rate::new(1, MAX_RATE_DENOMINATOR).is_ok());
        assert!(matches!(
            Rate::new(1, MAX_RATE_DENOMINATOR + 1),
            Err(ConfigError::RateOutOfRange { .. })
        ));
        // One token per ~136 years is below the grid: an error, not a rounded rate.
        assert!(Rate::per(1, Duration::from_secs(1 << 32) * 2).is_err());
    }

    #[test]
    fn display_round_trips() {
        for rate in [
            Rate::per_second(7),
            Rate::new(1, 3600).unwrap(),
            Rate::ZERO,
            Rate::new(u64::MAX, MAX_RATE_DENOMINATOR - 1).unwrap(),
        ] {
            assert_eq!(rate.to_string().parse::<Rate>().unwrap(), rate);
        }
    }
}
