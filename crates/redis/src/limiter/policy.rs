//! The outage policy: what an acquire answers when Redis cannot be reached.
//!
//! Owns: [`Unavailable`] (the policy), [`Source`] and [`Outcome`] (where a decision came from), and the
//! fallback itself: the local-budget bucket and the fail-open answer.
//!
//! Promises: a fallback decision is always flagged ([`Source::LocalBudget`], [`Source::FailOpen`]) or an
//! error ([`RedisAcquireError::Unavailable`]), never an ordinary denial; an invalid cost is refused as
//! it is with Redis up; a cost above the whole local budget is a flagged denial that charges nothing.

use bucketproof_limiter::internal::{Attempt, transition, transition_set};
use bucketproof_limiter::{
    AcquireError, Acquired, Bandwidths, BucketState, Config, Decision, Decisions, Nanos, Request,
    SetState,
};
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
/// `Outcome` carries one [`Decision`] (`acquire*`); `Outcome<Decisions>` every bandwidth's part
/// (`acquire_set*`), under the same outage policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome<D = Decision> {
    /// Decision, whether the bucket was created, whether it was a replay.
    pub acquired: Acquired<D>,
    /// Redis, or which fallback.
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
            acquired: Acquired {
                decision: *self.acquired.decision.binding(),
                created: self.acquired.created,
                replayed: self.acquired.replayed,
            },
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

    /// The unavailability policy for `acquire_set*`: as [`RedisLimiter::unavailable`], with every
    /// bandwidth's part. Fail-open answers a fresh key's decision under the whole set; the local
    /// budget is one bucket per instance, so its decision has one part (the budget's).
    pub(super) fn unavailable_set(
        &self,
        request: Request,
        attempts: u32,
        last: RedisError,
    ) -> Result<Outcome<Decisions>, RedisAcquireError> {
        bump(&self.counters.unavailable);
        let now = request.now.unwrap_or_else(|| self.local_now());
        let set = &self.settings.bandwidths;
        let attempt = Attempt {
            cost: request.cost,
            now,
        };
        // Validates the cost against the smallest capacity, and is what fail-open answers.
        let (_, fresh) = transition_set(set, &SetState::full(set, now), attempt)?;
        let fallback = |decision: Decisions, source| Outcome {
            acquired: Acquired {
                decision,
                created: false,
                replayed: false,
            },
            source,
            recovering: false,
            seq: 0,
        };
        match self.settings.unavailable {
            Unavailable::FailClosed => {
                bump(&self.counters.fail_closed);
                Err(RedisAcquireError::Unavailable { attempts, last })
            }
            Unavailable::FailOpen => {
                bump(&self.counters.fail_open);
                Ok(fallback(fresh, Source::FailOpen))
            }
            Unavailable::LocalBudget { budget } => {
                let (state, asked, _) = self.local_budget(&budget, request.cost, now)?;
                // The same decision, as a set of one: the core's set transition from the same state.
                let one = Bandwidths::from(budget);
                let (_, decisions) =
                    crate::set::set_state(&one, &[state.balance()], state.last_refill())
                        .map(|state| transition_set(&one, &state, asked))
                        .expect("a local-budget state is a state of its budget")?;
                Ok(fallback(decisions, Source::LocalBudget))
            }
        }
    }

    /// One decision of the local budget at `now`: the state it was decided on, the attempt it decided,
    /// and the decision. The budget's state moves on.
    fn local_budget(
        &self,
        budget: &Config,
        cost: u64,
        now: Nanos,
    ) -> Result<(BucketState, Attempt, Decision), AcquireError> {
        let mut local = self.local.lock().unwrap_or_else(|e| e.into_inner());
        let state = local.unwrap_or_else(|| BucketState::full(budget, now));
        let (on, asked) = if cost <= budget.capacity() {
            (state, Attempt { cost, now })
        } else {
            // Valid for the real config but larger than the whole local budget: a flagged
            // denial that can never succeed locally (shown as a full-budget request on an
            // empty bucket), and nothing is charged.
            let refilled = state.refilled(budget, now);
            let empty = BucketState::new(budget, 0, refilled.last_refill())
                .expect("an empty balance is within every capacity");
            let whole_budget = Attempt {
                cost: budget.capacity(),
                now,
            };
            (empty, whole_budget)
        };
        let (next, decision) = transition(budget, on, asked)?;
        *local = Some(if cost <= budget.capacity() {
            next
        } else {
            state.refilled(budget, now)
        });
        if decision.is_allowed() {
            bump(&self.counters.local_allowed);
        } else {
            bump(&self.counters.local_denied);
        }
        Ok((on, asked, decision))
    }

    fn local_now(&self) -> Nanos {
        u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}
