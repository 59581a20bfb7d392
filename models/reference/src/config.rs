//! Configurations and errors.
//!
//! Owns the rules of docs/semantics.md, "Values":
//! > Rate: tokens per second as a reduced fraction `p/q`, `p >= 0`, `1 <= q <= 2^32`. `p == 0` means "no refill".
//! > Config: `capacity >= 1` tokens and a rate.
//!
//! Promise: a [`ModelConfig`] value is always valid and always holds the *reduced* fraction, because its fields are
//! private and its only constructor validates. Invalid input becomes a typed [`ConfigError`], never a panic. The
//! errors of a bandwidth set ([`crate::ModelBandwidths`]) are [`ConfigError`]s too, so one error type says why any
//! config of a key was refused.

use std::fmt;

use crate::Integer;
use crate::Rational;

/// Nanoseconds per second. Time is `u64` nanoseconds; rates are tokens per *second*.
pub const NANOS_PER_SECOND: u64 = 1_000_000_000;

/// The largest allowed reduced rate denominator: "`1 <= q <= 2^32`".
pub const MAX_RATE_DENOM: u64 = 1 << 32;

/// "A key's config is a *bandwidth set*: 1 to 8 bandwidths".
pub const MAX_BANDWIDTHS: usize = 8;

/// A bandwidth name: "a lowercase letter or `*`, then up to 31" more characters, so at most 32 bytes.
pub const MAX_NAME_LEN: usize = 32;

/// Which rule of a bandwidth name was broken ("a lowercase letter or `*`, then up to 31 of lowercase letters,
/// digits, `_`, `-`, `.`, `*`").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NameRule {
    /// The name is empty: it needs a first character.
    Empty,
    /// "then up to 31": the name has more than 32 bytes (it carries the length).
    TooLong(usize),
    /// "a lowercase letter or `*`": the first character is neither.
    First,
    /// "lowercase letters, digits, `_`, `-`, `.`, `*`": the character at this byte offset is none of them.
    Later(usize),
}

impl fmt::Display for NameRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameRule::Empty => write!(f, "a name is not empty"),
            NameRule::TooLong(len) => write!(f, "a name has at most 32 bytes, not {len}"),
            NameRule::First => write!(f, "a name starts with a lowercase letter or `*`"),
            NameRule::Later(at) => write!(
                f,
                "byte {at} is not a lowercase letter, a digit, `_`, `-`, `.` or `*`"
            ),
        }
    }
}

/// Why a configuration was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConfigError {
    /// "Config: `capacity >= 1` tokens": capacity 0 was given.
    ZeroCapacity,
    /// "`1 <= q`": the rate denominator was 0 (not a fraction at all).
    ZeroRateDenom,
    /// "`q <= 2^32`": the *reduced* denominator is larger than 2^32. Carries the values as given.
    RateDenomTooLarge {
        /// The numerator as given (before reduction).
        rate_numer: u64,
        /// The denominator as given (before reduction).
        rate_denom: u64,
    },
    /// "1 to 8 bandwidths": a set of none was given.
    NoBandwidths,
    /// "1 to 8 bandwidths": more were given. Carries how many.
    TooManyBandwidths(usize),
    /// The name of the bandwidth at `position` (from 0) is not a structured-field key.
    BandwidthName {
        /// The bandwidth's position in the set as given.
        position: usize,
        /// The rule it breaks.
        rule: NameRule,
    },
    /// "names in one set are distinct": the bandwidths at these two positions share a name.
    DuplicateBandwidthName {
        /// The position of the first bandwidth with the name.
        first: usize,
        /// The position of the later one.
        second: usize,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::ZeroCapacity => write!(f, "capacity must be at least 1 token"),
            ConfigError::ZeroRateDenom => write!(f, "rate denominator must be at least 1"),
            ConfigError::RateDenomTooLarge {
                rate_numer,
                rate_denom,
            } => write!(
                f,
                "rate {rate_numer}/{rate_denom} reduces to a denominator above 2^32"
            ),
            ConfigError::NoBandwidths => write!(f, "a bandwidth set has at least 1 bandwidth"),
            ConfigError::TooManyBandwidths(count) => write!(
                f,
                "a bandwidth set has at most {MAX_BANDWIDTHS} bandwidths, not {count}"
            ),
            ConfigError::BandwidthName { position, rule } => {
                write!(f, "the name of bandwidth #{position}: {rule}")
            }
            ConfigError::DuplicateBandwidthName { first, second } => {
                write!(f, "bandwidths #{first} and #{second} have the same name")
            }
        }
    }
}

impl std::error::Error for ConfigError {}

/// Errors of the model's operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModelError {
    /// acquire step 1: "`cost == 0` or `cost > capacity` -> `Err(InvalidCost)`. Nothing changes." For a set:
    /// "`cost` above the *smallest* capacity".
    InvalidCost {
        /// The cost that was asked for.
        cost: u64,
        /// The capacity of the key's config at that moment: the smallest of its bandwidths'.
        capacity: u64,
    },
    /// reconfigure step 4: "Invalid new config -> error, nothing changes." Also returned by [`ModelConfig::new`].
    InvalidConfig(ConfigError),
    /// settle step 1: "`actual > capacity` (the smallest capacity for a set) -> `Err(InvalidActual)`".
    InvalidActual {
        /// The actual cost given.
        actual: u64,
        /// The key's smallest capacity.
        capacity: u64,
    },
    /// settle step 2: "None (never recorded, out of the window, pushed out of the FIFO, forgotten, or its key
    /// expired) -> `Err(UnknownRequest)`".
    UnknownRequest,
    /// settle step 2: "A record of a denied acquire -> `Err(NotAdmitted)`".
    NotAdmitted,
    /// settle step 3: a record settled with another actual: "`Err(AlreadySettled { actual' })`".
    AlreadySettled {
        /// The actual it was settled with.
        actual: u64,
    },
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelError::InvalidCost { cost, capacity } => write!(
                f,
                "invalid cost {cost}: must be between 1 and the capacity {capacity}"
            ),
            ModelError::InvalidConfig(e) => write!(f, "invalid config: {e}"),
            ModelError::InvalidActual { actual, capacity } => write!(
                f,
                "invalid actual cost {actual}: must be at most the capacity {capacity}"
            ),
            ModelError::UnknownRequest => write!(f, "no live record of this request id"),
            ModelError::NotAdmitted => write!(f, "the request was denied: nothing to settle"),
            ModelError::AlreadySettled { actual } => {
                write!(
                    f,
                    "the request was settled already, with actual cost {actual}"
                )
            }
        }
    }
}

impl std::error::Error for ModelError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ModelError::InvalidConfig(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ConfigError> for ModelError {
    fn from(e: ConfigError) -> Self {
        ModelError::InvalidConfig(e)
    }
}

/// A valid bucket configuration: capacity (whole tokens) and a reduced rate `p/q` tokens per second.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ModelConfig {
    /// "`capacity >= 1` tokens".
    capacity: u64,
    /// The reduced numerator `p >= 0` of the rate `p/q` tokens per second.
    rate_numer: u64,
    /// The reduced denominator `1 <= q <= 2^32` of the rate `p/q` tokens per second.
    rate_denom: u64,
    /// `p / (q * 10^9)`, derived once from the two fields above: every refill and every wait uses it, and
    /// building it reduces a fraction (a gcd) each time.
    rate_per_ns: Rational,
}

/// Greatest common divisor (Euclid). `gcd(0, q) == q`, so `0/q` reduces to `0/1`.
fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl ModelConfig {
    /// "Config: `capacity >= 1` tokens and a rate." "Rate: tokens per second as a reduced fraction `p/q`, `p >= 0`,
    /// `1 <= q <= 2^32`."
    ///
    /// Decisions pinned here: a denominator of 0 is refused before anything else is looked at (it is no fraction);
    /// otherwise the fraction is reduced first and the bound `q <= 2^32` applies to the *reduced* denominator, so
    /// `2 / 2^33` is accepted as `1 / 2^32`, and `0/q` is accepted as `0/1` for every `q >= 1`.
    pub fn new(capacity: u64, rate_numer: u64, rate_denom: u64) -> Result<Self, ConfigError> {
        if capacity < 1 {
            return Err(ConfigError::ZeroCapacity);
        }
        if rate_denom < 1 {
            return Err(ConfigError::ZeroRateDenom);
        }
        let g = gcd(rate_numer, rate_denom);
        let (p, q) = (rate_numer / g, rate_denom / g);
        if q > MAX_RATE_DENOM {
            return Err(ConfigError::RateDenomTooLarge {
                rate_numer,
                rate_denom,
            });
        }
        debug_assert_eq!(gcd(p, q), 1, "the stored fraction is reduced");
        Ok(ModelConfig {
            capacity,
            rate_numer: p,
            rate_denom: q,
            rate_per_ns: Rational::from_parts(
                Integer::from(p),
                dashu_int::UBig::from(q) * dashu_int::UBig::from(NANOS_PER_SECOND),
            ),
        })
    }

    /// Capacity in whole tokens ("`capacity >= 1`").
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The reduced numerator `p` of the rate `p/q` tokens per second.
    pub fn rate_numer(&self) -> u64 {
        self.rate_numer
    }

    /// The reduced denominator `q` of the rate `p/q` tokens per second, `1 <= q <= 2^32`.
    pub fn rate_denom(&self) -> u64 {
        self.rate_denom
    }

    /// "`p == 0` means 'no refill'."
    pub fn refills(&self) -> bool {
        self.rate_numer != 0
    }

    /// The capacity as an exact rational number of tokens.
    pub fn capacity_tokens(&self) -> Rational {
        Rational::from(self.capacity)
    }

    /// The rate in tokens per second, `p/q`, exact.
    pub fn rate_per_second(&self) -> Rational {
        Rational::from_parts_signed(
            Integer::from(self.rate_numer),
            Integer::from(self.rate_denom),
        )
    }

    /// The rate in tokens per nanosecond, `rate_per_ns = p / (q * 10^9)`, exact.
    pub fn rate_per_ns(&self) -> &Rational {
        &self.rate_per_ns
    }

    /// reconfigure step 2: "with the new rate `p'/q'`, one unit is `1/(q' * 10^9)` token". Returns `q * 10^9`, the
    /// number of units in one token of this config's grid.
    pub fn units_per_token(&self) -> Integer {
        Integer::from(self.rate_denom) * Integer::from(NANOS_PER_SECOND)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_zero_is_an_error() {
        assert_eq!(ModelConfig::new(0, 1, 1), Err(ConfigError::ZeroCapacity));
    }

    #[test]
    fn denominator_zero_is_an_error_even_for_rate_zero() {
        assert_eq!(ModelConfig::new(1, 0, 0), Err(ConfigError::ZeroRateDenom));
        assert_eq!(ModelConfig::new(1, 5, 0), Err(ConfigError::ZeroRateDenom));
    }

    #[test]
    fn denominator_bound_applies_after_reduction() {
        let c = ModelConfig::new(3, 2, 1 << 33).unwrap();
        assert_eq!((c.rate_numer(), c.rate_denom()), (1, 1 << 32));
        assert_eq!(
            ModelConfig::new(3, 1, (1 << 32) + 1),
            Err(ConfigError::RateDenomTooLarge {
                rate_numer: 1,
                rate_denom: (1 << 32) + 1
            })
        );
        let c = ModelConfig::new(3, 1, 1 << 32).unwrap();
        assert_eq!(c.rate_denom(), 1 << 32);
    }

    #[test]
    fn fractions_are_reduced_and_zero_rate_is_zero_over_one() {
        let c = ModelConfig::new(10, 6, 4).unwrap();
        assert_eq!((c.rate_numer(), c.rate_denom()), (3, 2));
        let z = ModelConfig::new(10, 0, u64::MAX).unwrap();
        assert_eq!((z.rate_numer(), z.rate_denom()), (0, 1));
        assert!(!z.refills());
        let big = ModelConfig::new(u64::MAX, u64::MAX, u64::MAX).unwrap();
        assert_eq!((big.rate_numer(), big.rate_denom()), (1, 1));
    }

    #[test]
    fn rate_per_ns_is_rate_over_a_billion() {
        let c = ModelConfig::new(1, 1, 3).unwrap();
        assert_eq!(
            *c.rate_per_ns(),
            Rational::from_parts_signed(Integer::from(1), Integer::from(3_000_000_000u64))
        );
    }
}
