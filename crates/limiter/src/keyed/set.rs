//! Keys decided by a bandwidth set, inside a shard: where their state lives and their one decision.
//!
//! What it owns: [`KeySet`] (a set key's bandwidths and the balances after the first) and the
//! shard's set path: reading and writing a set key's [`SetState`], its acquire and its
//! reconfiguration. What it promises:
//! - a *set key* is one whose bandwidth set is not one unnamed bandwidth. Its first bandwidth's
//!   balance and the shared cursor are its packed bucket's (so expiry, eviction and the key bound
//!   treat it as any key), and the rest is in its extras' `set`; a key that is not a set key has no
//!   `set`, so the one-bandwidth path never reads this file's state;
//! - a set key's acquire is [`transition_set`] under the shard lock, like the one-bandwidth acquire:
//!   read, refill, decide, write in one critical section, an invalid cost changes nothing, and a
//!   request id replays every bandwidth's part.

use std::hash::Hash;
use std::sync::Arc;

use arrayvec::ArrayVec;

use super::deficits;
use super::records::Recorded;
use super::shard::{PackedBucket, Shard};
use super::{Acquired, RequestId, Settings};
use crate::bucket::{Attempt, BucketState};
use crate::set::transition_set;
use crate::{AcquireError, Bandwidths, Decisions, MAX_BANDWIDTHS, Nanos, SetState};

/// A set key's bandwidths and the balances of all but the first, in the set's order.
#[derive(Clone, Debug)]
pub(super) struct KeySet {
    pub(super) bandwidths: Arc<Bandwidths>,
    pub(super) more: ArrayVec<u128, { MAX_BANDWIDTHS - 1 }>,
}

/// A key's set, its state at `now` and, if it is live, its bucket and position.
pub(super) type CurrentSet = (Arc<Bandwidths>, SetState, Option<(PackedBucket, usize)>);

impl<K: Hash + Eq + Clone> Shard<K> {
    /// True if `key` (found live as `found`, or new) is a set key. A live key without extras is not:
    /// the one-bandwidth path pays one flag test for this.
    #[inline(always)]
    pub(super) fn holds_set(
        &self,
        key: &K,
        found: Option<(PackedBucket, usize)>,
        settings: &Settings<K>,
    ) -> bool {
        match found {
            Some((bucket, _)) => {
                bucket.has_extra() && self.extra(key).is_some_and(|extra| extra.set.is_some())
            }
            None => settings.resolved_set(key).is_some(),
        }
    }

    /// Any key's set and state at `now` (a one-bandwidth key's as a set of one), and its bucket and
    /// position if it is live.
    pub(super) fn current_set(
        &self,
        hash: u64,
        key: &K,
        now: Nanos,
        settings: &Settings<K>,
    ) -> CurrentSet {
        let found = self.find(hash, key);
        let (set, state) = match found {
            Some((bucket, _)) => self.live_set(key, bucket, settings),
            None => {
                let set = match settings.resolved_set(key) {
                    Some(set) => set.clone(),
                    None => Arc::new(Bandwidths::from(settings.resolved_config(key))),
                };
                let cursor = now.max(self.evicted_horizon);
                let fresh = match &self.deficits {
                    None => SetState::full(&set, cursor),
                    Some(deficits) => {
                        let owed = deficits.owed(hash);
                        let balances = (set.as_slice().iter())
                            .map(|b| deficits::owing(b.config(), cursor, owed).balance());
                        SetState::from_balances(balances, cursor)
                    }
                };
                (set, fresh)
            }
        };
        (set, state, found)
    }

    /// The set and stored state (not refilled) of the live `key`, whose packed bucket is `bucket`
    /// (a one-bandwidth key's as a set of one).
    pub(super) fn live_set(
        &self,
        key: &K,
        bucket: PackedBucket,
        settings: &Settings<K>,
    ) -> (Arc<Bandwidths>, SetState) {
        let first = self.state_of(key, bucket);
        match self.extra(key).and_then(|extra| extra.set.as_ref()) {
            Some(key_set) => {
                let balances = std::iter::once(first.balance()).chain(key_set.more.iter().copied());
                (
                    key_set.bandwidths.clone(),
                    SetState::from_balances(balances, first.last_refill()),
                )
            }
            None => {
                let config = self.config_of(key, bucket, settings);
                let balances = [first.balance()];
                (
                    Arc::new(Bandwidths::from(config)),
                    SetState::from_balances(balances, first.last_refill()),
                )
            }
        }
    }

    /// Writes `state` of `set` for the live key at `pos`: the first bandwidth into its bucket, the
    /// rest (and the set) into its extras; a set of one unnamed bandwidth leaves no `set` behind.
    pub(super) fn store_set(
        &mut self,
        pos: usize,
        key: &K,
        set: &Arc<Bandwidths>,
        state: &SetState,
    ) {
        let balances = state.balances();
        if set.single().is_some() {
            if let Some(extra) = self.extras.get_mut(key) {
                extra.set = None;
            }
        } else {
            self.extra_mut(key, pos).set = Some(KeySet {
                bandwidths: set.clone(),
                more: balances[1..].iter().copied().collect(),
            });
        }
        // After the extras: `store` drops extras that hold nothing, which a set key's never are.
        let first = BucketState::from_parts(balances[0], state.last_refill());
        self.store(pos, key, first);
    }

    /// The one decision of a set key (docs/semantics.md, "Several bandwidths per key"), the steps of
    /// `Shard::acquire` over the set: validate the cost, replay, transition, insert, write, record.
    #[cold]
    #[inline(never)]
    pub(super) fn acquire_set(
        &mut self,
        hash: u64,
        key: &K,
        attempt: Attempt,
        request_id: Option<RequestId>,
        settings: &Settings<K>,
    ) -> Result<Acquired<Decisions>, AcquireError> {
        let (set, state, found) = self.current_set(hash, key, attempt.now, settings);
        if attempt.cost == 0 || attempt.cost > set.cost_bound() {
            self.stats.errors += 1;
            return Err(AcquireError::InvalidCost {
                cost: attempt.cost,
                capacity: set.cost_bound(),
            });
        }
        let now = attempt.now;
        if let Some(decisions) =
            self.replay(key, found, request_id, now, settings, Recorded::decisions)
        {
            return Ok(decisions);
        }
        let (next, decisions) = transition_set(&set, &state, attempt)?;
        let first = BucketState::from_parts(next.balances()[0], next.last_refill());
        let pos = self.place(hash, key, found, first, now, settings)?;
        self.store_set(pos, key, &set, &next);
        self.record(key, pos, request_id, next.last_refill(), settings, || {
            (Recorded::Set(Box::new(decisions.clone())), attempt.cost)
        });
        let allowed = decisions.is_allowed();
        Ok(self.decided(decisions, allowed, found))
    }

    /// True if the set key's every bandwidth other than the first, refilled to `now`, is full (the
    /// first is judged by the caller, as for any key). True for a key that is not a set key.
    pub(super) fn rest_is_full(&self, key: &K, bucket: PackedBucket, now: Nanos) -> bool {
        let Some(key_set) = self.extra(key).and_then(|extra| extra.set.as_ref()) else {
            return true;
        };
        key_set.bandwidths.as_slice()[1..]
            .iter()
            .zip(&key_set.more)
            .all(|(bandwidth, &balance)| {
                BucketState::from_parts(balance, bucket.last_refill)
                    .refilled(bandwidth.config(), now)
                    .is_full(bandwidth.config())
            })
    }
}
