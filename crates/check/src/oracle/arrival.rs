//! The arrival-curve oracle: no overselling, checked without the reference model.
//!
//! # What it promises
//!
//! For every key and every interval `[a, b]` of one *segment* of the key's life, the cost admitted at
//! times in `[a, b]` is at most `capacity + rate * (b - a)`, with the segment's capacity and rate (a
//! balance never exceeds capacity, and refill adds `rate` per unit of time). The segments of a key:
//!
//! - **The whole life is one segment** across evictions and recreations. A bucket the subject drops
//!   and later recreates is not a reset: a lossless eviction (the bucket was full when dropped) and
//!   a correct recreation (fresh, with its cursor no earlier than the time it was judged evictable)
//!   never break the bound, while a recreation that credits time twice does (capacity 2, rate 1/s:
//!   2 admitted at 10 s, a sweep at 13 s drops the full bucket, 2 admitted again at a rolled-back
//!   10 s is 4 tokens at one instant).
//! - **A reconfiguration starts a new segment** at its effective time, with the new capacity and
//!   rate; its initial balance is the converted balance, at most the new capacity, so the segment
//!   is judged as if it started full. Intervals that straddle a reconfiguration are not judged.
//! - **`forget` is a declared reset**: the key's next use starts a new segment, full, at that use's
//!   time.
//! - **A lossy eviction policy is a declared reset.** Under `EvictLeastRecent` a victim may be dropped
//!   with tokens spent and comes back full: a burst of up to one capacity by contract. The subject
//!   does not say which of its evictions were lossy (the `Subject` trait reports creations, not
//!   losses, and the limiter's lossy count is per shard, not per key), so under that policy every
//!   recreation of a key starts a new segment, full, at its effective time, and is counted
//!   ([`ArrivalCurve::lossy_resets`]). Judging each segment alone is the same as allowing `k *
//!   capacity` extra over an interval that contains `k` lossy recreations of the key. Under every
//!   other policy a recreation is never a reset.
//!
//! # In which time
//!
//! The bound holds in the key's *effective* time: an op's effective time is the maximum of its own
//! time and the effective times of the key's earlier ops (a clock that runs backwards does not stop
//! the bucket's own clock), and for an op that recreated the key, also the fresh bucket's cursor as
//! the subject shows it after the op, but never later than the latest time seen in the trace (the
//! most a fresh cursor may legally be; a subject that cannot show its state is given that most). A
//! fresh bucket that starts at its eviction horizon is therefore judged at the horizon, and one
//! that restarts at a rolled-back `now` is judged at `now`.
//!
//! Effective time equals the caller's time for every op whose time is at least every time seen
//! before it in the trace; under a clock that never runs backwards that is every op, and the bound
//! holds in caller time. Across a rollback it holds in effective time only.
//!
//! # How
//!
//! All `a <= b` are covered in one streaming pass per op: with `S` the cumulative admitted cost, the
//! worst `a` is the admitted op `j` maximizing `rate * t_j - S_before_j`, which is kept as a running
//! maximum. Admitted cost is *net*: a settled extra adds, a settled refund subtracts (docs/semantics.md,
//! "settle"), and an interval may start just after a refund. Exact integer arithmetic in units of `1 / (q * 10^9)` token, with a big-integer fallback
//! when an `i128` would overflow.

use std::collections::BTreeMap;

use bucketproof_model::Integer;

use bucketproof_trace::trace::Acquire;

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
    segment_start: u64,
    effective_now: u64,
    /// Cumulative admitted units in the segment.
    admitted: i128,
    /// max over admitted ops j (and the segment start) of `p * (t_j - segment_start) - admitted_before_j`.
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
    lossy_resets: u64,
    allowance: Allowance,
}

/// What a subject checked under the safety profile may admit beyond `capacity + rate * (b - a)`:
/// the tolerance it declares, and one step of the time resolution it counts in (a subject that
/// truncates time to ms sees an interval up to 1 ms longer than the harness's). Zero by default,
/// and always zero for the exact profile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Allowance {
    /// Extra tokens.
    pub tokens: bucketproof_model::Rational,
    /// Extra refill time, in ns.
    pub time_ns: u64,
}

/// A subject reports it recreated a key the curve has seen (after dropping its bucket).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recreation {
    /// The op's time.
    pub at: u64,
    /// The fresh bucket's cursor after the op, as the subject shows it (`None`: it cannot show it).
    pub cursor: Option<u64>,
    /// The latest time seen in the trace so far: no fresh cursor may legally be later.
    pub latest: u64,
    /// The eviction policy is lossy by contract (`EvictLeastRecent`): the recreation is a declared
    /// reset.
    pub lossy: bool,
}

impl Recreation {
    /// The time the recreated bucket is judged at: its cursor, at most the latest time seen (the
    /// latest time seen when the subject cannot show its cursor), never before the op.
    pub fn effective_time(&self) -> u64 {
        let newest = self.latest.max(self.at);
        self.cursor.unwrap_or(newest).clamp(self.at, newest)
    }
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
    /// An empty curve that grants `allowance` on every bound.
    pub fn with_allowance(allowance: Allowance) -> ArrivalCurve {
        ArrivalCurve {
            allowance,
            ..ArrivalCurve::default()
        }
    }

    /// The allowance in units of `units_per_token` and `units_per_ns`, rounded up (lenient by
    /// less than one unit), saturating.
    fn allowance_units(&self, units_per_token: i128, units_per_ns: i128) -> i128 {
        let tokens = &self.allowance.tokens
            * bucketproof_model::Rational::from(Integer::from(units_per_token));
        let tokens = i128::try_from(tokens.ceil()).unwrap_or(i128::MAX);
        tokens.saturating_add(units_per_ns.saturating_mul(i128::from(self.allowance.time_ns)))
    }

    /// Starts a new segment for `key` at `now` (or at the key's effective time, if later) with
    /// `config`: a full bucket, or a reconfigured one whose balance is at most the new capacity.
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
                capacity_units: (config.capacity as i128 * units_per_token).saturating_add(
                    self.allowance_units(units_per_token, config.rate_numer as i128),
                ),
                units_per_token,
                units_per_ns: config.rate_numer as i128,
                segment_start: effective_now,
                effective_now,
                admitted: 0,
                best: 0,
                best_at: effective_now,
                wide: None,
            },
        );
    }

    /// Forgets `key` (a declared reset): its next use starts a new segment.
    pub fn forget(&mut self, key: u64) {
        self.keys.remove(&key);
    }

    /// Follows a recreation of `key`: a lossy one is a declared reset (a new segment, full, at its
    /// effective time, counted); any other continues the segment, with the key's effective time
    /// moved up to the recreated bucket's (see the module docs). A key the curve has not seen
    /// starts its first segment.
    pub fn recreated(&mut self, key: u64, recreation: Recreation, config: CurveConfig) {
        let at = recreation.effective_time();
        match self.keys.get_mut(&key) {
            Some(curve) if !recreation.lossy => curve.effective_now = curve.effective_now.max(at),
            Some(_) => {
                self.lossy_resets += 1;
                self.restart(key, at, config);
            }
            None => self.restart(key, at, config),
        }
    }

    /// Lossy recreations taken as declared resets so far (all keys).
    pub fn lossy_resets(&self) -> u64 {
        self.lossy_resets
    }

    /// True if `key` has a segment running.
    pub fn knows(&self, key: u64) -> bool {
        self.keys.contains_key(&key)
    }

    /// Records `acquire` (admitted or not) and checks the bound. Its request id is not consulted: a
    /// replayed answer is not an arrival, so it is never observed.
    pub fn observe(&mut self, acquire: Acquire, admitted: bool) -> Result<(), ArrivalBreach> {
        let Acquire { key, cost, now, .. } = acquire;
        let tokens = if admitted { i128::from(cost) } else { 0 };
        self.observe_net(key, now, tokens)
    }

    /// Records `tokens` of net admitted cost on `key` at `now` and checks the bound: an admitted
    /// acquire's cost, a settled extra (positive), or a settled refund (negative: docs/semantics.md,
    /// "settle": net admitted cost). 0 only moves the key's effective time.
    ///
    /// A refund lowers the cumulative sum, so an interval that starts just after it is the worst
    /// of those starting there: each op offers the start candidate `p * t - S` with `S` the smaller
    /// of the sums before and after it (before an arrival, after a refund).
    pub fn observe_net(&mut self, key: u64, now: u64, tokens: i128) -> Result<(), ArrivalBreach> {
        let Some(curve) = self.keys.get_mut(&key) else {
            return Ok(());
        };
        curve.effective_now = curve.effective_now.max(now);
        if tokens == 0 {
            return Ok(());
        }
        let t = curve.effective_now;
        let elapsed = (t - curve.segment_start) as i128; // < 2^64
        if curve.wide.is_none() {
            let fast = (|| {
                let cost_units = tokens.checked_mul(curve.units_per_token)?;
                let refill = curve.units_per_ns.checked_mul(elapsed)?;
                let admitted = curve.admitted.checked_add(cost_units)?;
                let candidate = refill.checked_sub(curve.admitted.min(admitted))?;
                let best = curve.best.max(candidate);
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
        let cost_units = Integer::from(tokens) * Integer::from(curve.units_per_token);
        let admitted = &wide.admitted + &cost_units;
        let candidate = &refill - (&wide.admitted).min(&admitted);
        if candidate > wide.best {
            wide.best = candidate;
            curve.best_at = t;
        }
        wide.admitted = admitted;
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

    use bucketproof_trace::duration::SECOND;
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

    /// The recreate-under-rollback shape: a recreation is not a reset, so a fresh bucket judged at a
    /// rolled-back `now` breaks the bound, while one judged at its horizon does not.
    #[test]
    fn a_recreation_continues_the_segment_at_the_fresh_cursor() {
        let recreation = |cursor| Recreation {
            at: 10 * SECOND,
            cursor: Some(cursor),
            latest: 13 * SECOND,
            lossy: false,
        };
        for (cursor, breaks) in [(10 * SECOND, true), (13 * SECOND, false)] {
            let mut curve = ArrivalCurve::default();
            curve.restart(0, 10 * SECOND, ONE_PER_SECOND);
            curve
                .observe(Acquire::on_key_0(2, 10 * SECOND), true)
                .unwrap();
            curve.recreated(0, recreation(cursor), ONE_PER_SECOND);
            let again = curve.observe(Acquire::on_key_0(2, 10 * SECOND), true);
            assert_eq!(again.is_err(), breaks, "cursor {cursor}");
        }
    }

    #[test]
    fn a_fresh_cursor_is_judged_no_later_than_the_latest_time_seen() {
        let shown = |cursor| Recreation {
            at: 5,
            cursor,
            latest: 9,
            lossy: false,
        };
        assert_eq!(shown(Some(7)).effective_time(), 7);
        assert_eq!(shown(Some(100)).effective_time(), 9);
        assert_eq!(shown(Some(1)).effective_time(), 5);
        assert_eq!(shown(None).effective_time(), 9);
    }

    #[test]
    fn a_lossy_recreation_is_a_counted_reset() {
        let mut curve = ArrivalCurve::default();
        curve.restart(0, 0, ONE_PER_SECOND);
        curve.observe(Acquire::on_key_0(2, 0), true).unwrap();
        let lossy = Recreation {
            at: 0,
            cursor: Some(0),
            latest: 0,
            lossy: true,
        };
        curve.recreated(0, lossy, ONE_PER_SECOND);
        assert_eq!(curve.lossy_resets(), 1);
        // A full burst again: the victim came back full, by contract.
        curve.observe(Acquire::on_key_0(2, 0), true).unwrap();
        assert!(curve.observe(Acquire::on_key_0(1, 0), true).is_err());
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
