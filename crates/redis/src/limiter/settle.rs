//! The settle path: one `EVALSHA` of the settle script, its reply and its errors.
//!
//! Owns: [`RedisLimiter::settle`], [`RedisLimiter::settle_set`], [`SettleOutcome`], and the settle
//! script's arguments.
//!
//! Promises: the whole settle (docs/semantics.md, "settle") runs in one script call, so it is atomic
//! with every acquire and settle of the key; a settlement from Redis equals the core's (rebuilt by
//! [`crate::settle`]); the rule's refusals are [`SettleError`]s; an unreachable Redis is
//! [`RedisSettleError::Unavailable`], never a settlement (settle has no local fallback).

use bucketproof_limiter::{Decision, Decisions, Settle, SettleError, Settled};
use redis::RedisError;

use super::RedisLimiter;
use super::acquire::{Failed, id_text};
use super::error::RedisSettleError;
use crate::settle::SettleReply;

/// A settle's result: the same [`Settled`] the in-memory limiter returns, plus the key's transition
/// counter. `SettleOutcome` carries one [`Decision`] (`settle`), `SettleOutcome<Decisions>` every
/// bandwidth's part (`settle_set`). Always from the store: settle has no fallback.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SettleOutcome<D = Decision> {
    /// The settlement and whether it was a replay of the request's recorded one.
    pub settled: Settled<D>,
    /// The key's transition counter in Redis after this settle (a replay's: the recorded one).
    pub seq: u64,
}

impl SettleOutcome {
    /// The settlement.
    pub fn decision(&self) -> Decision {
        self.settled.decision
    }
}

impl SettleOutcome<Decisions> {
    /// Every bandwidth's part of the settlement.
    pub fn decisions(&self) -> &Decisions {
        &self.settled.decision
    }

    /// The same outcome with the binding part ([`Decisions::binding`]) as its one decision: what
    /// `settle` answers, as the in-memory limiter's `settle`.
    pub fn binding(&self) -> SettleOutcome {
        SettleOutcome {
            settled: Settled {
                decision: *self.settled.decision.binding(),
                replayed: self.settled.replayed,
            },
            seq: self.seq,
        }
    }
}

impl RedisLimiter {
    /// Reconciles the charge of an admitted acquire that carried `settle.request_id` on `user` with
    /// the actual cost, as the in-memory limiter's `settle` (docs/semantics.md, "settle"): gives back
    /// `charged - actual` when the actual is lower (never above any capacity), charges the extra when
    /// it is higher (all bandwidths or none; a denied extra charges nothing and leaves the request
    /// open, its `retry_after` says when the same settle would pass). A request settles once: a
    /// retried settle with the same actual replays the recorded settlement
    /// ([`Settled::replayed`]), another actual is [`SettleError::AlreadySettled`]. `settle.now ==
    /// None` uses the Redis server's `TIME`. For a key of several bandwidths the decision is the
    /// binding part ([`RedisLimiter::settle_set`] gives all).
    ///
    /// The record is the one acquire wrote, judged live as a replay is (within the dedupe window
    /// from the acquire's effective time, among the key's newest `dedupe_per_key` records): a settle
    /// after that, or on a key that expired or was forgotten, is [`SettleError::UnknownRequest`]. A
    /// settle never creates a key.
    ///
    /// Outage: no fallback. The call is retried under the limiter's `attempts` and backoff (safe: a
    /// retry of a settle that ran replays it); when Redis stays unreachable the answer is
    /// [`RedisSettleError::Unavailable`] and whether the last attempt ran is unknown. Settle again
    /// later with the same actual: that replays a settlement that happened and makes one that did
    /// not (while the record is live).
    pub async fn settle(
        &self,
        user: &str,
        settle: Settle,
    ) -> Result<SettleOutcome, RedisSettleError> {
        Ok(self.settle_set(user, settle).await?.binding())
    }

    /// [`RedisLimiter::settle`] with every bandwidth's part of the settlement (one part for a
    /// limiter of one bandwidth).
    pub async fn settle_set(
        &self,
        user: &str,
        settle: Settle,
    ) -> Result<SettleOutcome<Decisions>, RedisSettleError> {
        let key = self.redis_key(user);
        let (mode, now_s, now_n, ttl_floor_ms) = self.time_args(settle.now);
        let mut invocation = self.settle.key(&key);
        match &self.set {
            None => invocation.key(self.records_key(&key)),
            // A key of several bandwidths keeps its records in its own hash.
            Some(_) => invocation.key(&key),
        };
        invocation
            .arg(mode)
            .arg(now_s)
            .arg(now_n)
            .arg(ttl_floor_ms)
            .arg(id_text(settle.request_id))
            .arg(settle.actual);
        match &self.set {
            None => invocation.arg("o").arg(&self.conf),
            Some(wire) => {
                invocation
                    .arg("h")
                    .arg(&wire.fingerprint)
                    .arg(self.settings.bandwidths.len());
                for (capacity, p, unit) in &wire.bandwidths {
                    invocation.arg(capacity).arg(*p).arg(unit);
                }
                &mut invocation
            }
        };
        // Always safe to retry: a settle that ran replays.
        match self.run(&invocation, true).await {
            Ok(raw) => {
                let reply = self.decoded(SettleReply::parse(raw))?;
                let decisions =
                    self.decoded(reply.decisions(&self.settings.bandwidths, settle.actual))?;
                Ok(SettleOutcome {
                    settled: Settled {
                        decision: decisions,
                        replayed: reply.replayed,
                    },
                    seq: reply.seq,
                })
            }
            Err(Failed::Unavailable(attempts, last)) => {
                Err(RedisSettleError::Unavailable { attempts, last })
            }
            Err(Failed::Answered(e)) => Err(self.settle_error(e, settle.actual)),
        }
    }

    /// The settle script's refusals as the rule's errors; anything else is a store error.
    fn settle_error(&self, e: RedisError, actual: u64) -> RedisSettleError {
        let number = |e: &RedisError| e.detail().and_then(|d| d.trim().parse::<u64>().ok());
        let refused = match e.code() {
            Some("BPUNKNOWN") => Some(SettleError::UnknownRequest),
            Some("BPNOTADMITTED") => Some(SettleError::NotAdmitted),
            Some("BPSETTLED") => number(&e).map(|actual| SettleError::AlreadySettled { actual }),
            Some("BPACTUAL") => {
                number(&e).map(|capacity| SettleError::InvalidActual { actual, capacity })
            }
            _ => None,
        };
        match refused {
            Some(refused) => refused.into(),
            None => match self.store_error(e) {
                Ok(mismatch) => RedisSettleError::ConfigMismatch(mismatch),
                Err(e) => RedisSettleError::Script(e),
            },
        }
    }
}
