//! Making room and dropping what no decision can miss: the key bound's policy and the sweep.
//!
//! What it owns: [`EvictionPolicy`], the evictability rule, the amortized sweep, the full sweep's
//! walk and the room scan at the key bound. What it promises:
//! - only *evictable* buckets are dropped without loss: judged at the key's effective time `j =
//!   max(now, last_refill)`, full, no override, no request-id record live at `j`; and every eviction
//!   raises the shard's horizon to `j`, so a fresh bucket starts no earlier than `j`. The old bucket
//!   refilled to `j` and a fresh bucket at any cursor `>= j` are the same (full, no live record), so
//!   a drop is "refill to `j`, then forget what is now redundant": nothing before `j` is credited
//!   twice, and no record dead at `j` is alive again, whatever the caller's clock does later;
//! - the room scan inspects at most `ROOM_SCAN` entries over at most `ROOM_SCAN_SLOTS` slots, so an
//!   attacker cannot turn a request into a full scan; only [`EvictionPolicy::EvictLeastRecent`]
//!   drops a non-evictable bucket (counted as lossy);
//! - a walk over every slot visits every entry, even when a removal moves a later entry of its probe
//!   run into the slot just looked at.

use std::hash::{BuildHasher, Hash};
use std::ops::ControlFlow;

use super::Settings;
use super::deficits;
use super::shard::{PackedBucket, Shard};
use crate::{AcquireError, BucketState, Nanos};

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
    /// the oldest `last_refill` among those without an override config (a pinned key is never dropped);
    /// reject only if every sampled bucket is pinned. Lossy: the victim comes back full, so **it lifts
    /// the limit for every evicted key**: under a flood of fresh ids an active user is evicted between
    /// two of its requests and every request of it finds a full bucket (`examples/flood.rs`: all
    /// 10,000 legitimate requests admitted against a budget of 6,000). Counted in
    /// [`Stats::evicted_lossy`](super::Stats::evicted_lossy). Use
    /// [`EvictionPolicy::EvictKeepingDeficit`] instead.
    EvictLeastRecent,
    /// As [`EvictionPolicy::EvictLeastRecent`], and the victim's deficit is kept: when its bucket
    /// would be full again, in a fixed array per shard of tagged slots chosen by the key's hash (by
    /// default 48 bytes per key the shard may hold, whatever arrives:
    /// [`Builder::deficit_slots_per_key`](super::Builder::deficit_slots_per_key)). A new bucket
    /// whose slots say it may owe starts no fuller than the dropped bucket would be now; a
    /// collision can only make a new bucket emptier. Never admits more than the key's budget,
    /// under a flood too: the policy to use under attack. Drops are counted in
    /// [`Stats::evicted_owing`](super::Stats::evicted_owing), new buckets that started below full in
    /// [`Stats::created_owing`](super::Stats::created_owing).
    EvictKeepingDeficit,
}

/// How many entries a new key may inspect to make room at the bound. Bounded, so an attacker filling
/// the table with non-full buckets cannot turn every request into a full scan.
const ROOM_SCAN: usize = 32;

/// How many table slots (occupied or not) that scan may step over. A shard's table at its bound is
/// about 70-85% full (`table` grows by a fifth at 85%), so 4 slots per wanted entry find all 32.
const ROOM_SCAN_SLOTS: usize = 4 * ROOM_SCAN;

impl<K: Hash + Eq + Clone> Shard<K> {
    /// Evictable when judged at `now`: at the key's effective time `j = max(now, last_refill)` it is
    /// full and holds no override and no record live at `j`. Dropping it then (with [`Shard::evict`]
    /// at the same `now`) changes nothing a fresh bucket at a cursor `>= j` would not.
    pub(super) fn is_evictable(
        &self,
        key: &K,
        bucket: PackedBucket,
        now: Nanos,
        settings: &Settings<K>,
    ) -> bool {
        let judged_at = now.max(bucket.last_refill);
        if bucket.has_extra()
            && self
                .extra(key)
                .is_some_and(|extra| extra.pins(judged_at, settings.dedupe_window))
        {
            return false;
        }
        let config = self.config_of(key, bucket, settings);
        self.state_of(key, bucket)
            .refilled(&config, now)
            .is_full(&config)
            && (!bucket.has_extra() || self.rest_is_full(key, bucket, now))
    }

    /// Makes room for one new key (of an acquire or a reconfigure) in this shard at its bound, by the
    /// policy: either drops exactly one bucket and returns `Ok`, or drops nothing and returns
    /// [`AcquireError::KeyLimitReached`], never both, so a refused key costs no other key its state.
    /// A pinned bucket (override config) is never dropped.
    pub(super) fn make_room(
        &mut self,
        now: Nanos,
        settings: &Settings<K>,
    ) -> Result<(), AcquireError> {
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
                shard.evict(here, now);
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
                self.evict(victim, now);
                self.stats.evicted_lossy += 1;
                Ok(())
            }
            (EvictionPolicy::EvictKeepingDeficit, Some((victim, _))) => {
                let owed = self.entries.get(victim).map(|(key, bucket)| {
                    let hash = self.extras.hasher().hash_one(key);
                    (hash, self.full_at(key, *bucket, now, settings))
                });
                self.evict(victim, now);
                // After the drop, which raised the horizon: no new bucket starts before it.
                let horizon = self.evicted_horizon;
                if let (Some((hash, full_at)), Some(deficits)) = (owed, &mut self.deficits) {
                    deficits.remember(hash, full_at, horizon);
                }
                self.stats.evicted_owing += 1;
                Ok(())
            }
            _ => reject(self),
        }
    }

    /// When the live `bucket` of `key`, refilled to `now`, is full again with no traffic: the latest
    /// of its bandwidths' instants (`Nanos::MAX` if one never refills).
    fn full_at(&self, key: &K, bucket: PackedBucket, now: Nanos, settings: &Settings<K>) -> Nanos {
        let first = self.state_of(key, bucket);
        let key_set = bucket
            .has_extra()
            .then(|| self.extra(key).and_then(|extra| extra.set.as_ref()))
            .flatten();
        let Some(key_set) = key_set else {
            let config = self.config_of(key, bucket, settings);
            return deficits::full_at(&config, first.refilled(&config, now));
        };
        let balances = std::iter::once(first.balance()).chain(key_set.more.iter().copied());
        (key_set.bandwidths.as_slice().iter().zip(balances))
            .map(|(bandwidth, balance)| {
                let config = bandwidth.config();
                BucketState::new(config, balance, first.last_refill()).map_or(Nanos::MAX, |state| {
                    deficits::full_at(config, state.refilled(config, now))
                })
            })
            .max()
            .unwrap_or(Nanos::MAX)
    }

    /// Inspects entries from the cursor until it has kept `budget` of them (entries it drops do not
    /// count), stepping over at most `max_slots` slots (and at most the whole table), and drops the
    /// evictable ones. Returns how many.
    ///
    /// Why drops are free: the walk goes up the table, so where it has just been the table holds only
    /// what was kept and inserted since, and where it is about to go it holds everything inserted since
    /// its last round. At a fixed number of entries per call, a workload whose keys expire faster than
    /// one round lets the table ahead of the cursor fill up to probe runs of thousands of entries, and
    /// every removal there re-hashes the rest of its run (reports/bench-limiter.md). Stepping over
    /// expired entries for free lets the cursor run through them as fast as its slot limit allows.
    pub(super) fn sweep_some(
        &mut self,
        now: Nanos,
        budget: usize,
        max_slots: usize,
        settings: &Settings<K>,
    ) -> usize {
        if budget == 0 {
            return 0;
        }
        let mut dropped = 0;
        let mut kept = 0;
        self.walk_from_cursor(usize::MAX, max_slots, |shard, here| {
            if let Some((key, bucket)) = shard.entries.get(here)
                && shard.is_evictable(key, *bucket, now, settings)
            {
                shard.evict(here, now);
                shard.stats.evicted_lossless += 1;
                dropped += 1;
                return ControlFlow::Continue(());
            }
            kept += 1;
            if kept >= budget {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        dropped
    }

    /// The one bounded walk the amortized sweep and the room scan share: visits up to `budget`
    /// occupied slots from the sweep cursor, stepping over at most `max_slots` slots (and at most the
    /// whole table), and leaves the cursor after the last slot stepped over. `visit` may evict the slot
    /// it is given; `Break` ends the walk there. A removal can move a later entry of the same probe run
    /// into the removed slot (`table`), so after one the walk looks at that slot again: a walk over
    /// every slot visits every entry.
    pub(super) fn walk_from_cursor(
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

    /// Drops an entry by eviction (not by `forget`) judged at `now`: the horizon rises to the time
    /// it was judged at, `max(now, last_refill)`, not just to its stored cursor. A bucket emptied at
    /// 10 s and judged full at 13 s must come back at 13 s: at 10 s a fresh bucket would hand out
    /// the tokens it refilled by 13 s a second time.
    pub(super) fn evict(&mut self, pos: usize, now: Nanos) {
        if let Some((_, bucket)) = self.entries.get(pos) {
            let judged_at = now.max(bucket.last_refill);
            self.evicted_horizon = self.evicted_horizon.max(judged_at);
        }
        self.remove(pos);
    }
}
