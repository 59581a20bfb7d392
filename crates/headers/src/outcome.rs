//! One decision as the layer advertises it: [`Outcome`] (a limiter [`Decision`] with the config it
//! was made under), and the glue from a decision to the advertised numbers, using
//! [`crate::mapping`]'s rounding.
//!
//! What it owns: [`Outcome`], the recovery of the refill cursor's lead over a decision's `now`
//! (`exposed_lag`), a decision's `r` and `t` (`advertise_balance`) and a denial's `Retry-After`
//! seconds (`wait_secs`). [`crate::set::SetOutcome`] uses the same glue for each of its parts, and
//! [`crate::source`] re-exports [`Outcome`] as the answer of [`crate::source::DecisionSource::decide`].
//!
//! What it promises: every number is [`crate::mapping`]'s, so the advertised picture is never more
//! permissive than the limiter; a lag that cannot be recovered exactly is `None`, and then no `t`
//! is advertised.

use bucketproof_limiter::{Config, Decision, Wait};

use crate::mapping::{self, AdvertiseOptions, Advertised};

/// One decision with the configuration it was made under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The limiter's decision.
    pub decision: Decision,
    /// The key's configuration at the time (capacity and rate, for the policy field).
    pub config: Config,
    /// The cost that was asked for.
    pub cost: u64,
    /// True when the store could not be reached and a fallback decided (local budget or fail-open),
    /// or the store decided while recovering from a detected loss of its state.
    pub degraded: bool,
}

/// How far the refill cursor was ahead of `decision`'s `now`, in ns, recovered exactly from a wait
/// the decision exposes, for a decision on a bucket of `config` for `cost` tokens.
///
/// The limiter folds this lag into its waits but does not expose it. A denial that this bucket did
/// not cover has `retry_after = lag + ceil(short / rate)`; a bucket that is not full has
/// `reset_after = lag + ceil(missing / rate)` (every allowed decision charged at least one token, so
/// its bucket is not full). `None` when neither applies (a bucket that covered a denied cost and is
/// full: both waits are 0 whatever the lag), when the rate is zero or when the wait is `Never`.
pub(crate) fn exposed_lag(config: &Config, decision: &Decision, cost: u64) -> Option<u64> {
    let per_ns = config.units_per_nanosecond() as u128;
    if per_ns == 0 {
        return None;
    }
    let units = decision.remaining().units();
    let cost_units = cost as u128 * config.units_per_token();
    let (wait, missing) = if !decision.is_allowed() && units < cost_units {
        (
            decision.retry_after().unwrap_or(Wait::Never),
            cost_units - units,
        )
    } else if units < config.capacity_units() {
        (decision.reset_after(), config.capacity_units() - units)
    } else {
        return None;
    };
    let Wait::After(total) = wait else {
        return None;
    };
    let refill = u64::try_from(missing.div_ceil(per_ns)).ok()?;
    Some(total.saturating_sub(refill))
}

/// `r` and `t` for `decision` on a bucket of `config` whose cursor led the decision by `lag` ns
/// (see [`crate::mapping`] for the rounding); no `t` when the lag is unknown (`None`).
pub(crate) fn advertise_balance(
    config: &Config,
    decision: &Decision,
    lag: Option<u64>,
    options: AdvertiseOptions,
) -> Advertised {
    let rate = config.rate();
    let (units, per_token) = decision.remaining().as_ratio();
    let mut adv = mapping::advertise(
        units,
        per_token,
        rate.numer(),
        rate.denom(),
        lag.unwrap_or(0),
        options,
    );
    if lag.is_none() {
        // No refill to wait for (zero rate) or one beyond the clock's range: no window.
        adv.reset = None;
    }
    adv
}

impl Outcome {
    /// A decision with the config it was made under (so a concurrent reconfigure cannot make the
    /// advertised policy disagree with the decision).
    pub fn of(decision: Decision, cost: u64, degraded: bool) -> Outcome {
        Outcome {
            decision,
            config: decision.config(),
            cost,
            degraded,
        }
    }

    /// How far the bucket's refill cursor was ahead of the decision's `now`, in ns.
    ///
    /// The limiter folds this lag into its waits but does not expose it, so it is recovered exactly
    /// from a wait the decision does expose: an allowed decision charged at least one token, so its
    /// bucket is not full and `reset_after = lag + ceil(missing / rate)`; a denial has
    /// `retry_after = lag + ceil(short / rate)`. `None` when the rate is zero or a wait is `Never`.
    pub fn lag_ns(&self) -> Option<u64> {
        exposed_lag(&self.config, &self.decision, self.cost)
    }

    /// `r` and `t` for this decision (see [`crate::mapping`] for the rounding).
    pub fn advertised(&self, options: AdvertiseOptions) -> Advertised {
        advertise_balance(&self.config, &self.decision, self.lag_ns(), options)
    }

    /// `Retry-After` in delay seconds for a denial (rounded up, never 0 for a positive wait); `None`
    /// when allowed or when the wait is `Never` (the quota will not come back).
    pub fn retry_after_secs(&self) -> Option<u64> {
        wait_secs(self.decision.retry_after())
    }
}

/// A denial's wait as `Retry-After` delay seconds: `None` when allowed (`None`) or `Never`.
pub(crate) fn wait_secs(wait: Option<Wait>) -> Option<u64> {
    match wait? {
        Wait::After(ns) => Some(mapping::retry_after_secs(ns)),
        Wait::Never => None,
    }
}
