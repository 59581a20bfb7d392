//! TEST FIXTURE: deliberately broken subjects, so the engine, the gate, the shrinker and `replay` can
//! be shown to catch a bug end to end. Not implementations of anything; never use them for real.
//!
//! Compiled only for this crate's unit tests and with the `test-fixtures` feature, which only
//! dev-dependencies enable: no shipped binary can register them. The mutants crate
//! (`crates/mutants`) holds the real catalogue of broken limiters; this fixture exists so the
//! harness's own tests do not depend on it.

use std::collections::BTreeMap;

use bucketproof_limiter::internal::{Attempt, state_from_parts, transition};
use bucketproof_limiter::{BucketState, Config};

use super::CoreSubject;
use super::core::observe;
use bucketproof_trace::subject::{
    Amount, Inspection, Observed, Subject, SubjectError, SubjectFactory,
};
use bucketproof_trace::trace::{Acquire, ConfigSpec, Setup};

/// `broken:charges-denials`: the core limiter, except that a denial *reports* one token less than the
/// bucket holds, as if the denied request had been charged. Caught by the model oracle at the first
/// denial.
pub struct ChargesDenials(CoreSubject);

/// The name under which the fixture is registered.
pub const CHARGES_DENIALS: &str = "broken:charges-denials";

impl Subject for ChargesDenials {
    fn name(&self) -> String {
        CHARGES_DENIALS.into()
    }

    fn acquire(&mut self, acquire: Acquire) -> Result<Observed, SubjectError> {
        let mut observed = self.0.acquire(acquire)?;
        if !observed.allowed
            && !observed.replayed
            && let Amount::Exact { numer, denom } = &mut observed.remaining
        {
            *numer = numer.saturating_sub(*denom);
        }
        Ok(observed)
    }

    fn reconfigure(&mut self, key: u64, config: &ConfigSpec, now: u64) -> Result<(), SubjectError> {
        self.0.reconfigure(key, config, now)
    }

    fn forget(&mut self, key: u64) -> Result<(), SubjectError> {
        self.0.forget(key)
    }

    fn sweep(&mut self, now: u64) -> Result<(), SubjectError> {
        self.0.sweep(now)
    }

    fn would_allow(&mut self, acquire: Acquire) -> Option<bool> {
        self.0.would_allow(acquire)
    }

    fn inspect(&mut self, key: u64) -> Inspection {
        self.0.inspect(key)
    }

    fn may_evict(&self) -> bool {
        true
    }
}

/// One classic bug of a hand-written bucket, for [`Classic`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bug {
    /// `>` instead of `>=`: a request that exactly empties the bucket is denied.
    StrictAllow,
    /// Denied requests are charged.
    ChargesDenials,
    /// A backwards clock moves the cursor back, so the interval is credited again.
    CursorFollowsRollback,
}

/// A hand-written keyed bucket on the real transition with one [`Bug`] planted, for showing that a
/// driver (the state machine) catches classic bugs in a few ops. Acquires only: no reconfigure,
/// sweep or forget, no request ids, no key bound.
pub struct Classic {
    bug: Bug,
    config: Config,
    buckets: BTreeMap<u64, BucketState>,
}

impl Classic {
    /// An empty table of `setup`'s config with `bug` planted.
    pub fn new(bug: Bug, setup: &Setup) -> Result<Classic, SubjectError> {
        let config = bucketproof_trace::subject::one_bandwidth(&setup.config)?;
        Ok(Classic {
            bug,
            config,
            buckets: BTreeMap::new(),
        })
    }
}

impl Subject for Classic {
    fn name(&self) -> String {
        format!("broken:classic:{:?}", self.bug)
    }

    fn acquire(&mut self, acquire: Acquire) -> Result<Observed, SubjectError> {
        let Acquire { key, cost, now, .. } = acquire;
        let created = !self.buckets.contains_key(&key);
        let state = *self
            .buckets
            .entry(key)
            .or_insert_with(|| BucketState::full(&self.config, now));
        let decide = |state| {
            transition(&self.config, state, Attempt { cost, now })
                .map_err(|_| SubjectError::InvalidCost)
        };
        let (mut next, mut decision) = decide(state)?;
        match self.bug {
            Bug::StrictAllow if decision.is_allowed() && next.balance() == 0 => {
                // `balance > cost` denies the exact fit: decide again one unit short, charge nothing.
                let refilled = state.refilled(&self.config, now);
                let one_short = state_from_parts(refilled.balance() - 1, refilled.last_refill());
                decision = decide(one_short)?.1;
                next = refilled;
            }
            Bug::ChargesDenials if !decision.is_allowed() => {
                let charged = next
                    .balance()
                    .saturating_sub(u128::from(cost) * self.config.units_per_token());
                next = state_from_parts(charged, next.last_refill());
            }
            Bug::CursorFollowsRollback if now < state.last_refill() => {
                next = state_from_parts(next.balance(), now);
            }
            _ => {}
        }
        self.buckets.insert(key, next);
        Ok(observe(&decision, created, false))
    }
}

/// `broken:global-request-ids`: the core limiter behind a request-id table that is *not* scoped per
/// key: an id seen on any key within the dedupe window replays that answer, so user B's id 7 is
/// answered with user A's decision for id 7. Caught by the model oracle at the first id one key
/// reuses from another.
pub struct GlobalRequestIds {
    core: CoreSubject,
    window: u64,
    /// id -> (key, time of the request, its answer): one table for all keys.
    records: BTreeMap<u64, (u64, u64, Observed)>,
}

/// The name under which [`GlobalRequestIds`] is registered.
pub const GLOBAL_REQUEST_IDS: &str = "broken:global-request-ids";

impl Subject for GlobalRequestIds {
    fn name(&self) -> String {
        GLOBAL_REQUEST_IDS.into()
    }

    fn acquire(&mut self, acquire: Acquire) -> Result<Observed, SubjectError> {
        // Only a record of *another* key is the bug: a key's own retries are the core's.
        if let Some(id) = acquire.request_id
            && let Some((key, at, answer)) = self.records.get(&id)
            && *key != acquire.key
            && acquire.now >= *at
            && acquire.now - at < self.window
        {
            return Ok(Observed {
                replayed: true,
                created: Some(false),
                ..answer.clone()
            });
        }
        let observed = self.core.acquire(acquire)?;
        if let Some(id) = acquire.request_id
            && !observed.replayed
        {
            self.records
                .insert(id, (acquire.key, acquire.now, observed.clone()));
        }
        Ok(observed)
    }

    fn reconfigure(&mut self, key: u64, config: &ConfigSpec, now: u64) -> Result<(), SubjectError> {
        self.core.reconfigure(key, config, now)
    }

    fn forget(&mut self, key: u64) -> Result<(), SubjectError> {
        self.core.forget(key)
    }

    fn sweep(&mut self, now: u64) -> Result<(), SubjectError> {
        self.core.sweep(now)
    }

    fn would_allow(&mut self, acquire: Acquire) -> Option<bool> {
        self.core.would_allow(acquire)
    }

    fn inspect(&mut self, key: u64) -> Inspection {
        self.core.inspect(key)
    }

    fn may_evict(&self) -> bool {
        true
    }
}

/// Builds the fixtures (`broken:*`).
pub struct BrokenSubjects;

impl SubjectFactory for BrokenSubjects {
    fn names(&self) -> Vec<String> {
        vec![CHARGES_DENIALS.into(), GLOBAL_REQUEST_IDS.into()]
    }

    fn build(&self, name: &str, setup: &Setup) -> Option<Result<Box<dyn Subject>, SubjectError>> {
        let core = || CoreSubject::new(setup);
        Some(match name {
            CHARGES_DENIALS => {
                core().map(|core| Box::new(ChargesDenials(core)) as Box<dyn Subject>)
            }
            GLOBAL_REQUEST_IDS => core().map(|core| {
                Box::new(GlobalRequestIds {
                    core,
                    window: setup.dedupe_window_ns,
                    records: BTreeMap::new(),
                }) as Box<dyn Subject>
            }),
            _ => return None,
        })
    }
}
