//! The one interface the harness talks to: a [`Subject`] is an implementation under test (the exact
//! core, a float bucket, Redis, a mutant, a peer). Adapters are small; everything the oracles need is
//! in [`Observed`].

use std::cmp::Ordering;

use bucketproof_limiter::Wait;
use bucketproof_model::Integer;
use bucketproof_model::Rational;

use crate::profile::Profile;
use crate::subject_file::ExecSpec;
use crate::trace::{Acquire, ConfigSpec, Op, Settle, Setup};

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

/// An exact amount as an integer or `a/b` (lowest terms), a float's as its exact value; an
/// unreported balance as `none` (as an unreported wait is shown); infinities as the float.
impl std::fmt::Display for Amount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.is_reported() {
            return f.write_str("none");
        }
        match self.to_rational() {
            Some(value) if value.is_int() => write!(f, "{}", value.numerator()),
            Some(value) => write!(f, "{}/{}", value.numerator(), value.denominator()),
            None => write!(f, "{self:?}"),
        }
    }
}

impl Amount {
    /// The balance of a decision whose subject reports none (an exec reply without `remaining`, a
    /// script reply with no balance mapped). It is NaN, so every comparison that needs a number
    /// finds none, and the oracles that judge a reported balance skip it
    /// ([`Amount::is_reported`]); the decision itself is judged as any other.
    pub const UNREPORTED: Amount = Amount::Approx(f64::NAN);

    /// False for [`Amount::UNREPORTED`] (any NaN): the subject said nothing about the balance.
    pub fn is_reported(self) -> bool {
        !matches!(self, Amount::Approx(value) if value.is_nan())
    }

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

    /// Whether this is exactly `value`.
    ///
    /// The per-step comparison of the differential oracle: an exact amount is compared without building
    /// a reduced fraction. `value = a/b` in lowest terms equals `numer/denom` exactly when `b` divides
    /// `denom` and `numer = a * (denom / b)`; an `a` or `b` wider than `u128` (or a negative `a`) cannot.
    pub fn equals(self, value: &Rational) -> bool {
        match self {
            Amount::Exact { numer, denom } => {
                match (
                    u128::try_from(value.numerator()),
                    u128::try_from(value.denominator()),
                ) {
                    (Ok(a), Ok(b)) => denom % b == 0 && a.checked_mul(denom / b) == Some(numer),
                    _ => false,
                }
            }
            Amount::Approx(_) => self.to_rational().as_ref() == Some(value),
        }
    }

    /// Compares two amounts exactly; `None` if either is not a number. Two exact amounts on the same
    /// grid (the same denominator, as before and after one step of one config) compare by numerator.
    pub fn compare(self, other: Amount) -> Option<Ordering> {
        match (self, other) {
            (
                Amount::Exact { numer, denom },
                Amount::Exact {
                    numer: other_numer,
                    denom: other_denom,
                },
            ) if denom == other_denom => Some(numer.cmp(&other_numer)),
            _ => Some(self.to_rational()?.cmp(&other.to_rational()?)),
        }
    }

    /// Compares with a whole number of tokens exactly; `None` if this is not a number.
    pub fn compare_whole(self, tokens: u64) -> Option<Ordering> {
        match self {
            // `tokens * denom` past u128 is above every u128 numerator.
            Amount::Exact { numer, denom } => Some(
                (denom.checked_mul(u128::from(tokens)))
                    .map_or(Ordering::Less, |scaled| numer.cmp(&scaled)),
            ),
            Amount::Approx(_) => Some(self.to_rational()?.cmp(&Rational::from(tokens))),
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
///
/// For a key of several bandwidths, `remaining` and `reset_after` are the binding bandwidth's (the
/// one that answers for the whole decision, see the limiter's `Decisions::binding`), `retry_after` the
/// whole decision's (the largest wait), and `bandwidths` every bandwidth's part when the subject
/// reports them.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    /// Admitted and charged (in every bandwidth).
    pub allowed: bool,
    /// Balance after the decision ([`Amount::UNREPORTED`] if the subject reports none).
    pub remaining: Amount,
    /// For a denial, the subject's retry-after (`None` if it reports none).
    pub retry_after: Option<Wait>,
    /// The subject's reset-after, if it reports one.
    pub reset_after: Option<Wait>,
    /// Each bandwidth's part, in the set's order, for a key of several bandwidths; empty when the key
    /// has one, or when the subject reports only the whole decision (then only that is judged).
    pub bandwidths: Vec<BandwidthObserved>,
    /// Whether the bucket was created by this call (`None`: the subject does not say).
    pub created: Option<bool>,
    /// The subject answered from a request-id record.
    pub replayed: bool,
}

/// One bandwidth's part of a decision.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BandwidthObserved {
    /// The bandwidth's balance after the decision.
    pub remaining: Amount,
    /// For a denial, how long until this bandwidth alone covers the cost (0 when it does).
    pub retry_after: Option<Wait>,
    /// How long until this bandwidth is full again with no traffic.
    pub reset_after: Option<Wait>,
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

/// What [`Subject::inspect`] shows of one key.
#[derive(Clone, Debug, PartialEq)]
pub enum Inspection {
    /// The subject cannot show its state.
    Unsupported,
    /// The subject holds no state for the key.
    Absent,
    /// The key's state.
    Held(Inspected),
}

impl Inspection {
    /// The state, if the subject showed one.
    pub fn held(&self) -> Option<&Inspected> {
        match self {
            Inspection::Held(state) => Some(state),
            Inspection::Unsupported | Inspection::Absent => None,
        }
    }

    /// False for [`Inspection::Unsupported`]: then an absent state says nothing.
    pub fn is_supported(&self) -> bool {
        !matches!(self, Inspection::Unsupported)
    }
}

/// A subject that can show its state: `None` is [`Inspection::Absent`].
impl From<Option<Inspected>> for Inspection {
    fn from(state: Option<Inspected>) -> Inspection {
        state.map_or(Inspection::Absent, Inspection::Held)
    }
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
    /// A settle of a request id the key holds no live record of (docs/semantics.md, "settle").
    #[error("unknown request")]
    UnknownRequest,
    /// A settle of a request whose acquire was denied.
    #[error("request not admitted")]
    NotAdmitted,
    /// A settle of a request settled already with another actual cost.
    #[error("request settled already")]
    AlreadySettled,
    /// The subject cannot do this operation (e.g. a float bucket has no reconfigure).
    #[error("unsupported by this subject: {0}")]
    Unsupported(&'static str),
    /// The subject cannot express this setup or op exactly (e.g. a config outside its exact
    /// range): like [`SubjectError::Unsupported`], the run is skipped, naming why; never a verdict.
    #[error("not expressible by this subject: {0}")]
    Inexpressible(String),
    /// The subject's store failed (e.g. Redis unreachable): never a denial.
    #[error("store error: {0}")]
    Store(String),
    /// The subject could not be built for this setup.
    #[error("cannot build subject: {0}")]
    Build(String),
    /// The subject broke its protocol or died (a child process that exited, hung or answered
    /// nonsense): a harness error, never a verdict about its decisions.
    #[error("{0}")]
    Broken(String),
}

impl SubjectError {
    /// [`SubjectError::Unsupported`] with a reason known only at run time (a script's or a child
    /// process's own words), as the `'static` text the variant carries: distinct reasons are interned
    /// (a subject gives a few), and past a bound of them `fallback` is used instead.
    pub fn unsupported_because(reason: String, fallback: &'static str) -> SubjectError {
        use std::collections::BTreeSet;
        use std::sync::Mutex;
        static SEEN: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
        let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(known) = seen.get(reason.as_str()) {
            return SubjectError::Unsupported(known);
        }
        if seen.len() >= 256 {
            return SubjectError::Unsupported(fallback);
        }
        let leaked: &'static str = Box::leak(reason.into_boxed_str());
        seen.insert(leaked);
        SubjectError::Unsupported(leaked)
    }
}

/// An implementation under test.
pub trait Subject {
    /// Stable name used in reports and replay commands (e.g. `core`, `float-textbook`, `mutant:no-clamp`).
    fn name(&self) -> String;

    /// Take `acquire.cost` tokens for `acquire.key` at `acquire.now`, deduplicated by
    /// `acquire.request_id` if one is given. One [`Acquire`] rather than loose `u64`s, so that a
    /// swapped key, cost or time cannot compile.
    fn acquire(&mut self, acquire: Acquire) -> Result<Observed, SubjectError>;

    /// Reconcile the charge of the admitted request `settle.request_id` on `settle.key` with
    /// `settle.actual` at `settle.now`: a refund or an extra charge, reported like an acquire
    /// (`replayed` for a settle repeated with the same actual). An actual above capacity is
    /// [`SubjectError::InvalidCost`].
    fn settle(&mut self, _settle: Settle) -> Result<Observed, SubjectError> {
        Err(SubjectError::Unsupported("settle"))
    }

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

    /// Side-effect free: would `acquire` (its cost, for its key, at its time) be admitted with no other
    /// traffic? Its request id is not consulted. `None` if the subject cannot tell without changing
    /// state (then the retry-after tightness oracle is skipped).
    fn would_allow(&mut self, _acquire: Acquire) -> Option<bool> {
        None
    }

    /// The key's stored state, or that the subject holds none, or that it cannot show its state
    /// (the default; then the invariant oracle and the runner's creation checks have nothing to see).
    fn inspect(&mut self, _key: u64) -> Inspection {
        Inspection::Unsupported
    }

    /// Refuses a setup whose pinned keys cannot all be held: `tiers[i] = [first, last]` are the keys
    /// a scenario gives their own config (reconfigured at the start, so never evictable). A subject
    /// with a key bound checks them against it before the run, so a scenario that cannot fit is an
    /// error of the scenario rather than a failure of the subject. Default: no bound, nothing to check.
    fn check_pinned(&self, _tiers: &[[u64; 2]]) -> Result<(), SubjectError> {
        Ok(())
    }

    /// True if the subject enforces the setup's key bound (`max_keys` and its policy). A scenario
    /// with a key bound below the default is skipped on a subject without one (the scenario
    /// engine's one rule): it could never reach the bound's events, and that proves nothing
    /// about it. Default: a subject that may evict ([`Subject::may_evict`]) has one.
    fn has_key_bound(&self) -> bool {
        self.may_evict()
    }

    /// True if the subject can show a key's state ([`Subject::inspect`] answers). Under
    /// `EvictKeepingDeficit` a bucket the subject recreated may start owing, and the runner learns
    /// its first balance only from the state shown, so a bounded setup of that policy on a subject
    /// that evicts and shows nothing is skipped (the scenario engine's rule). Default: true.
    fn shows_state(&self) -> bool {
        true
    }

    /// True if the subject may drop buckets on its own (amortized sweeping, key bound): the differential
    /// oracle then follows its `created` reports instead of failing on them.
    fn may_evict(&self) -> bool {
        false
    }

    /// The ops the runner will step next, in order, announced before it steps them. A subject across
    /// a pipe writes them ahead (batching); every other subject ignores them (the default). A caller
    /// that announces ops must then step exactly those, in that order.
    fn upcoming(&mut self, _ops: &[Op]) {}

    /// `Err(SubjectError::Broken)` once the subject broke in a call that cannot return an error
    /// (`inspect`, `would_allow`); the runner asks after every step. Default: always healthy.
    fn health(&self) -> Result<(), SubjectError> {
        Ok(())
    }

    /// What the subject is checked against (`crate::profile`). Default: exact.
    fn profile(&self) -> Profile {
        Profile::exact()
    }

    /// For a child-process subject, what starts it (recorded in counterexample files so that
    /// `replay` starts the same command). Default: none.
    fn exec_spec(&self) -> Option<ExecSpec> {
        None
    }
}

/// Builds a subject for a setup. Implemented by each crate that adds subjects (the in-process ones, the
/// external stores, child processes, mutants); a registry searches several in order.
pub trait SubjectFactory {
    /// Names this factory builds.
    fn names(&self) -> Vec<String>;
    /// True if this factory builds `name` (default: it is one of [`SubjectFactory::names`]; a
    /// factory of open-ended names, like `exec:<command>`, says so here).
    fn knows(&self, name: &str) -> bool {
        self.names().iter().any(|known| known == name)
    }
    /// Builds `name` for `setup`, or `None` if the name is not this factory's.
    fn build(&self, name: &str, setup: &Setup) -> Option<Result<Box<dyn Subject>, SubjectError>>;
    /// Checks once, before a gate's first run, that `name` can run at all (its command line or
    /// file is valid, what it needs is installed, its store is reachable), so a subject that
    /// cannot start is one error rather than one per run; the message says what is wrong and, when
    /// known, what to run. `None` if the name is not this factory's. Default: build it once for a
    /// setup of one token per second; a refusal of that setup (unsupported, inexpressible) is not
    /// a failure, any other error is.
    fn preflight(&self, name: &str) -> Option<Result<(), String>> {
        if !self.knows(name) {
            return None;
        }
        let setup = Setup::new(ConfigSpec::new(1, "1/s"));
        Some(match self.build(name, &setup)? {
            Ok(_) | Err(SubjectError::Unsupported(_) | SubjectError::Inexpressible(_)) => Ok(()),
            Err(error) => Err(error.to_string()),
        })
    }
}

/// The one bandwidth of `config`, for a subject that holds one bandwidth per key: a config of several
/// (or of one named bandwidth) is [`SubjectError::Unsupported`], so the run is skipped visibly rather than
/// judged on a config the subject cannot hold; an invalid one is [`SubjectError::Build`].
pub fn one_bandwidth(config: &ConfigSpec) -> Result<bucketproof_limiter::Config, SubjectError> {
    if config.single().is_none() {
        return Err(SubjectError::Unsupported("several bandwidths per key"));
    }
    config
        .to_config()
        .map_err(|e| SubjectError::Build(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn exact(numer: u128, denom: u128) -> Amount {
        Amount::Exact { numer, denom }
    }

    proptest! {
        /// Property: the fast exact comparisons agree with comparing the reduced rationals, for amounts on
        /// the same grid, on different grids, near the top of u128, and against whole token counts.
        #[test]
        fn prop_fast_comparisons_agree_with_reduced_rationals(
            numer in prop_oneof![0u128..1_000, any::<u128>()],
            denom in prop_oneof![1u128..1_000, 1u128..=u128::MAX],
            other_numer in prop_oneof![0u128..1_000, any::<u128>()],
            other_denom in prop_oneof![1u128..1_000, 1u128..=u128::MAX],
            scale in 1u128..1_000,
            tokens in prop_oneof![0u64..1_000, any::<u64>()],
        ) {
            let (a, b) = (exact(numer, denom), exact(other_numer, other_denom));
            let (ra, rb) = (a.to_rational().unwrap(), b.to_rational().unwrap());
            prop_assert_eq!(a.compare(b), Some(ra.cmp(&rb)));
            prop_assert_eq!(a.equals(&rb), ra == rb);
            prop_assert_eq!(a.compare_whole(tokens), Some(ra.cmp(&Rational::from(tokens))));
            // The same value on a finer grid (unreduced) is still equal.
            if let (Some(n), Some(d)) = (numer.checked_mul(scale), denom.checked_mul(scale)) {
                prop_assert!(exact(n, d).equals(&ra));
                prop_assert_eq!(exact(n, d).compare(a), Some(Ordering::Equal));
            }
        }
    }

    #[test]
    fn floats_compare_exactly_and_nan_is_not_a_number() {
        let half = Amount::Approx(0.5);
        assert!(half.equals(&Rational::from_parts(1.into(), 2u32.into())));
        assert_eq!(half.compare(exact(1, 2)), Some(Ordering::Equal));
        assert_eq!(half.compare_whole(1), Some(Ordering::Less));
        assert_eq!(Amount::Approx(f64::NAN).compare_whole(1), None);
        assert!(!Amount::Approx(f64::NAN).equals(&Rational::ZERO));
    }
}
