//! What a bucket dropped while not full still owed, for [`EvictionPolicy::EvictKeepingDeficit`].
//!
//! What it owns: a fixed array of tagged slots per shard. A dropped bucket's key has
//! [`POSITIONS`] slots, chosen by its hash, and a tag (32 other bits of that hash); each slot holds
//! an instant `full_at` and a tag: the key whose bucket is owed there, or [`WILD`] when two keys'
//! debts share it. What it promises:
//! - bounded: the array never grows, whatever keys arrive ([`SLOTS_PER_KEY`] slots of 12 bytes per
//!   key the shard may hold);
//! - never fuller than the dropped bucket would be now. The invariant: for every dropped bucket `v`
//!   whose `full_at` `f_v` is past the shard's eviction horizon `H`, each of `v`'s slots holds `v`'s tag
//!   or [`WILD`], with `full_at >= f_v`. A write keeps it: a slot whose instant is at or before `H`
//!   (and not `Nanos::MAX`, owed at every cursor) is overwritten (every debt it held is paid: a fresh
//!   bucket's cursor is never before `H`, which never falls, and a bucket full by its cursor owes
//!   nothing); a slot of the same tag keeps the later
//!   instant; a slot of another tag, still owed, becomes [`WILD`] with the later instant. So a new
//!   bucket of the key, at a cursor `c >= H`, owes nothing if one of its slots holds another key's tag
//!   (its own debt, were it unpaid, would be there) and otherwise until the earliest instant among its
//!   slots, each of which is at least its own `f_v` (the count-min principle, for a maximum): it starts
//!   with `capacity - (that instant - c) * rate`, at most the dropped bucket's refilled balance at `c`.
//!   Two keys with the same tag are one key here, which can only make a new bucket emptier;
//! - what it may cost a key that was never dropped owing: it starts owing only when every one of its
//!   slots is [`WILD`] (or holds its tag) and still owed, which needs two live debts in each slot.
//!   Such a key then pays another's debt, and if it is dropped owing it writes that debt back: the
//!   array must be sized so that live [`WILD`] slots stay rare (`reports/flood.md`).
//!
//! Under every clock the recreated bucket's cursor is at least the shard's eviction horizon, so no
//! time is credited twice.
//!
//! [`EvictionPolicy::EvictKeepingDeficit`]: super::EvictionPolicy::EvictKeepingDeficit

use crate::{BucketState, Config, Nanos};

/// Slots per key the shard may hold, by default (`Builder::deficit_slots_per_key`). A flood that drops a bucket at every new id writes about
/// `drops per second * seconds each victim still owes` live debts; a key that was never dropped owing
/// is charged one only when each of its slots holds two of them, so more slots make that rarer
/// (`reports/flood.md` measures the trade). Public (as `DEFICIT_SLOTS_PER_KEY`) so that a
/// verification harness can size a flood that outnumbers the array.
pub const SLOTS_PER_KEY: usize = 4;

/// Slots per dropped key: its debt is written to each, and a new bucket of the key owes only what
/// every one of them says it may owe.
pub const POSITIONS: usize = 2;

/// The tag of a slot that holds the debts of two or more keys: it may be owed by any key.
pub const WILD: u32 = 0;

/// The per-shard array of `full_at` instants (0: nothing owed) and their tags.
pub(super) struct Deficits {
    full_at: Box<[Nanos]>,
    tags: Box<[u32]>,
}

impl Deficits {
    /// An array of `slots_per_key` (at least 1) slots per key for a shard that holds at most `keys`
    /// keys.
    pub(super) fn new(keys: usize, slots_per_key: usize) -> Deficits {
        let slots = keys.max(1).saturating_mul(slots_per_key.max(1));
        Deficits {
            full_at: vec![0; slots].into_boxed_slice(),
            tags: vec![WILD; slots].into_boxed_slice(),
        }
    }

    /// The slots and tag of a key's hash. The shard is chosen by a remix of the hash and the table
    /// position by its high bits, so each slot takes a remix of its own (a multiply-shift onto the
    /// array's length) and the tag another; the tag is never [`WILD`].
    fn place(&self, hash: u64) -> ([usize; POSITIONS], u32) {
        let len = self.full_at.len() as u128;
        let slots = std::array::from_fn(|i| {
            let mixed = (hash ^ (i as u64 + 1).wrapping_mul(0xD6E8_FEB8_6659_FD93))
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .rotate_left(29);
            ((mixed as u128 * len) >> 64) as usize
        });
        let tag = (hash.wrapping_mul(0xC2B2_AE3D_27D4_EB4F) >> 32) as u32;
        (slots, tag.max(1))
    }

    /// A bucket of the key with `hash` was dropped owing until `full_at`, with the shard's eviction
    /// horizon at `horizon` (raised by that drop: no new bucket of this shard starts before it). Kept
    /// in each of the key's slots (see the module's invariant).
    pub(super) fn remember(&mut self, hash: u64, full_at: Nanos, horizon: Nanos) {
        let (slots, tag) = self.place(hash);
        for slot in slots {
            let (held, held_tag) = (self.full_at[slot], self.tags[slot]);
            if held <= horizon && held != Nanos::MAX {
                // Every debt written here is paid by the earliest cursor a new bucket can have. Not
                // `Nanos::MAX`: a bucket full only past the end of the clock (or never) is owed at
                // every cursor, the last instant included (`owing`).
                self.full_at[slot] = full_at;
                self.tags[slot] = tag;
            } else {
                self.full_at[slot] = held.max(full_at);
                if held_tag != tag {
                    self.tags[slot] = WILD;
                }
            }
        }
    }

    /// Until when a fresh bucket of the key with `hash` is owing (0 or an instant at or before its
    /// cursor: nothing): 0 if one of its slots holds another key's tag, else the earliest instant
    /// among them.
    pub(super) fn owed(&self, hash: u64) -> Nanos {
        let (slots, tag) = self.place(hash);
        slots
            .into_iter()
            .map(|slot| {
                let held_tag = self.tags[slot];
                if held_tag == tag || held_tag == WILD {
                    self.full_at[slot]
                } else {
                    0
                }
            })
            .min()
            .unwrap_or(0)
    }

    /// The arrays' size in bytes.
    pub(super) fn bytes(&self) -> usize {
        std::mem::size_of_val(&*self.full_at) + std::mem::size_of_val(&*self.tags)
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
        let mut deficits = Deficits::new(4, SLOTS_PER_KEY);
        deficits.remember(7, 5_000, 0);
        deficits.remember(7, 3_000, 0);
        assert_eq!(deficits.owed(7), 5_000);
        assert_eq!(deficits.bytes(), 4 * SLOTS_PER_KEY * 12);
    }

    /// The module's invariant, on a deliberately small array (8 slots) that many victims overflow:
    /// after every write, each victim whose debt is not paid by the horizon owes at least its own
    /// instant, whichever victims shared its slots. Pseudo-random hashes and instants (splitmix64),
    /// a horizon that rises, the same key dropped several times.
    #[test]
    fn every_unpaid_debt_is_owed_in_full_whatever_shares_its_slots() {
        let mut deficits = Deficits::new(1, SLOTS_PER_KEY);
        let mut state = 1u64;
        let mut next = || {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        // The latest drop of each of 40 keys: a key's own debt is its last drop's instant.
        let mut latest = std::collections::BTreeMap::new();
        let mut horizon = 0;
        for _ in 0..20_000 {
            let hash = next() % 40;
            horizon += next() % 3;
            let full_at = horizon + next() % 50;
            deficits.remember(hash, full_at, horizon);
            latest.insert(hash, full_at);
            for (&key, &owed) in &latest {
                if owed > horizon {
                    assert!(deficits.owed(key) >= owed, "key {key} owes {owed}");
                }
            }
        }
    }

    /// Two victims dropped at the last instant, each full again only past the end of the clock: the
    /// second must not overwrite the first's debt as paid, though its instant is not after the horizon.
    #[test]
    fn a_debt_past_the_end_of_the_clock_is_never_paid() {
        let mut deficits = Deficits::new(1, 1);
        deficits.remember(1, Nanos::MAX, Nanos::MAX);
        for hash in 2..50 {
            deficits.remember(hash, Nanos::MAX, Nanos::MAX);
        }
        assert_eq!(deficits.owed(1), Nanos::MAX);
    }

    /// A key that was never dropped owes nothing while one of its slots holds only another key's
    /// debt: the debt of a fresh id is not charged to the next fresh id of its slot, so a flood's
    /// debts cannot feed on themselves.
    #[test]
    fn a_key_never_dropped_does_not_pay_a_debt_of_one_other_key() {
        let mut deficits = Deficits::new(1, SLOTS_PER_KEY);
        deficits.remember(1, 5_000, 0);
        let (_, owner) = deficits.place(1);
        let strangers = (2..10_000u64).filter(|&hash| deficits.place(hash).1 != owner);
        for hash in strangers {
            assert_eq!(deficits.owed(hash), 0, "hash {hash}");
        }
        assert_eq!(deficits.owed(1), 5_000);
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
