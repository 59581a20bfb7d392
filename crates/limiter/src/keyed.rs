//! The keyed limiter: one exact bucket per key, in sharded maps, with a memory bound.
//!
//! What it owns: the map from keys to [`BucketState`]s, per-key config overrides, request-id records,
//! the key bound and its eviction policy, and the counters. What it promises:
//! - every decision is [`crate::transition`] on the key's state under the shard lock: read, refill,
//!   decide, write, in one critical section (checked by loom and shuttle in `tests/`);
//! - unrelated keys rarely share a lock: keys are spread over shards by a randomly seeded hasher, so
//!   an attacker cannot aim at one shard;
//! - memory is bounded: at most `max_keys` (rounded up to a multiple of the shard count) live keys;
//!   what happens at the bound is the explicit [`EvictionPolicy`];
//! - expiry is lossless: a bucket is dropped by the amortized sweep only when it is *evictable*
//!   (refilled to capacity, no override, no live request-id record), which a fresh bucket would be too;
//!   and a fresh bucket's cursor starts no earlier than the latest cursor the shard ever evicted, so a
//!   clock that runs backwards after an expiry cannot be credited the same interval twice;
//! - an error changes nothing; a replayed request id charges nothing.

use std::collections::VecDeque;
use std::hash::Hash;
use std::time::Duration;

use indexmap::IndexMap;
use indexmap::map::RawEntryApiV1;

use crate::bucket::{BucketState, Decision, snapshot, transition};
use crate::sync::{Mutex, lock};
use crate::{AcquireError, Clock, Config, MonotonicClock, Nanos, Tokens, Wait};

/// Identifies one logical request across retries (e.g. the low 128 bits of an idempotency key's hash,
/// or a UUID). Scoped to the key it was used with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u128);

impl From<u64> for RequestId {
    fn from(id: u64) -> Self {
        RequestId(id as u128)
    }
}

/// What happens when a new key arrives and its shard already holds its share of `max_keys`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum EvictionPolicy {
    /// Fail closed: the new key gets [`AcquireError::KeyLimitReached`]. Only the amortized lossless
    /// sweep frees room.
    RejectNewKeys,
    /// Look for an evictable (full) bucket among a few entries and drop it; otherwise reject.
    /// Never changes a decision.
    #[default]
    EvictFull,
    /// Drop an evictable bucket if one is found among a few entries, otherwise the sampled bucket with
    /// the oldest `last_refill`. Lossy: the victim comes back full (a burst). Counted in
    /// [`Stats::evicted_lossy`].
    EvictLeastRecent,
}

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

/// An acquire's decision plus what the limiter did to get it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acquired {
    /// The decision (for a replay: the first decision for that request id).
    pub decision: Decision,
    /// The bucket did not exist before this call (first sight, or expired and dropped).
    pub created: bool,
    /// The request id was known: nothing was charged, `decision` is the recorded one.
    pub replayed: bool,
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
    /// New keys refused at the key bound.
    pub rejected_keys: u64,
}

/// How many entries a new key may inspect to make room at the bound. Bounded, so an attacker filling
/// the table with non-full buckets cannot turn every request into a full scan.
const ROOM_SCAN: usize = 32;

/// Builder for [`Limiter`]; see [`Limiter::builder`].
pub struct Builder<K, C = MonotonicClock> {
    default_config: Config,
    clock: C,
    shards: usize,
    max_keys: usize,
    policy: EvictionPolicy,
    sweep_per_op: usize,
    dedupe_window: Nanos,
    dedupe_per_key: usize,
    resolver: Option<Resolver<K>>,
    hasher_seed: Option<u64>,
}

type Resolver<K> = Box<dyn Fn(&K) -> Config + Send + Sync>;

impl<K: Hash + Eq + Clone, C: Clock> Builder<K, C> {
    /// Use `clock` for the forms that do not take `now`.
    pub fn clock<C2: Clock>(self, clock: C2) -> Builder<K, C2> {
        Builder {
            default_config: self.default_config,
            clock,
            shards: self.shards,
            max_keys: self.max_keys,
            policy: self.policy,
            sweep_per_op: self.sweep_per_op,
            dedupe_window: self.dedupe_window,
            dedupe_per_key: self.dedupe_per_key,
            resolver: self.resolver,
            hasher_seed: self.hasher_seed,
        }
    }

    /// Number of shards (rounded up to a power of two, at least 1). Default: 4 x the CPU count.
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = shards.clamp(1, 1 << 16).next_power_of_two();
        self
    }

    /// Bound on live keys and what to do at it. Default: 1,048,576 keys, [`EvictionPolicy::EvictFull`].
    pub fn max_keys(mut self, max_keys: usize, policy: EvictionPolicy) -> Self {
        self.max_keys = max_keys.max(1);
        self.policy = policy;
        self
    }

    /// Entries the amortized sweep inspects per operation (0 disables it). Default 2.
    pub fn sweep_per_op(mut self, entries: usize) -> Self {
        self.sweep_per_op = entries;
        self
    }

    /// Request-id records: kept `window` long and at most `per_key` per key. Default 60 s, 8.
    pub fn dedupe(mut self, window: Duration, per_key: usize) -> Self {
        self.dedupe_window = u64::try_from(window.as_nanos()).unwrap_or(u64::MAX);
        self.dedupe_per_key = per_key;
        self
    }

    /// Per-key configs (tiers). Must be a pure function of the key: to change a key's config over
    /// time, use [`Limiter::reconfigure_at`], which converts the balance.
    pub fn resolver(mut self, resolver: impl Fn(&K) -> Config + Send + Sync + 'static) -> Self {
        self.resolver = Some(Box::new(resolver));
        self
    }

    /// Fixes the hasher's seed (reproducible shard placement in simulations). Default: random.
    pub fn hasher_seed(mut self, seed: u64) -> Self {
        self.hasher_seed = Some(seed);
        self
    }

    /// Builds the limiter.
    pub fn build(self) -> Limiter<K, C> {
        let hasher = match self.hasher_seed {
            Some(seed) => ahash::RandomState::with_seeds(
                seed,
                seed ^ 0x243F_6A88_85A3_08D3,
                seed.rotate_left(17),
                !seed,
            ),
            None => ahash::RandomState::new(),
        };
        let max_keys_per_shard = self.max_keys.div_ceil(self.shards);
        let shards = (0..self.shards)
            .map(|_| {
                Padded(Mutex::new(Shard {
                    entries: IndexMap::with_hasher(hasher.clone()),
                    evicted_horizon: 0,
                    sweep_cursor: 0,
                    stats: Stats::default(),
                }))
            })
            .collect();
        Limiter {
            shards,
            shard_bits: self.shards.trailing_zeros(),
            hasher,
            settings: Settings {
                default_config: self.default_config,
                resolver: self.resolver,
                max_keys: self.max_keys,
                max_keys_per_shard,
                policy: self.policy,
                sweep_per_op: self.sweep_per_op,
                dedupe_window: self.dedupe_window,
                dedupe_per_key: self.dedupe_per_key,
            },
            clock: self.clock,
        }
    }
}

/// A keyed, exact token-bucket limiter. See the crate docs for an example.
pub struct Limiter<K, C = MonotonicClock> {
    shards: Box<[Padded<Mutex<Shard<K>>>]>,
    shard_bits: u32,
    hasher: ahash::RandomState,
    settings: Settings<K>,
    clock: C,
}

/// Keeps each shard's lock on its own cache lines, so two cores working on two shards do not fight
/// over one line.
#[repr(align(128))]
struct Padded<T>(T);

struct Settings<K> {
    default_config: Config,
    resolver: Option<Resolver<K>>,
    max_keys: usize,
    max_keys_per_shard: usize,
    policy: EvictionPolicy,
    sweep_per_op: usize,
    dedupe_window: Nanos,
    dedupe_per_key: usize,
}

impl<K> Settings<K> {
    fn resolved_config(&self, key: &K) -> Config {
        match &self.resolver {
            Some(resolve) => resolve(key),
            None => self.default_config,
        }
    }

    fn config_of(&self, key: &K, entry: &Entry) -> Config {
        match entry.extra.as_ref().and_then(|extra| extra.config_override) {
            Some((config, _version)) => config,
            None => self.resolved_config(key),
        }
    }

    fn record_is_live(&self, recorded_at: Nanos, now: Nanos) -> bool {
        // A `now` before the record (a rollback) counts as inside the window.
        now.saturating_sub(recorded_at) < self.dedupe_window
    }
}

struct Shard<K> {
    entries: IndexMap<K, Entry, ahash::RandomState>,
    /// The latest `last_refill` of any bucket this shard dropped by eviction. A new bucket starts with
    /// its cursor at `max(now, evicted_horizon)`, so a key that was dropped and comes back under a
    /// clock that ran backwards is never credited the same time twice.
    evicted_horizon: Nanos,
    /// Where the amortized sweep resumes (an index into `entries`).
    sweep_cursor: usize,
    stats: Stats,
}

/// One key's state. The common case is just the bucket; overrides and request ids live behind one
/// pointer so they cost nothing for keys that do not use them.
struct Entry {
    bucket: PackedBucket,
    extra: Option<Box<Extra>>,
}

/// [`BucketState`] without `u128`'s 16-byte alignment: 24 bytes instead of 32 per key.
#[derive(Clone, Copy)]
struct PackedBucket {
    balance: [u64; 2],
    last_refill: Nanos,
}

impl PackedBucket {
    fn pack(state: BucketState) -> PackedBucket {
        PackedBucket {
            balance: [state.balance as u64, (state.balance >> 64) as u64],
            last_refill: state.last_refill,
        }
    }

    fn unpack(self) -> BucketState {
        BucketState {
            balance: self.balance[0] as u128 | (self.balance[1] as u128) << 64,
            last_refill: self.last_refill,
        }
    }
}

#[derive(Default)]
struct Extra {
    /// Set by `reconfigure`: the key's config and how many times it was changed.
    config_override: Option<(Config, u64)>,
    /// Request-id records, oldest first.
    requests: VecDeque<(RequestId, Nanos, Decision)>,
}

impl Entry {
    fn new(state: BucketState) -> Entry {
        Entry {
            bucket: PackedBucket::pack(state),
            extra: None,
        }
    }

    fn state(&self) -> BucketState {
        self.bucket.unpack()
    }

    fn set_state(&mut self, state: BucketState) {
        self.bucket = PackedBucket::pack(state);
    }

    fn extra_mut(&mut self) -> &mut Extra {
        self.extra.get_or_insert_with(Default::default)
    }

    fn replay(
        &self,
        request_id: RequestId,
        now: Nanos,
        settings: &Settings<impl Sized>,
    ) -> Option<Decision> {
        let extra = self.extra.as_ref()?;
        extra
            .requests
            .iter()
            .rev()
            .find(|(id, at, _)| *id == request_id && settings.record_is_live(*at, now))
            .map(|(_, _, decision)| *decision)
    }

    fn record(&mut self, request_id: RequestId, now: Nanos, decision: Decision, per_key: usize) {
        if per_key == 0 {
            return;
        }
        let requests = &mut self.extra_mut().requests;
        while requests.len() >= per_key {
            requests.pop_front();
        }
        requests.push_back((request_id, now, decision));
    }

    /// Evictable at `now`: dropping it changes no later decision at `now >= last_refill`.
    fn is_evictable<K>(&self, key: &K, now: Nanos, settings: &Settings<K>) -> bool {
        if let Some(extra) = &self.extra {
            let has_live_record = extra
                .requests
                .iter()
                .any(|(_, at, _)| settings.record_is_live(*at, now));
            if extra.config_override.is_some() || has_live_record {
                return false;
            }
        }
        let config = settings.config_of(key, self);
        self.state().refilled(&config, now).is_full(&config)
    }
}

impl<K: Hash + Eq + Clone> Limiter<K, MonotonicClock> {
    /// A limiter with `default_config` for every key and the default settings.
    pub fn new(default_config: Config) -> Limiter<K, MonotonicClock> {
        Self::builder(default_config).build()
    }

    /// A builder starting from the defaults (see each setter).
    pub fn builder(default_config: Config) -> Builder<K, MonotonicClock> {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        Builder {
            default_config,
            clock: MonotonicClock::new(),
            shards: (cpus * 4).next_power_of_two(),
            max_keys: 1 << 20,
            policy: EvictionPolicy::default(),
            sweep_per_op: 2,
            dedupe_window: 60_000_000_000,
            dedupe_per_key: 8,
            resolver: None,
            hasher_seed: None,
        }
    }
}

impl<K: Hash + Eq + Clone, C: Clock> Limiter<K, C> {
    /// Takes `cost` tokens for `key` at the clock's time.
    pub fn acquire(&self, key: &K, cost: u64) -> Result<Decision, AcquireError> {
        self.acquire_at(key, cost, self.clock.now())
    }

    /// Takes `cost` tokens for `key` at `now`.
    pub fn acquire_at(&self, key: &K, cost: u64, now: Nanos) -> Result<Decision, AcquireError> {
        Ok(self
            .acquire_with(key, Request::cost(cost).at(now))?
            .decision)
    }

    /// The full form: optional explicit time and request id, and a report of what happened.
    pub fn acquire_with(&self, key: &K, request: Request) -> Result<Acquired, AcquireError> {
        let now = request.now.unwrap_or_else(|| self.clock.now());
        let hash = self.hasher.hash_one(key);
        let mut shard = lock(self.shard(hash));
        let result = shard.acquire(
            hash,
            key,
            now,
            request.cost,
            request.request_id,
            &self.settings,
        );
        // Sweep only after a successful call: an error changes nothing, not even other keys.
        if result.is_ok() {
            shard.sweep_some(now, self.settings.sweep_per_op, &self.settings);
        }
        result
    }

    /// The key's balance at `now`, read-only: nothing is refilled, charged or created.
    pub fn peek_at(&self, key: &K, now: Nanos) -> Peek {
        let hash = self.hasher.hash_one(key);
        let shard = lock(self.shard(hash));
        let (config, state, present) = match shard.find(hash, key) {
            Some(index) => {
                let entry = &shard.entries[index];
                (self.settings.config_of(key, entry), entry.state(), true)
            }
            None => {
                let config = self.settings.resolved_config(key);
                (config, shard.fresh(&config, now), false)
            }
        };
        let view = snapshot(&config, state, now);
        Peek {
            remaining: view.remaining,
            reset_after: view.reset_after,
            present,
            config,
        }
    }

    /// Moves `key` to `config` at `now`: refill under the old config, round down to the new unit grid,
    /// clamp to the new capacity (design.md section 2). Returns the key's new config version (1 for the
    /// first change). The override stays until [`Limiter::forget`].
    pub fn reconfigure_at(&self, key: &K, config: Config, now: Nanos) -> Result<u64, AcquireError> {
        let hash = self.hasher.hash_one(key);
        let mut shard = lock(self.shard(hash));
        let index = match shard.find(hash, key) {
            Some(index) => index,
            None => {
                let old = self.settings.resolved_config(key);
                let fresh = shard.fresh(&old, now);
                shard.insert(hash, key, fresh, now, &self.settings)?
            }
        };
        let entry = &mut shard.entries[index];
        let old = self.settings.config_of(key, entry);
        entry.set_state(entry.state().reconfigured(&old, &config, now));
        let extra = entry.extra_mut();
        let version = extra.config_override.map_or(0, |(_, version)| version) + 1;
        extra.config_override = Some((config, version));
        Ok(version)
    }

    /// Drops everything about `key` (bucket, override, request ids). True if it had state.
    pub fn forget(&self, key: &K) -> bool {
        let hash = self.hasher.hash_one(key);
        let mut shard = lock(self.shard(hash));
        match shard.find(hash, key) {
            Some(index) => {
                shard.remove(index);
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
                let mut shard = lock(&shard.0);
                let len = shard.entries.len();
                shard.sweep_cursor = 0;
                shard.sweep_some(now, len, &self.settings)
            })
            .sum()
    }

    /// The key's stored state and config, if it holds any: for invariant checks and debugging.
    pub fn inspect(&self, key: &K) -> Option<(BucketState, Config)> {
        let hash = self.hasher.hash_one(key);
        let shard = lock(self.shard(hash));
        let entry = &shard.entries[shard.find(hash, key)?];
        Some((entry.state(), self.settings.config_of(key, entry)))
    }

    /// The config that applies to `key` now (override, resolver or default).
    pub fn config_for(&self, key: &K) -> Config {
        let hash = self.hasher.hash_one(key);
        let shard = lock(self.shard(hash));
        match shard.find(hash, key) {
            Some(index) => self.settings.config_of(key, &shard.entries[index]),
            None => self.settings.resolved_config(key),
        }
    }

    /// Live keys across all shards.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| lock(&shard.0).entries.len())
            .sum()
    }

    /// True if no key holds state.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Counters summed over shards.
    pub fn stats(&self) -> Stats {
        self.shards.iter().fold(Stats::default(), |total, shard| {
            let shard = lock(&shard.0);
            let s = shard.stats;
            Stats {
                allowed: total.allowed + s.allowed,
                denied: total.denied + s.denied,
                errors: total.errors + s.errors,
                replayed: total.replayed + s.replayed,
                live_keys: total.live_keys + shard.entries.len() as u64,
                evicted_lossless: total.evicted_lossless + s.evicted_lossless,
                evicted_lossy: total.evicted_lossy + s.evicted_lossy,
                rejected_keys: total.rejected_keys + s.rejected_keys,
            }
        })
    }

    /// The clock used by [`Limiter::acquire`].
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The bound on live keys as enforced: `max_keys` rounded up to a multiple of the shard count.
    pub fn key_bound(&self) -> usize {
        self.settings.max_keys_per_shard * self.shards.len()
    }

    fn shard(&self, hash: u64) -> &Mutex<Shard<K>> {
        // The map inside a shard uses the hash's low bits (slot) and top 7 bits (tag); pick the shard
        // from a remix so that keys of one shard still spread over its whole table.
        let mixed = (hash ^ hash.rotate_left(32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let index = if self.shard_bits == 0 {
            0
        } else {
            (mixed >> (64 - self.shard_bits)) as usize
        };
        &self.shards[index].0
    }

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
        let (config, state) = {
            let shard = lock(self.shard(hash));
            match shard.find(hash, key) {
                Some(index) => {
                    let entry = &shard.entries[index];
                    (self.settings.config_of(key, entry), entry.state())
                }
                None => {
                    let config = self.settings.resolved_config(key);
                    (config, shard.fresh(&config, now))
                }
            }
        };
        let (next, decision) = transition(&config, state, now, cost)?;
        let mut shard = lock(self.shard(hash));
        let index = match shard.find(hash, key) {
            Some(index) => index,
            None => shard.insert(hash, key, next, now, &self.settings)?,
        };
        shard.entries[index].set_state(next);
        Ok(decision)
    }
}

impl<K: Hash + Eq + Clone> Shard<K> {
    /// A bucket for a key this shard does not hold: full, with its cursor at `now` or at the eviction
    /// horizon if that is later (see `evicted_horizon`).
    fn fresh(&self, config: &Config, now: Nanos) -> BucketState {
        BucketState::full(config, now.max(self.evicted_horizon))
    }

    fn find(&self, hash: u64, key: &K) -> Option<usize> {
        self.entries
            .raw_entry_v1()
            .index_from_hash(hash, |candidate| candidate == key)
    }

    fn acquire(
        &mut self,
        hash: u64,
        key: &K,
        now: Nanos,
        cost: u64,
        request_id: Option<RequestId>,
        settings: &Settings<K>,
    ) -> Result<Acquired, AcquireError> {
        let found = self.find(hash, key);
        let (config, state) = match found {
            Some(index) => {
                let entry = &self.entries[index];
                (settings.config_of(key, entry), entry.state())
            }
            None => {
                let config = settings.resolved_config(key);
                (config, self.fresh(&config, now))
            }
        };
        // Validate the cost before consulting request ids or making room: an error changes nothing.
        if config.cost_units(cost).is_none() {
            self.stats.errors += 1;
            return Err(AcquireError::InvalidCost {
                cost,
                capacity: config.capacity(),
            });
        }
        if let (Some(index), Some(request_id)) = (found, request_id) {
            if let Some(decision) = self.entries[index].replay(request_id, now, settings) {
                self.stats.replayed += 1;
                return Ok(Acquired {
                    decision,
                    created: false,
                    replayed: true,
                });
            }
        }
        let (next, decision) = transition(&config, state, now, cost)?;
        let index = match found {
            Some(index) => index,
            None => match self.insert(hash, key, next, now, settings) {
                Ok(index) => index,
                Err(error) => {
                    self.stats.errors += 1;
                    return Err(error);
                }
            },
        };
        let entry = &mut self.entries[index];
        entry.set_state(next);
        if let Some(request_id) = request_id {
            entry.record(request_id, now, decision, settings.dedupe_per_key);
        }
        if decision.is_allowed() {
            self.stats.allowed += 1;
        } else {
            self.stats.denied += 1;
        }
        Ok(Acquired {
            decision,
            created: found.is_none(),
            replayed: false,
        })
    }

    /// Inserts a new key, making room first if the shard is at its bound. Returns the entry's index.
    fn insert(
        &mut self,
        hash: u64,
        key: &K,
        state: BucketState,
        now: Nanos,
        settings: &Settings<K>,
    ) -> Result<usize, AcquireError> {
        if self.entries.len() >= settings.max_keys_per_shard {
            self.make_room(now, settings)?;
        }
        let index = self.entries.len();
        match self
            .entries
            .raw_entry_mut_v1()
            .from_hash(hash, |k| k == key)
        {
            indexmap::map::raw_entry_v1::RawEntryMut::Vacant(vacant) => {
                vacant.insert_hashed_nocheck(hash, key.clone(), Entry::new(state));
            }
            indexmap::map::raw_entry_v1::RawEntryMut::Occupied(_) => {
                unreachable!("insert is only called for a key the shard does not hold")
            }
        }
        Ok(index)
    }

    fn make_room(&mut self, now: Nanos, settings: &Settings<K>) -> Result<(), AcquireError> {
        let reject = |shard: &mut Self| {
            shard.stats.rejected_keys += 1;
            Err(AcquireError::KeyLimitReached {
                max_keys: settings.max_keys,
                live_keys: shard.entries.len(),
            })
        };
        if settings.policy == EvictionPolicy::RejectNewKeys || self.entries.is_empty() {
            return reject(self);
        }
        let len = self.entries.len();
        let mut oldest: Option<(usize, Nanos)> = None;
        for step in 0..ROOM_SCAN.min(len) {
            let index = (self.sweep_cursor + step) % len;
            let (key, entry) = self.entries.get_index(index).expect("index below len");
            if entry.is_evictable(key, now, settings) {
                self.evict(index);
                self.stats.evicted_lossless += 1;
                return Ok(());
            }
            let pinned = entry
                .extra
                .as_ref()
                .is_some_and(|extra| extra.config_override.is_some());
            let last_refill = entry.bucket.last_refill;
            if !pinned && oldest.is_none_or(|(_, oldest_time)| last_refill < oldest_time) {
                oldest = Some((index, last_refill));
            }
        }
        self.sweep_cursor = (self.sweep_cursor + ROOM_SCAN) % len;
        match (settings.policy, oldest) {
            (EvictionPolicy::EvictLeastRecent, Some((index, _))) => {
                self.evict(index);
                self.stats.evicted_lossy += 1;
                Ok(())
            }
            _ => reject(self),
        }
    }

    /// Inspects up to `budget` entries from the cursor and drops the evictable ones. Returns how many.
    fn sweep_some(&mut self, now: Nanos, budget: usize, settings: &Settings<K>) -> usize {
        let mut dropped = 0;
        for _ in 0..budget {
            if self.entries.is_empty() {
                break;
            }
            if self.sweep_cursor >= self.entries.len() {
                self.sweep_cursor = 0;
            }
            let index = self.sweep_cursor;
            let (key, entry) = self.entries.get_index(index).expect("cursor below len");
            if entry.is_evictable(key, now, settings) {
                // swap_remove moves the last entry into `index`; the cursor stays to inspect it next.
                self.evict(index);
                self.stats.evicted_lossless += 1;
                dropped += 1;
            } else {
                self.sweep_cursor += 1;
            }
        }
        dropped
    }

    fn remove(&mut self, index: usize) {
        self.entries.swap_remove_index(index);
    }

    /// Drops an entry by eviction (not by `forget`): its cursor raises the horizon.
    fn evict(&mut self, index: usize) {
        if let Some((_, entry)) = self.entries.get_index(index) {
            self.evicted_horizon = self.evicted_horizon.max(entry.bucket.last_refill);
        }
        self.remove(index);
    }
}
