//! Building a keyed limiter: the defaults, every setting, and what a built limiter keeps of them.
//!
//! What it owns: [`Builder`], [`Limiter::new`] and [`Limiter::builder`] (which start from
//! [`crate::defaults`]), and the `Settings` the built limiter reads on every call. What it
//! promises: every setting is normalized here (shards a power of two in `1..=2^16`, `max_keys >= 1`,
//! windows saturating at `u64::MAX` ns), so the rest of the limiter never re-checks one.

use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use super::deficits;
use super::eviction::EvictionPolicy;
use super::shard::Shard;
use super::{Limiter, Padded};
use crate::hashing::KeyHasher;
use crate::sync::Mutex;
use crate::{Bandwidths, Clock, Config, MonotonicClock, Nanos, defaults};

/// Builder for [`Limiter`]; see [`Limiter::builder`].
pub struct Builder<K, C = MonotonicClock> {
    default_config: Bandwidths,
    clock: C,
    shards: usize,
    max_keys: usize,
    policy: EvictionPolicy,
    sweep_per_op: usize,
    dedupe_window: Nanos,
    dedupe_per_key: usize,
    resolver: Option<Resolver<K>>,
    hasher_seed: Option<u64>,
    deficit_slots_per_key: usize,
}

pub(super) type Resolver<K> = Box<dyn Fn(&K) -> Config + Send + Sync>;

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
            deficit_slots_per_key: self.deficit_slots_per_key,
        }
    }

    /// Number of shards (rounded up to a power of two, at least 1). Default: 4 x the CPU count.
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = shards.clamp(1, 1 << 16).next_power_of_two();
        self
    }

    /// Bound on live keys and what to do at it. Default: [`defaults::MAX_KEYS`]
    /// keys, [`EvictionPolicy::EvictFull`].
    pub fn max_keys(mut self, max_keys: usize, policy: EvictionPolicy) -> Self {
        self.max_keys = max_keys.max(1);
        self.policy = policy;
        self
    }

    /// Entries the amortized sweep keeps (inspects and finds not evictable) each time an acquire
    /// inserts a new key into a shard (the only time the shard's memory grows), stepping over at
    /// most 8 table slots per such entry; the evictable entries it meets on the way, which it drops,
    /// do not count. 0 disables it. Default: [`defaults::SWEEP_PER_OP`].
    pub fn sweep_per_op(mut self, entries: usize) -> Self {
        self.sweep_per_op = entries;
        self
    }

    /// Request-id records: kept `window` long and at most `per_key` per key. Default:
    /// [`defaults::DEDUPE_WINDOW`], [`defaults::DEDUPE_PER_KEY`].
    pub fn dedupe(mut self, window: Duration, per_key: usize) -> Self {
        self.dedupe_window = u64::try_from(window.as_nanos()).unwrap_or(u64::MAX);
        self.dedupe_per_key = per_key;
        self
    }

    /// Under [`EvictionPolicy::EvictKeepingDeficit`], the size of the array that keeps what dropped
    /// buckets owe: `slots` (at least 1) slots of 12 bytes per key of the bound, fixed when the
    /// limiter is built. More slots make it rarer that a flood's debts are charged to a key that was
    /// never dropped owing; none ever lets a key be admitted beyond its budget (`reports/flood.md`
    /// measures the trade). Default: [`DEFICIT_SLOTS_PER_KEY`](crate::DEFICIT_SLOTS_PER_KEY).
    pub fn deficit_slots_per_key(mut self, slots: usize) -> Self {
        self.deficit_slots_per_key = slots.max(1);
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
                let mut shard = Shard::new(&hasher);
                if self.policy == EvictionPolicy::EvictKeepingDeficit {
                    shard.keep_deficits(max_keys_per_shard, self.deficit_slots_per_key);
                }
                Padded(Mutex::new(shard))
            })
            .collect();
        Limiter {
            shards,
            shard_bits: self.shards.trailing_zeros(),
            hasher,
            settings: Settings {
                default_config: *self.default_config.first(),
                default_set: self
                    .default_config
                    .single()
                    .is_none()
                    .then(|| Arc::new(self.default_config)),
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

/// What a built limiter keeps of its builder.
pub(super) struct Settings<K> {
    /// The default set's first bandwidth: the whole default when the set is one unnamed bandwidth.
    pub(super) default_config: Config,
    /// The default set when it is not one unnamed bandwidth (then every new key is a set key).
    pub(super) default_set: Option<Arc<Bandwidths>>,
    pub(super) resolver: Option<Resolver<K>>,
    pub(super) max_keys: usize,
    pub(super) max_keys_per_shard: usize,
    pub(super) policy: EvictionPolicy,
    pub(super) sweep_per_op: usize,
    pub(super) dedupe_window: Nanos,
    pub(super) dedupe_per_key: usize,
}

impl<K> Settings<K> {
    pub(super) fn resolved_config(&self, key: &K) -> Config {
        match &self.resolver {
            Some(resolve) => resolve(key),
            None => self.default_config,
        }
    }

    /// The set a new key gets, when it is not one unnamed bandwidth: the default set, unless a
    /// resolver (which answers one config) decides.
    #[inline]
    pub(super) fn resolved_set(&self, _key: &K) -> Option<&Arc<Bandwidths>> {
        match &self.resolver {
            Some(_) => None,
            None => self.default_set.as_ref(),
        }
    }
}

impl<K: Hash + Eq + Clone> Limiter<K, MonotonicClock> {
    /// A limiter with `default_config` (a [`Config`], or a [`Bandwidths`] set) for every key and the
    /// default settings.
    pub fn new(default_config: impl Into<Bandwidths>) -> Limiter<K, MonotonicClock> {
        Self::builder(default_config).build()
    }

    /// A builder starting from the defaults (see each setter).
    pub fn builder(default_config: impl Into<Bandwidths>) -> Builder<K, MonotonicClock> {
        let default_config = default_config.into();
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        Builder {
            default_config,
            clock: MonotonicClock::new(),
            shards: defaults::shards_for(cpus),
            max_keys: defaults::MAX_KEYS,
            policy: EvictionPolicy::default(),
            sweep_per_op: defaults::SWEEP_PER_OP,
            dedupe_window: defaults::DEDUPE_WINDOW,
            dedupe_per_key: defaults::DEDUPE_PER_KEY,
            resolver: None,
            hasher_seed: None,
            deficit_slots_per_key: deficits::SLOTS_PER_KEY,
        }
    }
}
