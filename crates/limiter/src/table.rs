//! A shard's storage: one hash table whose slots hold the key and the value inline.
//!
//! Why this shape (numbers in reports/bench-limiter.md): a lookup is one probe of hashbrown's control
//! bytes and one read of the slot that holds both the key to compare and the bucket to update; at
//! 1,000,000 keys, every further dependent random access (an `IndexMap` or a slab keeps an index table
//! *and* an entry vector) measured about 4x slower per decision on the benchmark machine, while
//! the slab's memory saving (44 against 69 bytes per key at 1,000,000 keys with the 32-byte slots of
//! then) was not worth that.
//!
//! Positions are hashbrown's bucket indices: stable while the table is not resized, so a caller
//! uses a position only inside the critical section that found or inserted it, and a sweep cursor
//! over `0..slots()` stays meaningful (after a resize it just resumes somewhere else). Removing an
//! entry never moves another one. No stored hash: the table re-hashes the keys when it grows.

use std::hash::{BuildHasher, Hash};

use hashbrown::HashTable;

pub(crate) struct FlatMap<K, V, S> {
    table: HashTable<(K, V)>,
    hasher: S,
}

impl<K: Hash + Eq, V, S: BuildHasher> FlatMap<K, V, S> {
    pub(crate) fn with_hasher(hasher: S) -> Self {
        FlatMap {
            table: HashTable::new(),
            hasher,
        }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// The number of positions, occupied or not: a cursor runs over `0..slots()`.
    #[inline]
    pub(crate) fn slots(&self) -> usize {
        self.table.num_buckets()
    }

    /// The position of `key`, given `hash = hasher.hash_one(key)`.
    #[inline]
    pub(crate) fn find(&self, hash: u64, key: &K) -> Option<usize> {
        self.table
            .find_bucket_index(hash, |(candidate, _)| candidate == key)
    }

    /// The entry at `pos`, `None` if that slot is empty or out of range.
    #[inline]
    pub(crate) fn get(&self, pos: usize) -> Option<&(K, V)> {
        self.table.get_bucket(pos)
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, pos: usize) -> Option<&mut (K, V)> {
        self.table.get_bucket_mut(pos)
    }

    /// Inserts a key the map does not hold (the caller looked it up under the same lock) and returns
    /// its position. May resize the table, which invalidates every earlier position.
    pub(crate) fn insert_new(&mut self, hash: u64, key: K, value: V) -> usize {
        let hasher = &self.hasher;
        self.table
            .insert_unique(hash, (key, value), |(key, _)| hasher.hash_one(key))
            .bucket_index()
    }

    /// Removes the entry at `pos` (no other entry moves). `None` if the slot is empty.
    pub(crate) fn remove(&mut self, pos: usize) -> Option<(K, V)> {
        let entry = self.table.get_bucket_entry(pos).ok()?;
        Some(entry.remove().0)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    type Map = FlatMap<u64, u64, ahash::RandomState>;

    fn check(map: &Map, model: &HashMap<u64, u64>) {
        assert_eq!(map.len(), model.len());
        for (key, value) in model {
            let pos = map
                .find(map.hasher.hash_one(key), key)
                .expect("model key present");
            assert_eq!(map.get(pos), Some(&(*key, *value)));
        }
        let occupied = (0..map.slots())
            .filter(|&pos| map.get(pos).is_some())
            .count();
        assert_eq!(occupied, model.len());
        assert_eq!(map.get(map.slots()), None);
    }

    /// Random inserts and removals at random positions (empty ones included) against a `HashMap`,
    /// across several resizes, checking every entry regularly.
    #[test]
    fn the_flat_map_agrees_with_a_hash_map() {
        let mut map = Map::with_hasher(ahash::RandomState::with_seeds(1, 2, 3, 4));
        let mut model = HashMap::new();
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        for step in 0..20_000u64 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let remove = (state % 100) < if step < 10_000 { 30 } else { 70 };
            if remove && map.slots() > 0 {
                let pos = (state >> 8) as usize % map.slots();
                match map.get(pos).copied() {
                    Some((key, value)) => {
                        assert_eq!(map.remove(pos), Some((key, value)));
                        assert_eq!(model.remove(&key), Some(value));
                    }
                    None => assert_eq!(map.remove(pos), None),
                }
            } else {
                let key = state % 5_000;
                let hash = map.hasher.hash_one(key);
                match map.find(hash, &key) {
                    Some(pos) => map.get_mut(pos).expect("found").1 = step,
                    None => {
                        let pos = map.insert_new(hash, key, step);
                        assert_eq!(map.get(pos), Some(&(key, step)));
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
}
