//! Exact quantities the limiter reports: token balances and waits.
//!
//! Tokens are counted in integer *units* of `1 / (q * 10^9)` token, where `q` is the denominator of the
//! key's reduced rate `p/q` per second. In those units one nanosecond of refill adds exactly `p` units,
//! so refill never divides and never rounds. A [`Tokens`] keeps the units together with the grid, so
//! it can answer exactly (as a ratio) or as whole tokens (floor), and never silently as a float.

use crate::Nanos;

/// An exact token amount: `units / units_per_token`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tokens {
    units: u128,
    units_per_token: u128,
}

impl Tokens {
    /// `units` on the grid of `units_per_token` units per token (`units_per_token > 0`).
    pub fn from_units(units: u128, units_per_token: u128) -> Tokens {
        assert!(
            units_per_token > 0,
            "a unit grid has at least one unit per token"
        );
        Tokens {
            units,
            units_per_token,
        }
    }

    /// The raw unit count.
    pub const fn units(self) -> u128 {
        self.units
    }

    /// Units per whole token (`q * 10^9`).
    pub const fn units_per_token(self) -> u128 {
        self.units_per_token
    }

    /// Whole tokens, rounded down: what a client may still spend.
    pub fn whole(self) -> u64 {
        // units <= capacity * units_per_token, so the quotient fits u64.
        (self.units / self.units_per_token) as u64
    }

    /// The exact value as an (unreduced) ratio `(numerator, denominator)`.
    pub const fn as_ratio(self) -> (u128, u128) {
        (self.units, self.units_per_token)
    }

    /// An approximation for display and plots only; never used in a decision.
    pub fn to_f64_lossy(self) -> f64 {
        self.units as f64 / self.units_per_token as f64
    }
}

/// How long until something becomes true, in nanoseconds from the `now` of the decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Wait {
    /// Exactly this many nanoseconds (rounded up to a whole nanosecond).
    After(Nanos),
    /// Never: the rate is zero, or the moment lies beyond the `u64` nanosecond clock.
    Never,
}

impl Wait {
    /// `Some(ns)` for [`Wait::After`].
    pub const fn nanos(self) -> Option<Nanos> {
        match self {
            Wait::After(ns) => Some(ns),
            Wait::Never => None,
        }
    }

    /// The wait for `short_units` more units at `units_per_ns` per nanosecond, after a lag of `lag` ns
    /// (time the cursor is ahead of `now`), as seen from `now`: `lag + ceil(short_units / units_per_ns)`.
    ///
    /// `Never` when `units_per_ns == 0` or when `now + wait` does not fit the clock.
    pub(crate) fn until(short_units: u128, units_per_ns: u64, lag: Nanos, now: Nanos) -> Wait {
        if short_units == 0 {
            return Wait::After(0);
        }
        if units_per_ns == 0 {
            return Wait::Never;
        }
        let refill_ns = short_units.div_ceil(units_per_ns as u128);
        let total = refill_ns + lag as u128;
        let reachable = total <= (u64::MAX - now) as u128;
        if reachable {
            Wait::After(total as Nanos)
        } else {
            Wait::Never
        }
    }
}
