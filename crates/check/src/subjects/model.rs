//! The reference model as a subject: lets the harness check itself (model against model must agree)
//! and lets scenarios run with no implementation at all (oracle-only throughput).

use bucketproof_limiter::Wait;
use bucketproof_model::Rational;
use bucketproof_model::{Model, ModelDecision, ModelError, ModelWait, Outcome};

use bucketproof_trace::subject::{
    Amount, BandwidthObserved, Inspected, Inspection, Observed, Subject, SubjectError,
};
use bucketproof_trace::trace::{Acquire, ConfigSpec, Settle, Setup};

/// The subject's error that answers the model's: a refused cost or actual cost is `InvalidCost`,
/// a settle's refusals are their own kinds.
pub(crate) fn subject_error_of(error: &ModelError) -> SubjectError {
    match error {
        ModelError::InvalidCost { .. } | ModelError::InvalidActual { .. } => {
            SubjectError::InvalidCost
        }
        ModelError::UnknownRequest => SubjectError::UnknownRequest,
        ModelError::NotAdmitted => SubjectError::NotAdmitted,
        ModelError::AlreadySettled { .. } => SubjectError::AlreadySettled,
        other => SubjectError::Build(format!("{other:?}")),
    }
}

/// The model behind the subject interface.
pub struct ModelSubject {
    model: Model,
}

impl ModelSubject {
    /// A model configured as `setup` says (the model has no key bound: it never evicts by itself).
    pub fn new(setup: &Setup) -> Result<ModelSubject, SubjectError> {
        let config = setup
            .config
            .to_model()
            .map_err(|e| SubjectError::Build(e.to_string()))?;
        Ok(ModelSubject {
            model: Model::new(config, setup.dedupe_window_ns, setup.dedupe_per_key),
        })
    }
}

/// A model wait as the limiter's [`Wait`] type, which the oracles use.
pub fn wait(wait: ModelWait) -> Wait {
    match wait {
        ModelWait::After(ns) => Wait::After(ns),
        ModelWait::Never => Wait::Never,
    }
}

/// An exact rational as an [`Amount`] (model amounts are at most `capacity * q * 10^9 < 2^126`).
pub fn amount(value: &Rational) -> Amount {
    Amount::Exact {
        numer: u128::try_from(value.numerator()).expect("model amounts are >= 0 and fit u128"),
        denom: u128::try_from(value.denominator()).expect("model denominators fit u128"),
    }
}

/// Maps a model outcome to what the oracles compare: the binding part as the whole decision, the
/// largest wait as its retry-after, and (for several bandwidths) every part.
pub fn observe(outcome: &Outcome) -> Observed {
    let decision = &outcome.decision;
    let parts = outcome.decisions.bandwidths();
    Observed {
        allowed: decision.is_allowed(),
        remaining: amount(decision.remaining()),
        retry_after: outcome.decisions.retry_after().map(wait),
        reset_after: Some(wait(decision.reset_after())),
        bandwidths: if parts.len() > 1 {
            parts.iter().map(observe_part).collect()
        } else {
            Vec::new()
        },
        created: Some(outcome.created),
        replayed: outcome.replayed,
    }
}

fn observe_part(part: &ModelDecision) -> BandwidthObserved {
    BandwidthObserved {
        remaining: amount(part.remaining()),
        retry_after: part.retry_after().map(wait),
        reset_after: Some(wait(part.reset_after())),
    }
}

impl Subject for ModelSubject {
    fn name(&self) -> String {
        "model".into()
    }

    fn acquire(&mut self, acquire: Acquire) -> Result<Observed, SubjectError> {
        // The model keeps its own argument order (it shares no types with the harness).
        let Acquire { key, cost, now, .. } = acquire;
        match self.model.acquire(key, now, cost, acquire.request_id) {
            Ok(outcome) => Ok(observe(&outcome)),
            Err(ModelError::InvalidCost { .. }) => Err(SubjectError::InvalidCost),
            Err(other) => Err(SubjectError::Build(format!("{other:?}"))),
        }
    }

    fn settle(&mut self, settle: Settle) -> Result<Observed, SubjectError> {
        let Settle {
            key,
            request_id,
            actual,
            now,
        } = settle;
        (self.model.settle(key, now, request_id, actual))
            .map(|outcome| observe(&outcome))
            .map_err(|error| subject_error_of(&error))
    }

    fn reconfigure(&mut self, key: u64, config: &ConfigSpec, now: u64) -> Result<(), SubjectError> {
        let config = config
            .to_model()
            .map_err(|e| SubjectError::Build(e.to_string()))?;
        self.model.reconfigure(key, config, now);
        Ok(())
    }

    fn forget(&mut self, key: u64) -> Result<(), SubjectError> {
        self.model.forget(key);
        Ok(())
    }

    fn sweep(&mut self, now: u64) -> Result<(), SubjectError> {
        self.model.sweep(now);
        Ok(())
    }

    fn would_allow(&mut self, acquire: Acquire) -> Option<bool> {
        let Acquire { key, cost, now, .. } = acquire;
        let peeks = self.model.peek_set(key, now);
        Some(
            peeks
                .iter()
                .all(|peek| peek.remaining >= Rational::from(cost)),
        )
    }

    fn inspect(&mut self, key: u64) -> Inspection {
        let capacity = self.model.config_of(key).capacity();
        let held = self.model.state(key);
        held.map(|(tokens, last_refill)| Inspected {
            tokens: amount(tokens),
            last_refill,
            capacity,
        })
        .into()
    }
}
