//! A token amount as a subject reports it: exact (`numer / denom`) or a float's value, and the
//! exact comparisons the oracles make between amounts, rationals and whole token counts.
//!
//! Promise: every comparison is exact (a float compares by its exact binary value), and a value
//! that is not a number compares as nothing, never as equal.

use std::cmp::Ordering;

use bucketproof_model::Integer;
use bucketproof_model::Rational;

/// A token amount as a subject reports it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Amount {
    /// Exactly `numer / denom`.
    Exact {
        /// Numerator.
        numer: u128,
        /// Denominator (> 0).
        denom: u128,
    },
    /// A float subject's value.
    Approx(f64),
}

/// An exact amount as an integer or `a/b` (lowest terms), a float's as its exact value; an
/// unreported balance as `none` (as an unreported wait is shown); infinities as the float.
impl std::fmt::Display for Amount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.is_reported() {
            return f.write_str("none");
        }
        match self.to_rational() {
            Some(value) if value.is_int() => write!(f, "{}", value.numerator()),
            Some(value) => write!(f, "{}/{}", value.numerator(), value.denominator()),
            None => write!(f, "{self:?}"),
        }
    }
}

impl Amount {
    /// The balance of a decision whose subject reports none (an exec reply without `remaining`, a
    /// script reply with no balance mapped). It is NaN, so every comparison that needs a number
    /// finds none, and the oracles that judge a reported balance skip it
    /// ([`Amount::is_reported`]); the decision itself is judged as any other.
    pub const UNREPORTED: Amount = Amount::Approx(f64::NAN);

    /// False for [`Amount::UNREPORTED`] (any NaN): the subject said nothing about the balance.
    pub fn is_reported(self) -> bool {
        !matches!(self, Amount::Approx(value) if value.is_nan())
    }

    /// The amount as an exact rational (a float is converted exactly, bit for bit). `None` for NaN or
    /// infinities.
    pub fn to_rational(self) -> Option<Rational> {
        match self {
            Amount::Exact { numer, denom } => Some(Rational::from_parts_signed(
                Integer::from(numer),
                Integer::from(denom),
            )),
            Amount::Approx(value) => Rational::try_from(value).ok(),
        }
    }

    /// Whether this is exactly `value`.
    ///
    /// The per-step comparison of the differential oracle: an exact amount is compared without building
    /// a reduced fraction. `value = a/b` in lowest terms equals `numer/denom` exactly when `b` divides
    /// `denom` and `numer = a * (denom / b)`; an `a` or `b` wider than `u128` (or a negative `a`) cannot.
    pub fn equals(self, value: &Rational) -> bool {
        match self {
            Amount::Exact { numer, denom } => {
                match (
                    u128::try_from(value.numerator()),
                    u128::try_from(value.denominator()),
                ) {
                    (Ok(a), Ok(b)) => denom % b == 0 && a.checked_mul(denom / b) == Some(numer),
                    _ => false,
                }
            }
            Amount::Approx(_) => self.to_rational().as_ref() == Some(value),
        }
    }

    /// Compares two amounts exactly; `None` if either is not a number. Two exact amounts on the same
    /// grid (the same denominator, as before and after one step of one config) compare by numerator.
    pub fn compare(self, other: Amount) -> Option<Ordering> {
        match (self, other) {
            (
                Amount::Exact { numer, denom },
                Amount::Exact {
                    numer: other_numer,
                    denom: other_denom,
                },
            ) if denom == other_denom => Some(numer.cmp(&other_numer)),
            _ => Some(self.to_rational()?.cmp(&other.to_rational()?)),
        }
    }

    /// Compares with a whole number of tokens exactly; `None` if this is not a number.
    pub fn compare_whole(self, tokens: u64) -> Option<Ordering> {
        match self {
            // `tokens * denom` past u128 is above every u128 numerator.
            Amount::Exact { numer, denom } => Some(
                (denom.checked_mul(u128::from(tokens)))
                    .map_or(Ordering::Less, |scaled| numer.cmp(&scaled)),
            ),
            Amount::Approx(_) => Some(self.to_rational()?.cmp(&Rational::from(tokens))),
        }
    }

    /// For plots and reports only.
    pub fn to_f64_lossy(self) -> f64 {
        match self {
            Amount::Exact { numer, denom } => numer as f64 / denom as f64,
            Amount::Approx(value) => value,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn exact(numer: u128, denom: u128) -> Amount {
        Amount::Exact { numer, denom }
    }

    proptest! {
        /// Property: the fast exact comparisons agree with comparing the reduced rationals, for amounts on
        /// the same grid, on different grids, near the top of u128, and against whole token counts.
        #[test]
        fn prop_fast_comparisons_agree_with_reduced_rationals(
            numer in prop_oneof![0u128..1_000, any::<u128>()],
            denom in prop_oneof![1u128..1_000, 1u128..=u128::MAX],
            other_numer in prop_oneof![0u128..1_000, any::<u128>()],
            other_denom in prop_oneof![1u128..1_000, 1u128..=u128::MAX],
            scale in 1u128..1_000,
            tokens in prop_oneof![0u64..1_000, any::<u64>()],
        ) {
            let (a, b) = (exact(numer, denom), exact(other_numer, other_denom));
            let (ra, rb) = (a.to_rational().unwrap(), b.to_rational().unwrap());
            prop_assert_eq!(a.compare(b), Some(ra.cmp(&rb)));
            prop_assert_eq!(a.equals(&rb), ra == rb);
            prop_assert_eq!(a.compare_whole(tokens), Some(ra.cmp(&Rational::from(tokens))));
            // The same value on a finer grid (unreduced) is still equal.
            if let (Some(n), Some(d)) = (numer.checked_mul(scale), denom.checked_mul(scale)) {
                prop_assert!(exact(n, d).equals(&ra));
                prop_assert_eq!(exact(n, d).compare(a), Some(Ordering::Equal));
            }
        }
    }

    #[test]
    fn floats_compare_exactly_and_nan_is_not_a_number() {
        let half = Amount::Approx(0.5);
        assert!(half.equals(&Rational::from_parts(1.into(), 2u32.into())));
        assert_eq!(half.compare(exact(1, 2)), Some(Ordering::Equal));
        assert_eq!(half.compare_whole(1), Some(Ordering::Less));
        assert_eq!(Amount::Approx(f64::NAN).compare_whole(1), None);
        assert!(!Amount::Approx(f64::NAN).equals(&Rational::ZERO));
    }
}
