//! A shard's storage: one open-addressing table whose slots hold the key and the value inline, and
//! nothing else.
//!
//! Why hand-written (numbers in reports/bench-limiter.md): the goal is no more resident bytes
//! per key than governor's keyed limiter, whose slot is 16 bytes of key and GCRA instant plus one
//! hashbrown control byte. An exact bucket needs two numbers (a balance and a cursor), so our slot is
//! 24 bytes for a `u64` key. Every power-of-two table (hashbrown, `std`, DashMap) is 44-88% full, 48%
//! at 1,000,000 keys, which makes that 52 B/key. This table takes any size, grows by a fifth when it is
//! 85% full, and so stays 70-85% full: 28-35 B/key at every size. It also has no control bytes: a
//! lookup starts at the key's home slot and reads on, so its one dependent random access is the slot
//! that holds both the key to compare and the bucket to update.
//!
//! The shape is linear probing with backward-shift deletion (Knuth, TAOCP vol. 3, algorithm 6.4R):
//! - A key's home is `hash * slots / 2^64` (the high bits of the hash, no power-of-two mask); its
//!   entry sits at the first slot from home on (cyclically) that holds it, and every slot between
//!   home and it is occupied. Lookups rely on that: they stop at the first vacant slot.
//! - A slot is vacant exactly when its value is [`Vacancy::VACANT`]; its key is initialized exactly
//!   when it is not. That is the one fact the `unsafe` blocks below rely on.
//! - The table is never full (at most 85%), so every probe loop meets a vacant slot and ends.
//!
//! Positions: a caller uses a position only inside the critical section that found or inserted it.
//! An insert may grow the table (every position changes). A removal shifts later entries of its run
//! back, possibly into the removed position itself, and moves nothing else: a cursor walking over
//! `0..slots()` that looks at a position again after removing there visits every entry (`keyed/eviction.rs`,
//! `walk_from_cursor`). Nothing stores a hash: a resize or a shift re-hashes the keys it moves, which
//! for the fixed-size keys a limiter sees is cheaper than the memory a stored hash would cost.
//!
//! A panic in the key's `Hash` or `Eq` (user code) can leak keys or leave an entry unreachable, never
//! read an uninitialized key: every slot is marked vacant before its key is moved out.
//!
//! Heap keys: probing compares keys, not hash tags, so a `String` key of the probed length costs a
//! pointer chase per probe (2.2-3.8 probes on average at 70-85% full). Limiter keys are mostly
//! integers, addresses and short ids; the trade is written down here so it is a choice.

use std::hash::{BuildHasher, Hash};
use std::mem::MaybeUninit;

/// A value type with one value no live entry ever holds, which marks a vacant slot.
pub(crate) trait Vacancy: Copy {
    const VACANT: Self;
    fn is_vacant(&self) -> bool;
}

struct Slot<K, V> {
    /// Initialized exactly when `value` is not vacant.
    key: MaybeUninit<K>,
    value: V,
}

impl<K, V: Vacancy> Slot<K, V> {
    const EMPTY: Self = Slot {
        key: MaybeUninit::uninit(),
        value: V::VACANT,
    };
}

/// The bytes one slot takes for key `K` and value `V`: for the size assertions of the types stored
/// here (the slot type itself stays private).
pub(crate) const fn slot_size<K, V: Vacancy>() -> usize {
    size_of::<Slot<K, V>>()
}

/// Grow when an insert would make the table fuller than `MAX_LOAD_NUM / MAX_LOAD_DEN`.
const MAX_LOAD_NUM: usize = 17;
const MAX_LOAD_DEN: usize = 20;
/// The first allocation, in slots.
const MIN_SLOTS: usize = 8;

/// `V: Vacancy` is on the type itself so that `Drop` can tell live keys from uninitialized ones.
pub(crate) struct FlatMap<K, V: Vacancy, S> {
    slots: Box<[Slot<K, V>]>,
    len: usize,
    hasher: S,
}

impl<K: Hash + Eq, V: Vacancy, S: BuildHasher> FlatMap<K, V, S> {
    pub(crate) fn with_hasher(hasher: S) -> Self {
        FlatMap {
            slots: Box::new([]),
            len: 0,
            hasher,
        }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The number of positions, occupied or not: a cursor runs over `0..slots()`.
    #[inline]
    pub(crate) fn slots(&self) -> usize {
        self.slots.len()
    }

    /// The home position of a hash in a table of `slots` positions (`slots > 0`).
    #[inline(always)]
    pub(crate) fn home(hash: u64, slots: usize) -> usize {
        ((u128::from(hash) * slots as u128) >> 64) as usize
    }

    #[inline(always)]
    fn next(pos: usize, slots: usize) -> usize {
        if pos + 1 == slots { 0 } else { pos + 1 }
    }

    /// The position of `key`, given `hash = hasher.hash_one(key)`.
    #[inline]
    pub(crate) fn find(&self, hash: u64, key: &K) -> Option<usize> {
        let slots = self.slots.len();
        if slots == 0 {
            return None;
        }
        let mut pos = Self::home(hash, slots);
        loop {
            let slot = &self.slots[pos];
            if slot.value.is_vacant() {
                return None;
            }
            // SAFETY: the slot is not vacant, so its key is initialized.
            if unsafe { slot.key.assume_init_ref() } == key {
                return Some(pos);
            }
            pos = Self::next(pos, slots);
        }
    }

    /// The entry at `pos`, `None` if that slot is vacant or out of range.
    #[inline]
    pub(crate) fn get(&self, pos: usize) -> Option<(&K, &V)> {
        let slot = self.slots.get(pos)?;
        if slot.value.is_vacant() {
            return None;
        }
        // SAFETY: the slot is not vacant, so its key is initialized.
        Some((unsafe { slot.key.assume_init_ref() }, &slot.value))
    }

    /// The entry at `pos` with its value writable. The value must stay non-vacant: a `VACANT` written
    /// here would lose the entry and leak its key (memory-safe, but a broken map).
    #[inline]
    pub(crate) fn get_mut(&mut self, pos: usize) -> Option<(&K, &mut V)> {
        let slot = self.slots.get_mut(pos)?;
        if slot.value.is_vacant() {
            return None;
        }
        // SAFETY: the slot is not vacant, so its key is initialized.
        Some((unsafe { slot.key.assume_init_ref() }, &mut slot.value))
    }

    /// Inserts a key the map does not hold (the caller looked it up under the same lock) and returns
    /// its position. May grow the table, which moves every entry. `value` must not be vacant.
    pub(crate) fn insert_new(&mut self, hash: u64, key: K, value: V) -> usize {
        assert!(!value.is_vacant(), "a live entry's value is never VACANT");
        if (self.len + 1) * MAX_LOAD_DEN > self.slots.len() * MAX_LOAD_NUM {
            self.grow();
        }
        debug_assert!(self.find(hash, &key).is_none(), "insert_new of a held key");
        let pos = self.vacant_from(hash);
        self.slots[pos] = Slot {
            key: MaybeUninit::new(key),
            value,
        };
        self.len += 1;
        pos
    }

    /// The first vacant position from `hash`'s home on.
    #[inline]
    fn vacant_from(&self, hash: u64) -> usize {
        let slots = self.slots.len();
        let mut pos = Self::home(hash, slots);
        while !self.slots[pos].value.is_vacant() {
            pos = Self::next(pos, slots);
        }
        pos
    }

    /// Reallocates with a fifth more slots (at least `MIN_SLOTS`) and re-inserts every entry.
    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let wanted = (self.slots.len() + self.slots.len() / 5).max(MIN_SLOTS);
        let fresh: Box<[Slot<K, V>]> = (0..wanted).map(|_| Slot::EMPTY).collect();
        let old = std::mem::replace(&mut self.slots, fresh);
        for slot in old.into_vec() {
            if slot.value.is_vacant() {
                continue;
            }
            // SAFETY: not vacant, so initialized; `old` is consumed and `Slot` has no `Drop`, so the
            // key is moved exactly once.
            let key = unsafe { slot.key.assume_init() };
            let pos = self.vacant_from(self.hasher.hash_one(&key));
            self.slots[pos] = Slot {
                key: MaybeUninit::new(key),
                value: slot.value,
            };
        }
    }

    /// Removes the entry at `pos`, `None` if that slot is vacant. Later entries of the same run move
    /// back to keep every entry reachable from its home, so `pos` may hold another entry afterwards
    /// (a cursor over the positions must then look at `pos` again).
    pub(crate) fn remove(&mut self, pos: usize) -> Option<(K, V)> {
        let slot = self.slots.get_mut(pos)?;
        if slot.value.is_vacant() {
            return None;
        }
        let value = std::mem::replace(&mut slot.value, V::VACANT);
        // SAFETY: it was not vacant, so the key was initialized; the slot is now vacant, so nothing
        // reads this key again.
        let key = unsafe { slot.key.assume_init_read() };
        self.len -= 1;
        let slots = self.slots.len();
        let mut hole = pos;
        let mut probe = Self::next(pos, slots);
        loop {
            let candidate = &self.slots[probe];
            if candidate.value.is_vacant() {
                break;
            }
            // SAFETY: not vacant, so initialized.
            let home = Self::home(
                self.hasher
                    .hash_one(unsafe { candidate.key.assume_init_ref() }),
                slots,
            );
            // The entry at `probe` may move back into the hole if the hole lies on its probe path,
            // that is not after its home: distance(home, probe) >= distance(hole, probe).
            let from_home = (probe + slots - home) % slots;
            let from_hole = (probe + slots - hole) % slots;
            if from_home >= from_hole {
                let moved = std::mem::replace(&mut self.slots[probe], Slot::EMPTY);
                self.slots[hole] = moved;
                hole = probe;
            }
            probe = Self::next(probe, slots);
        }
        Some((key, value))
    }
}

#[cfg(test)]
impl<K: Hash + Eq, V: Vacancy, S: BuildHasher> FlatMap<K, V, S> {
    /// The mean number of slots a successful lookup reads, over every entry.
    pub(crate) fn mean_probe_length(&self) -> f64 {
        let slots = self.slots.len();
        let total: usize = (0..slots)
            .filter_map(|pos| {
                let (key, _) = self.get(pos)?;
                Some((pos + slots - Self::home(self.hasher.hash_one(key), slots)) % slots + 1)
            })
            .sum();
        total as f64 / self.len.max(1) as f64
    }

    /// The fraction of slots in use.
    pub(crate) fn load(&self) -> f64 {
        self.len as f64 / self.slots.len().max(1) as f64
    }
}

impl<K, V: Vacancy, S> Drop for FlatMap<K, V, S> {
    fn drop(&mut self) {
        if !std::mem::needs_drop::<K>() {
            return;
        }
        for slot in self.slots.iter_mut() {
            if !slot.value.is_vacant() {
                // SAFETY: not vacant, so initialized; the map is going away, so nothing reads it again.
                unsafe { slot.key.assume_init_drop() };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::collections::HashMap;
    use std::rc::Rc;

    use super::*;

    /// A value with `u64::MAX` as its vacant mark.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    struct Value(u64);

    impl Vacancy for Value {
        const VACANT: Self = Value(u64::MAX);
        fn is_vacant(&self) -> bool {
            self.0 == u64::MAX
        }
    }

    type Map = FlatMap<u64, Value, ahash::RandomState>;

    /// Miri (which checks the `unsafe` blocks: `cargo +nightly miri test -p bucketproof-limiter --lib
    /// table::tests`, in CI) runs these about 10,000 times slower, so it gets runs 50 times shorter.
    const fn scaled(steps: u64) -> u64 {
        if cfg!(miri) { steps / 50 } else { steps }
    }

    fn hasher() -> ahash::RandomState {
        ahash::RandomState::with_seeds(1, 2, 3, 4)
    }

    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    /// Every model entry is found at a position holding it, nothing else is in the table, and every
    /// entry is reachable: no vacant slot lies between a key's home and its position.
    fn check(map: &Map, model: &HashMap<u64, u64>) {
        assert_eq!(map.len(), model.len());
        assert_eq!(map.is_empty(), model.is_empty());
        let slots = map.slots();
        for (key, value) in model {
            let hash = map.hasher.hash_one(key);
            let pos = map.find(hash, key).expect("model key present");
            assert_eq!(map.get(pos), Some((key, &Value(*value))));
            let mut walk = Map::home(hash, slots);
            while walk != pos {
                assert!(
                    map.get(walk).is_some(),
                    "vacant slot inside {key}'s probe run"
                );
                walk = Map::next(walk, slots);
            }
        }
        let occupied = (0..slots).filter(|&pos| map.get(pos).is_some()).count();
        assert_eq!(occupied, model.len());
        assert_eq!(map.get(slots), None);
    }

    /// Random inserts and removals at random positions (vacant ones included) against a `HashMap`,
    /// across several resizes, checking every entry regularly.
    #[test]
    fn the_flat_map_agrees_with_a_hash_map() {
        let mut map = Map::with_hasher(hasher());
        let mut model = HashMap::new();
        check(&map, &model);
        let mut random = XorShift(0x2545_F491_4F6C_DD1D);
        let steps = scaled(20_000);
        for step in 0..steps {
            let state = random.next();
            let remove = (state % 100) < if step < steps / 2 { 30 } else { 70 };
            if remove && map.slots() > 0 {
                let pos = (state >> 8) as usize % map.slots();
                match map.get(pos).map(|(key, value)| (*key, *value)) {
                    Some((key, value)) => {
                        assert_eq!(map.remove(pos), Some((key, value)));
                        assert_eq!(model.remove(&key), Some(value.0));
                    }
                    None => assert_eq!(map.remove(pos), None),
                }
            } else {
                let key = state % 5_000;
                let hash = map.hasher.hash_one(key);
                match map.find(hash, &key) {
                    Some(pos) => map.get_mut(pos).expect("found").1.0 = step,
                    None => {
                        let pos = map.insert_new(hash, key, Value(step));
                        assert_eq!(map.get(pos), Some((&key, &Value(step))));
                    }
                }
                model.insert(key, step);
            }
            if step % 997 == 0 || map.len() < 4 {
                check(&map, &model);
            }
        }
        check(&map, &model);
    }

    /// The memory promise: once past its first few sizes, the table is 70-85% full after every
    /// insert, so its bytes per key stay within `slot / 0.85 ..= slot / 0.70`.
    #[test]
    fn the_table_stays_between_70_and_85_percent_full_as_it_grows() {
        let mut map = Map::with_hasher(hasher());
        let mut grew = 0;
        for key in 0..scaled(300_000) {
            let slots_before = map.slots();
            map.insert_new(map.hasher.hash_one(key), key, Value(key));
            grew += usize::from(map.slots() != slots_before);
            let load = map.len() as f64 / map.slots() as f64;
            assert!(load <= 0.85, "{} keys in {} slots", map.len(), map.slots());
            if map.slots() >= 100 {
                assert!(load >= 0.70, "{} keys in {} slots", map.len(), map.slots());
            }
        }
        assert!(grew > 30, "grew {grew} times");
    }

    /// The table grows exactly when an insert would make it fuller than 85% (17/20), never earlier:
    /// at a size where 85% is a whole number of entries (260 slots, 221 entries) it fills up to it.
    #[test]
    fn the_table_grows_only_when_an_insert_would_pass_85_percent() {
        let mut map = Map::with_hasher(hasher());
        let mut filled_to_the_bound = false;
        // Short enough for Miri unscaled: the first exact fit is at 221 entries.
        for key in 0..300 {
            let (len, slots) = (map.len(), map.slots());
            map.insert_new(map.hasher.hash_one(key), key, Value(key));
            let over_the_bound = (len + 1) * MAX_LOAD_DEN > slots * MAX_LOAD_NUM;
            assert_eq!(
                map.slots() != slots,
                over_the_bound,
                "insert {} into {slots} slots",
                len + 1
            );
            filled_to_the_bound |= (len + 1) * MAX_LOAD_DEN == slots * MAX_LOAD_NUM;
        }
        assert!(filled_to_the_bound, "no size was filled to exactly 85%");
    }

    /// A walk over the positions that looks at a position again after removing there (what
    /// `keyed/eviction.rs` does) sees every entry, although removals move entries back.
    #[test]
    fn a_walk_that_revisits_after_a_removal_sees_every_entry() {
        // Under Miri a tenth of the keys (still several resizes, and removals that shift entries
        // back): the walk over 5,000 took two of Miri's three minutes in CI.
        let keys: u64 = if cfg!(miri) { 500 } else { 5_000 };
        let mut map = Map::with_hasher(hasher());
        for key in 0..keys {
            map.insert_new(map.hasher.hash_one(key), key, Value(key));
        }
        let mut seen = std::collections::HashSet::new();
        let mut pos = 0;
        while pos < map.slots() {
            let Some((key, _)) = map.get(pos).map(|(key, value)| (*key, *value)) else {
                pos += 1;
                continue;
            };
            seen.insert(key);
            if key % 3 != 0 {
                map.remove(pos);
                if map.get(pos).is_some() {
                    continue;
                }
            }
            pos += 1;
        }
        assert_eq!(seen.len() as u64, keys);
        assert_eq!(map.len() as u64, keys.div_ceil(3));
        let model = (0..keys)
            .filter(|key| key % 3 == 0)
            .map(|key| (key, key))
            .collect();
        check(&map, &model);
    }

    /// Heap keys: each key is dropped exactly once, whether it leaves by `remove`, by a resize
    /// (moved, not dropped) or with the map.
    #[test]
    fn every_key_is_dropped_exactly_once() {
        struct Counted(u64, Rc<Cell<usize>>);
        impl PartialEq for Counted {
            fn eq(&self, other: &Self) -> bool {
                self.0 == other.0
            }
        }
        impl Eq for Counted {}
        impl std::hash::Hash for Counted {
            fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
                self.0.hash(state);
            }
        }
        impl Drop for Counted {
            fn drop(&mut self) {
                self.1.set(self.1.get() + 1);
            }
        }
        let drops = Rc::new(Cell::new(0));
        let mut map: FlatMap<Counted, Value, _> = FlatMap::with_hasher(hasher());
        for key in 0..1_000u64 {
            let counted = Counted(key, Rc::clone(&drops));
            let hash = map.hasher.hash_one(&counted);
            map.insert_new(hash, counted, Value(key));
        }
        assert_eq!(drops.get(), 0, "growing moves keys, it drops none");
        let mut removed = 0;
        for pos in 0..map.slots() {
            if pos % 2 == 0 && map.remove(pos).is_some() {
                removed += 1;
            }
        }
        assert_eq!(drops.get(), removed);
        drop(map);
        assert_eq!(drops.get(), 1_000);
    }
}
