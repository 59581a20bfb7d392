//! The protocol's value types (docs/subject-protocol.md, "Values") and their exact JSON forms.
//!
//! Promises: integers stay integers (`u64`, never a float); token amounts are written as exact
//! `"numerator/denominator"` strings; a wait is an integer, `"never"` or `null`; a rate is read as
//! the exact fraction it is written as, and a malformed one fails to parse (a protocol error), while
//! a well-formed one the limiter cannot hold is left for the subject to refuse (`unsupported`).

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// An exact token amount `numer / denom` (`denom > 0`, not necessarily reduced).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ratio {
    /// Numerator.
    pub numer: u128,
    /// Denominator, `> 0`.
    pub denom: u128,
}

impl fmt::Display for Ratio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.numer, self.denom)
    }
}

/// Written as the string `"numer/denom"`, formatted on the stack: an acquire's reply holds up to
/// five amounts, and `fmt` machinery for each was a fifth of the adapter's time.
impl Serialize for Ratio {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // Two u128s of at most 39 digits each and the slash.
        let mut text = [0u8; 2 * 39 + 1];
        let mut digits = itoa::Buffer::new();
        let slash = put(&mut text, 0, digits.format(self.numer));
        text[slash] = b'/';
        let end = put(&mut text, slash + 1, digits.format(self.denom));
        // Digits and a slash are ASCII.
        let text = std::str::from_utf8(&text[..end]).map_err(serde::ser::Error::custom)?;
        serializer.serialize_str(text)
    }
}

/// Copies `digits` into `out` at `at`; returns where they end.
fn put(out: &mut [u8], at: usize, digits: &str) -> usize {
    let end = at + digits.len();
    out[at..end].copy_from_slice(digits.as_bytes());
    end
}

/// A duration from an operation's `now`, in nanoseconds, or never.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// This many nanoseconds.
    After(u64),
    /// No refill can help (zero rate, or the moment lies past the end of the clock).
    Never,
}

/// An integer, or `"never"`. "Not reported" is `Option::None`, written as `null`.
impl Serialize for Wait {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match *self {
            Wait::After(ns) => serializer.serialize_u64(ns),
            Wait::Never => serializer.serialize_str("never"),
        }
    }
}

/// A key's stored state, as `inspect` shows it (not refilled).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct State {
    /// The balance.
    pub tokens: Ratio,
    /// The refill cursor.
    pub last_refill_ns: u64,
    /// The key's capacity in whole tokens.
    pub capacity: u64,
}

/// One bandwidth of a config: `capacity` whole tokens refilled at `rate_per_s`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bandwidth {
    /// Whole tokens.
    pub capacity: u64,
    /// Tokens per second, exact.
    pub rate_per_s: RatePerSecond,
    /// The rate as the scenario wrote it (`"5/min"`): for messages only.
    pub rate: String,
}

/// A rate of `numer / denom` tokens per second, as written (`"p/q"`, `q >= 1`).
///
/// Held as `u128` so that any well-formed rate parses; whether the limiter can hold it is the
/// subject's question, answered with `unsupported`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RatePerSecond {
    /// Tokens.
    pub numer: u128,
    /// Seconds, `>= 1`.
    pub denom: u128,
}

impl RatePerSecond {
    /// Parses `"p/q"`: two runs of ASCII digits around one slash, `q >= 1`.
    pub fn parse(text: &str) -> Option<RatePerSecond> {
        let (numer, denom) = text.split_once('/')?;
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(numer) || !digits(denom) {
            return None;
        }
        let rate = RatePerSecond {
            numer: numer.parse().ok()?,
            denom: denom.parse().ok()?,
        };
        (rate.denom > 0).then_some(rate)
    }
}

impl<'de> Deserialize<'de> for RatePerSecond {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct RateVisitor;
        impl Visitor<'_> for RateVisitor {
            type Value = RatePerSecond;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a rate \"p/q\" in tokens per second, q >= 1, both below 2^128")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<RatePerSecond, E> {
                RatePerSecond::parse(text)
                    .ok_or_else(|| E::invalid_value(de::Unexpected::Str(text), &self))
            }
        }
        deserializer.deserialize_str(RateVisitor)
    }
}

/// What happens at the key bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// A new key at the bound is refused.
    RejectNewKeys,
    /// Drop an evictable (full, unpinned, no live record) bucket to make room, else refuse.
    EvictFull,
    /// Drop an evictable bucket, else the least recently refilled unpinned one (lossy).
    EvictLeastRecent,
    /// As `EvictLeastRecent`, keeping the victim's deficit: it comes back no fuller than it would be.
    EvictKeepingDeficit,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_exactly_and_only_when_well_formed() {
        let rate = RatePerSecond::parse("340282366920938463463374607431768211455/3").unwrap();
        assert_eq!((rate.numer, rate.denom), (u128::MAX, 3));
        for bad in [
            "", "5", "5/", "/5", "5/0", "-1/2", "1/+2", "1 /2", "1/2/3", "5/min",
        ] {
            assert_eq!(RatePerSecond::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn amounts_and_waits_have_their_exact_forms() {
        let state = State {
            tokens: Ratio {
                numer: 7,
                denom: 1_000_000_000,
            },
            last_refill_ns: u64::MAX,
            capacity: 10,
        };
        let json = serde_json::to_string(&state).unwrap();
        assert_eq!(
            json,
            r#"{"tokens":"7/1000000000","last_refill_ns":18446744073709551615,"capacity":10}"#
        );
        assert_eq!(serde_json::to_string(&Wait::Never).unwrap(), r#""never""#);
        assert_eq!(serde_json::to_string(&Wait::After(3)).unwrap(), "3");
    }
}
