//! Reply mapping: a script's reply (a Lua array, a multi-bulk of integers, strings and nils) to a
//! decision ([`Observed`]), by the description's `[script.reply]` table.
//!
//! Promise: numbers are read exactly (integers, decimal strings, exponents); a reply that does not
//! match the mapping (not an array, an index out of range, not a number where one is mapped) is a
//! [`Mismatch`] the subject reports as a harness error, never a decision. A `remaining` outside
//! `[0, capacity]` is passed through: judging it is the oracles' job; so is a negative wait (not
//! under `none_below`), which is read as 0 (a wait cannot be negative; "now" is the nearest).

use bucketproof_limiter::Wait;
use redis::Value;
use serde::Deserialize;

use bucketproof_trace::subject::{Amount, Observed};

/// A time unit of a reply's waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeUnit {
    /// Seconds.
    S,
    /// Milliseconds.
    Ms,
    /// Microseconds.
    Us,
    /// Nanoseconds.
    Ns,
}

impl TimeUnit {
    fn ns(self) -> u128 {
        match self {
            TimeUnit::S => 1_000_000_000,
            TimeUnit::Ms => 1_000_000,
            TimeUnit::Us => 1_000,
            TimeUnit::Ns => 1,
        }
    }
}

/// How `allowed` is read from its reply entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allowed {
    /// Allowed when the entry is this integer.
    Equals(i64),
    /// Allowed when the entry is not this integer (a nil is not any integer).
    NotEquals(i64),
    /// Allowed when the entry is a number at least this (a nil is not).
    AtLeast(i64),
    /// Allowed when the entry's truth is this: nil, 0, an empty string and `"0"` are false,
    /// anything else true (Redis turns Lua `true` into 1 and `false` into nil).
    Truthy(bool),
}

/// A wait's entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaitMap {
    /// 0-based.
    pub index: usize,
    /// Its unit.
    pub unit: TimeUnit,
    /// Values below this mean "no wait given".
    pub none_below: Option<Decimal>,
}

/// The remaining balance's entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemainingMap {
    /// 0-based.
    pub index: usize,
    /// Read only from an admission's reply; a denial's reports no balance.
    pub only_when_allowed: bool,
}

/// The whole mapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplyMap {
    /// 0-based.
    pub allowed_index: usize,
    /// How.
    pub allowed: Allowed,
    /// The remaining balance's entry, in script units.
    pub remaining: Option<RemainingMap>,
    /// The retry-after's entry.
    pub retry_after: Option<WaitMap>,
    /// The reset-after's entry.
    pub reset_after: Option<WaitMap>,
}

/// A reply that does not match the mapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch(pub String);

/// An exact decimal `sign * mantissa / 10^scale`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decimal {
    negative: bool,
    mantissa: u128,
    scale: u32,
}

impl Decimal {
    /// An integer.
    pub fn from_i64(value: i64) -> Decimal {
        Decimal {
            negative: value < 0,
            mantissa: u128::from(value.unsigned_abs()),
            scale: 0,
        }
    }

    /// `12`, `-1`, `0.25`, `1e-05`, `+3.5E2`; `None` for anything else (or too many digits).
    pub fn parse(text: &str) -> Option<Decimal> {
        let text = text.trim();
        let (negative, body) = match text.as_bytes().first()? {
            b'-' => (true, &text[1..]),
            b'+' => (false, &text[1..]),
            _ => (false, text),
        };
        let (digits, exponent) = match body.find(['e', 'E']) {
            Some(at) => (&body[..at], body[at + 1..].parse::<i32>().ok()?),
            None => (body, 0),
        };
        let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
        if int.is_empty() && frac.is_empty()
            || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
        {
            return None;
        }
        let mut mantissa: u128 = 0;
        for b in int.bytes().chain(frac.bytes()) {
            mantissa = mantissa
                .checked_mul(10)?
                .checked_add(u128::from(b - b'0'))?;
        }
        let mut scale = i64::try_from(frac.len()).ok()? - i64::from(exponent);
        while scale < 0 {
            mantissa = mantissa.checked_mul(10)?;
            scale += 1;
        }
        Some(Decimal {
            negative: negative && mantissa != 0,
            mantissa,
            scale: u32::try_from(scale).ok().filter(|s| *s <= 38)?,
        })
    }

    fn is_zero(self) -> bool {
        self.mantissa == 0
    }

    /// `self < other`, exactly.
    pub fn less_than(self, other: Decimal) -> bool {
        match (self.negative, other.negative) {
            (true, false) => !(self.is_zero() && other.is_zero()),
            (false, true) => false,
            (negative, _) => {
                let (a, b) = align(self, other);
                if negative { a > b } else { a < b }
            }
        }
    }

    /// `ceil(self * factor)`, 0 for a negative value; `None` if too large.
    fn ceil_times(self, factor: u128) -> Option<u128> {
        if self.negative {
            return Some(0);
        }
        let scaled = self.mantissa.checked_mul(factor)?;
        Some(scaled.div_ceil(10u128.checked_pow(self.scale)?))
    }

    /// The amount `self * unit` tokens.
    fn amount(self, unit: u64) -> Amount {
        let denom = 10u128.pow(self.scale);
        match (self.negative, self.mantissa.checked_mul(u128::from(unit))) {
            (false, Some(numer)) => Amount::Exact { numer, denom },
            _ => {
                let magnitude = self.mantissa as f64 / denom as f64 * unit as f64;
                Amount::Approx(if self.negative { -magnitude } else { magnitude })
            }
        }
    }
}

/// Both mantissas at the larger scale (saturating: such magnitudes do not occur in replies).
fn align(a: Decimal, b: Decimal) -> (u128, u128) {
    let scale = a.scale.max(b.scale);
    let up = |d: Decimal| {
        d.mantissa
            .saturating_mul(10u128.saturating_pow(scale - d.scale))
    };
    (up(a), up(b))
}

/// One reply entry as text, for messages.
pub fn show(value: &Value) -> String {
    match value {
        Value::Nil => "nil".into(),
        Value::Int(i) => i.to_string(),
        Value::BulkString(bytes) => format!("{:?}", String::from_utf8_lossy(bytes)),
        Value::SimpleString(s) => format!("{s:?}"),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(show).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Okay => "OK".into(),
        Value::Double(d) => d.to_string(),
        Value::Boolean(b) => b.to_string(),
        other => format!("{other:?}"),
    }
}

fn number(value: &Value) -> Option<Decimal> {
    match value {
        Value::Int(i) => Some(Decimal::from_i64(*i)),
        Value::BulkString(bytes) => Decimal::parse(std::str::from_utf8(bytes).ok()?),
        Value::SimpleString(s) => Decimal::parse(s),
        Value::Double(d) => Decimal::parse(&d.to_string()),
        _ => None,
    }
}

fn truthy(value: &Value) -> bool {
    match value {
        Value::Nil => false,
        Value::Int(i) => *i != 0,
        Value::Boolean(b) => *b,
        Value::BulkString(bytes) => !bytes.is_empty() && bytes.as_slice() != b"0",
        Value::SimpleString(s) => !s.is_empty() && s != "0",
        _ => true,
    }
}

impl ReplyMap {
    /// The decision `reply` shows; `unit` is tokens per script unit.
    pub fn observe(&self, reply: &Value, unit: u64) -> Result<Observed, Mismatch> {
        let Value::Array(items) = reply else {
            return Err(Mismatch(format!(
                "the reply {} is not an array",
                show(reply)
            )));
        };
        let entry = |index: usize, what: &str| {
            items.get(index).ok_or_else(|| {
                Mismatch(format!(
                    "{what} is mapped to index {index}, but the reply {} has {} entries",
                    show(reply),
                    items.len()
                ))
            })
        };
        let numeric = |index: usize, what: &str| -> Result<Decimal, Mismatch> {
            let value = entry(index, what)?;
            number(value).ok_or_else(|| {
                Mismatch(format!(
                    "{what} at index {index} of the reply {} is {}, not a number",
                    show(reply),
                    show(value)
                ))
            })
        };
        let value = entry(self.allowed_index, "allowed")?;
        // The allowed entry as a number; nil is none (it equals no integer and is below any floor).
        let allowed_number = || match value {
            Value::Nil => Ok(None),
            other => number(other).map(Some).ok_or_else(|| {
                Mismatch(format!(
                    "allowed at index {} of the reply {} is {}, not a number or nil",
                    self.allowed_index,
                    show(reply),
                    show(other)
                ))
            }),
        };
        let allowed = match self.allowed {
            Allowed::Truthy(want) => truthy(value) == want,
            Allowed::AtLeast(floor) => {
                allowed_number()?.is_some_and(|n| !n.less_than(Decimal::from_i64(floor)))
            }
            Allowed::Equals(v) => allowed_number()?.is_some_and(|n| n.eq(&Decimal::from_i64(v))),
            Allowed::NotEquals(v) => {
                !allowed_number()?.is_some_and(|n| n.eq(&Decimal::from_i64(v)))
            }
        };
        let remaining = match self.remaining {
            Some(map) if allowed || !map.only_when_allowed => {
                numeric(map.index, "remaining")?.amount(unit)
            }
            // No balance reported: the oracles do not judge one.
            _ => Amount::UNREPORTED,
        };
        let wait = |map: &Option<WaitMap>, what: &str| -> Result<Option<Wait>, Mismatch> {
            let Some(map) = map else { return Ok(None) };
            let value = numeric(map.index, what)?;
            if map.none_below.is_some_and(|floor| value.less_than(floor)) {
                return Ok(None);
            }
            let ns = value.ceil_times(map.unit.ns()).ok_or_else(|| {
                Mismatch(format!(
                    "{what} at index {} of the reply {} is too large for a wait",
                    map.index,
                    show(reply)
                ))
            })?;
            Ok(Some(Wait::After(u64::try_from(ns).unwrap_or(u64::MAX))))
        };
        let retry_after = wait(&self.retry_after, "retry_after")?;
        Ok(Observed {
            allowed,
            remaining,
            retry_after: if allowed { None } else { retry_after },
            reset_after: wait(&self.reset_after, "reset_after")?,
            bandwidths: Vec::new(),
            created: None,
            replayed: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gcra() -> ReplyMap {
        ReplyMap {
            allowed_index: 0,
            allowed: Allowed::Truthy(false),
            remaining: Some(RemainingMap {
                index: 1,
                only_when_allowed: false,
            }),
            retry_after: Some(WaitMap {
                index: 2,
                unit: TimeUnit::S,
                none_below: Some(Decimal::from_i64(0)),
            }),
            reset_after: Some(WaitMap {
                index: 3,
                unit: TimeUnit::S,
                none_below: None,
            }),
        }
    }

    #[test]
    fn decimals_parse_exactly() {
        let d = |s: &str| Decimal::parse(s).unwrap();
        assert!(d("-1").less_than(d("0")));
        assert!(d("0.25").less_than(d("0.3")));
        assert!(!d("-0").less_than(d("0")));
        assert_eq!(d("1e-05").ceil_times(1_000_000_000), Some(10_000));
        assert_eq!(d("2.5E1").ceil_times(1), Some(25));
        assert_eq!(d("0.0000000001").ceil_times(1_000_000_000), Some(1));
        assert_eq!(d("-3").ceil_times(1), Some(0));
        for bad in ["", "-", "1.2.3", "abc", "1e", "."] {
            assert_eq!(Decimal::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn replies_map_to_decisions_or_mismatches() {
        let allowed = Value::Array(vec![
            Value::Nil,
            Value::Int(4),
            Value::Int(-1),
            Value::Int(2),
        ]);
        let observed = gcra().observe(&allowed, 1).unwrap();
        assert!(observed.allowed);
        assert_eq!(observed.remaining, Amount::Exact { numer: 4, denom: 1 });
        assert_eq!(observed.retry_after, None);
        assert_eq!(observed.reset_after, Some(Wait::After(2_000_000_000)));
        let denied = Value::Array(vec![
            Value::Int(1),
            Value::Int(0),
            Value::BulkString(b"0.5".to_vec()),
            Value::Int(3),
        ]);
        let observed = gcra().observe(&denied, 2).unwrap();
        assert!(!observed.allowed);
        assert_eq!(observed.retry_after, Some(Wait::After(500_000_000)));
        let short = Value::Array(vec![Value::Int(1)]);
        assert!(gcra().observe(&short, 1).unwrap_err().0.contains("index 1"));
        let word = Value::Array(vec![
            Value::Nil,
            Value::BulkString(b"many".to_vec()),
            Value::Int(0),
            Value::Int(0),
        ]);
        assert!(
            gcra()
                .observe(&word, 1)
                .unwrap_err()
                .0
                .contains("not a number")
        );
        assert!(gcra().observe(&Value::Int(1), 1).is_err());
    }
}
