//! A shard: the keys of one lock, their packed buckets, and the side map of their rare extras.
//!
//! What it owns: one `table::FlatMap` of `(key, PackedBucket)` slots, the side map of [`Extra`]s
//! (override configs, request-id records, wide balances), the eviction horizon, the sweep cursor and
//! the shard's counters. What it promises:
//! - `Shard::state_of` and `Shard::store` are the only readers and writers of a balance, and keep it
//!   in exactly one place: the packed bucket below `2^62` units, else the key's extra (flag `WIDE`);
//! - an entry in the side map exists exactly when its key is live and its bucket flags `HAS_EXTRA`;
//! - `Shard::acquire` is the one decision of the keyed limiter: read, refill, decide, write, under
//!   the caller's lock, and an invalid cost changes nothing (not even request ids or room-making).
//!
//! Storage (why it looks like this: reports/bench-limiter.md): each shard holds its keys in one
//! open-addressing table of `(key, PackedBucket)` slots (24 bytes for a `u64` key) kept 70-85% full,
//! nothing else per key, one dependent random access per lookup. A packed bucket holds the balance in
//! 62 bits and the cursor; the rarely used per-key extras live in the side map, and spare top bits of
//! the packed balance say whether a key has one and whether its balance is there, so the common path
//! never touches it (a pattern of them no live bucket has marks a vacant slot).

use std::collections::HashMap;
use std::hash::Hash;

use super::deficits::{self, Deficits};
use super::records::{Recorded, Records, RequestId};
use super::set::KeySet;
use super::{Acquired, Settings, Stats};
use crate::bucket::{Attempt, BucketState, transition};
use crate::hashing::KeyHasher;
use crate::table::{FlatMap, Vacancy};
use crate::{AcquireError, Config, Nanos};

pub(super) struct Shard<K> {
    /// Key and bucket of every live key, nothing else.
    pub(super) entries: FlatMap<K, PackedBucket, KeyHasher>,
    /// Override configs, request-id records and wide balances, for the keys whose bucket has
    /// `HAS_EXTRA` set (and only those: an entry here exists exactly when its key is live and flagged).
    pub(super) extras: HashMap<K, Extra, KeyHasher>,
    /// The latest time at which this shard judged a bucket it dropped by eviction: `max(s,
    /// last_refill)` for a drop at `s` (not the dropped bucket's stored cursor, which can be earlier).
    /// A new bucket starts with its cursor at `max(now, evicted_horizon)`, so a key that was dropped
    /// and comes back under a clock that ran backwards continues from where it was judged full with
    /// no live record: never credited the same time twice, and no dead record alive again.
    pub(super) evicted_horizon: Nanos,
    /// Where the amortized sweep and the room scan resume (a slot position in `entries`).
    pub(super) sweep_cursor: usize,
    /// What buckets dropped while not full still owe, under `EvictionPolicy::EvictKeepingDeficit`
    /// only (`None` under every other policy, so a fresh bucket is full there).
    pub(super) deficits: Option<Deficits>,
    pub(super) stats: Stats,
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
pub(super) struct PackedBucket {
    /// `HAS_EXTRA | WIDE | balance` (the low 62 bits are the balance when `WIDE` is clear, zero when set).
    pub(super) flagged_balance: u64,
    pub(super) last_refill: Nanos,
}

// The sizes promised above and in `table`: 16 bytes per bucket, 24 per slot with a `u64` key.
const _: () = assert!(size_of::<PackedBucket>() == 16);
const _: () = assert!(crate::table::slot_size::<u64, PackedBucket>() == 24);

pub(super) const HAS_EXTRA: u64 = 1 << 63;
pub(super) const WIDE: u64 = 1 << 62;
/// Balances below this fit the packed bucket's 62 bits.
pub(super) const NARROW_LIMIT: u128 = 1 << 62;

impl PackedBucket {
    #[inline]
    pub(super) fn has_extra(self) -> bool {
        self.flagged_balance & HAS_EXTRA != 0
    }

    #[inline]
    pub(super) fn is_wide(self) -> bool {
        self.flagged_balance & WIDE != 0
    }

    pub(super) fn set_has_extra(&mut self) {
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
pub(super) struct Extra {
    /// Set by `reconfigure`: the key's config and how many times it was changed.
    pub(super) config_override: Option<(Config, u64)>,
    /// Request-id records, oldest first.
    pub(super) requests: Records,
    /// The balance of a bucket flagged `WIDE` (at or above `NARROW_LIMIT`); `None` for a narrow one.
    pub(super) wide_balance: Option<u128>,
    /// A key decided by a bandwidth set other than one unnamed bandwidth: the set and the balances of
    /// every bandwidth after the first (whose balance is the packed bucket's, see `set`).
    pub(super) set: Option<KeySet>,
}

impl Extra {
    /// Keeps this key's bucket from being evicted when judged at the key's effective time `at`: an
    /// override, or a request-id record live at `at`.
    pub(super) fn pins(&self, at: Nanos, window: Nanos) -> bool {
        self.config_override.is_some() || self.requests.any_live(at, window)
    }
}

impl<K> Shard<K> {
    /// Counts one contended acquisition of this shard's lock that waited `nanos` (called with the
    /// lock held, so plain fields suffice). Only the contended path calls it.
    pub(super) fn count_contended(&mut self, nanos: u64) {
        self.stats.lock_contended += 1;
        self.stats.lock_wait_nanos = self.stats.lock_wait_nanos.saturating_add(nanos);
    }
}

impl<K: Hash + Eq + Clone> Shard<K> {
    /// An empty shard whose table and side map hash with `hasher`.
    pub(super) fn new(hasher: &KeyHasher) -> Shard<K> {
        Shard {
            entries: FlatMap::with_hasher(hasher.clone()),
            extras: HashMap::with_hasher(hasher.clone()),
            evicted_horizon: 0,
            sweep_cursor: 0,
            deficits: None,
            stats: Stats::default(),
        }
    }

    /// Keeps what buckets dropped while not full owe: `slots_per_key` slots for each of `keys` keys.
    pub(super) fn keep_deficits(&mut self, keys: usize, slots_per_key: usize) {
        self.deficits = Some(Deficits::new(keys, slots_per_key));
    }

    /// A bucket for a key this shard does not hold, with its cursor at `now` or at the eviction
    /// horizon if that is later (see `evicted_horizon`): full, or, under
    /// `EvictionPolicy::EvictKeepingDeficit`, no fuller than a bucket of its hash dropped owing would
    /// be there (see `deficits`).
    pub(super) fn fresh(&self, hash: u64, config: &Config, now: Nanos) -> BucketState {
        let cursor = now.max(self.evicted_horizon);
        match &self.deficits {
            None => BucketState::full(config, cursor),
            Some(deficits) => deficits::owing(config, cursor, deficits.owed(hash)),
        }
    }

    /// The config and state `key` has at `now` (its own if it is live, else those of a fresh
    /// bucket), and its bucket and position if it is live. Inlined: it is the first step of every
    /// decision.
    #[inline(always)]
    pub(super) fn current(
        &self,
        hash: u64,
        key: &K,
        now: Nanos,
        settings: &Settings<K>,
    ) -> (Config, BucketState, Option<(PackedBucket, usize)>) {
        let found = self.find(hash, key);
        let (config, state) = self.current_of(hash, key, found, now, settings);
        (config, state, found)
    }

    /// [`Shard::current`] of a key already looked up.
    #[inline(always)]
    pub(super) fn current_of(
        &self,
        hash: u64,
        key: &K,
        found: Option<(PackedBucket, usize)>,
        now: Nanos,
        settings: &Settings<K>,
    ) -> (Config, BucketState) {
        match found {
            Some((bucket, _)) => (
                self.config_of(key, bucket, settings),
                self.state_of(key, bucket),
            ),
            None => {
                let config = settings.resolved_config(key);
                (config, self.fresh(hash, &config, now))
            }
        }
    }

    /// The key's bucket (a copy) and position.
    #[inline]
    pub(super) fn find(&self, hash: u64, key: &K) -> Option<(PackedBucket, usize)> {
        let pos = self.entries.find(hash, key)?;
        let (_, bucket) = self.entries.get(pos)?;
        Some((*bucket, pos))
    }

    /// The config of a live key: its override if it has one, else the resolver's or the default.
    #[inline]
    pub(super) fn config_of(
        &self,
        key: &K,
        bucket: PackedBucket,
        settings: &Settings<K>,
    ) -> Config {
        if bucket.has_extra()
            && let Some((config, _)) = self.extra(key).and_then(|extra| extra.config_override)
        {
            return config;
        }
        settings.resolved_config(key)
    }

    pub(super) fn extra(&self, key: &K) -> Option<&Extra> {
        self.extras.get(key)
    }

    /// The extras of the live key at `pos`, created (and flagged) on first use.
    pub(super) fn extra_mut(&mut self, key: &K, pos: usize) -> &mut Extra {
        if let Some((_, bucket)) = self.entries.get_mut(pos) {
            bucket.set_has_extra();
        }
        self.extras.entry(key.clone()).or_default()
    }

    /// The state of the live `key`, whose packed bucket is `bucket`: the balance from the bucket, or
    /// from the key's extras when it is wide.
    #[inline]
    pub(super) fn state_of(&self, key: &K, bucket: PackedBucket) -> BucketState {
        let balance = if bucket.is_wide() {
            // `store` writes the wide balance before it sets the flag, and only `remove` (which drops
            // the bucket too) deletes extras: a flagged bucket without one is a broken invariant.
            self.extra(key)
                .and_then(|extra| extra.wide_balance)
                .expect("a wide bucket's balance is in its extras")
        } else {
            (bucket.flagged_balance & !(HAS_EXTRA | WIDE)) as u128
        };
        BucketState::from_parts(balance, bucket.last_refill)
    }

    /// Replaces the state of the live key at `pos`, keeping its `HAS_EXTRA` flag: in the bucket when
    /// the balance fits 62 bits (a wide balance it had is cleared from its extras), else in its extras
    /// with the bucket flagged `WIDE`. The narrow case is inline (it is every decision's write); the
    /// rest is out of line.
    #[inline(always)]
    pub(super) fn store(&mut self, pos: usize, key: &K, state: BucketState) {
        if let Some((_, bucket)) = self.entries.get_mut(pos)
            && !bucket.is_wide()
            && state.balance() < NARROW_LIMIT
        {
            bucket.flagged_balance = (bucket.flagged_balance & HAS_EXTRA) | state.balance() as u64;
            bucket.last_refill = state.last_refill();
        } else {
            self.store_slow(pos, key, state);
        }
    }

    #[cold]
    #[inline(never)]
    pub(super) fn store_slow(&mut self, pos: usize, key: &K, state: BucketState) {
        let Some((_, bucket)) = self.entries.get_mut(pos) else {
            return;
        };
        bucket.last_refill = state.last_refill();
        if state.balance() < NARROW_LIMIT {
            // It was wide: the balance moves back into the bucket, and out of the extras, which go
            // too when nothing else is in them (so the key's later calls skip the side map).
            bucket.flagged_balance = (bucket.flagged_balance & HAS_EXTRA) | state.balance() as u64;
            if let Some(extra) = self.extras.get_mut(key) {
                extra.wide_balance = None;
                if extra.config_override.is_none()
                    && extra.requests.is_empty()
                    && extra.set.is_none()
                {
                    self.extras.remove(key);
                    bucket.flagged_balance &= !HAS_EXTRA;
                }
            }
        } else {
            self.extra_mut(key, pos).wide_balance = Some(state.balance());
            if let Some((_, bucket)) = self.entries.get_mut(pos) {
                bucket.flagged_balance = HAS_EXTRA | WIDE;
            }
        }
    }

    /// `inline(always)`: with two callers (`acquire_at`, `acquire_with`) the compiler kept it out of
    /// line in the benchmark binary; inlining it (with `KeyHasher::hash_one`) more than halved the
    /// 1,000,000-key time per decision (reports/bench-limiter.md).
    #[inline(always)]
    pub(super) fn acquire(
        &mut self,
        hash: u64,
        key: &K,
        attempt: Attempt,
        request_id: Option<RequestId>,
        settings: &Settings<K>,
    ) -> Result<Acquired, AcquireError> {
        let Attempt { cost, now } = attempt;
        let found = self.find(hash, key);
        if self.holds_set(key, found, settings) {
            return self
                .acquire_set(hash, key, attempt, request_id, settings)
                .map(|acquired| acquired.binding());
        }
        let (config, state) = self.current_of(hash, key, found, now, settings);
        // Validate the cost before consulting request ids or making room: an error changes nothing.
        if config.cost_units(cost).is_none() {
            self.stats.errors += 1;
            return Err(AcquireError::InvalidCost {
                cost,
                capacity: config.capacity(),
            });
        }
        if let Some(decision) =
            self.replay(key, found, request_id, now, settings, Recorded::decision)
        {
            return Ok(decision);
        }
        let (next, decision) = transition(&config, state, attempt)?;
        let pos = self.place(hash, key, found, next, now, settings)?;
        self.store(pos, key, next);
        self.record(key, pos, request_id, next.last_refill(), settings, || {
            (Recorded::One(decision), cost)
        });
        Ok(self.decided(decision, decision.is_allowed(), found))
    }

    /// A held key's live record of `request_id`, read by `read`, as a replayed answer (counted):
    /// judged at the key's effective time, which never moves back (step 2). Only a key with extras
    /// can hold records.
    #[inline(always)]
    pub(super) fn replay<D>(
        &mut self,
        key: &K,
        found: Option<(PackedBucket, usize)>,
        request_id: Option<RequestId>,
        now: Nanos,
        settings: &Settings<K>,
        read: fn(&Recorded) -> D,
    ) -> Option<Acquired<D>> {
        let (Some((bucket, _)), Some(request_id)) = (found, request_id) else {
            return None;
        };
        if !bucket.has_extra() {
            return None;
        }
        let at = now.max(bucket.last_refill);
        let decision = self.extra(key).and_then(|extra| {
            extra
                .requests
                .replay(request_id, at, settings.dedupe_window)
                .map(read)
        })?;
        self.stats.replayed += 1;
        Some(Acquired {
            decision,
            created: false,
            replayed: true,
        })
    }

    /// The key's position: where it was found, or where it is inserted with `first` as its packed
    /// state (making room at the bound; a refusal is counted as an error).
    #[inline(always)]
    pub(super) fn place(
        &mut self,
        hash: u64,
        key: &K,
        found: Option<(PackedBucket, usize)>,
        first: BucketState,
        now: Nanos,
        settings: &Settings<K>,
    ) -> Result<usize, AcquireError> {
        if let Some((_, pos)) = found {
            return Ok(pos);
        }
        self.insert(hash, key, first, now, settings)
            .inspect_err(|_| {
                self.stats.errors += 1;
            })
    }

    /// Records the decision and cost `recorded` makes under `request_id`, stamped with the acquire's
    /// effective time, the refilled cursor (step 6). A window of 0 keeps nothing live, so nothing is
    /// kept then, nor at a per-key bound of 0 (ids are off).
    #[inline(always)]
    pub(super) fn record(
        &mut self,
        key: &K,
        pos: usize,
        request_id: Option<RequestId>,
        at: Nanos,
        settings: &Settings<K>,
        recorded: impl FnOnce() -> (Recorded, u64),
    ) {
        let per_key = settings.dedupe_per_key;
        if let Some(request_id) = request_id
            && per_key > 0
            && settings.dedupe_window > 0
        {
            let requests = &mut self.extra_mut(key, pos).requests;
            requests.record(request_id, at, recorded(), per_key);
        }
    }

    /// A fresh (not replayed) answer, counted by its outcome.
    #[inline(always)]
    pub(super) fn decided<D>(
        &mut self,
        decision: D,
        allowed: bool,
        found: Option<(PackedBucket, usize)>,
    ) -> Acquired<D> {
        if allowed {
            self.stats.allowed += 1;
        } else {
            self.stats.denied += 1;
        }
        Acquired {
            decision,
            created: found.is_none(),
            replayed: false,
        }
    }

    /// Inserts a new key, making room first if the shard is at its bound. Returns the entry's position.
    pub(super) fn insert(
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
        if let Some(deficits) = &self.deficits
            && deficits.owed(hash) > state.last_refill()
        {
            self.stats.created_owing += 1;
        }
        let empty = PackedBucket {
            flagged_balance: 0,
            last_refill: state.last_refill(),
        };
        let pos = self.entries.insert_new(hash, key.clone(), empty);
        self.store(pos, key, state);
        Ok(pos)
    }

    /// Drops the entry at `pos` and its extras.
    pub(super) fn remove(&mut self, pos: usize) {
        if let Some((key, bucket)) = self.entries.remove(pos)
            && bucket.has_extra()
        {
            self.extras.remove(&key);
        }
    }
}
