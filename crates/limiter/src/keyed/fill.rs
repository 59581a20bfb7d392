//! How full the live buckets are: the token distribution, read by a scan.
//!
//! Owns [`FillLevels`] (live keys counted by how full they are at an instant) and the scan that
//! fills it. Promises: read-only (nothing is refilled, charged, created or dropped); each shard is
//! locked once, for the length of its own scan, so a decision waits at most one shard's scan; the
//! count of a key is exact (integer arithmetic on its refilled balance). It costs one visit per
//! slot, which is why nothing on the decision path keeps it and a metrics exporter asks for it
//! explicitly.

use std::hash::Hash;

use super::Settings;
use super::shard::Shard;
use crate::Nanos;

/// Live keys by how full their bucket is at one instant, in tenths of capacity. A key of several
/// bandwidths counts by its emptiest bandwidth (the one closest to denying).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FillLevels {
    /// `tenths[i]` for `i < 10`: keys whose balance is at least `i/10` and below `(i+1)/10` of
    /// capacity; `tenths[10]`: keys that are full.
    pub tenths: [u64; 11],
}

impl FillLevels {
    /// The keys counted.
    pub fn keys(&self) -> u64 {
        self.tenths.iter().sum()
    }
}

/// The tenth of capacity that `balance` units of `capacity` fall in: `floor(10 * balance /
/// capacity)`, at most 10, computed against the ten thresholds so that no product can overflow.
fn tenth(balance: u128, capacity: u128) -> usize {
    (1..=10u128)
        .take_while(|&i| balance >= mul_div_ceil(capacity, i, 10))
        .count()
}

/// `ceil(a * b / c)` for small `b`, `c`, without overflow.
fn mul_div_ceil(a: u128, b: u128, c: u128) -> u128 {
    let (whole, rest) = (a / c, a % c);
    whole * b + (rest * b).div_ceil(c)
}

impl<K: Hash + Eq + Clone> Shard<K> {
    /// Adds every live key of this shard, refilled to `now` (read-only), to `levels`.
    pub(super) fn fill_levels(&self, now: Nanos, settings: &Settings<K>, levels: &mut FillLevels) {
        for pos in 0..self.entries.slots() {
            let Some((key, bucket)) = self.entries.get(pos) else {
                continue;
            };
            let (set, state) = self.live_set(key, *bucket, settings);
            let refilled = state.refilled(&set, now);
            let emptiest = (set.as_slice().iter().enumerate())
                .filter_map(|(i, b)| {
                    Some(tenth(
                        refilled.bandwidth(i)?.balance(),
                        b.config().capacity_units(),
                    ))
                })
                .min();
            if let Some(emptiest) = emptiest {
                levels.tenths[emptiest] += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_balance_counts_in_its_tenth() {
        let tenths: Vec<usize> = [0, 9, 10, 19, 20, 99, 100]
            .map(|balance| tenth(balance, 100))
            .to_vec();
        assert_eq!(tenths, [0, 0, 1, 1, 2, 9, 10]);
        // Capacities that do not divide by ten, and the widest: 1/3 is in the fourth tenth.
        assert_eq!(tenth(1, 3), 3);
        assert_eq!(tenth(u128::MAX / 3, u128::MAX), 3);
        assert_eq!(tenth(u128::MAX, u128::MAX), 10);
        assert_eq!(tenth(u128::MAX - 1, u128::MAX), 9);
    }
}
