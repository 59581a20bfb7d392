//! The one interface the harness talks to: a [`Subject`] is an implementation under test (the exact
//! core, a float bucket, Redis, a mutant, a peer). Adapters are small; everything the oracles need is
//! in [`Observed`].

use bucketproof_limiter::Wait;
use bucketproof_model::Integer;
use bucketproof_model::Rational;

use crate::trace::{ConfigSpec, Setup};

/// A token amount as a subject reports it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Amount {
    /// Exactly `numer / denom`.
    Exact {
        /// Numerator.
        numer: u128,
        /// Denominator (> 0).
        denom: u128,
    },
    /// A float subject's value.
    Approx(f64),
}

impl Amount {
    /// The amount as an exact rational (a float is converted exactly, bit for bit). `None` for NaN or
    /// infinities.
    pub fn to_rational(self) -> Option<Rational> {
        match self {
            Amount::Exact { numer, denom } => Some(Rational::from_parts_signed(
                Integer::from(numer),
                Integer::from(denom),
            )),
            Amount::Approx(value) => Rational::try_from(value).ok(),
        }
    }

    /// For plots and reports only.
    pub fn to_f64_lossy(self) -> f64 {
        match self {
            Amount::Exact { numer, denom } => numer as f64 / denom as f64,
            Amount::Approx(value) => value,
        }
    }
}

/// What a subject answered to one acquire.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Observed {
    /// Admitted and charged.
    pub allowed: bool,
    /// Balance after the decision.
    pub remaining: Amount,
    /// For a denial, the subject's retry-after (`None` if it reports none).
    pub retry_after: Option<Wait>,
    /// The subject's reset-after, if it reports one.
    pub reset_after: Option<Wait>,
    /// Whether the bucket was created by this call (`None`: the subject does not say).
    pub created: Option<bool>,
    /// The subject answered from a request-id record.
    pub replayed: bool,
}

/// A subject's state for one key, for the invariant oracle.
#[derive(Clone, Debug, PartialEq)]
pub struct Inspected {
    /// Balance.
    pub tokens: Amount,
    /// Refill cursor.
    pub last_refill: u64,
    /// Capacity in force.
    pub capacity: u64,
}

/// Why a subject refused an operation (as opposed to denying a request).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubjectError {
    /// `cost == 0` or `cost > capacity`.
    #[error("invalid cost")]
    InvalidCost,
    /// A new key at the key bound.
    #[error("key limit reached")]
    KeyLimitReached,
    /// The subject cannot do this operation (e.g. a float bucket has no reconfigure).
    #[error("unsupported by this subject: {0}")]
    Unsupported(&'static str),
    /// The subject's store failed (e.g. Redis unreachable): never a denial.
    #[error("store error: {0}")]
    Store(String),
    /// The subject could not be built for this setup.
    #[error("cannot build subject: {0}")]
    Build(String),
}

/// An implementation under test.
pub trait Subject {
    /// Stable name used in reports and replay commands (e.g. `core`, `float-textbook`, `mutant:no-clamp`).
    fn name(&self) -> String;

    /// Take `cost` tokens for `key` at `now`.
    fn acquire(
        &mut self,
        key: u64,
        now: u64,
        cost: u64,
        request_id: Option<u64>,
    ) -> Result<Observed, SubjectError>;

    /// Move `key` to `config` at `now`.
    fn reconfigure(
        &mut self,
        _key: u64,
        _config: &ConfigSpec,
        _now: u64,
    ) -> Result<(), SubjectError> {
        Err(SubjectError::Unsupported("reconfigure"))
    }

    /// Drop all state of `key`.
    fn forget(&mut self, _key: u64) -> Result<(), SubjectError> {
        Err(SubjectError::Unsupported("forget"))
    }

    /// Drop evictable buckets at `now`.
    fn sweep(&mut self, _now: u64) -> Result<(), SubjectError> {
        Err(SubjectError::Unsupported("sweep"))
    }

    /// Side-effect free: would `cost` be admitted for `key` at `now` with no other traffic? `None` if the
    /// subject cannot tell without changing state (then the retry-after tightness oracle is skipped).
    fn would_allow(&mut self, _key: u64, _now: u64, _cost: u64) -> Option<bool> {
        None
    }

    /// The key's stored state, if the subject can show it (`None` also for an absent key).
    fn inspect(&mut self, _key: u64) -> Option<Inspected> {
        None
    }

    /// True if [`Subject::inspect`] works, so that its `None` means "no state for this key".
    fn can_inspect(&self) -> bool {
        false
    }

    /// True if the subject may drop buckets on its own (amortized sweeping, key bound): the differential
    /// oracle then follows its `created` reports instead of failing on them.
    fn may_evict(&self) -> bool {
        false
    }
}

/// Builds a subject for a setup. Implemented by the subject registry (see [`crate::subjects`]) and by
/// crates that add subjects (Redis, mutants).
pub trait SubjectFactory {
    /// Names this factory builds.
    fn names(&self) -> Vec<String>;
    /// Builds `name` for `setup`, or `None` if the name is not this factory's.
    fn build(&self, name: &str, setup: &Setup) -> Option<Result<Box<dyn Subject>, SubjectError>>;
}
