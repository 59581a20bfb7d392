//! Reserve, then settle: reconciling an admitted request's charge with its actual cost.
//!
//! What it owns: [`Settle`] (what a caller asks), [`Settled`] (what it gets), the keyed limiter's
//! `settle` and `settle_set`, and the shard's one settle. What it promises (docs/semantics.md,
//! "settle"): under the shard lock, in one critical section, the key's live record of the request
//! id is found, refilled and reconciled by the crate's one settle step (`set::settle_set`); a refund
//! never lifts a bucket above capacity nor gives back more than the request was charged, and happens
//! at most once per record (a retried settle with the same actual replays, another actual is an
//! error); an extra is decided by the ordinary rule, all bandwidths or none; every error changes
//! nothing; a settle never creates a key.

use std::hash::{BuildHasher, Hash};

use super::records::Recorded;
use super::shard::{PackedBucket, Shard};
use super::{Limiter, RequestId, Settings, lock_shard};
use crate::bucket::{SettleAttempt, settle};
use crate::set::settle_set;
use crate::{Clock, Decision, Decisions, Nanos, SettleError};

/// One settle: the request id of an admitted acquire on the key, and what the work really cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settle {
    /// The request id the acquire carried.
    pub request_id: RequestId,
    /// What the work really cost, in whole tokens, `0..=capacity` (0 gives the whole charge back).
    pub actual: u64,
    /// The time to settle at; `None` reads the limiter's clock.
    pub now: Option<Nanos>,
}

impl Settle {
    /// Settles the request `request_id` at an actual cost of `actual`, at the clock's time.
    pub fn new(request_id: impl Into<RequestId>, actual: u64) -> Settle {
        Settle {
            request_id: request_id.into(),
            actual,
            now: None,
        }
    }

    /// Settle at `now` instead of reading the clock.
    pub fn at(mut self, now: Nanos) -> Settle {
        self.now = Some(now);
        self
    }
}

/// A settle's decision: allowed when the charge was reconciled (a refund, or an extra that was
/// covered), denied when the extra was not covered (nothing charged, the request stays open, and
/// `retry_after` says when the same settle would be allowed with no other traffic).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settled<D = Decision> {
    /// The settlement (for a replay: the first one of this request).
    pub decision: D,
    /// The request was settled already with the same actual cost: nothing changed.
    pub replayed: bool,
}

impl<K: Hash + Eq + Clone, C: Clock> Limiter<K, C> {
    /// Reconciles the charge of an admitted acquire that carried `settle.request_id` with the
    /// actual cost: gives back the difference when the actual is lower, charges the extra when it
    /// is higher. For a key of several bandwidths the decision is the binding part (see
    /// [`Limiter::settle_set`] for all).
    ///
    /// Reserve an estimate of 4 tokens; the work cost 1, so 3 come back; a second settle of the
    /// same request replays and gives back nothing more.
    ///
    /// ```
    /// use bucketproof_limiter::{Config, Limiter, Rate, Request, Settle};
    ///
    /// let limiter: Limiter<&str> = Limiter::new(Config::new(10, Rate::per_second(1))?);
    /// let reserved = limiter.acquire_with(&"alice", Request::cost(4).at(0).id(7u64))?;
    /// assert_eq!(reserved.decision.remaining().whole(), 6);
    /// let settled = limiter.settle(&"alice", Settle::new(7u64, 1).at(0))?;
    /// assert_eq!(settled.decision.remaining().whole(), 9);
    /// let again = limiter.settle(&"alice", Settle::new(7u64, 1).at(0))?;
    /// assert!(again.replayed);
    /// assert_eq!(limiter.peek_at(&"alice", 0).remaining.whole(), 9);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn settle(&self, key: &K, settle: Settle) -> Result<Settled, SettleError> {
        let now = settle.now.unwrap_or_else(|| self.clock.now());
        let hash = self.hasher.hash_one(key);
        let mut shard = lock_shard(self.shard(hash));
        let found = shard.find(hash, key);
        if shard.holds_set(key, found, &self.settings) {
            let settled = shard.settle_set(
                hash,
                key,
                settle.request_id,
                settle.actual,
                now,
                &self.settings,
            )?;
            return Ok(Settled {
                decision: *settled.decision.binding(),
                replayed: settled.replayed,
            });
        }
        shard.settle_one(
            hash,
            key,
            settle.request_id,
            settle.actual,
            now,
            &self.settings,
        )
    }

    /// [`Limiter::settle`] with every bandwidth's part of the settlement.
    pub fn settle_set(&self, key: &K, settle: Settle) -> Result<Settled<Decisions>, SettleError> {
        let now = settle.now.unwrap_or_else(|| self.clock.now());
        let hash = self.hasher.hash_one(key);
        let mut shard = lock_shard(self.shard(hash));
        let found = shard.find(hash, key);
        if shard.holds_set(key, found, &self.settings) {
            return shard.settle_set(
                hash,
                key,
                settle.request_id,
                settle.actual,
                now,
                &self.settings,
            );
        }
        let settled = shard.settle_one(
            hash,
            key,
            settle.request_id,
            settle.actual,
            now,
            &self.settings,
        )?;
        Ok(Settled {
            decision: Decisions::one(settled.decision),
            replayed: settled.replayed,
        })
    }
}

/// What steps 1 to 3 found: a settled record's settlement to replay, or the open record's charge
/// and place, and the key's position.
enum Found {
    Replay(Recorded),
    Open {
        charged: u64,
        record: usize,
        pos: usize,
    },
}

impl<K: Hash + Eq + Clone> Shard<K> {
    /// A key of one bandwidth (not a set key): steps 1 to 6 on its packed bucket with the crate's
    /// single-bucket settle step, no set built.
    pub(super) fn settle_one(
        &mut self,
        hash: u64,
        key: &K,
        request_id: RequestId,
        actual: u64,
        now: Nanos,
        settings: &Settings<K>,
    ) -> Result<Settled, SettleError> {
        let (config, state, found) = self.current(hash, key, now, settings);
        let (charged, record, pos) = match self.find_record(
            key,
            found,
            config.capacity(),
            request_id,
            actual,
            now,
            settings,
        )? {
            Found::Replay(settlement) => return Ok(Settled::replay(settlement.decision())),
            Found::Open {
                charged,
                record,
                pos,
            } => (charged, record, pos),
        };
        let (next, decision) = settle(
            &config,
            state,
            SettleAttempt {
                charged,
                actual,
                now,
            },
        )
        .map_err(SettleError::from_step)?;
        self.close_record(key, record, actual, decision.is_allowed(), || {
            Recorded::One(decision)
        });
        self.store(pos, key, next);
        Ok(Settled::fresh(decision))
    }

    /// Any key, as a set (a key of one bandwidth as a set of one): steps 1 to 6 with the crate's
    /// settle step over a set.
    pub(super) fn settle_set(
        &mut self,
        hash: u64,
        key: &K,
        request_id: RequestId,
        actual: u64,
        now: Nanos,
        settings: &Settings<K>,
    ) -> Result<Settled<Decisions>, SettleError> {
        let (set, state, found) = self.current_set(hash, key, now, settings);
        let (charged, record, pos) = match self.find_record(
            key,
            found,
            set.cost_bound(),
            request_id,
            actual,
            now,
            settings,
        )? {
            Found::Replay(settlement) => return Ok(Settled::replay(settlement.decisions())),
            Found::Open {
                charged,
                record,
                pos,
            } => (charged, record, pos),
        };
        let (next, decisions) = settle_set(
            &set,
            &state,
            SettleAttempt {
                charged,
                actual,
                now,
            },
        )
        .map_err(SettleError::from_step)?;
        self.close_record(key, record, actual, decisions.is_allowed(), || {
            Recorded::of(decisions.clone())
        });
        self.store_set(pos, key, &set, &next);
        Ok(Settled::fresh(decisions))
    }

    /// Steps 1 to 3: the actual within `bound` (judged first, whether or not the key is live),
    /// then the live key's live record of `request_id` at its effective time, admitted, and either
    /// settled with this `actual` (a replay) or open.
    #[allow(clippy::too_many_arguments)]
    fn find_record(
        &self,
        key: &K,
        found: Option<(PackedBucket, usize)>,
        bound: u64,
        request_id: RequestId,
        actual: u64,
        now: Nanos,
        settings: &Settings<K>,
    ) -> Result<Found, SettleError> {
        if actual > bound {
            return Err(SettleError::InvalidActual {
                actual,
                capacity: bound,
            });
        }
        let (bucket, pos) = found.ok_or(SettleError::UnknownRequest)?;
        let at = now.max(bucket.last_refill);
        let requests = &self.extra(key).ok_or(SettleError::UnknownRequest)?.requests;
        let (position, record) = requests
            .live(request_id, at, settings.dedupe_window)
            .ok_or(SettleError::UnknownRequest)?;
        if !record.decision.is_allowed() {
            return Err(SettleError::NotAdmitted);
        }
        match record.settled.as_deref() {
            Some((settled_actual, settlement)) if *settled_actual == actual => {
                Ok(Found::Replay(settlement.clone()))
            }
            Some((settled_actual, _)) => Err(SettleError::AlreadySettled {
                actual: *settled_actual,
            }),
            None => Ok(Found::Open {
                charged: record.cost,
                record: position,
                pos,
            }),
        }
    }

    /// Step 6: an allowed settlement closes the record at `position` with `(actual, settlement)`,
    /// its stamp and place unchanged; a denied extra leaves it open.
    fn close_record(
        &mut self,
        key: &K,
        position: usize,
        actual: u64,
        allowed: bool,
        settlement: impl FnOnce() -> Recorded,
    ) {
        if allowed && let Some(extra) = self.extras.get_mut(key) {
            extra.requests.settle(position, actual, settlement());
        }
    }
}

impl<D> Settled<D> {
    fn fresh(decision: D) -> Settled<D> {
        Settled {
            decision,
            replayed: false,
        }
    }

    fn replay(decision: D) -> Settled<D> {
        Settled {
            decision,
            replayed: true,
        }
    }
}
