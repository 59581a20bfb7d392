//! The f64 baselines of `bucketproof-float` as subjects: the textbook bucket and the Go-style one.

use bucketproof_float::{
    FloatBucket, FloatDecision, FloatError, FloatKeyed, GoStyleBucket, TextbookBucket,
};
use bucketproof_limiter::Wait;

use bucketproof_trace::subject::{Amount, Inspected, Inspection, Observed, Subject, SubjectError};
use bucketproof_trace::trace::{Acquire, Setup};

fn observe(decision: FloatDecision) -> Observed {
    let wait = |ns: Option<u64>| Some(ns.map_or(Wait::Never, Wait::After));
    Observed {
        allowed: decision.allowed,
        remaining: Amount::Approx(decision.remaining),
        retry_after: if decision.allowed {
            None
        } else {
            wait(decision.retry_after_ns)
        },
        reset_after: wait(decision.reset_after_ns),
        bandwidths: Vec::new(),
        created: None,
        replayed: false,
    }
}

fn float_error(error: FloatError) -> SubjectError {
    match error {
        FloatError::InvalidCost { .. } => SubjectError::InvalidCost,
        other => SubjectError::Build(other.to_string()),
    }
}

/// A keyed float bucket of type `B` under a subject name.
pub struct FloatSubject<B: FloatBucket> {
    name: &'static str,
    buckets: FloatKeyed<B>,
}

/// The textbook f64 bucket.
pub type FloatTextbookSubject = FloatSubject<TextbookBucket>;
/// The Go x/time/rate style f64 bucket.
pub type FloatGoSubject = FloatSubject<GoStyleBucket>;

/// The setup's default config as the float constructors take it: `(capacity, p, q)`.
fn float_parts(setup: &Setup) -> Result<(u64, u64, u64), SubjectError> {
    let config = bucketproof_trace::subject::one_bandwidth(&setup.config)?;
    Ok((
        config.capacity(),
        config.rate().numer(),
        config.rate().denom(),
    ))
}

impl FloatSubject<TextbookBucket> {
    /// Built from the setup's default config (float buckets have no reconfigure or key bound).
    pub fn new(setup: &Setup) -> Result<Self, SubjectError> {
        let (capacity, numer, denom) = float_parts(setup)?;
        let template = TextbookBucket::new(capacity, numer, denom).map_err(float_error)?;
        Ok(FloatSubject::from_template("float-textbook", template))
    }
}

impl FloatSubject<GoStyleBucket> {
    /// Built from the setup's default config, with today's `x/time/rate` arithmetic.
    pub fn new(setup: &Setup) -> Result<Self, SubjectError> {
        let (capacity, numer, denom) = float_parts(setup)?;
        let template = GoStyleBucket::new(capacity, numer, denom).map_err(float_error)?;
        Ok(FloatSubject::from_template("float-go", template))
    }

    /// Built from the setup's default config, transcribing another `x/time/rate` version, under `name`.
    pub fn with_go_version(
        setup: &Setup,
        name: &'static str,
        version: bucketproof_float::GoRateVersion,
    ) -> Result<Self, SubjectError> {
        let (capacity, numer, denom) = float_parts(setup)?;
        let template = GoStyleBucket::new(capacity, numer, denom)
            .map_err(float_error)?
            .with_version(version);
        Ok(FloatSubject::from_template(name, template))
    }
}

impl<B: FloatBucket> FloatSubject<B> {
    /// A subject whose every key starts as a copy of `template`, under `name`. For comparisons that
    /// need a bucket the setup cannot describe: an `f64` rate given digit for digit (Go's
    /// `rate.Limit(0.7692307692307693)`), or a historical [`bucketproof_float::GoRateVersion`].
    pub fn from_template(name: &'static str, template: B) -> Self {
        FloatSubject {
            name,
            buckets: FloatKeyed::new(template),
        }
    }
}

impl<B: FloatBucket> Subject for FloatSubject<B> {
    fn name(&self) -> String {
        self.name.into()
    }

    fn acquire(&mut self, acquire: Acquire) -> Result<Observed, SubjectError> {
        if acquire.request_id.is_some() {
            return Err(SubjectError::Unsupported("request ids"));
        }
        let Acquire { key, cost, now, .. } = acquire;
        self.buckets
            .acquire(key, now, cost)
            .map(observe)
            .map_err(float_error)
    }

    fn forget(&mut self, key: u64) -> Result<(), SubjectError> {
        self.buckets.forget(key);
        Ok(())
    }

    fn would_allow(&mut self, acquire: Acquire) -> Option<bool> {
        let Acquire { key, cost, now, .. } = acquire;
        let peek = self.buckets.peek(key, now);
        Some(peek.remaining >= cost as f64)
    }

    fn inspect(&mut self, key: u64) -> Inspection {
        // A bucket that was never refilled has no cursor to show: as good as absent.
        let held = self.buckets.get(key).and_then(|bucket| {
            Some(Inspected {
                tokens: Amount::Approx(bucket.tokens()),
                last_refill: bucket.last_refill()?,
                capacity: bucket.capacity(),
            })
        });
        held.into()
    }
}
