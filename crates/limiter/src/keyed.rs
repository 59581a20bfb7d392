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
//!
//! Storage (why it looks like this: reports/bench-limiter.md): each shard holds its keys in a
//! `table::FlatMap`: one open-addressing table of `(key, PackedBucket)` slots (24 bytes for a `u64`
//! key) kept 70-85% full, nothing else per key, one dependent random access per lookup. A packed
//! bucket holds the balance in 62 bits and the cursor; the rarely used per-key extras (override
//! config, request-id records, and the balance of a bucket whose config needs more than 62 bits) live
//! in a per-shard side map, and spare top bits of the packed balance say whether a key has one and
//! whether its balance is there, so the common path never touches it (a pattern of them no live
//! bucket has marks a vacant slot). The amortized sweep runs when a
//! shard inserts a new key (the only time its memory grows), not on every call: a call on a known key
//! does no work for other keys.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hash};
use std::ops::ControlFlow;
use std::time::Duration;

use crate::bucket::{BucketState, Decision, snapshot, transition};
use crate::hashing::KeyHasher;
use crate::sync::{Mutex, lock};
use crate::table::{FlatMap, Vacancy};
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

/// How many table slots (occupied or not) that scan may step over. A shard's table at its bound is
/// about 70-85% full (`table` grows by a fifth at 85%), so 4 slots per wanted entry find all 32.
const ROOM_SCAN_SLOTS: usize = 4 * ROOM_SCAN;

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

    /// Entries the amortized sweep inspects each time an acquire inserts a new key into a shard (the
    /// only time the shard's memory grows), stepping over at most 8 table slots per entry; 0 disables
    /// it. Default 2.
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

    /// Fixes the hasher's seed: shard placement and table order become the same on every run and every
    /// machine (a portable SipHash-1-3 instead of the random `ahash`), for simulations and verification
    /// reports. Default: random.
    pub fn hasher_seed(mut self, seed: u64) -> Self {
        self.hasher_seed = Some(seed);
        self
    }

    /// Builds the limiter.
    pub fn build(self) -> Limiter<K, C> {
        let hasher = self
            .hasher_seed
            .map_or_else(KeyHasher::random, KeyHasher::seeded);
        let max_keys_per_shard = self.max_keys.div_ceil(self.shards);
        let shards = (0..self.shards)
            .map(|_| {
                Padded(Mutex::new(Shard {
                    entries: FlatMap::with_hasher(hasher.clone()),
                    extras: HashMap::with_hasher(hasher.clone()),
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
    hasher: KeyHasher,
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

    fn record_is_live(&self, recorded_at: Nanos, now: Nanos) -> bool {
        // A `now` before the record (a rollback) counts as inside the window.
        now.saturating_sub(recorded_at) < self.dedupe_window
    }
}

struct Shard<K> {
    /// Key and bucket of every live key, nothing else.
    entries: FlatMap<K, PackedBucket, KeyHasher>,
    /// Override configs, request-id records and wide balances, for the keys whose bucket has
    /// `HAS_EXTRA` set (and only those: an entry here exists exactly when its key is live and flagged).
    extras: HashMap<K, Extra, KeyHasher>,
    /// The latest `last_refill` of any bucket this shard dropped by eviction. A new bucket starts with
    /// its cursor at `max(now, evicted_horizon)`, so a key that was dropped and comes back under a
    /// clock that ran backwards is never credited the same time twice.
    evicted_horizon: Nanos,
    /// Where the amortized sweep and the room scan resume (a slot position in `entries`).
    sweep_cursor: usize,
    stats: Stats,
}

/// A [`BucketState`] in 16 bytes instead of 32 (`u128` is 16-byte aligned), plus two flags.
///
/// The balance is kept here when it is below `2^62` (`NARROW_LIMIT`): every config with
/// `capacity_units < 2^62` (capacity x q x 10^9, e.g. a billion tokens at any rate with q = 1), so for
/// most configs always. A larger balance is *wide*: the `WIDE` flag is set and the exact `u128` sits in
/// the key's [`Extra::wide_balance`]. The two top bits carry the flags, so the arithmetic never sees
/// them: `HAS_EXTRA` ("this key has an entry in the shard's `extras`") and `WIDE` (which implies it).
/// Only [`Shard::state_of`] and [`Shard::store`] (with its cold half, `store_slow`) read or write the
/// balance, and they keep the two places consistent: a wide bucket's `Extra` always holds its
/// balance, and a narrow one's never does.
#[derive(Clone, Copy)]
struct PackedBucket {
    /// `HAS_EXTRA | WIDE | balance` (the low 62 bits are the balance when `WIDE` is clear, zero when set).
    flagged_balance: u64,
    last_refill: Nanos,
}

const HAS_EXTRA: u64 = 1 << 63;
const WIDE: u64 = 1 << 62;
/// Balances below this fit the packed bucket's 62 bits.
const NARROW_LIMIT: u128 = 1 << 62;

impl PackedBucket {
    #[inline]
    fn has_extra(self) -> bool {
        self.flagged_balance & HAS_EXTRA != 0
    }

    #[inline]
    fn is_wide(self) -> bool {
        self.flagged_balance & WIDE != 0
    }

    fn set_has_extra(&mut self) {
        self.flagged_balance |= HAS_EXTRA;
    }
}

/// `WIDE` without `HAS_EXTRA` is a pattern no live bucket has (a wide balance lives in the extras),
/// so it marks a vacant slot of the table.
impl Vacancy for PackedBucket {
    const VACANT: Self = PackedBucket {
        flagged_balance: WIDE,
        last_refill: 0,
    };

    #[inline(always)]
    fn is_vacant(&self) -> bool {
        self.flagged_balance == WIDE
    }
}

#[derive(Default)]
struct Extra {
    /// Set by `reconfigure`: the key's config and how many times it was changed.
    config_override: Option<(Config, u64)>,
    /// Request-id records, oldest first.
    requests: VecDeque<(RequestId, Nanos, Decision)>,
    /// The balance of a bucket flagged `WIDE` (at or above `NARROW_LIMIT`); `None` for a narrow one.
    wide_balance: Option<u128>,
}

impl Extra {
    fn replay<K>(
        &self,
        request_id: RequestId,
        now: Nanos,
        settings: &Settings<K>,
    ) -> Option<Decision> {
        self.requests
            .iter()
            .rev()
            .find(|(id, at, _)| *id == request_id && settings.record_is_live(*at, now))
            .map(|(_, _, decision)| *decision)
    }

    /// Keeps this key's bucket from being evicted at `now`.
    fn pins<K>(&self, now: Nanos, settings: &Settings<K>) -> bool {
        self.config_override.is_some()
            || self
                .requests
                .iter()
                .any(|(_, at, _)| settings.record_is_live(*at, now))
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
        // Inlined with `request_id: None`, so the request-id branches fold away on this path.
        Ok(self.acquire_inner(key, cost, now, None)?.decision)
    }

    /// The full form: optional explicit time and request id, and a report of what happened.
    pub fn acquire_with(&self, key: &K, request: Request) -> Result<Acquired, AcquireError> {
        let now = request.now.unwrap_or_else(|| self.clock.now());
        self.acquire_inner(key, request.cost, now, request.request_id)
    }

    #[inline(always)]
    fn acquire_inner(
        &self,
        key: &K,
        cost: u64,
        now: Nanos,
        request_id: Option<RequestId>,
    ) -> Result<Acquired, AcquireError> {
        let hash = self.hasher.hash_one(key);
        let mut shard = lock(self.shard(hash));
        let result = shard.acquire(hash, key, now, cost, request_id, &self.settings);
        // Sweep only when this call inserted a key: memory grows only then, so sweeping at every
        // insertion bounds what expired keys can pile up, and calls on known keys pay nothing. Never
        // after an error: an error changes nothing, not even other keys.
        if let Ok(Acquired { created: true, .. }) = result {
            let budget = self.settings.sweep_per_op;
            shard.sweep_some(now, budget, budget.saturating_mul(8), &self.settings);
        }
        result
    }

    /// The key's balance at `now`, read-only: nothing is refilled, charged or created.
    pub fn peek_at(&self, key: &K, now: Nanos) -> Peek {
        let hash = self.hasher.hash_one(key);
        let shard = lock(self.shard(hash));
        let (config, state, present) = match shard.find(hash, key) {
            Some((bucket, _)) => (
                shard.config_of(key, bucket, &self.settings),
                shard.state_of(key, bucket),
                true,
            ),
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
        let (old, state, pos) = match shard.find(hash, key) {
            Some((bucket, pos)) => (
                shard.config_of(key, bucket, &self.settings),
                shard.state_of(key, bucket),
                pos,
            ),
            None => {
                let old = self.settings.resolved_config(key);
                let fresh = shard.fresh(&old, now);
                let pos = shard.insert(hash, key, fresh, now, &self.settings)?;
                (old, fresh, pos)
            }
        };
        let next = state.reconfigured(&old, &config, now);
        let extra = shard.extra_mut(key, pos);
        let version = extra.config_override.map_or(0, |(_, version)| version) + 1;
        extra.config_override = Some((config, version));
        shard.store(pos, key, next);
        Ok(version)
    }

    /// Drops everything about `key` (bucket, override, request ids). True if it had state.
    pub fn forget(&self, key: &K) -> bool {
        let hash = self.hasher.hash_one(key);
        let mut shard = lock(self.shard(hash));
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
                let mut shard = lock(&shard.0);
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
        let shard = lock(self.shard(hash));
        let (bucket, _) = shard.find(hash, key)?;
        Some((
            shard.state_of(key, bucket),
            shard.config_of(key, bucket, &self.settings),
        ))
    }

    /// The config that applies to `key` now (override, resolver or default).
    pub fn config_for(&self, key: &K) -> Config {
        let hash = self.hasher.hash_one(key);
        let shard = lock(self.shard(hash));
        match shard.find(hash, key) {
            Some((bucket, _)) => shard.config_of(key, bucket, &self.settings),
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
                Some((bucket, _)) => (
                    shard.config_of(key, bucket, &self.settings),
                    shard.state_of(key, bucket),
                ),
                None => {
                    let config = self.settings.resolved_config(key);
                    (config, shard.fresh(&config, now))
                }
            }
        };
        let (next, decision) = transition(&config, state, now, cost)?;
        let mut shard = lock(self.shard(hash));
        let pos = match shard.find(hash, key) {
            Some((_, pos)) => pos,
            None => shard.insert(hash, key, next, now, &self.settings)?,
        };
        shard.store(pos, key, next);
        Ok(decision)
    }
}

impl<K: Hash + Eq + Clone> Shard<K> {
    /// A bucket for a key this shard does not hold: full, with its cursor at `now` or at the eviction
    /// horizon if that is later (see `evicted_horizon`).
    fn fresh(&self, config: &Config, now: Nanos) -> BucketState {
        BucketState::full(config, now.max(self.evicted_horizon))
    }

    /// The key's bucket (a copy) and position.
    #[inline]
    fn find(&self, hash: u64, key: &K) -> Option<(PackedBucket, usize)> {
        let pos = self.entries.find(hash, key)?;
        let (_, bucket) = self.entries.get(pos)?;
        Some((*bucket, pos))
    }

    /// The config of a live key: its override if it has one, else the resolver's or the default.
    #[inline]
    fn config_of(&self, key: &K, bucket: PackedBucket, settings: &Settings<K>) -> Config {
        if bucket.has_extra()
            && let Some((config, _)) = self.extra(key).and_then(|extra| extra.config_override)
        {
            return config;
        }
        settings.resolved_config(key)
    }

    fn extra(&self, key: &K) -> Option<&Extra> {
        self.extras.get(key)
    }

    /// The extras of the live key at `pos`, created (and flagged) on first use.
    fn extra_mut(&mut self, key: &K, pos: usize) -> &mut Extra {
        if let Some((_, bucket)) = self.entries.get_mut(pos) {
            bucket.set_has_extra();
        }
        self.extras.entry(key.clone()).or_default()
    }

    /// The state of the live `key`, whose packed bucket is `bucket`: the balance from the bucket, or
    /// from the key's extras when it is wide.
    #[inline]
    fn state_of(&self, key: &K, bucket: PackedBucket) -> BucketState {
        let balance = if bucket.is_wide() {
            // `store` writes the wide balance before it sets the flag, and only `remove` (which drops
            // the bucket too) deletes extras: a flagged bucket without one is a broken invariant.
            self.extra(key)
                .and_then(|extra| extra.wide_balance)
                .expect("a wide bucket's balance is in its extras")
        } else {
            (bucket.flagged_balance & !(HAS_EXTRA | WIDE)) as u128
        };
        BucketState {
            balance,
            last_refill: bucket.last_refill,
        }
    }

    /// Replaces the state of the live key at `pos`, keeping its `HAS_EXTRA` flag: in the bucket when
    /// the balance fits 62 bits (a wide balance it had is cleared from its extras), else in its extras
    /// with the bucket flagged `WIDE`. The narrow case is inline (it is every decision's write); the
    /// rest is out of line.
    #[inline(always)]
    fn store(&mut self, pos: usize, key: &K, state: BucketState) {
        if let Some((_, bucket)) = self.entries.get_mut(pos)
            && !bucket.is_wide()
            && state.balance < NARROW_LIMIT
        {
            bucket.flagged_balance = (bucket.flagged_balance & HAS_EXTRA) | state.balance as u64;
            bucket.last_refill = state.last_refill;
        } else {
            self.store_slow(pos, key, state);
        }
    }

    #[cold]
    #[inline(never)]
    fn store_slow(&mut self, pos: usize, key: &K, state: BucketState) {
        let Some((_, bucket)) = self.entries.get_mut(pos) else {
            return;
        };
        bucket.last_refill = state.last_refill;
        if state.balance < NARROW_LIMIT {
            // It was wide: the balance moves back into the bucket, and out of the extras, which go
            // too when nothing else is in them (so the key's later calls skip the side map).
            bucket.flagged_balance = (bucket.flagged_balance & HAS_EXTRA) | state.balance as u64;
            if let Some(extra) = self.extras.get_mut(key) {
                extra.wide_balance = None;
                if extra.config_override.is_none() && extra.requests.is_empty() {
                    self.extras.remove(key);
                    bucket.flagged_balance &= !HAS_EXTRA;
                }
            }
        } else {
            self.extra_mut(key, pos).wide_balance = Some(state.balance);
            if let Some((_, bucket)) = self.entries.get_mut(pos) {
                bucket.flagged_balance = HAS_EXTRA | WIDE;
            }
        }
    }

    /// `inline(always)`: with two callers (`acquire_at`, `acquire_with`) the compiler kept it out of
    /// line in the benchmark binary; inlining it (with `KeyHasher::hash_one`) more than halved the
    /// 1,000,000-key time per decision (reports/bench-limiter.md).
    #[inline(always)]
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
            Some((bucket, _)) => (
                self.config_of(key, bucket, settings),
                self.state_of(key, bucket),
            ),
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
        if let (Some((bucket, _)), Some(request_id)) = (found, request_id) {
            let replayed = if bucket.has_extra() {
                self.extra(key)
                    .and_then(|extra| extra.replay(request_id, now, settings))
            } else {
                None
            };
            if let Some(decision) = replayed {
                self.stats.replayed += 1;
                return Ok(Acquired {
                    decision,
                    created: false,
                    replayed: true,
                });
            }
        }
        let (next, decision) = transition(&config, state, now, cost)?;
        let pos = match found {
            Some((_, pos)) => pos,
            None => match self.insert(hash, key, next, now, settings) {
                Ok(pos) => pos,
                Err(error) => {
                    self.stats.errors += 1;
                    return Err(error);
                }
            },
        };
        self.store(pos, key, next);
        if let Some(request_id) = request_id {
            let per_key = settings.dedupe_per_key;
            if per_key > 0 {
                let requests = &mut self.extra_mut(key, pos).requests;
                // A new record of an id replaces its older (dead) one: a dead record must not hold a
                // slot that could push out another id's live record (docs/semantics.md, step 6).
                requests.retain(|(id, _, _)| *id != request_id);
                while requests.len() >= per_key {
                    requests.pop_front();
                }
                requests.push_back((request_id, now, decision));
            }
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

    /// Inserts a new key, making room first if the shard is at its bound. Returns the entry's position.
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
        let empty = PackedBucket {
            flagged_balance: 0,
            last_refill: state.last_refill,
        };
        let pos = self.entries.insert_new(hash, key.clone(), empty);
        self.store(pos, key, state);
        Ok(pos)
    }

    /// Evictable at `now`: dropping it changes no later decision at `now >= last_refill`.
    fn is_evictable(
        &self,
        key: &K,
        bucket: PackedBucket,
        now: Nanos,
        settings: &Settings<K>,
    ) -> bool {
        if bucket.has_extra()
            && self
                .extra(key)
                .is_some_and(|extra| extra.pins(now, settings))
        {
            return false;
        }
        let config = self.config_of(key, bucket, settings);
        self.state_of(key, bucket)
            .refilled(&config, now)
            .is_full(&config)
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
        let mut oldest: Option<(usize, Nanos)> = None;
        let mut made_room = false;
        // At most ROOM_SCAN entries over at most ROOM_SCAN_SLOTS slots: bounded whatever the table holds.
        self.walk_from_cursor(ROOM_SCAN, ROOM_SCAN_SLOTS, |shard, here| {
            let Some((key, bucket)) = shard.entries.get(here) else {
                return ControlFlow::Continue(());
            };
            let bucket = *bucket;
            if shard.is_evictable(key, bucket, now, settings) {
                shard.evict(here);
                shard.stats.evicted_lossless += 1;
                made_room = true;
                return ControlFlow::Break(());
            }
            let pinned = bucket.has_extra()
                && shard
                    .extra(key)
                    .is_some_and(|extra| extra.config_override.is_some());
            let last_refill = bucket.last_refill;
            if !pinned && oldest.is_none_or(|(_, oldest_time)| last_refill < oldest_time) {
                oldest = Some((here, last_refill));
            }
            ControlFlow::Continue(())
        });
        if made_room {
            return Ok(());
        }
        match (settings.policy, oldest) {
            (EvictionPolicy::EvictLeastRecent, Some((victim, _))) => {
                self.evict(victim);
                self.stats.evicted_lossy += 1;
                Ok(())
            }
            _ => reject(self),
        }
    }

    /// Inspects up to `budget` entries from the cursor, stepping over at most `max_slots` slots (and
    /// at most the whole table), and drops the evictable ones. Returns how many.
    fn sweep_some(
        &mut self,
        now: Nanos,
        budget: usize,
        max_slots: usize,
        settings: &Settings<K>,
    ) -> usize {
        let mut dropped = 0;
        self.walk_from_cursor(budget, max_slots, |shard, here| {
            if let Some((key, bucket)) = shard.entries.get(here)
                && shard.is_evictable(key, *bucket, now, settings)
            {
                shard.evict(here);
                shard.stats.evicted_lossless += 1;
                dropped += 1;
            }
            ControlFlow::Continue(())
        });
        dropped
    }

    /// The one bounded walk the amortized sweep and the room scan share: visits up to `budget`
    /// occupied slots from the sweep cursor, stepping over at most `max_slots` slots (and at most the
    /// whole table), and leaves the cursor after the last slot stepped over. `visit` may evict the slot
    /// it is given; `Break` ends the walk there. A removal can move a later entry of the same probe run
    /// into the removed slot (`table`), so after one the walk looks at that slot again: a walk over
    /// every slot visits every entry.
    fn walk_from_cursor(
        &mut self,
        budget: usize,
        max_slots: usize,
        mut visit: impl FnMut(&mut Self, usize) -> ControlFlow<()>,
    ) {
        let slots = self.entries.slots();
        if slots == 0 || budget == 0 {
            return;
        }
        let mut inspected = 0;
        let mut stepped = 0;
        let mut pos = self.sweep_cursor % slots;
        while stepped < max_slots.min(slots) && inspected < budget {
            if self.entries.get(pos).is_none() {
                pos = (pos + 1) % slots;
                stepped += 1;
                continue;
            }
            inspected += 1;
            let live_before = self.entries.len();
            if visit(self, pos).is_break() {
                // Stepping over this slot leaves a moved-in entry for the next walk, like any other.
                pos = (pos + 1) % slots;
                break;
            }
            let refilled = self.entries.len() < live_before && self.entries.get(pos).is_some();
            if !refilled {
                pos = (pos + 1) % slots;
                stepped += 1;
            }
        }
        self.sweep_cursor = pos;
    }

    /// Drops the entry at `pos` and its extras.
    fn remove(&mut self, pos: usize) {
        if let Some((key, bucket)) = self.entries.remove(pos)
            && bucket.has_extra()
        {
            self.extras.remove(&key);
        }
    }

    /// Drops an entry by eviction (not by `forget`): its cursor raises the horizon.
    fn evict(&mut self, pos: usize) {
        if let Some((_, bucket)) = self.entries.get(pos) {
            self.evicted_horizon = self.evicted_horizon.max(bucket.last_refill);
        }
        self.remove(pos);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Rate;

    /// The side-map entry of `key` and its bucket's two flags: what a test of the packing can see.
    fn packing(limiter: &Limiter<u64>, key: u64) -> (bool, bool, Option<u128>) {
        let hash = limiter.hasher.hash_one(key);
        let shard = lock(limiter.shard(hash));
        let (bucket, _) = shard.find(hash, &key).expect("the key is live");
        let wide_balance = shard.extra(&key).and_then(|extra| extra.wide_balance);
        (bucket.has_extra(), bucket.is_wide(), wide_balance)
    }

    /// The shard a key goes to and its home slot inside that shard's table are independent: the
    /// keys of each shard spread over its whole table, so a lookup reads no more slots than linear
    /// probing predicts at that load, `(1 + 1 / (1 - load)) / 2` (Knuth), with both hashers.
    #[test]
    fn keys_spread_over_each_shard_table_as_linear_probing_predicts() {
        let config = Config::new(4, Rate::per_second(1)).unwrap();
        for seed in [None, Some(3)] {
            let mut builder = Limiter::builder(config).shards(8);
            if let Some(seed) = seed {
                builder = builder.hasher_seed(seed);
            }
            let limiter: Limiter<u64> = builder.build();
            for key in 0..400_000u64 {
                limiter.acquire_at(&key, 1, 0).unwrap();
            }
            for shard in limiter.shards.iter() {
                let shard = lock(&shard.0);
                let load = shard.entries.load();
                let predicted = (1.0 + 1.0 / (1.0 - load)) / 2.0;
                let measured = shard.entries.mean_probe_length();
                assert!(
                    measured <= 1.2 * predicted,
                    "seed {seed:?}: {measured:.2} slots per lookup at load {load:.3}, \
                     predicted {predicted:.2}"
                );
            }
        }
    }

    /// A full sweep drops every evictable bucket even when it must look at one entry twice: here a
    /// probe run wraps from the table's last slots to slot 0, the sweep (which starts at slot 0)
    /// keeps the wrapped entry there, then evicts a bucket near the end, which moves that entry back
    /// into the freed slot, where the walk looks at it again. The last slot holds an evictable
    /// bucket; a sweep that allowed only one visit per live entry would stop before it.
    #[test]
    fn a_full_sweep_reaches_the_last_slot_after_looking_at_a_wrapped_entry_twice() {
        const SECOND: Nanos = 1_000_000_000;
        let config = Config::new(2, Rate::per_second(1)).unwrap();
        let limiter: Limiter<u64> = Limiter::builder(config)
            .shards(1)
            .sweep_per_op(0)
            .hasher_seed(5)
            .build();
        let pinned = |key: u64| {
            limiter.acquire_at(&key, 1, SECOND).unwrap();
            limiter.reconfigure_at(&key, config, SECOND).unwrap();
        };
        for filler in 0..40 {
            pinned(filler);
        }
        let slots = lock(&limiter.shards[0].0).entries.slots();
        let home = |key: u64| {
            FlatMap::<u64, PackedBucket, KeyHasher>::home(limiter.hasher.hash_one(key), slots)
        };
        let position = |key: u64| {
            let shard = lock(&limiter.shards[0].0);
            shard
                .find(limiter.hasher.hash_one(key), &key)
                .map(|(_, pos)| pos)
        };
        // Clear the wrap region (the last three slots and slot 0) of fillers.
        let region = [slots - 3, slots - 2, slots - 1, 0];
        while let Some(filler) =
            (0..40).find(|&key| position(key).is_some_and(|p| region.contains(&p)))
        {
            assert!(limiter.forget(&filler));
        }
        let fillers = limiter.len();
        let with_home = |wanted: usize, skip: usize| {
            (1_000..)
                .filter(|&key| home(key) == wanted)
                .nth(skip)
                .unwrap()
        };
        let (evicted_early, kept, evicted_last) = (
            with_home(slots - 3, 0),
            with_home(slots - 2, 0),
            with_home(slots - 1, 0),
        );
        let wrapped = with_home(slots - 3, 1);
        limiter.acquire_at(&evicted_early, 1, SECOND).unwrap();
        pinned(kept);
        limiter.acquire_at(&evicted_last, 1, SECOND).unwrap();
        pinned(wrapped);
        assert_eq!(
            lock(&limiter.shards[0].0).entries.slots(),
            slots,
            "the four keys grew the table: the homes above are stale"
        );
        assert_eq!(
            [evicted_early, kept, evicted_last, wrapped].map(position),
            [Some(slots - 3), Some(slots - 2), Some(slots - 1), Some(0)]
        );
        assert_eq!(limiter.sweep_at(10 * SECOND), 2);
        assert_eq!(
            [evicted_early, kept, evicted_last, wrapped].map(position),
            [None, Some(slots - 2), None, Some(slots - 3)]
        );
        assert_eq!(limiter.len(), fillers + 2);
    }

    /// A balance that leaves the wide range (`>= 2^62` units) moves back into its bucket, and the
    /// key's side-map entry goes with it when nothing else is in it; an override keeps the entry.
    #[test]
    fn a_balance_back_below_2_62_units_moves_into_its_bucket_and_frees_an_empty_side_entry() {
        // 5e9 tokens x 10^9 units per token = 5e18 units >= 2^62 (about 4.61e18) when full.
        let wide = Config::new(5_000_000_000, Rate::per_second(1)).unwrap();
        let limiter: Limiter<u64> = Limiter::builder(wide).hasher_seed(1).build();
        limiter.acquire_at(&1, 1, 0).unwrap();
        assert_eq!(
            packing(&limiter, 1),
            (true, true, Some(wide.capacity_units() - 1_000_000_000))
        );
        // One billion tokens more: 3.99e18 units, narrow again.
        limiter.acquire_at(&1, 1_000_000_000, 0).unwrap();
        assert_eq!(packing(&limiter, 1), (false, false, None));
        let (state, _) = limiter.inspect(&1).unwrap();
        assert_eq!(
            state.balance,
            wide.capacity_units() - 1_000_000_001 * 1_000_000_000
        );

        // With an override the entry stays (it holds the override), only the wide balance leaves.
        limiter.reconfigure_at(&2, wide, 0).unwrap();
        limiter.acquire_at(&2, 1, 0).unwrap();
        assert!(packing(&limiter, 2).1, "the overridden key is wide first");
        limiter.acquire_at(&2, 1_000_000_000, 0).unwrap();
        assert_eq!(packing(&limiter, 2), (true, false, None));
    }
}
