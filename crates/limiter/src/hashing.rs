//! The key hasher: fast and randomly seeded in production, portable when a seed is fixed.
//!
//! Production limiters hash with `ahash`, randomly seeded per limiter, so an attacker cannot aim keys at
//! one shard or one probe chain. A fixed seed (`Builder::hasher_seed`) is for simulations and
//! verification, whose reports must be byte-identical on every machine: `ahash` picks its algorithm by
//! CPU features and documents no stable output, so the seeded form uses SipHash-1-3 with keys derived
//! from the seed, whose output is fixed by its specification (`siphasher` feeds integers as
//! little-endian bytes on every machine).

use std::hash::{BuildHasher, Hash, Hasher};

use siphasher::sip::SipHasher13;

/// Builds the hasher for one limiter.
#[derive(Clone, Debug)]
pub(crate) enum KeyHasher {
    /// Randomly seeded `ahash`: the default.
    Fast(ahash::RandomState),
    /// SipHash-1-3 with fixed keys: reproducible shard placement and table order.
    Portable(u64, u64),
}

impl KeyHasher {
    pub(crate) fn random() -> KeyHasher {
        KeyHasher::Fast(ahash::RandomState::new())
    }

    pub(crate) fn seeded(seed: u64) -> KeyHasher {
        KeyHasher::Portable(seed, seed.rotate_left(32) ^ 0x243F_6A88_85A3_08D3)
    }
}

/// The hasher state of either kind.
pub(crate) enum KeyHasherState {
    Fast(ahash::AHasher),
    Portable(SipHasher13),
}

impl Hasher for KeyHasherState {
    #[inline]
    fn finish(&self) -> u64 {
        match self {
            KeyHasherState::Fast(hasher) => hasher.finish(),
            KeyHasherState::Portable(hasher) => hasher.finish(),
        }
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        match self {
            KeyHasherState::Fast(hasher) => hasher.write(bytes),
            KeyHasherState::Portable(hasher) => hasher.write(bytes),
        }
    }

    #[inline]
    fn write_u64(&mut self, value: u64) {
        match self {
            KeyHasherState::Fast(hasher) => hasher.write_u64(value),
            KeyHasherState::Portable(hasher) => hasher.write_u64(value),
        }
    }
}

impl BuildHasher for KeyHasher {
    type Hasher = KeyHasherState;

    /// One branch per hash instead of one per `Hasher` call, and the fast arm is `ahash`'s own
    /// `hash_one` (small enough to inline into the acquire path; through the default method the
    /// benchmark binary called out to `hash_one` and `<u64 as Hash>::hash`, see
    /// reports/bench-limiter.md). Every user of a `KeyHasher` (the shard tables, the side maps, shard
    /// selection) hashes through this method, so its value need not equal the build-feed-finish one.
    /// The portable arm is exactly the default method, so its output, pinned below, does not change.
    #[inline]
    // Clippy suggests `self.hash_one(x)` for the portable arm, which is this very method: it would
    // recurse forever.
    #[allow(clippy::manual_hash_one)]
    fn hash_one<T: Hash>(&self, x: T) -> u64 {
        match self {
            KeyHasher::Fast(state) => state.hash_one(x),
            KeyHasher::Portable(..) => {
                let mut state = self.build_hasher();
                x.hash(&mut state);
                state.finish()
            }
        }
    }

    #[inline]
    fn build_hasher(&self) -> KeyHasherState {
        match self {
            KeyHasher::Fast(state) => KeyHasherState::Fast(state.build_hasher()),
            KeyHasher::Portable(k0, k1) => {
                KeyHasherState::Portable(SipHasher13::new_with_keys(*k0, *k1))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seeded_hasher_is_pinned() {
        // SipHash-1-3's output is fixed by its definition: if this changes, reports change on every
        // machine, so it must never change silently.
        let hasher = KeyHasher::seeded(0x6275_636b_6574_7072);
        assert_eq!(hasher.hash_one(42u64), hasher.hash_one(42u64));
        assert_eq!(hasher.hash_one(42u64), 14_063_276_355_716_485_768);
    }

    /// Keys hashed as bytes (strings, and any key through a `HashMap` built on the hasher) go
    /// through `write`: both hashers tell such keys apart, and the seeded one is pinned for them too.
    #[test]
    fn keys_hashed_as_bytes_are_told_apart_by_both_hashers() {
        let seeded = KeyHasher::seeded(0x6275_636b_6574_7072);
        for hasher in [KeyHasher::random(), seeded.clone()] {
            assert_ne!(hasher.hash_one("alice"), hasher.hash_one("bob"));
            let mut state = hasher.build_hasher();
            state.write(b"alice");
            let mut other = hasher.build_hasher();
            other.write(b"bob");
            assert_ne!(state.finish(), other.finish());
        }
        assert_eq!(seeded.hash_one("alice"), seeded.hash_one("alice"));
        assert_eq!(seeded.hash_one("alice"), 1_892_823_273_051_725_079);
    }
}
