//! The keyed limiter: one exact bucket per key, in sharded maps, with a memory bound.
//!
//! This file is the public front end: [`Limiter`] and the types its calls take and return. The
//! engine behind it is private: `shard` (a shard's table, its packed buckets and side map, and the
//! one decision), `eviction` (the key bound's policy and the sweeps), `records` (request-id
//! records), `settle` (reconciling an admitted request's charge with its actual cost), `builder`
//! (settings and defaults). What the keyed limiter promises:
//! - every decision is the crate's one transition on the key's state under the shard lock: read,
//!   refill, decide, write, in one critical section (checked by loom and shuttle in `tests/`);
//! - unrelated keys rarely share a lock: keys are spread over shards by a randomly seeded hasher, so
//!   an attacker cannot aim at one shard;
//! - memory is bounded: at most `max_keys` (rounded up to a multiple of the shard count) live keys;
//!   what happens at the bound is the explicit [`EvictionPolicy`], the same for a new key of an
//!   acquire and of a reconfigure; a key with an override config is pinned (never dropped, counted
//!   against the bound until forgotten), and a refused key changes nothing;
//! - a key is judged in its own time, `max(now, last_refill)`, which never moves back: its
//!   request-id records are stamped and judged there, so a rollback of the caller's clock is not
//!   special, and a dedupe window of 0 turns request ids off;
//! - expiry is lossless: a bucket is dropped by a sweep at `s` only when it is *evictable* judged at
//!   `j = max(s, last_refill)` (full, no override, no record live at `j`), which a fresh bucket at a
//!   cursor `>= j` would be too; and a fresh bucket's cursor starts no earlier than the latest such
//!   `j` of its shard, so a clock that runs backwards after an expiry cannot be credited the same
//!   interval twice, nor bring a dead record back;
//! - an error changes nothing; a replayed request id charges nothing;
//! - the amortized sweep runs when an acquire inserts a new key (the only time traffic grows a
//!   shard's memory; a reconfigure, the operator's call, makes room at the bound but does not
//!   sweep), not on every call: a call on a known key does no work for other keys.

mod builder;
mod deficits;
mod eviction;
mod fill;
#[cfg(feature = "racy-variant")]
mod racy;
mod records;
mod set;
mod settle;
mod shard;
#[cfg(test)]
mod tests;

use std::hash::{BuildHasher, Hash};
use std::sync::Arc;

pub use builder::Builder;
use builder::Settings;
pub use deficits::SLOTS_PER_KEY as DEFICIT_SLOTS_PER_KEY;
pub use eviction::EvictionPolicy;
pub use fill::FillLevels;
pub use records::RequestId;
pub use settle::{Settle, Settled};
use shard::Shard;

use crate::bucket::{Attempt, BucketState, Decision, snapshot};
use crate::hashing::KeyHasher;
use crate::sync::{Mutex, MutexGuard, lock_timed};
use crate::{
    AcquireError, Bandwidths, Clock, Config, Decisions, MonotonicClock, Nanos, SetState, Tokens,
    Wait,
};

/// One acquire, with the optional parts spelled out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// Whole tokens to take, `1..=capacity`.
    pub cost: u64,
    /// The time to decide at; `None` reads the limiter's clock.
    pub now: Option<Nanos>,
    /// Makes a retried call idempotent within the dedupe window.
    pub request_id: Option<RequestId>,
}

impl Request {
    /// A request for `cost` tokens, at the clock's time, without a request id.
    pub fn cost(cost: u64) -> Request {
        Request {
            cost,
            now: None,
            request_id: None,
        }
    }

    /// Decide at `now` instead of reading the clock.
    pub fn at(mut self, now: Nanos) -> Request {
        self.now = Some(now);
        self
    }

    /// Carry a request id.
    pub fn id(mut self, request_id: impl Into<RequestId>) -> Request {
        self.request_id = Some(request_id.into());
        self
    }
}

/// An acquire's decision plus what the limiter did to get it: a [`Decision`], or with
/// [`Limiter::acquire_set_with`] every bandwidth's part ([`Decisions`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acquired<D = Decision> {
    /// The decision (for a replay: the first decision for that request id).
    pub decision: D,
    /// The bucket did not exist before this call (first sight, or expired and dropped).
    pub created: bool,
    /// The request id was known: nothing was charged, `decision` is the recorded one.
    pub replayed: bool,
}

impl Acquired<Decisions> {
    /// The same report with the set's binding part as its decision.
    pub fn binding(&self) -> Acquired {
        Acquired {
            decision: *self.decision.binding(),
            created: self.created,
            replayed: self.replayed,
        }
    }
}

/// A read-only look at one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peek {
    /// The balance the key would have at `now`.
    pub remaining: Tokens,
    /// Time from `now` until the bucket is full.
    pub reset_after: Wait,
    /// False if the key has no state (it would start full).
    pub present: bool,
    /// The key's config.
    pub config: Config,
}

/// Counters since construction, summed over shards. Reading them locks each shard briefly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Acquires admitted.
    pub allowed: u64,
    /// Acquires denied.
    pub denied: u64,
    /// Acquires refused as invalid (and key-limit rejections).
    pub errors: u64,
    /// Acquires answered from a request-id record.
    pub replayed: u64,
    /// Keys currently holding state.
    pub live_keys: u64,
    /// Buckets dropped while evictable: no decision can tell.
    pub evicted_lossless: u64,
    /// Buckets dropped while not full ([`EvictionPolicy::EvictLeastRecent`]).
    pub evicted_lossy: u64,
    /// Buckets dropped while not full with their deficit kept
    /// ([`EvictionPolicy::EvictKeepingDeficit`]).
    pub evicted_owing: u64,
    /// New buckets that started below full because a bucket of their hash was dropped owing
    /// ([`EvictionPolicy::EvictKeepingDeficit`]).
    pub created_owing: u64,
    /// New keys refused at the key bound.
    pub rejected_keys: u64,
    /// Shard lock acquisitions that found the lock held and had to wait (any call: decisions,
    /// peeks, sweeps and the reads of these counters themselves).
    pub lock_contended: u64,
    /// Total nanoseconds those contended acquisitions waited, from the failed first try to the
    /// lock. Uncontended acquisitions are not timed: they add nothing here.
    pub lock_wait_nanos: u64,
}

/// A keyed, exact token-bucket limiter. See the crate docs for an example.
pub struct Limiter<K, C = MonotonicClock> {
    shards: Box<[Padded<Mutex<Shard<K>>>]>,
    shard_bits: u32,
    hasher: KeyHasher,
    settings: Settings<K>,
    clock: C,
}

/// Locks a shard, and on the contended path only (the first `try_lock` failed) counts the
/// acquisition and its wait in the shard's counters, once the lock is held.
#[inline(always)]
fn lock_shard<K>(mutex: &Mutex<Shard<K>>) -> MutexGuard<'_, Shard<K>> {
    lock_timed(mutex, Shard::count_contended)
}

/// Keeps each shard's lock on its own cache lines, so two cores working on two shards do not fight
/// over one line.
#[repr(align(128))]
struct Padded<T>(T);

impl<K: Hash + Eq + Clone, C: Clock> Limiter<K, C> {
    /// Takes `cost` tokens for `key` at the clock's time.
    pub fn acquire(&self, key: &K, cost: u64) -> Result<Decision, AcquireError> {
        self.acquire_at(key, cost, self.clock.now())
    }

    /// Takes `cost` tokens for `key` at `now`.
    pub fn acquire_at(&self, key: &K, cost: u64, now: Nanos) -> Result<Decision, AcquireError> {
        // Inlined with `request_id: None`, so the request-id branches fold away on this path.
        Ok(self
            .acquire_inner(key, Attempt { cost, now }, None)?
            .decision)
    }

    /// The full form: optional explicit time and request id, and a report of what happened.
    pub fn acquire_with(&self, key: &K, request: Request) -> Result<Acquired, AcquireError> {
        let now = request.now.unwrap_or_else(|| self.clock.now());
        let attempt = Attempt {
            cost: request.cost,
            now,
        };
        self.acquire_inner(key, attempt, request.request_id)
    }

    /// Takes `cost` tokens for `key` at `now`, with every bandwidth's part of the decision (one part
    /// for a key of one bandwidth).
    ///
    /// A burst of 3 and a sustained 1 token per second on one key: the fourth call in the same instant
    /// is denied by the burst alone, charges neither bandwidth, and may retry when the burst frees a
    /// token.
    ///
    /// ```
    /// use bucketproof_limiter::{Bandwidth, Bandwidths, Config, Limiter, Wait};
    ///
    /// let burst = Bandwidth::named("burst", Config::new(3, "3/s".parse()?)?)?;
    /// let daily = Bandwidth::named("daily", Config::new(100, "100/d".parse()?)?)?;
    /// let limiter: Limiter<&str> = Limiter::new(Bandwidths::new([burst, daily])?);
    /// for _ in 0..3 {
    ///     assert!(limiter.acquire_set_at(&"alice", 1, 0)?.is_allowed());
    /// }
    /// let denied = limiter.acquire_set_at(&"alice", 1, 0)?;
    /// assert!(!denied.is_allowed());
    /// // The burst waits a third of a second; the daily quota covers the cost and waits 0.
    /// assert_eq!(denied.retry_after(), Some(Wait::After(333_333_334)));
    /// assert_eq!(denied.bandwidths()[1].remaining().whole(), 97);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn acquire_set_at(
        &self,
        key: &K,
        cost: u64,
        now: Nanos,
    ) -> Result<Decisions, AcquireError> {
        Ok(self
            .acquire_set_with(key, Request::cost(cost).at(now))?
            .decision)
    }

    /// [`Limiter::acquire_with`] with every bandwidth's part of the decision.
    pub fn acquire_set_with(
        &self,
        key: &K,
        request: Request,
    ) -> Result<Acquired<Decisions>, AcquireError> {
        let now = request.now.unwrap_or_else(|| self.clock.now());
        let attempt = Attempt {
            cost: request.cost,
            now,
        };
        let hash = self.hasher.hash_one(key);
        let mut shard = lock_shard(self.shard(hash));
        let found = shard.find(hash, key);
        let result = if shard.holds_set(key, found, &self.settings) {
            shard.acquire_set(hash, key, attempt, request.request_id, &self.settings)
        } else {
            shard
                .acquire(hash, key, attempt, request.request_id, &self.settings)
                .map(|acquired| Acquired {
                    decision: Decisions::one(acquired.decision),
                    created: acquired.created,
                    replayed: acquired.replayed,
                })
        };
        if let Ok(Acquired { created: true, .. }) = result {
            let budget = self.settings.sweep_per_op;
            shard.sweep_some(now, budget, budget.saturating_mul(8), &self.settings);
        }
        result
    }

    #[inline(always)]
    fn acquire_inner(
        &self,
        key: &K,
        attempt: Attempt,
        request_id: Option<RequestId>,
    ) -> Result<Acquired, AcquireError> {
        let hash = self.hasher.hash_one(key);
        let mut shard = lock_shard(self.shard(hash));
        let result = shard.acquire(hash, key, attempt, request_id, &self.settings);
        // Sweep only when this call inserted a key: memory grows only then, so sweeping at every
        // insertion bounds what expired keys can pile up, and calls on known keys pay nothing. Never
        // after an error: an error changes nothing, not even other keys.
        if let Ok(Acquired { created: true, .. }) = result {
            let budget = self.settings.sweep_per_op;
            shard.sweep_some(
                attempt.now,
                budget,
                budget.saturating_mul(8),
                &self.settings,
            );
        }
        result
    }

    /// The key's balance at `now`, read-only: nothing is refilled, charged or created. For a key of
    /// several bandwidths, the bandwidth with the fewest whole tokens (the first of equals); see
    /// [`Limiter::peek_set_at`] for all.
    pub fn peek_at(&self, key: &K, now: Nanos) -> Peek {
        let hash = self.hasher.hash_one(key);
        let shard = lock_shard(self.shard(hash));
        let (config, state, found) = shard.current(hash, key, now, &self.settings);
        if !shard.holds_set(key, found, &self.settings) {
            let view = snapshot(&config, state, now);
            return Peek {
                remaining: view.remaining,
                reset_after: view.reset_after,
                present: found.is_some(),
                config,
            };
        }
        drop(shard);
        let mut parts = self.peek_set_at(key, now);
        // `min_by_key` keeps the first of equals.
        let fewest = (0..parts.len())
            .min_by_key(|&i| parts[i].remaining.whole())
            .unwrap_or(0);
        parts.swap_remove(fewest)
    }

    /// Every bandwidth's balance at `now`, in the set's order, read-only.
    pub fn peek_set_at(&self, key: &K, now: Nanos) -> Vec<Peek> {
        let hash = self.hasher.hash_one(key);
        let shard = lock_shard(self.shard(hash));
        let (set, state, found) = shard.current_set(hash, key, now, &self.settings);
        let present = found.is_some();
        set.as_slice()
            .iter()
            .enumerate()
            .filter_map(|(position, bandwidth)| {
                let config = *bandwidth.config();
                let view = snapshot(&config, state.bandwidth(position)?, now);
                Some(Peek {
                    remaining: view.remaining,
                    reset_after: view.reset_after,
                    present,
                    config,
                })
            })
            .collect()
    }

    /// True if an acquire of `cost` for `key` at `now` would be allowed, read-only (a
    /// [`Limiter::peek_set_at`]): the balance every bandwidth would have at `now` covers `cost`
    /// whole tokens. A cost above a capacity is never covered; a cost of 0 always is (an acquire
    /// would refuse it as invalid, which is [`Limiter::acquire_at`]'s answer to give).
    pub fn would_allow_at(&self, key: &K, cost: u64, now: Nanos) -> bool {
        self.peek_set_at(key, now)
            .iter()
            .all(|peek| peek.remaining.units() >= cost as u128 * peek.remaining.units_per_token())
    }

    /// Moves `key` to `config` at `now`: refill under the old config, round down to the new unit grid,
    /// clamp to the new capacity (docs/semantics.md, "reconfigure"). Returns the key's new config
    /// version (1 for the first change). The override stays until [`Limiter::forget`], and while it
    /// stays no policy drops the key.
    ///
    /// A key with no state is created, so it meets the key bound as a new key of an acquire does:
    /// its shard makes room by the [`EvictionPolicy`], and if none can be made the call returns
    /// [`AcquireError::KeyLimitReached`] and changes nothing (no override, no key dropped).
    ///
    /// `config` is a [`Config`] or a [`Bandwidths`] set: each new bandwidth continues the old one of
    /// its identity (its name, else its position), converted and clamped; one with no old
    /// counterpart starts full; an old one with no new counterpart is dropped.
    pub fn reconfigure_at(
        &self,
        key: &K,
        config: impl Into<Bandwidths>,
        now: Nanos,
    ) -> Result<u64, AcquireError> {
        let config = Arc::new(config.into());
        let hash = self.hasher.hash_one(key);
        let mut shard = lock_shard(self.shard(hash));
        let (old, state, found) = shard.current_set(hash, key, now, &self.settings);
        let pos = match found {
            Some((_, pos)) => pos,
            None => {
                let first = state
                    .bandwidth(0)
                    .unwrap_or_else(|| BucketState::full(old.first(), now));
                shard.insert(hash, key, first, now, &self.settings)?
            }
        };
        let next = state.reconfigured(&old, &config, now);
        let extra = shard.extra_mut(key, pos);
        let version = extra.config_override.map_or(0, |(_, version)| version) + 1;
        extra.config_override = Some((*config.first(), version));
        shard.store_set(pos, key, &config, &next);
        Ok(version)
    }

    /// Drops everything about `key` (bucket, override, request ids). True if it had state.
    pub fn forget(&self, key: &K) -> bool {
        let hash = self.hasher.hash_one(key);
        let mut shard = lock_shard(self.shard(hash));
        match shard.find(hash, key) {
            Some((_, pos)) => {
                shard.remove(pos);
                true
            }
            None => false,
        }
    }

    /// Drops every bucket that is evictable at `now`, in every shard. Returns how many.
    pub fn sweep_at(&self, now: Nanos) -> usize {
        self.shards
            .iter()
            .map(|shard| {
                let mut shard = lock_shard(&shard.0);
                let slots = shard.entries.slots();
                shard.sweep_cursor = 0;
                // Bounded by the slots, not by the entries: a walk can look at an entry twice (one
                // that a removal near the end moved back from the start of a wrapped probe run), so
                // a budget of `len` visits could end it before the last slots.
                shard.sweep_some(now, usize::MAX, slots, &self.settings)
            })
            .sum()
    }

    /// The key's stored state and config, if it holds any: for invariant checks and debugging.
    pub fn inspect(&self, key: &K) -> Option<(BucketState, Config)> {
        let hash = self.hasher.hash_one(key);
        let shard = lock_shard(self.shard(hash));
        let (bucket, _) = shard.find(hash, key)?;
        Some((
            shard.state_of(key, bucket),
            shard.config_of(key, bucket, &self.settings),
        ))
    }

    /// The key's stored state and bandwidth set, if it holds any (a key of one bandwidth as a set of
    /// one).
    pub fn inspect_set(&self, key: &K) -> Option<(SetState, Bandwidths)> {
        let hash = self.hasher.hash_one(key);
        let shard = lock_shard(self.shard(hash));
        let (set, state, found) = shard.current_set(hash, key, 0, &self.settings);
        found.map(|_| (state, (*set).clone()))
    }

    /// The bandwidth set that applies to `key` now (override, resolver or default).
    pub fn bandwidths_for(&self, key: &K) -> Bandwidths {
        let hash = self.hasher.hash_one(key);
        let shard = lock_shard(self.shard(hash));
        (*shard.current_set(hash, key, 0, &self.settings).0).clone()
    }

    /// The config that applies to `key` now (override, resolver or default); for a key of several
    /// bandwidths, its first.
    pub fn config_for(&self, key: &K) -> Config {
        let hash = self.hasher.hash_one(key);
        let shard = lock_shard(self.shard(hash));
        match shard.find(hash, key) {
            Some((bucket, _)) => shard.config_of(key, bucket, &self.settings),
            None => self.settings.resolved_config(key),
        }
    }

    /// Live keys across all shards.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| lock_shard(&shard.0).entries.len())
            .sum()
    }

    /// True if no key holds state.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of the arrays in which [`EvictionPolicy::EvictKeepingDeficit`] keeps what dropped
    /// buckets owe: fixed when the limiter is built, 0 under every other policy.
    pub fn deficit_bytes(&self) -> usize {
        (self.shards.iter())
            .map(|shard| {
                lock_shard(&shard.0)
                    .deficits
                    .as_ref()
                    .map_or(0, |d| d.bytes())
            })
            .sum()
    }

    /// Bytes of the shards' key tables: every slot allocated (occupied or vacant) times the size of
    /// one slot, a key and its packed bucket (24 bytes for a `u64` key). For a key type that owns
    /// nothing on the heap (an integer, a fixed-size digest such as the HTTP layer's `KeyDigest`)
    /// that is every byte a key costs the table, whatever the key it stands for. It leaves out what
    /// a key owns on the heap (a `String`'s text: key by a fixed-size digest when clients choose
    /// the keys, or their length is what they cost), the side map of the rare extras (override
    /// configs, request-id records, wide balances, bandwidth sets) and [`Limiter::deficit_bytes`].
    /// Reading it locks each shard briefly.
    pub fn table_bytes(&self) -> usize {
        let slot = crate::table::slot_size::<K, shard::PackedBucket>();
        (self.shards.iter())
            .map(|shard| lock_shard(&shard.0).entries.slots().saturating_mul(slot))
            .fold(0, usize::saturating_add)
    }

    /// Live keys by how full they are at `now` (the token distribution), read-only. It visits every
    /// slot, one shard lock at a time: a scrape's call, not a decision's.
    pub fn fill_levels_at(&self, now: Nanos) -> FillLevels {
        let mut levels = FillLevels::default();
        for shard in self.shards.iter() {
            lock_shard(&shard.0).fill_levels(now, &self.settings, &mut levels);
        }
        levels
    }

    /// [`Limiter::fill_levels_at`] the clock's now.
    pub fn fill_levels(&self) -> FillLevels {
        self.fill_levels_at(self.clock.now())
    }

    /// Counters summed over shards.
    pub fn stats(&self) -> Stats {
        self.shards.iter().fold(Stats::default(), |total, shard| {
            let shard = lock_shard(&shard.0);
            let s = shard.stats;
            Stats {
                allowed: total.allowed + s.allowed,
                denied: total.denied + s.denied,
                errors: total.errors + s.errors,
                replayed: total.replayed + s.replayed,
                live_keys: total.live_keys + shard.entries.len() as u64,
                evicted_lossless: total.evicted_lossless + s.evicted_lossless,
                evicted_lossy: total.evicted_lossy + s.evicted_lossy,
                evicted_owing: total.evicted_owing + s.evicted_owing,
                created_owing: total.created_owing + s.created_owing,
                rejected_keys: total.rejected_keys + s.rejected_keys,
                lock_contended: total.lock_contended + s.lock_contended,
                lock_wait_nanos: total.lock_wait_nanos.saturating_add(s.lock_wait_nanos),
            }
        })
    }

    /// The clock used by [`Limiter::acquire`].
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The bound on live keys as enforced: `max_keys` rounded up to a multiple of the shard count.
    pub fn key_bound(&self) -> usize {
        // Saturates: `max_keys` near `usize::MAX` rounds up past it.
        self.settings
            .max_keys_per_shard
            .saturating_mul(self.shards.len())
    }

    /// The bound on live keys of each shard: a new key whose shard holds this many keys, none of
    /// them evictable, is refused ([`AcquireError::KeyLimitReached`]).
    pub fn shard_key_bound(&self) -> usize {
        self.settings.max_keys_per_shard
    }

    /// The shard that holds `key`, below `key_bound() / shard_key_bound()`. The same on every run
    /// only with a fixed [`Builder::hasher_seed`].
    pub fn shard_of(&self, key: &K) -> usize {
        self.shard_index(self.hasher.hash_one(key))
    }

    #[inline]
    fn shard_index(&self, hash: u64) -> usize {
        // The table inside a shard takes a key's home from the hash's high bits (`table::FlatMap`);
        // pick the shard from a remix so that keys of one shard still spread over its whole table.
        let mixed = (hash ^ hash.rotate_left(32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        if self.shard_bits == 0 {
            0
        } else {
            (mixed >> (64 - self.shard_bits)) as usize
        }
    }

    #[inline]
    fn shard(&self, hash: u64) -> &Mutex<Shard<K>> {
        &self.shards[self.shard_index(hash)].0
    }
}
