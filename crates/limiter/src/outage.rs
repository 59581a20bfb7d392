//! The outage policy of the shared-state front ends (Redis, PostgreSQL): what an acquire answers when
//! the store cannot be reached.
//!
//! Owns: [`Unavailable`] (the policy), [`Source`] (where a decision came from) and [`Fallback`], the
//! policy applied: the local-budget bucket and the fail-open answer. Each front end keeps one
//! `Fallback` and asks it only after the store failed, so the two stores answer an outage alike.
//!
//! Promises: a fallback decision is always flagged ([`Source::LocalBudget`], [`Source::FailOpen`]) or
//! no decision at all (fail closed, which the front end turns into its own error), never an ordinary
//! denial; an invalid cost is refused as it is with the store up; a cost above the whole local budget
//! is a flagged denial that charges nothing.

use std::sync::Mutex;
use std::time::Instant;

use crate::bucket::{Attempt, BucketState, transition};
use crate::set::{SetState, transition_set};
use crate::{AcquireError, Bandwidths, Config, Decisions, Nanos};

/// What to do when the store cannot be reached (refused, dropped, timed out, restarting, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unavailable {
    /// Refuse: the acquire returns the front end's `Unavailable` error. The safe default.
    FailClosed,
    /// Decide from one local bucket per limiter instance (shared by all keys), so an outage admits at
    /// most `budget.capacity + budget.rate * outage` per instance. Decisions carry
    /// [`Source::LocalBudget`], denials included: they are never ordinary denials.
    LocalBudget {
        /// The instance's budget while the store is away.
        budget: Config,
    },
    /// Admit everything, flagged [`Source::FailOpen`]. Only if asked for.
    FailOpen,
}

/// Where a decision came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The shared bucket in the store: the real decision.
    Store,
    /// The store was unavailable; the instance's local budget decided.
    LocalBudget,
    /// The store was unavailable; admitted by the fail-open policy. `remaining` is that of a fresh
    /// bucket after the charge and means nothing.
    FailOpen,
}

/// The outage policy of one limiter instance, with the local budget's state.
#[derive(Debug)]
pub struct Fallback {
    policy: Unavailable,
    /// The local-budget bucket, created on first use.
    local: Mutex<Option<BucketState>>,
    /// Origin of the clock of fallback decisions that carry no injected `now`.
    started: Instant,
}

impl Fallback {
    /// The policy, with a local budget (if any) that is full on first use.
    pub fn new(policy: Unavailable) -> Fallback {
        Fallback {
            policy,
            local: Mutex::new(None),
            started: Instant::now(),
        }
    }

    /// The policy.
    pub fn policy(&self) -> Unavailable {
        self.policy
    }

    /// The answer to a request of `cost` at `now` (`None`: the instance's own clock) on a key of
    /// bandwidths `set` while the store is away: `Ok(None)` to fail closed, else every bandwidth's
    /// part and where it came from. Fail-open answers a fresh key's decision under the whole set; the
    /// local budget is one bucket per instance, so its decision has one part (the budget's).
    pub fn decide(
        &self,
        set: &Bandwidths,
        cost: u64,
        now: Option<Nanos>,
    ) -> Result<Option<(Decisions, Source)>, AcquireError> {
        let now = now.unwrap_or_else(|| self.local_now());
        // Validates the cost against the smallest capacity, and is what fail-open answers.
        let (_, fresh) = transition_set(set, &SetState::full(set, now), Attempt { cost, now })?;
        Ok(match self.policy {
            Unavailable::FailClosed => None,
            Unavailable::FailOpen => Some((fresh, Source::FailOpen)),
            Unavailable::LocalBudget { budget } => {
                Some((self.local_budget(&budget, cost, now), Source::LocalBudget))
            }
        })
    }

    /// One decision of the local budget at `now`, as a set of one; the budget's state moves on.
    fn local_budget(&self, budget: &Config, cost: u64, now: Nanos) -> Decisions {
        let mut local = self.local.lock().unwrap_or_else(|e| e.into_inner());
        let state = local.unwrap_or_else(|| BucketState::full(budget, now));
        let (on, asked) = if cost <= budget.capacity() {
            (state, Attempt { cost, now })
        } else {
            // Valid for the real config but larger than the whole local budget: a flagged denial
            // that can never succeed locally (shown as a full-budget request on an empty bucket),
            // and nothing is charged.
            let refilled = state.refilled(budget, now);
            let empty = BucketState::from_parts(0, refilled.last_refill());
            let whole_budget = Attempt {
                cost: budget.capacity(),
                now,
            };
            (empty, whole_budget)
        };
        let (next, _) = transition(budget, on, asked).expect("a cost within the budget is valid");
        *local = Some(if cost <= budget.capacity() {
            next
        } else {
            state.refilled(budget, now)
        });
        // The same decision, as a set of one: the core's set transition from the same state.
        let one = Bandwidths::from(*budget);
        let on = SetState::from_balances([on.balance()], on.last_refill());
        let (_, decisions) =
            transition_set(&one, &on, asked).expect("a cost within the budget is valid");
        decisions
    }

    fn local_now(&self) -> Nanos {
        u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Rate;

    fn set() -> Bandwidths {
        Bandwidths::from(Config::new(10, Rate::per_second(1)).unwrap())
    }

    #[test]
    fn fail_closed_decides_nothing_and_invalid_costs_stay_errors() {
        let closed = Fallback::new(Unavailable::FailClosed);
        assert_eq!(closed.decide(&set(), 1, Some(0)).unwrap(), None);
        for policy in [Unavailable::FailClosed, Unavailable::FailOpen] {
            assert!(Fallback::new(policy).decide(&set(), 0, Some(0)).is_err());
            assert!(Fallback::new(policy).decide(&set(), 11, Some(0)).is_err());
        }
    }

    #[test]
    fn the_local_budget_is_one_bucket_for_every_key_and_flags_its_denials() {
        let budget = Config::new(3, Rate::per_second(1)).unwrap();
        let local = Fallback::new(Unavailable::LocalBudget { budget });
        let verdicts: Vec<(bool, Source)> = (0..4)
            .map(|_| {
                let (decisions, source) = local.decide(&set(), 1, Some(5)).unwrap().unwrap();
                (decisions.is_allowed(), source)
            })
            .collect();
        let flagged = |allowed| (allowed, Source::LocalBudget);
        assert_eq!(
            verdicts,
            [flagged(true), flagged(true), flagged(true), flagged(false)]
        );
        // Above the whole budget but valid for the key: a flagged denial that charges nothing.
        let (big, _) = local
            .decide(&set(), 5, Some(1_000_000_005))
            .unwrap()
            .unwrap();
        assert!(!big.is_allowed());
        let (after, _) = local
            .decide(&set(), 1, Some(1_000_000_005))
            .unwrap()
            .unwrap();
        assert!(after.is_allowed(), "the refilled token is still there");
    }

    #[test]
    fn fail_open_admits_flagged() {
        let open = Fallback::new(Unavailable::FailOpen);
        let (decisions, source) = open.decide(&set(), 10, Some(0)).unwrap().unwrap();
        assert!(decisions.is_allowed());
        assert_eq!(source, Source::FailOpen);
    }
}
