//! The boundary values of a config's own arithmetic: the gaps, instants and costs at which some
//! integer in the transition, the keyed limiter's storage or the Redis script crosses a line (stops
//! fitting a word, switches representation, stops being an exact double, reaches the end of the clock).
//!
//! Owns the list of those lines and, for one [`ConfigSpec`], where each lies ([`Boundaries::of`]), plus
//! a few configs whose capacity sits on the lines themselves ([`configs`]). Generators (the mutants'
//! trace families, the scenario engine's `[clock] boundary`, the state machine) put these values on
//! their menus, because uniform random values almost never land on them: a gap of exactly
//! `ceil(2^64 / p)` ns, or a balance of exactly `2^62` units, is one value among `2^64`.
//!
//! Promises: every list is sorted and deduplicated; each line is listed together with the values up to
//! [`SPREAD`] on either side (so "at the line" and "one before" are both on the menu); gaps and
//! instants are `u64` nanoseconds, and a gap line beyond the clock clamps to `u64::MAX` (listed
//! once, without neighbours; an instant line beyond it is left out); costs lie
//! in `1..=capacity + 1` (capacity + 1 is the first invalid cost). Nothing here runs a transition: the
//! lines are derived from the config's units alone, and the unit tests check each against the
//! arithmetic it names.
//!
//! The units (see the limiter's `units` module): the rate is reduced to `p/q` tokens per second, one
//! token is `u = q * 10^9` units, one nanosecond of refill adds exactly `p` units, and a full bucket
//! holds `C = capacity * u` units.

use crate::trace::{ConfigSpec, InvalidConfigSpec};
use bucketproof_limiter::{Config, NANOS_PER_SECOND};

/// How far on either side of a line the neighbours go, in the line's own unit (ns or tokens).
pub const SPREAD: u64 = 2;

/// The keyed limiter's packed-balance line: a balance below `2^62` units lives in the key's packed
/// slot, one at or above it in the shard's side map (flagged wide). Private in the limiter
/// (`keyed::shard`), restated here as the line generators aim at.
pub const PACKED_LIMIT: u128 = 1 << 62;

/// The Redis script's exactness line: Lua numbers are doubles, exact for integers up to `2^53`
/// (`bucketproof_redis::EXACT_LIMIT`; the harness may be built without Redis, so it is restated and a
/// test keeps the two equal).
pub const REDIS_EXACT_LIMIT: u128 = 1 << 53;

/// The Redis script's time headroom: it turns an elapsed time into one number only while it is below
/// the time to full plus 3 s (`bucketproof_redis::range::TIME_HEADROOM`).
pub const REDIS_TIME_HEADROOM: u64 = 3 * NANOS_PER_SECOND;

/// The boundary values of one config, each list sorted and deduplicated.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Boundaries {
    /// Idle gaps (ns between two ops on a key) at which the refill arithmetic crosses a line.
    pub gaps: Vec<u64>,
    /// Instants (ns) at which the clock arithmetic crosses a line.
    pub instants: Vec<u64>,
    /// Costs (whole tokens) at which the cost arithmetic crosses a line.
    pub costs: Vec<u64>,
}

/// `ceil(n / d)` ns, if it lies within the clock (`d > 0`).
fn ceil_ns(n: u128, d: u128) -> Option<u64> {
    u64::try_from(n.div_ceil(d))
        .ok()
        .filter(|&ns| ns < u64::MAX)
}

/// `values` with their neighbours up to `by` either side (saturating), sorted and deduplicated.
fn spread(values: impl IntoIterator<Item = u64>, by: u64) -> Vec<u64> {
    let mut out: Vec<u64> = values
        .into_iter()
        .flat_map(|v| (v.saturating_sub(by))..=(v.saturating_add(by)))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

impl Boundaries {
    /// The boundary values of `config`'s arithmetic (an error if the spec is not a valid config).
    ///
    /// Gaps (only for a rate that refills, `p > 0`; from an empty bucket unless said otherwise):
    /// - `ceil(C / p)`, the time to full: the refilled balance reaches capacity here and the clamp
    ///   starts to bite (one ns before, the exact credit decides);
    /// - `ceil(C / p) + 3 s`: the Redis script turns an elapsed time into one number only below this;
    /// - `ceil(2^53 / p)`: the credit `elapsed * p` stops being an exact double;
    /// - `ceil(2^62 / p)`: the credit reaches the packed-balance line, where the keyed limiter moves the
    ///   balance from its packed slot to the side map (it matters when `C >= 2^62`);
    /// - `ceil(2^64 / p)`: the product `elapsed * p` no longer fits a `u64` (the limiter widens it to
    ///   `u128`; a `u64` product wraps or saturates here);
    /// - `ceil((2^128 - C) / p)`: from a full bucket, `balance + elapsed * p` no longer fits a `u128`
    ///   (the limiter saturates the sum; a wrapping sum turns a full bucket nearly empty).
    ///
    /// Instants:
    /// - `u64::MAX`: the end of the clock (times saturate there, waits past it are `Never`);
    /// - `u64::MAX - ceil(k * u / p)` for `k` of 1 token and of the capacity: from an empty bucket at
    ///   that instant, the wait for `k` tokens ends exactly at `u64::MAX` (still `After`); one ns later
    ///   it would pass the end (`Never`);
    /// - `2^53`: an instant above it is not an exact double (the Redis script carries times as
    ///   `(seconds, ns)` limbs for this reason).
    ///
    /// Costs: 1; the capacity and one below it (the largest valid cost, which only a full bucket
    /// covers); capacity + 1 (the first invalid one); and, when within the capacity, the smallest cost
    /// whose units `cost * u` reach `2^53`, `2^62` and `2^64`.
    ///
    /// For a set of several bandwidths, every bandwidth's boundaries together.
    pub fn of(spec: &ConfigSpec) -> Result<Boundaries, InvalidConfigSpec> {
        Boundaries::of_set(spec, SPREAD)
    }

    /// The lines alone, without their neighbours: the values [`Boundaries::of`] centres its windows
    /// on. For generators that want to land on a line more often than one draw in `2 * SPREAD + 1`.
    pub fn lines(spec: &ConfigSpec) -> Result<Boundaries, InvalidConfigSpec> {
        Boundaries::of_set(spec, 0)
    }

    /// Every bandwidth's lines with their neighbours, merged, sorted and deduplicated.
    fn of_set(spec: &ConfigSpec, by: u64) -> Result<Boundaries, InvalidConfigSpec> {
        let set = spec.to_bandwidths()?;
        if let [one] = set.as_slice() {
            return Ok(Boundaries::of_config(one.config(), by));
        }
        let mut merged = Boundaries {
            gaps: Vec::new(),
            instants: Vec::new(),
            costs: Vec::new(),
        };
        for bandwidth in set.as_slice() {
            let one = Boundaries::of_config(bandwidth.config(), by);
            merged.gaps.extend(one.gaps);
            merged.instants.extend(one.instants);
            merged.costs.extend(one.costs);
        }
        for values in [&mut merged.gaps, &mut merged.instants, &mut merged.costs] {
            values.sort_unstable();
            values.dedup();
        }
        Ok(merged)
    }

    /// The lines of an already valid limiter config, each with its neighbours up to `by` either side.
    pub fn of_config(config: &Config, by: u64) -> Boundaries {
        let p = config.units_per_nanosecond() as u128;
        let unit = config.units_per_token();
        let capacity_units = config.capacity_units();
        let capacity = config.capacity();
        let mut gaps = Vec::new();
        // A line beyond the clock is listed once, as `u64::MAX`, without neighbours.
        let mut beyond_the_clock = false;
        let mut instants = vec![u64::MAX];
        if p > 0 {
            let to_full = ceil_ns(capacity_units, p);
            let lines = [
                to_full,
                to_full.and_then(|ns| ns.checked_add(REDIS_TIME_HEADROOM)),
                ceil_ns(REDIS_EXACT_LIMIT, p),
                ceil_ns(PACKED_LIMIT, p),
                ceil_ns(1 << 64, p),
                // C <= 2^126, so the difference is positive.
                ceil_ns(u128::MAX - capacity_units + 1, p),
            ];
            for line in lines {
                match line {
                    Some(ns) => gaps.push(ns),
                    None => beyond_the_clock = true,
                }
            }
            for tokens in [1, capacity] {
                if let Some(refill) = ceil_ns(tokens as u128 * unit, p) {
                    instants.push(u64::MAX - refill);
                }
            }
        }
        instants.push(REDIS_EXACT_LIMIT as u64);
        let mut costs = vec![1, capacity, capacity.saturating_add(1)];
        for line in [REDIS_EXACT_LIMIT, PACKED_LIMIT, 1 << 64] {
            let cost = line.div_ceil(unit);
            if cost <= capacity as u128 {
                costs.push(cost as u64);
            }
        }
        let top = capacity.saturating_add(1);
        let mut costs = spread(costs, by);
        costs.retain(|&cost| (1..=top).contains(&cost));
        let mut gaps = spread(gaps, by);
        if beyond_the_clock && gaps.last() != Some(&u64::MAX) {
            gaps.push(u64::MAX);
        }
        Boundaries {
            gaps,
            instants: spread(instants, by),
            costs,
        }
    }
}

impl Boundaries {
    /// The gaps a generator can take without ending the clock: those below `u64::MAX`. A gap that
    /// clamped to `u64::MAX` (its line lies beyond the clock) would, drawn once, pin every later time
    /// at the end of the clock; the instants already hold the clock's end.
    pub fn gaps_within_clock(&self) -> Vec<u64> {
        self.gaps
            .iter()
            .copied()
            .filter(|&gap| gap < u64::MAX)
            .collect()
    }
}

/// Configs whose capacity units sit on the lines, for generators that pick configs:
///
/// - capacity `u64::MAX` at `u64::MAX / 2^32` tokens/s: the largest capacity units any config has
///   (`(2^64 - 1) * 2^32 * 10^9`, just below `2^126`) and the largest `p`, so a full bucket's
///   `balance + credit` passes `2^128` after about 440 years;
/// - capacity `u64::MAX` at one token per `2^32` s: the same capacity units, the slowest refill
///   (its time to full lies beyond the clock);
/// - capacity `2^40` at `2^20` tokens/s: capacity units above `2^64`, and `elapsed * p` passes `2^64`
///   after `2^44` ns (under 5 hours), long before the bucket is full (12 days);
/// - capacity `ceil(2^62 / 10^9)` and one below at `2^20` tokens/s: capacity units just above and just
///   below the packed-balance line; `2^62 / p = 2^42` exactly, so an emptied bucket idle for `2^42` ns
///   holds exactly `2^62` units;
/// - the largest capacity the Redis script accepts at 1 token/s, and one above (refused by Redis by
///   design: its `capacity_units + 3 * 10^9` passes `2^53`).
pub fn configs() -> Vec<ConfigSpec> {
    let packed = PACKED_LIMIT.div_ceil(NANOS_PER_SECOND as u128) as u64;
    let redis =
        ((REDIS_EXACT_LIMIT - REDIS_TIME_HEADROOM as u128) / NANOS_PER_SECOND as u128) as u64;
    vec![
        ConfigSpec::new(u64::MAX, format!("{}/{}s", u64::MAX, 1u64 << 32)),
        ConfigSpec::new(u64::MAX, format!("1/{}s", 1u64 << 32)),
        ConfigSpec::new(1 << 40, "1048576/s"),
        ConfigSpec::new(packed, "1048576/s"),
        ConfigSpec::new(packed - 1, "1048576/s"),
        ConfigSpec::new(redis, "1/s"),
        ConfigSpec::new(redis + 1, "1/s"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(spec: &ConfigSpec) -> Config {
        spec.to_config().unwrap()
    }

    /// `at` is where `holds` starts to hold (it holds there, not 1 before), and the list has the line
    /// at the centre of its window: every value up to [`SPREAD`] either side.
    fn crosses_at(list: &[u64], at: u64, holds: impl Fn(u64) -> bool) {
        crosses_within(list, at, 0..=u64::MAX, holds)
    }

    /// [`crosses_at`] for a list limited to `valid` (costs): the window is cut to it.
    fn crosses_within(
        list: &[u64],
        at: u64,
        valid: std::ops::RangeInclusive<u64>,
        holds: impl Fn(u64) -> bool,
    ) {
        assert!(holds(at), "the line holds at {at}");
        assert!(!holds(at - 1), "the line does not hold 1 before {at}");
        let window = at.saturating_sub(SPREAD)..=at.saturating_add(SPREAD);
        let mut on_menu = window.clone().filter(|v| valid.contains(v));
        assert!(on_menu.all(|v| list.contains(&v)), "{window:?} on the menu");
    }

    fn gap_menu() -> Vec<ConfigSpec> {
        let mut specs = configs();
        specs.extend([
            ConfigSpec::new(3, "3/2s"),
            ConfigSpec::new(4, "1000/s"),
            ConfigSpec::new(5, "2/min"),
            ConfigSpec::new(5_000_000_000, "1000000000/s"),
        ]);
        specs
    }

    #[test]
    fn the_product_elapsed_times_rate_passes_2_64_at_its_gap() {
        for spec in gap_menu() {
            let config = config(&spec);
            let p = config.units_per_nanosecond();
            let gaps = Boundaries::of(&spec).unwrap().gaps;
            let at = (1u128 << 64).div_ceil(p as u128);
            if let Ok(at) = u64::try_from(at) {
                crosses_at(&gaps, at, |elapsed| elapsed.checked_mul(p).is_none());
            }
        }
    }

    #[test]
    fn a_full_buckets_sum_passes_2_128_at_its_gap() {
        let spec = &configs()[0];
        let config = config(spec);
        let p = config.units_per_nanosecond() as u128;
        let full = config.capacity_units();
        let gaps = Boundaries::of(spec).unwrap().gaps;
        let at = (u128::MAX - full + 1).div_ceil(p) as u64;
        assert!(at < u64::MAX, "reachable within the clock");
        crosses_at(&gaps, at, |elapsed| {
            full.checked_add(elapsed as u128 * p).is_none()
        });
    }

    #[test]
    fn the_credit_reaches_the_packed_line_the_redis_line_and_full_at_their_gaps() {
        for spec in gap_menu() {
            let config = config(&spec);
            let p = config.units_per_nanosecond() as u128;
            let gaps = Boundaries::of(&spec).unwrap().gaps;
            for line in [PACKED_LIMIT, REDIS_EXACT_LIMIT, config.capacity_units()] {
                if let Ok(at) = u64::try_from(line.div_ceil(p)) {
                    crosses_at(&gaps, at, |elapsed| elapsed as u128 * p >= line);
                }
            }
        }
        // The packed config's emptied bucket holds exactly 2^62 units after 2^42 ns.
        let packed = config(&configs()[3]);
        assert!(packed.capacity_units() > PACKED_LIMIT);
        assert!(config(&configs()[4]).capacity_units() < PACKED_LIMIT);
        assert_eq!(
            (1u128 << 42) * packed.units_per_nanosecond() as u128,
            PACKED_LIMIT
        );
        assert!(
            Boundaries::of(&configs()[3])
                .unwrap()
                .gaps
                .contains(&(1 << 42))
        );
    }

    #[test]
    fn an_empty_buckets_wait_ends_at_the_clocks_end_from_its_instant() {
        for spec in gap_menu() {
            let config = config(&spec);
            let p = config.units_per_nanosecond() as u128;
            let instants = Boundaries::of(&spec).unwrap().instants;
            for tokens in [1, config.capacity()] {
                let wait = (tokens as u128 * config.units_per_token()).div_ceil(p);
                let Ok(wait) = u64::try_from(wait) else {
                    continue;
                };
                // now + wait fits the clock at the instant, and not one ns later.
                let fits = |now: u64| now.checked_add(wait).is_some();
                let at = u64::MAX - wait;
                assert!(fits(at) && !fits(at + 1), "{spec:?}");
                let window = at.saturating_sub(SPREAD)..=at.saturating_add(SPREAD);
                assert!(window.clone().all(|v| instants.contains(&v)), "{window:?}");
            }
            assert!(instants.contains(&u64::MAX) && instants.contains(&(1 << 53)));
        }
    }

    #[test]
    fn costs_hold_the_capacity_one_below_one_above_and_the_unit_lines() {
        for spec in gap_menu() {
            let config = config(&spec);
            let costs = Boundaries::of(&spec).unwrap().costs;
            let capacity = config.capacity();
            assert!(costs.contains(&capacity) && costs.contains(&capacity.saturating_add(1)));
            assert!(capacity == 1 || costs.contains(&(capacity - 1)));
            assert!(
                costs
                    .iter()
                    .all(|&c| c >= 1 && c <= capacity.saturating_add(1))
            );
            let unit = config.units_per_token();
            for line in [REDIS_EXACT_LIMIT, PACKED_LIMIT, 1 << 64] {
                let at = line.div_ceil(unit) as u64;
                // At 1 every valid cost is past the line: nothing to cross.
                if at > 1 && at <= capacity {
                    let valid = 1..=capacity.saturating_add(1);
                    crosses_within(&costs, at, valid, |cost| cost as u128 * unit >= line);
                }
            }
        }
    }

    #[test]
    fn the_lines_are_the_centres_of_the_windows() {
        for spec in gap_menu() {
            let (lines, all) = (
                Boundaries::lines(&spec).unwrap(),
                Boundaries::of(&spec).unwrap(),
            );
            for (centres, windows) in [
                (&lines.gaps, &all.gaps),
                (&lines.instants, &all.instants),
                (&lines.costs, &all.costs),
            ] {
                assert!(centres.iter().all(|v| windows.contains(v)), "{spec:?}");
                assert!(centres.len() < windows.len(), "{spec:?}");
            }
        }
    }

    #[test]
    fn lists_are_sorted_and_deduplicated_and_gaps_clamp_to_the_clock() {
        for spec in gap_menu() {
            let b = Boundaries::of(&spec).unwrap();
            for list in [&b.gaps, &b.instants, &b.costs] {
                assert!(list.windows(2).all(|w| w[0] < w[1]), "{spec:?}: {list:?}");
            }
        }
        // One token per second: 2^64 / 1 ns lies past the clock, so the gap clamps, alone.
        let slow = Boundaries::of(&ConfigSpec::new(1, "1/s")).unwrap();
        assert_eq!(slow.gaps.last(), Some(&u64::MAX));
        assert!(slow.gaps_within_clock().iter().all(|&gap| gap < 1 << 63));
        // No refill: no gap line and no wait line, only the clock's own.
        let none = Boundaries::of(&ConfigSpec::new(2, "0/s")).unwrap();
        assert!(none.gaps.is_empty());
        assert_eq!(none.costs, vec![1, 2, 3]);
        assert!(Boundaries::of(&ConfigSpec::new(0, "1/s")).is_err());
    }

    #[test]
    fn the_line_configs_are_valid_and_sit_on_their_lines() {
        let specs = configs();
        for spec in &specs {
            spec.to_model().unwrap();
        }
        let top = config(&specs[0]);
        assert!(top.capacity_units() > 1 << 125 && top.capacity_units() < 1 << 126);
        assert_eq!(top.units_per_nanosecond(), u64::MAX);
        assert!(config(&specs[2]).capacity_units() > 1 << 64);
        let redis = config(&specs[5]).capacity_units() + REDIS_TIME_HEADROOM as u128;
        assert!(redis <= REDIS_EXACT_LIMIT);
        let over = config(&specs[6]).capacity_units() + REDIS_TIME_HEADROOM as u128;
        assert!(over > REDIS_EXACT_LIMIT);
    }
}
