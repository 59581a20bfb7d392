//! The outage policy: what an acquire answers when Redis cannot be reached.
//!
//! Owns: [`Unavailable`] (the policy), [`Source`] and [`Outcome`] (where a decision came from), and the
//! fallback itself: the local-budget bucket and the fail-open answer.
//!
//! Promises: a fallback decision is always flagged ([`Source::LocalBudget`], [`Source::FailOpen`]) or an
//! error ([`RedisAcquireError::Unavailable`]), never an ordinary denial; an invalid cost is refused as
//! it is with Redis up; a cost above the whole local budget is a flagged denial that charges nothing.

use bucketproof_limiter::outage::Source;
use bucketproof_limiter::{Acquired, Decision, Decisions, Request};
use redis::RedisError;

use super::RedisLimiter;
use super::error::RedisAcquireError;
use super::stats::bump;

/// An acquire's result: the same [`Acquired`] the in-memory limiter returns, plus where it came from.
/// `Outcome` carries one [`Decision`] (`acquire*`); `Outcome<Decisions>` every bandwidth's part
/// (`acquire_set*`), under the same outage policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome<D = Decision> {
    /// Decision, whether the bucket was created, whether it was a replay.
    pub acquired: Acquired<D>,
    /// The store (Redis), or which fallback.
    pub source: Source,
    /// This decision created the key's bucket within one refill period of a detected loss of its
    /// slot's state (see [`crate::Recovery`]): under the conservative policy it started below full,
    /// under the trusting one full. Always false for a fallback decision.
    pub recovering: bool,
    /// The key's transition counter in Redis after this decision (0 for a fallback decision). Tests
    /// use it to put concurrent decisions in the order Redis ran them.
    pub seq: u64,
}

impl Outcome {
    /// The decision.
    pub fn decision(&self) -> Decision {
        self.acquired.decision
    }
}

impl Outcome<Decisions> {
    /// Every bandwidth's part of the decision.
    pub fn decisions(&self) -> &Decisions {
        &self.acquired.decision
    }

    /// The same outcome with the binding part ([`Decisions::binding`]) as its one decision: what
    /// `acquire*` answers for a key of several bandwidths, as the in-memory limiter's `acquire_at`.
    pub fn binding(&self) -> Outcome {
        Outcome {
            acquired: self.acquired.binding(),
            source: self.source,
            recovering: self.recovering,
            seq: self.seq,
        }
    }
}

impl RedisLimiter {
    /// Applies the unavailability policy. Every branch is flagged or an error: never an ordinary denial.
    /// The policy of [`RedisLimiter::unavailable_set`], answered with the decision's binding part (for
    /// one bandwidth, the decision).
    pub(super) fn unavailable(
        &self,
        request: Request,
        attempts: u32,
        last: RedisError,
    ) -> Result<Outcome, RedisAcquireError> {
        self.unavailable_set(request, attempts, last)
            .map(|outcome| outcome.binding())
    }

    /// The unavailability policy for `acquire_set*`: the shared [`Fallback`](bucketproof_limiter::outage::Fallback)'s
    /// answer with every bandwidth's part, counted.
    pub(super) fn unavailable_set(
        &self,
        request: Request,
        attempts: u32,
        last: RedisError,
    ) -> Result<Outcome<Decisions>, RedisAcquireError> {
        bump(&self.counters.unavailable);
        let answer = self
            .fallback
            .decide(&self.settings.bandwidths, request.cost, request.now)?;
        let Some((decision, source)) = answer else {
            bump(&self.counters.fail_closed);
            return Err(RedisAcquireError::Unavailable { attempts, last });
        };
        bump(match (source, decision.is_allowed()) {
            (Source::FailOpen, _) => &self.counters.fail_open,
            (_, true) => &self.counters.local_allowed,
            (_, false) => &self.counters.local_denied,
        });
        Ok(Outcome {
            acquired: Acquired {
                decision,
                created: false,
                replayed: false,
            },
            source,
            recovering: false,
            seq: 0,
        })
    }
}
