//! The exact range: which configs the Lua script can run without ever rounding.
//!
//! Redis Lua numbers are IEEE doubles, exact for integers up to 2^53. Instead of carrying units in several
//! limbs (slower, and more script to get wrong), the script is written so that every number it computes is
//! an integer no larger than `capacity_units + max(p, 3 * 10^9)`:
//!
//! - the balance, the missing units and every quotient are `<= capacity_units`;
//! - exact integer division corrects a double quotient with products `k * p <= a + p`;
//! - elapsed time is only turned into one number once it is known to be below `time_to_full + 3 s`,
//!   and `time_to_full <= capacity_units` because `p >= 1` (larger gaps mean "full" without multiplying);
//! - instants (`u64` ns, beyond 2^53) travel as two limbs `(seconds, nanoseconds)`.
//!
//! So the accepted range is `capacity * q * 10^9 + max(p, 3 * 10^9) <= 2^53`, checked here once, at
//! construction; every other config is refused with [`RangeError::OutOfExactRange`], naming the limit.
//! For an integer rate (`q = 1`) that is a capacity up to 9,007,196 tokens; for `q = 1000`, up to 9,007;
//! for one token a day (`q = 86400`), up to 104; a denominator above 9,007,196 fits no capacity at all.

use bucketproof_limiter::{Config, NANOS_PER_SECOND};

/// 2^53: the largest integer below which every integer is an exact double.
pub const EXACT_LIMIT: u128 = 1 << 53;

/// Headroom the script needs above the capacity for time arithmetic: elapsed time is compared as one
/// number only while it is below `time_to_full + 3 s`.
pub const TIME_HEADROOM: u128 = 3_000_000_000;

/// A config the script cannot run exactly.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RangeError {
    /// `capacity_units + max(p, 3e9)` exceeds 2^53.
    #[error(
        "config capacity {capacity} at {numer}/{denom} tokens/s is outside the exact Redis range: \
         capacity*q*10^9 + max(p, 3*10^9) = {needed} > 2^53 = {limit} (Lua numbers are doubles); \
         lower the capacity or the rate's denominator"
    )]
    OutOfExactRange {
        /// Capacity in tokens.
        capacity: u64,
        /// Reduced rate numerator `p`.
        numer: u64,
        /// Reduced rate denominator `q`.
        denom: u64,
        /// `capacity_units + max(p, 3e9)`.
        needed: u128,
        /// [`EXACT_LIMIT`].
        limit: u128,
    },
}

/// Checks that the script computes `config` exactly; see the module docs for the bound.
pub fn check_exact(config: &Config) -> Result<(), RangeError> {
    let p = config.units_per_nanosecond() as u128;
    let needed = config.capacity_units() + p.max(TIME_HEADROOM);
    if needed <= EXACT_LIMIT {
        Ok(())
    } else {
        Err(RangeError::OutOfExactRange {
            capacity: config.capacity(),
            numer: config.rate().numer(),
            denom: config.rate().denom(),
            needed,
            limit: EXACT_LIMIT,
        })
    }
}

/// The largest capacity accepted for `rate`, or `None` if even capacity 1 is out of range.
pub fn max_capacity(rate: bucketproof_limiter::Rate) -> Option<u64> {
    let unit = rate.denom() as u128 * NANOS_PER_SECOND as u128;
    let room = EXACT_LIMIT.checked_sub((rate.numer() as u128).max(TIME_HEADROOM))?;
    let cap = room / unit;
    (cap >= 1).then_some(cap as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bucketproof_limiter::Rate;

    #[test]
    fn the_edge_is_accepted_and_one_more_token_is_refused() {
        for rate in [
            Rate::per_second(1),
            Rate::new(7, 3).unwrap(),
            Rate::new(1, 1 << 20).unwrap(),
            Rate::per_second(1 << 50),
        ] {
            let cap = max_capacity(rate).expect("some capacity fits");
            assert!(check_exact(&Config::new(cap, rate).unwrap()).is_ok());
            let err = check_exact(&Config::new(cap + 1, rate).unwrap()).unwrap_err();
            assert!(err.to_string().contains("2^53"), "{err}");
        }
        assert_eq!(max_capacity(Rate::per_second(1)), Some(9_007_196));
    }

    #[test]
    fn a_huge_rate_numerator_is_refused() {
        let rate = Rate::per_second(1 << 53);
        assert_eq!(max_capacity(rate), None);
        assert!(check_exact(&Config::new(1, rate).unwrap()).is_err());
    }

    #[test]
    fn large_denominators_shrink_the_range_and_2_pow_32_is_refused() {
        // One day per token (q = 86400): a burst of at most 104 tokens.
        assert_eq!(max_capacity(Rate::new(1, 86_400).unwrap()), Some(104));
        assert_eq!(max_capacity(Rate::new(1, 1 << 20).unwrap()), Some(8));
        // q * 10^9 alone exceeds 2^53: no capacity fits.
        assert_eq!(max_capacity(Rate::new(1, 1 << 32).unwrap()), None);
    }
}
