//! Shared by the limiter benches: [`clock::BenchClock`], the one clock every subject reads, and a
//! prototype used as evidence in reports/bench-limiter.md, not the product: what the exact
//! [`transition`] costs behind other storage than [`bucketproof_limiter::Limiter`]'s.
//!
//! - [`FlatKeyedProto`]: `u64` keys in sharded `hashbrown::HashTable`s that hold the key and the
//!   24-byte state inline (32-byte slots), instead of `IndexMap`'s index table plus a separate
//!   48-byte entry vector. Same hasher (ahash), same shard count rule, same transition; no sweep, no
//!   key bound, no overrides or request ids (a real version would keep a flag for those in the
//!   balance's two spare top bits).
#![allow(dead_code)]

pub mod cas_proto;
pub mod clock;

use std::sync::Mutex;

use bucketproof_limiter::internal::{Attempt, state_from_parts, transition};
use bucketproof_limiter::{AcquireError, BucketState, Config, Decision, Nanos};
use hashbrown::HashTable;

/// Key, balance (low, high), last refill.
type Slot = (u64, [u64; 2], Nanos);

#[repr(align(128))]
struct Shard(Mutex<HashTable<Slot>>);

pub struct FlatKeyedProto {
    shards: Box<[Shard]>,
    shard_bits: u32,
    hasher: ahash::RandomState,
    config: Config,
}

impl FlatKeyedProto {
    pub fn new(config: Config) -> FlatKeyedProto {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let shards = (cpus * 4).next_power_of_two();
        FlatKeyedProto {
            shards: (0..shards)
                .map(|_| Shard(Mutex::new(HashTable::new())))
                .collect(),
            shard_bits: shards.trailing_zeros(),
            hasher: ahash::RandomState::new(),
            config,
        }
    }

    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.0.lock().unwrap().len()).sum()
    }

    #[inline]
    pub fn acquire_at(&self, key: u64, cost: u64, now: Nanos) -> Result<Decision, AcquireError> {
        let hash = self.hasher.hash_one(key);
        let mixed = (hash ^ hash.rotate_left(32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let index = if self.shard_bits == 0 {
            0
        } else {
            (mixed >> (64 - self.shard_bits)) as usize
        };
        let mut table = self.shards[index].0.lock().unwrap();
        if let Some(slot) = table.find_mut(hash, |slot| slot.0 == key) {
            let state = state_from_parts(slot.1[0] as u128 | (slot.1[1] as u128) << 64, slot.2);
            let (next, decision) = transition(&self.config, state, Attempt { cost, now })?;
            slot.1 = [next.balance() as u64, (next.balance() >> 64) as u64];
            slot.2 = next.last_refill();
            return Ok(decision);
        }
        let (next, decision) = transition(
            &self.config,
            BucketState::full(&self.config, now),
            Attempt { cost, now },
        )?;
        let slot = (
            key,
            [next.balance() as u64, (next.balance() >> 64) as u64],
            next.last_refill(),
        );
        let hasher = &self.hasher;
        table.insert_unique(hash, slot, |slot| hasher.hash_one(slot.0));
        Ok(decision)
    }
}
