//! TEST FIXTURE: deliberately broken subjects, so the engine, the gate, the shrinker and `replay` can
//! be shown to catch a bug end to end. Not implementations of anything; never use them for real.
//!
//! Compiled only for this crate's unit tests and with the `test-fixtures` feature, which only
//! dev-dependencies enable: no shipped binary can register them. The mutants crate
//! (`crates/mutants`) holds the real catalogue of broken limiters; this fixture exists so the
//! harness's own tests do not depend on it.

use super::CoreSubject;
use crate::subject::{Amount, Inspection, Observed, Subject, SubjectError, SubjectFactory};
use crate::trace::{Acquire, ConfigSpec, Setup};

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

/// Builds the fixtures (`broken:*`).
pub struct BrokenSubjects;

impl SubjectFactory for BrokenSubjects {
    fn names(&self) -> Vec<String> {
        vec![CHARGES_DENIALS.into()]
    }

    fn build(&self, name: &str, setup: &Setup) -> Option<Result<Box<dyn Subject>, SubjectError>> {
        (name == CHARGES_DENIALS).then(|| {
            CoreSubject::new(setup).map(|core| Box::new(ChargesDenials(core)) as Box<dyn Subject>)
        })
    }
}
