//! The arrival-curve oracle: no overselling, checked without the reference model.
//!
//! For every key and every interval `[a, b]` of one bucket epoch, the cost admitted at times in `[a, b]`
//! must be at most `capacity + rate * (b - a)` (a balance never exceeds capacity, and refill adds
//! `rate` per unit of time). From the start of an epoch this is `initial + rate * t` with a full initial
//! bucket. All `a <= b` are covered in one streaming pass per op: with `S` the cumulative admitted cost,
//! the worst `a` is the admitted op `j` maximizing `rate * t_j - S_before_j`, which is kept as a running
//! maximum. Exact integer arithmetic in units of `1 / (q * 10^9)` token, with a big-integer fallback
//! when an `i128` would overflow.
//!
//! Times are per-key *effective* times (`max` of the key's times so far): a clock that runs backwards
//! does not stop the bucket's own clock. An epoch restarts when the bucket is created (first use, or
//! after the subject dropped it), reconfigured or forgotten.

use std::collections::BTreeMap;

use bucketproof_model::Integer;

use crate::trace::Acquire;

/// A breach of the arrival curve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArrivalBreach {
    /// The key.
    pub key: u64,
    /// Start of the worst interval (effective ns).
    pub from: u64,
    /// End of the interval (effective ns).
    pub to: u64,
    /// Admitted over the interval, in units.
    pub admitted_units: Integer,
    /// The bound over the interval, in units.
    pub bound_units: Integer,
}

#[derive(Clone, Debug)]
struct KeyCurve {
    capacity_units: i128,
    units_per_token: i128,
    units_per_ns: i128,
    epoch_start: u64,
    effective_now: u64,
    /// Cumulative admitted units in the epoch.
    admitted: i128,
    /// max over admitted ops j (and the epoch start) of `p * (t_j - epoch_start) - admitted_before_j`.
    best: i128,
    best_at: u64,
    /// Set once an `i128` would have overflowed: the same quantities as big integers.
    wide: Option<Box<WideCurve>>,
}

#[derive(Clone, Debug)]
struct WideCurve {
    admitted: Integer,
    best: Integer,
}

/// Per-key streaming state of the arrival-curve check.
#[derive(Clone, Debug, Default)]
pub struct ArrivalCurve {
    keys: BTreeMap<u64, KeyCurve>,
}

/// A bucket config as the oracle needs it: capacity and the rate `p/q` per second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CurveConfig {
    /// Whole tokens.
    pub capacity: u64,
    /// Rate numerator `p` (units per ns).
    pub rate_numer: u64,
    /// Rate denominator `q`.
    pub rate_denom: u64,
}

impl ArrivalCurve {
    /// Starts a new epoch for `key` at `now` with `config` (full bucket, or a reconfigured one whose
    /// balance is at most the new capacity).
    pub fn restart(&mut self, key: u64, now: u64, config: CurveConfig) {
        let units_per_token =
            config.rate_denom as i128 * i128::from(bucketproof_limiter::NANOS_PER_SECOND);
        let effective_now = self
            .keys
            .get(&key)
            .map_or(now, |k| k.effective_now.max(now));
        self.keys.insert(
            key,
            KeyCurve {
                capacity_units: config.capacity as i128 * units_per_token,
                units_per_token,
                units_per_ns: config.rate_numer as i128,
                epoch_start: effective_now,
                effective_now,
                admitted: 0,
                best: 0,
                best_at: effective_now,
                wide: None,
            },
        );
    }

    /// Forgets `key`: its next use starts a new epoch.
    pub fn forget(&mut self, key: u64) {
        self.keys.remove(&key);
    }

    /// True if `key` has an epoch running.
    pub fn knows(&self, key: u64) -> bool {
        self.keys.contains_key(&key)
    }

    /// Records `acquire` (admitted or not) and checks the bound. Its request id is not consulted: a
    /// replayed answer is not an arrival, so it is never observed.
    pub fn observe(&mut self, acquire: Acquire, admitted: bool) -> Result<(), ArrivalBreach> {
        let Acquire { key, cost, now, .. } = acquire;
        let Some(curve) = self.keys.get_mut(&key) else {
            return Ok(());
        };
        curve.effective_now = curve.effective_now.max(now);
        if !admitted {
            return Ok(());
        }
        let t = curve.effective_now;
        let elapsed = (t - curve.epoch_start) as i128; // < 2^64
        let cost_units = cost as i128 * curve.units_per_token; // < 2^126
        if curve.wide.is_none() {
            let fast = (|| {
                let refill = curve.units_per_ns.checked_mul(elapsed)?;
                let candidate = refill.checked_sub(curve.admitted)?;
                let best = curve.best.max(candidate);
                let admitted = curve.admitted.checked_add(cost_units)?;
                let slack = admitted.checked_sub(refill)?.checked_add(best)?;
                Some((candidate, best, admitted, slack))
            })();
            match fast {
                Some((candidate, best, admitted, slack)) => {
                    if candidate > curve.best {
                        curve.best_at = t;
                    }
                    curve.best = best;
                    curve.admitted = admitted;
                    return if slack <= curve.capacity_units {
                        Ok(())
                    } else {
                        Err(breach(key, curve, t, Integer::from(slack)))
                    };
                }
                None => {
                    curve.wide = Some(Box::new(WideCurve {
                        admitted: Integer::from(curve.admitted),
                        best: Integer::from(curve.best),
                    }));
                }
            }
        }
        let wide = curve.wide.as_mut().expect("set above");
        let refill = Integer::from(curve.units_per_ns) * Integer::from(elapsed);
        let candidate = &refill - &wide.admitted;
        if candidate > wide.best {
            wide.best = candidate;
            curve.best_at = t;
        }
        wide.admitted += Integer::from(cost_units);
        let slack = &wide.admitted - &refill + &wide.best;
        if slack <= Integer::from(curve.capacity_units) {
            Ok(())
        } else {
            Err(breach(key, curve, t, slack))
        }
    }
}

/// `slack` = admitted over `[best_at, t]` minus the refill over it; the breach is `slack > capacity`.
fn breach(key: u64, curve: &KeyCurve, t: u64, slack: Integer) -> ArrivalBreach {
    let refill = Integer::from(curve.units_per_ns) * Integer::from(t - curve.best_at);
    ArrivalBreach {
        key,
        from: curve.best_at,
        to: t,
        admitted_units: &slack + &refill,
        bound_units: Integer::from(curve.capacity_units) + refill,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::scenario::duration::SECOND;
    const ONE_PER_SECOND: CurveConfig = CurveConfig {
        capacity: 2,
        rate_numer: 1,
        rate_denom: 1,
    };

    #[test]
    fn a_burst_of_capacity_then_the_refill_rate_is_within_the_curve() {
        let mut curve = ArrivalCurve::default();
        curve.restart(0, 0, ONE_PER_SECOND);
        assert!(curve.observe(Acquire::on_key_0(2, 0), true).is_ok());
        for second in 1..100 {
            assert!(
                curve
                    .observe(Acquire::on_key_0(1, second * SECOND), true)
                    .is_ok()
            );
        }
    }

    #[test]
    fn one_token_more_than_the_curve_is_a_breach_naming_the_interval() {
        let mut curve = ArrivalCurve::default();
        curve.restart(0, 0, ONE_PER_SECOND);
        curve.observe(Acquire::on_key_0(2, 0), true).unwrap();
        curve.observe(Acquire::on_key_0(1, SECOND), true).unwrap();
        let breach = curve
            .observe(Acquire::on_key_0(1, SECOND + 1), true)
            .unwrap_err();
        assert_eq!((breach.from, breach.to), (0, SECOND + 1));
        assert!(breach.admitted_units > breach.bound_units);
    }

    #[test]
    fn a_breach_in_the_middle_of_a_long_trace_is_found() {
        // Quiet for a long time (the interval from the start has lots of slack), then an oversell
        // inside a short window: only the running maximum over `a` catches it.
        let mut curve = ArrivalCurve::default();
        curve.restart(0, 0, ONE_PER_SECOND);
        curve
            .observe(Acquire::on_key_0(2, 1000 * SECOND), true)
            .unwrap();
        curve
            .observe(Acquire::on_key_0(1, 1001 * SECOND), true)
            .unwrap();
        assert!(
            curve
                .observe(Acquire::on_key_0(1, 1001 * SECOND), true)
                .is_err()
        );
    }

    #[test]
    fn rollbacks_use_the_keys_effective_time() {
        let mut curve = ArrivalCurve::default();
        curve.restart(0, 10 * SECOND, ONE_PER_SECOND);
        curve
            .observe(Acquire::on_key_0(2, 10 * SECOND), true)
            .unwrap();
        // A lagging clock says 5 s: effective time is still 10 s; no refill may be assumed.
        assert!(
            curve
                .observe(Acquire::on_key_0(1, 5 * SECOND), true)
                .is_err()
        );
    }

    #[test]
    fn huge_rates_and_times_fall_back_to_big_integers() {
        let mut curve = ArrivalCurve::default();
        let config = CurveConfig {
            capacity: u64::MAX,
            rate_numer: u64::MAX,
            rate_denom: 1 << 32,
        };
        curve.restart(0, 0, config);
        curve.observe(Acquire::on_key_0(u64::MAX, 0), true).unwrap();
        curve
            .observe(Acquire::on_key_0(u64::MAX, u64::MAX), true)
            .unwrap();
        assert!(
            curve
                .observe(Acquire::on_key_0(u64::MAX, u64::MAX), true)
                .is_err()
        );
    }
}
