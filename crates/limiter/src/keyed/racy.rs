//! The deliberately racy acquire (feature `racy-variant`), for the limiter's own explorer tests.
//!
//! What it owns: `Limiter::acquire_racy_at`, the one transition with its read and its write in two
//! critical sections. What it promises: nothing a product could use; it exists so that loom, shuttle
//! and the linearizability checker (`tests/`) can show they catch a split read-modify-write. It is
//! compiled only with the feature, which no crate of the shipped binary turns on.

use std::hash::{BuildHasher, Hash};

use super::Limiter;
use crate::bucket::{Attempt, transition};
use crate::sync::lock;
use crate::{AcquireError, Clock, Decision, Nanos};

impl<K: Hash + Eq + Clone, C: Clock> Limiter<K, C> {
    /// The deliberately racy acquire: the same transition, but the read and the write happen in two
    /// critical sections, so two concurrent callers can both spend the same tokens. It exists only so
    /// the explorers and the linearizability checker can prove they catch this bug.
    #[cfg(feature = "racy-variant")]
    pub fn acquire_racy_at(
        &self,
        key: &K,
        cost: u64,
        now: Nanos,
    ) -> Result<Decision, AcquireError> {
        let hash = self.hasher.hash_one(key);
        let (config, state, _) = lock(self.shard(hash)).current(hash, key, now, &self.settings);
        let (next, decision) = transition(&config, state, Attempt { cost, now })?;
        let mut shard = lock(self.shard(hash));
        let pos = match shard.find(hash, key) {
            Some((_, pos)) => pos,
            None => shard.insert(hash, key, next, now, &self.settings)?,
        };
        shard.store(pos, key, next);
        Ok(decision)
    }
}
