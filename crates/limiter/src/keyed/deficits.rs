//! What a bucket dropped while not full still owed, for [`EvictionPolicy::EvictKeepingDeficit`].
//!
//! What it owns: a fixed array per shard, indexed by the key's hash, of the instant at which a dropped
//! bucket would have been full again (`full_at`). What it promises:
//! - bounded: the array never grows, whatever keys arrive (a few bytes per key the shard may hold);
//! - never fuller than the dropped bucket would be now: a bucket recreated at `t` starts with
//!   `capacity - (full_at - t) * rate`, which is exactly the dropped bucket's refilled balance at `t`
//!   when no other drop wrote the same slot; two drops on one slot keep the later `full_at`, so a
//!   collision can only make a recreated bucket emptier, never fuller. Under every clock the
//!   recreated bucket's cursor is at least the shard's eviction horizon, so no time is credited twice.
//!
//! [`EvictionPolicy::EvictKeepingDeficit`]: super::EvictionPolicy::EvictKeepingDeficit

use crate::{BucketState, Config, Nanos};

/// Slots per key the shard may hold: with one slot per key, a flood that drops a bucket every
/// request keeps most slots owing; more slots make a collision with an innocent key rarer. Public
/// (as `DEFICIT_SLOTS_PER_KEY`) so that a verification harness can size a flood that outnumbers
/// the array.
pub const SLOTS_PER_KEY: usize = 2;

/// The per-shard array of `full_at` instants (0: nothing owed).
pub(super) struct Deficits {
    full_at: Box<[Nanos]>,
}

impl Deficits {
    /// An array for a shard that holds at most `keys` keys.
    pub(super) fn new(keys: usize) -> Deficits {
        Deficits {
            full_at: vec![0; keys.max(1).saturating_mul(SLOTS_PER_KEY)].into_boxed_slice(),
        }
    }

    /// The slot of a key's hash. The shard is chosen by the hash's top bits and the table position by
    /// its low bits, so the slot takes the middle ones.
    fn slot(&self, hash: u64) -> usize {
        (hash.rotate_right(24) % self.full_at.len() as u64) as usize
    }

    /// A bucket of the key with `hash` was dropped owing until `full_at`: kept, merged with what the
    /// slot already owes by taking the later instant.
    pub(super) fn remember(&mut self, hash: u64, full_at: Nanos) {
        let slot = self.slot(hash);
        self.full_at[slot] = self.full_at[slot].max(full_at);
    }

    /// Until when a fresh bucket of the key with `hash` is owing (0 or a past instant: nothing).
    pub(super) fn owed(&self, hash: u64) -> Nanos {
        self.full_at[self.slot(hash)]
    }

    /// The array's size in bytes.
    pub(super) fn bytes(&self) -> usize {
        std::mem::size_of_val(&*self.full_at)
    }
}

/// When `state` of `config` (refilled to its cursor) is full again with no traffic: its cursor plus
/// the time its missing units take, rounded up (so the instant is never early); `Nanos::MAX` for a
/// bucket that never refills, or past the end of the clock.
pub(super) fn full_at(config: &Config, state: BucketState) -> Nanos {
    let missing = config.capacity_units().saturating_sub(state.balance());
    if missing == 0 {
        return state.last_refill();
    }
    let per_ns = config.units_per_nanosecond() as u128;
    if per_ns == 0 {
        return Nanos::MAX;
    }
    let wait = u64::try_from(missing.div_ceil(per_ns)).unwrap_or(Nanos::MAX);
    state.last_refill().saturating_add(wait)
}

/// A fresh bucket of `config` with its cursor at `cursor`, owing until `full_at`: `capacity - (full_at
/// - cursor) * rate` units (at least 0), full when `full_at <= cursor`, and empty when it owes and
/// `config` never refills (no refill can have paid anything back) or owes past the end of the clock
/// (`full_at` is `Nanos::MAX`, at every cursor, the last instant included). Never above the balance a bucket
/// that is full at `full_at` holds at `cursor`.
pub(super) fn owing(config: &Config, cursor: Nanos, full_at: Nanos) -> BucketState {
    let ahead = full_at.saturating_sub(cursor) as u128;
    let per_ns = config.units_per_nanosecond() as u128;
    let balance = if full_at == Nanos::MAX {
        // Full only past the end of the clock, or never (`full_at` saturated): the time it still
        // owes cannot be measured from any cursor, so it comes back empty. A full bucket at the last
        // instant would credit the time past the clock it never refilled.
        0
    } else if ahead == 0 {
        config.capacity_units()
    } else if per_ns == 0 {
        0
    } else {
        config
            .capacity_units()
            .saturating_sub(ahead.saturating_mul(per_ns))
    };
    BucketState::new(config, balance, cursor).expect("at most the capacity")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Rate;

    fn config() -> Config {
        Config::new(10, Rate::per_second(5)).unwrap()
    }

    #[test]
    fn a_recreated_bucket_holds_what_the_dropped_one_would_hold_now() {
        let config = config();
        let unit = config.units_per_token();
        // 4 tokens at 1 s: full again 1.2 s later.
        let dropped = BucketState::new(&config, 4 * unit, 1_000_000_000).unwrap();
        let until = full_at(&config, dropped);
        assert_eq!(until, 2_200_000_000);
        // At 1.5 s it would hold 4 + 0.5 * 5 = 6.5 tokens.
        let back = owing(&config, 1_500_000_000, until);
        assert_eq!(
            back.balance(),
            dropped.refilled(&config, 1_500_000_000).balance()
        );
        assert_eq!(back.balance(), 13 * unit / 2);
        // From the instant it is full on, nothing is owed.
        assert!(owing(&config, until, until).is_full(&config));
        assert!(owing(&config, until + 1, until).is_full(&config));
    }

    #[test]
    fn a_collision_keeps_the_later_instant_and_never_makes_a_bucket_fuller() {
        let mut deficits = Deficits::new(4);
        deficits.remember(7, 5_000);
        deficits.remember(7, 3_000);
        assert_eq!(deficits.owed(7), 5_000);
        assert_eq!(deficits.bytes(), 4 * SLOTS_PER_KEY * 8);
    }

    /// Capacity 4 at 1/s emptied 3 s before the end of the clock would be full 1 s past it: its
    /// `full_at` saturates, and recreated at the last instant it must not be full (it would hold 3).
    #[test]
    fn a_bucket_full_only_past_the_end_of_the_clock_comes_back_no_fuller_than_it_was() {
        let config = Config::new(4, Rate::per_second(1)).unwrap();
        let empty = BucketState::new(&config, 0, u64::MAX - 3_000_000_000).unwrap();
        assert_eq!(full_at(&config, empty), Nanos::MAX);
        let three = 3 * config.capacity_units() / 4;
        assert!(owing(&config, u64::MAX, Nanos::MAX).balance() <= three);
    }

    #[test]
    fn a_bucket_that_never_refills_owes_forever() {
        let config = Config::new(3, Rate::per_second(0)).unwrap();
        let empty = BucketState::new(&config, 0, 10).unwrap();
        assert_eq!(full_at(&config, empty), Nanos::MAX);
        assert_eq!(owing(&config, u64::MAX - 1, Nanos::MAX).balance(), 0);
        // At the last instant too: a bucket owing past the clock is not full there.
        assert_eq!(owing(&config, u64::MAX, Nanos::MAX).balance(), 0);
    }
}
