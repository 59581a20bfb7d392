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
use super::shard::Shard;
use super::{Limiter, RequestId, Settings, lock_shard};
use crate::bucket::SettleAttempt;
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
        let settled = self.settle_set(key, settle)?;
        Ok(Settled {
            decision: *settled.decision.binding(),
            replayed: settled.replayed,
        })
    }

    /// [`Limiter::settle`] with every bandwidth's part of the settlement.
    pub fn settle_set(&self, key: &K, settle: Settle) -> Result<Settled<Decisions>, SettleError> {
        let now = settle.now.unwrap_or_else(|| self.clock.now());
        let hash = self.hasher.hash_one(key);
        let mut shard = lock_shard(self.shard(hash));
        shard.settle(
            hash,
            key,
            settle.request_id,
            settle.actual,
            now,
            &self.settings,
        )
    }
}

impl<K: Hash + Eq + Clone> Shard<K> {
    /// The one settle of the keyed limiter (docs/semantics.md, "settle", steps 1 to 6).
    pub(super) fn settle(
        &mut self,
        hash: u64,
        key: &K,
        request_id: RequestId,
        actual: u64,
        now: Nanos,
        settings: &Settings<K>,
    ) -> Result<Settled<Decisions>, SettleError> {
        // Step 1, before anything else, against the key's config whether or not it is live.
        let (set, state, found) = self.current_set(hash, key, now, settings);
        if actual > set.cost_bound() {
            return Err(SettleError::InvalidActual {
                actual,
                capacity: set.cost_bound(),
            });
        }
        let Some((bucket, pos)) = found else {
            return Err(SettleError::UnknownRequest);
        };
        // Step 2: the live record, judged at the key's effective time.
        let at = now.max(bucket.last_refill);
        let window = settings.dedupe_window;
        let record = (self.extras.get_mut(key))
            .and_then(|extra| extra.requests.live_mut(request_id, at, window))
            .ok_or(SettleError::UnknownRequest)?;
        if !record.decision.is_allowed() {
            return Err(SettleError::NotAdmitted);
        }
        // Step 3: settled once; the same actual replays.
        if let Some(settled) = &record.settled {
            let (settled_actual, settlement) = &**settled;
            return if *settled_actual == actual {
                Ok(Settled {
                    decision: settlement.decisions(),
                    replayed: true,
                })
            } else {
                Err(SettleError::AlreadySettled {
                    actual: *settled_actual,
                })
            };
        }
        // Steps 4 and 5: the one settle step.
        let attempt = SettleAttempt {
            charged: record.cost,
            actual,
            now,
        };
        let (next, decisions) =
            settle_set(&set, &state, attempt).map_err(SettleError::from_step)?;
        // Step 6: an allowed settlement closes the record; a denied extra leaves it open.
        if decisions.is_allowed() {
            record.settled = Some(Box::new((actual, Recorded::of(decisions.clone()))));
        }
        self.store_set(pos, key, &set, &next);
        Ok(Settled {
            decision: decisions,
            replayed: false,
        })
    }
}
