//! The grid's traces: one deterministic single-key trace per cell.
//!
//! Owns [`generate_trace`] and the per-cell seed. Promises: the same cell and base seed give the same
//! trace on every machine, forever (a ChaCha8 stream and the harness's own integer sampling, from
//! [`bucketproof_scenario::sample`], no wall clock); times are monotone (every difference the comparison
//! finds is arithmetic, not clock handling) and inside the horizon; the patterns are bursts, polling
//! clients, arrivals exactly at and 1 ns around the instant an exact bucket reaches the cost, and idle
//! gaps sized so the ops spread over the whole horizon (sparse ops over 100 simulated years).

use rand_chacha::ChaCha8Rng;

use super::GridRate;
use bucketproof_scenario::sample::{self, below};
use bucketproof_trace::duration::SECOND;
use bucketproof_trace::trace::{Acquire, Op};

/// The stream number of the grid's traces (see [`sample::stream`]); fixed forever.
const TRACE_STREAM: u64 = 0;

/// splitmix64: derives each cell's seed from the base seed and the cell's coordinates.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

pub(super) fn cell_seed(seed: u64, rate: &GridRate, capacity: u64, horizon_ns: u64) -> u64 {
    [rate.numer, rate.denom, capacity, horizon_ns]
        .iter()
        .fold(mix(seed), |acc, &v| mix(acc ^ v))
}

/// The generator's own exact bucket, only to aim arrivals at refill boundaries (the instant the
/// bucket reaches the cost, and 1 ns either side). It is not an oracle: the model judges.
/// Units are `1/(q * 10^9)` token; one ns adds `p` units.
struct Shadow {
    p: u128,
    unit: u128,
    cap_units: u128,
    balance: u128,
    last: u64,
}

impl Shadow {
    fn balance_at(&self, t: u64) -> u128 {
        let dt = u128::from(t.saturating_sub(self.last));
        self.balance
            .saturating_add(dt.saturating_mul(self.p))
            .min(self.cap_units)
    }

    fn acquire(&mut self, cost: u64, now: u64) {
        self.balance = self.balance_at(now);
        self.last = self.last.max(now);
        let need = u128::from(cost) * self.unit;
        if self.balance >= need {
            self.balance -= need;
        }
    }

    /// ns from `now` until the balance reaches `cost` (0 if it already has).
    fn time_to(&self, cost: u64, now: u64) -> u64 {
        let need = u128::from(cost) * self.unit;
        let have = self.balance_at(now);
        if have >= need {
            return 0;
        }
        u64::try_from((need - have).div_ceil(self.p)).unwrap_or(u64::MAX)
    }
}

/// A deterministic single-key trace for one cell: at most `ops` acquires, at times in `[0, horizon]`,
/// non-decreasing. See the module doc for the patterns.
pub fn generate_trace(
    rate: &GridRate,
    capacity: u64,
    horizon_ns: u64,
    ops: usize,
    seed: u64,
) -> Vec<Op> {
    let mut rng = sample::stream(seed, TRACE_STREAM);
    let unit = u128::from(rate.denom) * u128::from(SECOND);
    let p = u128::from(rate.numer.max(1));
    let mut shadow = Shadow {
        p,
        unit,
        cap_units: u128::from(capacity) * unit,
        balance: u128::from(capacity) * unit,
        last: 0,
    };
    // ns per token, rounded up (a polling period near the refill rate).
    let token_ns = u64::try_from(unit.div_ceil(p)).unwrap_or(u64::MAX).max(1);
    let mut out: Vec<Op> = Vec::with_capacity(ops);
    let mut now = 0u64;
    let push = |out: &mut Vec<Op>, shadow: &mut Shadow, cost: u64, now: u64| {
        shadow.acquire(cost, now);
        out.push(Op::Acquire(Acquire {
            key: 0,
            cost,
            now,
            request_id: None,
        }));
    };
    // Bounded attempts: patterns that do not fit in the horizon are skipped, never looped on.
    for _ in 0..ops.saturating_mul(4) {
        if out.len() >= ops {
            break;
        }
        let left = (ops - out.len()) as u64;
        // An idle gap sized so the remaining segments (about 8 ops each) span the rest of the horizon.
        let segments_left = (left / 8).max(1);
        let span = (horizon_ns - now) / segments_left;
        now = now.saturating_add(below(&mut rng, span.saturating_mul(2).saturating_add(1)));
        if now > horizon_ns {
            now = horizon_ns;
        }
        let pick_cost = |rng: &mut ChaCha8Rng| match below(rng, 100) {
            0..70 => 1,
            70..85 => capacity,
            _ => 1 + below(rng, capacity),
        };
        match below(&mut rng, 100) {
            // Arrivals at the exact refill boundary for the cost, or 1 ns either side.
            0..40 => {
                for _ in 0..1 + below(&mut rng, 4) {
                    let cost = pick_cost(&mut rng);
                    let wait = shadow.time_to(cost, now);
                    let at = match (wait, below(&mut rng, 4)) {
                        (0, 0) => now,
                        (0, _) => now.saturating_add(1),
                        (w, 0) => now.saturating_add(w - 1),
                        (w, 1) => now.saturating_add(w + 1),
                        (w, _) => now.saturating_add(w),
                    };
                    if at > horizon_ns || out.len() >= ops {
                        break;
                    }
                    now = at;
                    push(&mut out, &mut shadow, cost, now);
                }
            }
            // A burst: as many requests at one instant as the bucket holds, and one more.
            40..55 => {
                for _ in 0..(capacity.saturating_add(1)).min(16) {
                    if out.len() >= ops {
                        break;
                    }
                    push(&mut out, &mut shadow, 1, now);
                }
            }
            // A polling client: a fixed period near the refill rate.
            55..85 => {
                let period = match below(&mut rng, 5) {
                    0 => token_ns / 7,
                    1 => token_ns / 2,
                    2 => token_ns,
                    3 => token_ns.saturating_add(token_ns / 2),
                    _ => token_ns.saturating_sub(1),
                }
                .max(1);
                for _ in 0..4 + below(&mut rng, 20) {
                    let at = now.saturating_add(period);
                    if at > horizon_ns || out.len() >= ops {
                        break;
                    }
                    now = at;
                    push(&mut out, &mut shadow, 1, now);
                }
            }
            // One request after the idle gap.
            _ => {
                let cost = pick_cost(&mut rng);
                push(&mut out, &mut shadow, cost, now);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bucketproof_trace::duration::YEAR;

    #[test]
    fn traces_are_deterministic_monotone_and_inside_the_horizon() {
        let rate = GridRate::parse("7000000/s").unwrap();
        let a = generate_trace(&rate, 10, SECOND, 500, 7);
        assert_eq!(a, generate_trace(&rate, 10, SECOND, 500, 7));
        assert_ne!(a, generate_trace(&rate, 10, SECOND, 500, 8));
        assert_eq!(a.len(), 500);
        let times: Vec<u64> = a.iter().filter_map(Op::now).collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]));
        assert!(times.iter().all(|&t| t <= SECOND));
        // Sparse long horizons still reach far into the horizon.
        let slow = GridRate::parse("1/3600s").unwrap();
        let long = generate_trace(&slow, 1, 100 * YEAR, 300, 7);
        let last = long.iter().filter_map(Op::now).max().unwrap();
        assert!(last > 50 * YEAR, "last op at {last}");
    }
}
