//! The outage policy: what an acquire answers when Redis cannot be reached.
//!
//! Owns: [`Unavailable`] (the policy), [`Source`] and [`Outcome`] (where a decision came from), and the
//! fallback itself: the local-budget bucket and the fail-open answer.
//!
//! Promises: a fallback decision is always flagged ([`Source::LocalBudget`], [`Source::FailOpen`]) or an
//! error ([`RedisAcquireError::Unavailable`]), never an ordinary denial; an invalid cost is refused as
//! it is with Redis up; a cost above the whole local budget is a flagged denial that charges nothing.

use bucketproof_limiter::internal::{Attempt, transition};
use bucketproof_limiter::{Acquired, BucketState, Config, Decision, Nanos, Request};
use redis::RedisError;

use super::RedisLimiter;
use super::error::RedisAcquireError;
use super::stats::bump;

/// What to do when Redis cannot be reached (refused, dropped, timed out, loading, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unavailable {
    /// Refuse: the acquire returns [`RedisAcquireError::Unavailable`]. The safe default.
    FailClosed,
    /// Decide from one local bucket per limiter instance (shared by all keys), so an outage admits at
    /// most `budget.capacity + budget.rate * outage` per instance. Decisions carry
    /// [`Source::LocalBudget`], denials included: they are never ordinary denials.
    LocalBudget {
        /// The instance's budget while Redis is away.
        budget: Config,
    },
    /// Admit everything, flagged [`Source::FailOpen`]. Only if asked for.
    FailOpen,
}

/// Where a decision came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The shared bucket in Redis: the real decision.
    Redis,
    /// Redis was unavailable; the instance's local budget decided.
    LocalBudget,
    /// Redis was unavailable; admitted by the fail-open policy. `remaining` is that of a fresh bucket
    /// after the charge and means nothing.
    FailOpen,
}

/// An acquire's result: the same [`Acquired`] the in-memory limiter returns, plus where it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Decision, whether the bucket was created, whether it was a replay.
    pub acquired: Acquired,
    /// Redis, or which fallback.
    pub source: Source,
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

impl RedisLimiter {
    /// Applies the unavailability policy. Every branch is flagged or an error: never an ordinary denial.
    pub(super) fn unavailable(
        &self,
        request: Request,
        attempts: u32,
        last: RedisError,
    ) -> Result<Outcome, RedisAcquireError> {
        bump(&self.counters.unavailable);
        let now = request.now.unwrap_or_else(|| self.local_now());
        // Without Redis the key's override (if any) is unknown: validate against the default config.
        let config = self.settings.config;
        let attempt = Attempt {
            cost: request.cost,
            now,
        };
        // Validates the cost, and is what fail-open answers: a fresh bucket's decision.
        let (_, fresh_decision) = transition(&config, BucketState::full(&config, now), attempt)?;
        let fallback = |decision: Decision, source| Outcome {
            acquired: Acquired {
                decision,
                created: false,
                replayed: false,
            },
            source,
            seq: 0,
        };
        match self.settings.unavailable {
            Unavailable::FailClosed => {
                bump(&self.counters.fail_closed);
                Err(RedisAcquireError::Unavailable { attempts, last })
            }
            Unavailable::FailOpen => {
                bump(&self.counters.fail_open);
                Ok(fallback(fresh_decision, Source::FailOpen))
            }
            Unavailable::LocalBudget { budget } => {
                let mut local = self.local.lock().unwrap_or_else(|e| e.into_inner());
                let state = local.unwrap_or_else(|| BucketState::full(&budget, now));
                let (next, decision) = if request.cost <= budget.capacity() {
                    transition(&budget, state, attempt)?
                } else {
                    // Valid for the real config but larger than the whole local budget: a flagged
                    // denial that can never succeed locally (shown as a full-budget request on an
                    // empty bucket), and nothing is charged.
                    let refilled = state.refilled(&budget, now);
                    let empty = BucketState::new(&budget, 0, refilled.last_refill())
                        .expect("an empty balance is within every capacity");
                    let whole_budget = Attempt {
                        cost: budget.capacity(),
                        now,
                    };
                    (refilled, transition(&budget, empty, whole_budget)?.1)
                };
                *local = Some(next);
                if decision.is_allowed() {
                    bump(&self.counters.local_allowed);
                } else {
                    bump(&self.counters.local_denied);
                }
                Ok(fallback(decision, Source::LocalBudget))
            }
        }
    }

    fn local_now(&self) -> Nanos {
        u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}
