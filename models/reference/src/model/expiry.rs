//! The expiry rules of the keyed model (docs/semantics.md, "Expiry and the key bound"): which
//! buckets are evictable, sweeping them, and following an implementation's eviction (a drop, with
//! or without the key's records, and a recreation full or owing). Promises: a key continues from
//! the time it was judged at; the refill arithmetic stays the bucket's.

use crate::Rational;

use super::{Model, is_live};
use crate::set::ModelSetBucket;

impl Model {
    /// "A bucket is evictable at sweep time `s` iff, at its judgment time `j = max(s, last_refill)`, it is full and
    /// holds no record live at `j` (and has no override)." "Evictable: every bandwidth full at the judgment
    /// time." A key holding no bucket is vacuously evictable (there is nothing to lose).
    pub fn is_evictable_at(&self, key: u64, s: u64) -> bool {
        let Some(entry) = self.entries.get(&key) else {
            return true;
        };
        let Some(bucket) = entry.bucket.as_ref() else {
            return true;
        };
        let judged_at = entry.effective_time(s);
        // "... and the key has no override config" (an override is explicit state, kept until forget).
        entry.override_config.is_none()
            && bucket.is_full_at(self.bandwidths_of(key), judged_at)
            && !entry
                .records
                .iter()
                .any(|r| is_live(r.stamped_at, self.dedupe_window_ns, judged_at))
    }

    /// Whether an implementation may have dropped `key`'s bucket and started it afresh with its cursor at `c`:
    /// the held bucket, refilled to `c`, is what a fresh bucket at `c` is (full, no record live at `c`, no
    /// override). Refilling goes forward only, so `c` must not be before the held cursor: a fresh bucket at an
    /// earlier cursor would credit the time in between a second time. A key holding no bucket may start at any
    /// cursor (the caller bounds it by the times seen).
    pub fn may_recreate_at(&self, key: u64, c: u64) -> bool {
        self.state(key)
            .is_none_or(|(_, last_refill)| last_refill <= c && self.is_evictable_at(key, c))
    }

    /// Drops the key's bucket and its request-id records, keeping its override config and version, whether or not
    /// it is evictable: used by the harness to follow an implementation's eviction, after checking
    /// [`Model::is_evictable_at`] (or not, under the lossy `EvictLeastRecent`). Returns whether a bucket was held.
    pub fn evict(&mut self, key: u64) -> bool {
        let Some(entry) = self.entries.get_mut(&key) else {
            return false;
        };
        let had_bucket = entry.bucket.take().is_some();
        entry.records.clear();
        if entry.is_empty() {
            self.entries.remove(&key);
        }
        had_bucket
    }

    /// Follows an implementation that dropped `key`'s bucket while the model still holds it, found out
    /// where the key's request-id records are gone (settle step 2: "its key was dropped" ->
    /// `Err(UnknownRequest)`) before the key is used again: the records go, as they went with the
    /// dropped bucket. The bucket stays, as the state a later recreation of the key is judged against
    /// (`EvictKeepingDeficit` brings a victim back at most as full as it would be). The harness checks
    /// first that the drop was legal. Returns whether any record was held.
    pub fn lose_records(&mut self, key: u64) -> bool {
        let Some(entry) = self.entries.get_mut(&key) else {
            return false;
        };
        let had = !entry.records.is_empty();
        entry.records.clear();
        had
    }

    /// Follows an implementation that started `key` afresh (first sight, or after dropping its bucket)
    /// with its cursor at `cursor` instead of at the operation's `now`: the bucket is fresh ("`tokens =
    /// capacity`") with `last_refill = cursor`. Implementations do this with an eviction horizon so that a
    /// key dropped while full and used again under a clock that ran backwards is not credited the same
    /// time twice. The harness checks that `cursor` is legal before calling this. Request-id records are
    /// dropped with the old bucket; the override config and version stay.
    pub fn recreate(&mut self, key: u64, cursor: u64) {
        self.evict(key);
        let set = self.bandwidths_of(key).clone();
        let entry = self.entries.entry(key).or_default();
        entry.bucket = Some(ModelSetBucket::fresh(&set, cursor));
        entry.dropped_at = None;
        self.check_invariants(key);
    }

    /// Follows an implementation that started `key` afresh at `cursor` below full, as
    /// `EvictKeepingDeficit` does for a key dropped while it owed: the first bandwidths hold `tokens`
    /// (the rest of the set, if `tokens` is shorter, is full), each at most its capacity. The harness
    /// checks first that no bandwidth is fuller than the dropped bucket refilled to `cursor` would be.
    pub fn recreate_owing(&mut self, key: u64, cursor: u64, tokens: &[Rational]) {
        self.evict(key);
        let set = self.bandwidths_of(key).clone();
        let balances: Vec<Rational> = (set.configs().enumerate())
            .map(|(position, config)| {
                let capacity = config.capacity_tokens();
                tokens
                    .get(position)
                    .map_or(capacity.clone(), |t| t.clone().min(capacity))
            })
            .collect();
        let entry = self.entries.entry(key).or_default();
        entry.bucket = Some(ModelSetBucket::from_balances(balances, cursor));
        entry.dropped_at = None;
        self.check_invariants(key);
    }

    /// "`sweep(now)`: drops every bucket evictable at `now`." Overrides and versions stay. Each dropped key
    /// continues from its judgment time `j = max(now, last_refill)`: "dropping is 'refill to `j`, then forget
    /// the now-redundant state'", so its next fresh bucket starts at `max(now', j)`. Returns the dropped keys,
    /// ascending.
    pub fn sweep(&mut self, now: u64) -> Vec<u64> {
        let dropped: Vec<u64> = self
            .keys()
            .into_iter()
            .filter(|&k| self.is_evictable_at(k, now))
            .collect();
        for &k in &dropped {
            let judged_at = self.state(k).map_or(now, |(_, last)| now.max(last));
            self.evict(k);
            self.entries.entry(k).or_default().dropped_at = Some(judged_at);
        }
        dropped
    }
}
