//! A shard's storage: a dense slab of `(key, value)` slots plus a hash index of `u32` positions.
//!
//! Why this shape and not a plain hash table (numbers in reports/bench-limiter.md):
//! - memory: a slot is just the key and the value (32 bytes for a `u64` key and the 24-byte packed
//!   bucket) in a `Vec` that grows by doubling on its own, and the index costs 4 bytes plus hashbrown's
//!   1 control byte per index slot. A hash table holding the 32-byte slots inline pays 33 bytes per
//!   *table slot* at hashbrown's load factor (48% full at 1,000,000 keys over 8 shards), the slab pays
//!   32 bytes per *key* plus 5 per index slot;
//! - the amortized sweep and the bounded room scan need a cursor over live entries: here it is a
//!   position in the dense `Vec`, every position is a live entry, and `swap_remove` keeps the same
//!   visiting order the previous `IndexMap` storage had (the last entry moves into the hole);
//! - no stored hash: lookups hash the caller's key once, and only a removal re-hashes (the removed
//!   key and the moved last key) to fix the index. That is `IndexMap`'s design minus its 8-byte stored
//!   hash, its `usize` indices and its habit of reserving the entry vector up to the index capacity.
//!
//! Every position stored in `index` is `< slots.len()`, and every slot has exactly one index entry.
//! The code never indexes out of bounds on a broken invariant (it uses `get`), and a removal whose
//! index entry cannot be found by hash (only possible with a `Hash` impl that breaks its contract) falls
//! back to a linear search instead of panicking.

use std::hash::{BuildHasher, Hash};

use hashbrown::HashTable;

pub(crate) struct SlabMap<K, V, S> {
    slots: Vec<(K, V)>,
    index: HashTable<u32>,
    hasher: S,
}

impl<K: Hash + Eq, V, S: BuildHasher> SlabMap<K, V, S> {
    /// The largest number of entries a map holds: positions are stored as `u32`.
    pub(crate) const MAX_LEN: usize = u32::MAX as usize;

    pub(crate) fn with_hasher(hasher: S) -> Self {
        SlabMap {
            slots: Vec::new(),
            index: HashTable::new(),
            hasher,
        }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The position of `key`, given `hash = hasher.hash_one(key)`.
    #[inline]
    pub(crate) fn find(&self, hash: u64, key: &K) -> Option<usize> {
        let slots = &self.slots;
        self.index
            .find(hash, |&pos| {
                slots
                    .get(pos as usize)
                    .is_some_and(|(candidate, _)| candidate == key)
            })
            .map(|&pos| pos as usize)
    }

    #[inline]
    pub(crate) fn get(&self, pos: usize) -> Option<&(K, V)> {
        self.slots.get(pos)
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, pos: usize) -> Option<&mut (K, V)> {
        self.slots.get_mut(pos)
    }

    /// Appends a key the map does not hold (the caller looked it up under the same lock) and returns
    /// its position, or `None` (nothing changed) if the map already holds [`Self::MAX_LEN`] entries.
    pub(crate) fn push_new(&mut self, hash: u64, key: K, value: V) -> Option<usize> {
        let pos = self.slots.len();
        let stored = u32::try_from(pos).ok().filter(|&p| p < u32::MAX)?;
        self.slots.push((key, value));
        let (slots, hasher) = (&self.slots, &self.hasher);
        // The closure re-hashes existing entries when the index grows.
        self.index.insert_unique(hash, stored, |&p| {
            slots
                .get(p as usize)
                .map_or(0, |(key, _)| hasher.hash_one(key))
        });
        Some(pos)
    }

    /// Removes the entry at `pos`, moving the last entry into its place (`Vec::swap_remove`).
    pub(crate) fn swap_remove(&mut self, pos: usize) -> Option<(K, V)> {
        let last = self.slots.len().checked_sub(1)?;
        if pos > last {
            return None;
        }
        self.unindex(pos);
        if pos != last {
            self.reindex(last, pos);
        }
        Some(self.slots.swap_remove(pos))
    }

    fn hash_at(&self, pos: usize) -> u64 {
        self.slots
            .get(pos)
            .map_or(0, |(key, _)| self.hasher.hash_one(key))
    }

    fn unindex(&mut self, pos: usize) {
        let hash = self.hash_at(pos);
        match self.index.find_entry(hash, |&p| p as usize == pos) {
            Ok(entry) => {
                entry.remove();
            }
            Err(_) => self.index.retain(|p| *p as usize != pos),
        }
    }

    fn reindex(&mut self, from: usize, to: usize) {
        let hash = self.hash_at(from);
        let stored = to as u32; // to < from <= MAX_LEN
        if let Some(p) = self.index.find_mut(hash, |&p| p as usize == from) {
            *p = stored;
        } else if let Some(p) = self.index.iter_mut().find(|p| **p as usize == from) {
            *p = stored;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    type Map = SlabMap<u64, u64, ahash::RandomState>;

    fn check(map: &Map, model: &HashMap<u64, u64>) {
        assert_eq!(map.len(), model.len());
        assert_eq!(map.index.len(), model.len());
        for (key, value) in model {
            let pos = map
                .find(map.hasher.hash_one(key), key)
                .expect("model key present");
            assert_eq!(map.get(pos), Some(&(*key, *value)));
        }
        for (pos, (key, _)) in map.slots.iter().enumerate() {
            assert_eq!(map.find(map.hasher.hash_one(key), key), Some(pos));
        }
    }

    /// Random inserts and removals (at random positions, including the last and the only entry)
    /// against a `HashMap`, across several index growths, checking every entry after each step.
    #[test]
    fn the_slab_map_agrees_with_a_hash_map() {
        let mut map = Map::with_hasher(ahash::RandomState::with_seeds(1, 2, 3, 4));
        let mut model = HashMap::new();
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        for step in 0..20_000u64 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            // Grow for the first half, then shrink: the index grows, and removals hit every shape.
            let remove = model.len() > 0 && (state % 100) < if step < 10_000 { 30 } else { 70 };
            if remove {
                let pos = (state >> 8) as usize % map.len();
                let (key, value) = map.swap_remove(pos).expect("pos below len");
                assert_eq!(model.remove(&key), Some(value));
            } else {
                let key = state % 5_000;
                let hash = map.hasher.hash_one(key);
                match map.find(hash, &key) {
                    Some(pos) => map.get_mut(pos).expect("found").1 = step,
                    None => {
                        map.push_new(hash, key, step).expect("room");
                    }
                }
                model.insert(key, step);
            }
            if step % 997 == 0 || map.len() < 4 {
                check(&map, &model);
            }
        }
        check(&map, &model);
        assert_eq!(map.swap_remove(map.len()), None, "out of range: no-op");
        while !map.is_empty() {
            map.swap_remove(0);
        }
        assert_eq!(map.index.len(), 0);
    }
}
