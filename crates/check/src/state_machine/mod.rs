//! The state machine: generated op sequences against any subject, every oracle after every step.
//!
//! The reference model drives generation (proptest-state-machine's sequential strategy over the
//! model and a clock): each next op is drawn from the model's state, so times land on
//! refill boundaries, rollbacks and the end of the clock. The caller's subject is the system under
//! test, stepped through the harness's [`Stepper`](crate::Stepper), so the differential, invariant,
//! arrival-curve, retry-after and eviction oracles judge every step. A failure shrinks to a minimal
//! op list, which [`run`] hands back as a [`Trace`] with its violation; regressions persist in a file
//! the caller names ([`Options::regressions`]), or nowhere.
//!
//! Owns the state-machine property as a library: the generator (`transitions`), the
//! reference state (`reference`), and the driver that runs cases, shrinks and judges the minimal
//! case again (`driver`). Promises: the outcome is the harness's own verdict on a plain trace (replay
//! [`Outcome`]'s trace with [`run_trace`](crate::run_trace) and it fails the same way); the subject
//! of a case is dropped with the case; nothing panics on a subject's answers (a subject that panics
//! is reported as [`Outcome::Panicked`]).
//!
//! **Feature.** This module is behind the default-off `state-machine` feature because it makes
//! proptest a dependency: a user's test enables it in its dev-dependencies, the project's own tests
//! enable it, and the shipped binary, which runs scenarios through the gate and not this property,
//! builds without proptest.
//!
//! **Extra values.** [`ExtraValues`] puts caller-chosen gaps, instants and costs on the generator's
//! menu (per config boundary values: where products of elapsed time and rate pass a word, the packed
//! balance line, costs of exactly the capacity). Empty by default, and then the draws are exactly the
//! built-in menu's.
//!
//! # Running it on your own subject
//!
//! ```
//! use bucketproof_check::state_machine::{self, OpKinds, Options, Outcome};
//! use bucketproof_check::subjects::core::observe;
//! use bucketproof_trace::{Acquire, ConfigSpec, Observed, Setup, Subject, SubjectError};
//! use bucketproof_limiter::DirectLimiter;
//!
//! /// Your limiter behind the harness's one trait: here one bucket, so one key.
//! struct MyLimiter(DirectLimiter);
//!
//! impl Subject for MyLimiter {
//!     fn name(&self) -> String {
//!         "my-limiter".into()
//!     }
//!     fn acquire(&mut self, acquire: Acquire) -> Result<Observed, SubjectError> {
//!         let decision = self
//!             .0
//!             .acquire_at(acquire.cost, acquire.now)
//!             .map_err(|_| SubjectError::InvalidCost)?;
//!         // The bucket exists from construction: it does not say when it was created.
//!         Ok(Observed { created: None, ..observe(&decision, false, false) })
//!     }
//! }
//!
//! let mut options = Options::new(Setup::new(ConfigSpec::new(4, "3/2s")));
//! options.keys = 1;
//! options.request_ids = 0; // no idempotency ids: the direct limiter has none
//! options.ops = OpKinds::acquires_only();
//! options.cases = 16;
//! let build = |setup: &Setup| -> Result<Box<dyn Subject>, SubjectError> {
//!     let config = setup.config.to_config().map_err(|e| SubjectError::Build(e.to_string()))?;
//!     Ok(Box::new(MyLimiter(DirectLimiter::new(config))))
//! };
//! let outcome = state_machine::run(&build, &options)?;
//! assert!(outcome.passed(), "{outcome}");
//! # Ok::<(), state_machine::Error>(())
//! ```

mod driver;
mod reference;
mod transitions;

use std::fmt;
use std::ops::Range;

pub use self::driver::run;
use crate::runner::{Failure, RunOptions};
use bucketproof_trace::boundary::Boundaries;
use bucketproof_trace::subject::{Subject, SubjectError};
use bucketproof_trace::trace::{ConfigSpec, InvalidConfigSpec, Setup, Trace};

/// Builds the subject under test for a setup, once per case (a closure, a registry (the harness's `Registry`)
/// lookup: `|setup| registry.build("core", setup)`).
pub type Build<'a> = dyn Fn(&Setup) -> Result<Box<dyn Subject>, SubjectError> + 'a;

/// Which ops besides acquires the generator draws. A subject that refuses one of them (with
/// [`SubjectError::Unsupported`]) ends its case as [`Outcome::Incompatible`]: switch that kind off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpKinds {
    /// Move a key to one of [`Options::tier_rates`].
    pub reconfigure: bool,
    /// Drop evictable buckets.
    pub sweep: bool,
    /// Drop a key's state.
    pub forget: bool,
    /// Settle a request id (drawn only when [`Options::request_ids`] is not 0).
    pub settle: bool,
}

impl OpKinds {
    /// Every kind.
    pub fn all() -> OpKinds {
        OpKinds {
            reconfigure: true,
            sweep: true,
            forget: true,
            settle: true,
        }
    }

    /// Acquires only, for subjects with no reconfigure, sweep, forget or settle.
    pub fn acquires_only() -> OpKinds {
        OpKinds {
            reconfigure: false,
            sweep: false,
            forget: false,
            settle: false,
        }
    }
}

/// Values added to the generator's menu. Gaps are added to the generator's clock (saturating),
/// instants are absolute times, costs are acquire costs. Each non-empty list is drawn from as often as
/// the refill boundaries are (gaps), or about a quarter of the time (costs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExtraValues {
    /// Nanoseconds after the clock.
    pub gaps: Vec<u64>,
    /// Absolute times.
    pub instants: Vec<u64>,
    /// Acquire costs.
    pub costs: Vec<u64>,
}

impl ExtraValues {
    /// The boundary values of `config`'s own arithmetic ([`bucketproof_trace::boundary::Boundaries`]): the gaps
    /// at which its refill products cross the 2^53, 2^62, 2^64 and 2^128 lines, instants at the end
    /// of the clock, costs at and around the capacity and the unit lines.
    pub fn boundaries_of(config: &ConfigSpec) -> Result<ExtraValues, InvalidConfigSpec> {
        let boundaries = Boundaries::of(config)?;
        Ok(ExtraValues {
            gaps: boundaries.gaps_within_clock(),
            instants: boundaries.instants,
            costs: boundaries.costs,
        })
    }
}

/// What to generate, how many cases, and where regressions go.
#[derive(Clone, Debug)]
pub struct Options {
    /// How every case's subject and model are built; its config is every key's until reconfigured,
    /// and its capacity sets the cost range.
    pub setup: Setup,
    /// Keys `0..keys`.
    pub keys: u64,
    /// Request ids `0..request_ids` (a small space, so ids repeat); on three acquires in ten. `0`:
    /// no request ids.
    pub request_ids: u64,
    /// Rates a reconfigure picks from (its capacity is drawn from `1..=capacity + 2`).
    pub tier_rates: Vec<String>,
    /// Which ops besides acquires are generated.
    pub ops: OpKinds,
    /// Caller-chosen gaps, instants and costs on the menu.
    pub extra: ExtraValues,
    /// Eviction-summary pressure phases ([`bucketproof_trace::pressure`]) on the menu: only a setup whose
    /// policy keeps a summary (`EvictKeepingDeficit`) has one.
    pub pressure: bool,
    /// Ops per case.
    pub ops_per_case: Range<usize>,
    /// Generated cases (persisted regressions run first, on top of these).
    pub cases: u32,
    /// At most this many test runs while shrinking a failure (proptest's own default, four per
    /// case, would leave a failure found with few cases barely shrunk).
    pub max_shrink_iters: u32,
    /// The regression file: failures are appended to it as proptest seeds, and its seeds run before
    /// any new case. `None`: nothing is read or written. A relative path is taken from the working
    /// directory, so a test names its own file absolutely, e.g.
    /// `concat!(env!("CARGO_MANIFEST_DIR"), "/tests/my_subject.proptest-regressions")`.
    pub regressions: Option<&'static str>,
    /// Fixed-seed generation (the same cases on every run) instead of proptest's fresh random seed
    /// per run (which `PROPTEST_RNG_SEED` pins).
    pub deterministic: bool,
    /// Which oracles judge each step. `stop_at_first` is always on: a case ends at its first
    /// violation.
    pub run: RunOptions,
}

impl Options {
    /// Defaults around `setup`: three keys, request ids `0..3`, every op kind, reconfigures to rates
    /// `1/3s`, `5/s`, `7/9s` and `0/s`, 1 to 39 ops per case, [`DEFAULT_CASES`] cases, 10,000 shrink runs,
    /// no regression file, random seeds, every oracle, the boundary values of the setup's config
    /// on the menu ([`ExtraValues::boundaries_of`]), and pressure phases under `EvictKeepingDeficit`.
    pub fn new(setup: Setup) -> Options {
        // An invalid config has no boundaries; `check` refuses it by name before any case runs.
        let extra = ExtraValues::boundaries_of(&setup.config).unwrap_or_default();
        let pressure = bucketproof_trace::pressure::Phase::of(&setup).is_some();
        Options {
            setup,
            pressure,
            keys: 3,
            request_ids: 3,
            tier_rates: ["1/3s", "5/s", "7/9s", "0/s"].map(String::from).to_vec(),
            ops: OpKinds::all(),
            extra,
            ops_per_case: 1..40,
            cases: DEFAULT_CASES,
            max_shrink_iters: 10_000,
            regressions: None,
            deterministic: false,
            run: RunOptions::default(),
        }
    }

    /// Refuses options no case could run with, naming the field.
    fn check(&self) -> Result<(), Error> {
        let invalid =
            |field: &'static str, reason: String| Err(Error::InvalidOptions { field, reason });
        if let Err(e) = self.setup.config.to_model() {
            return invalid("setup.config", e.to_string());
        }
        if self.keys == 0 {
            return invalid("keys", "must be at least 1".into());
        }
        if self.ops_per_case.is_empty() || self.ops_per_case.start == 0 {
            return invalid(
                "ops_per_case",
                format!(
                    "{:?} must be a non-empty range starting at 1 or more",
                    self.ops_per_case
                ),
            );
        }
        if self.cases == 0 {
            return invalid("cases", "must be at least 1".into());
        }
        for rate in &self.tier_rates {
            let tier = bucketproof_trace::trace::ConfigSpec::new(1, rate.clone());
            if let Err(e) = tier.to_model() {
                return invalid("tier_rates", e.to_string());
            }
        }
        Ok(())
    }
}

/// Cases per run by default: small enough for every `cargo test`.
pub const DEFAULT_CASES: u32 = 64;

/// `PROPTEST_CASES` if it is set to a number, else `default`: how a test lets a long run raise its
/// case count without changing its code.
pub fn cases_from_env(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(default)
}

/// How a run ended. Every failing outcome carries the minimal op list proptest shrank to, as a trace
/// (ending at the failing op) that replays the failure through [`run_trace`](crate::run_trace).
#[derive(Clone, Debug)]
pub enum Outcome {
    /// Every case passed.
    Pass {
        /// Cases run (persisted regressions not counted).
        cases: u32,
    },
    /// An oracle fired.
    Violated {
        /// The minimal trace.
        trace: Trace,
        /// The failing step, its op and the violation.
        failure: Failure,
    },
    /// The subject refused an op it does not support (switch that kind off in [`Options::ops`]).
    Incompatible {
        /// The minimal trace.
        trace: Trace,
        /// The refused op's index.
        step: u64,
        /// The subject's reason.
        reason: String,
    },
    /// The subject panicked.
    Panicked {
        /// The minimal trace, up to the op that panicked.
        trace: Trace,
        /// The panic's message.
        message: String,
    },
}

impl Outcome {
    /// True for [`Outcome::Pass`].
    pub fn passed(&self) -> bool {
        matches!(self, Outcome::Pass { .. })
    }

    /// The minimal failing trace, unless the run passed.
    pub fn trace(&self) -> Option<&Trace> {
        match self {
            Outcome::Pass { .. } => None,
            Outcome::Violated { trace, .. }
            | Outcome::Incompatible { trace, .. }
            | Outcome::Panicked { trace, .. } => Some(trace),
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ops = |trace: &Trace| format!("{:?}", trace.ops);
        match self {
            Outcome::Pass { cases } => write!(f, "passed {cases} cases"),
            Outcome::Violated { trace, failure } => write!(
                f,
                "step {} violated: {}; minimal ops: {}",
                failure.step,
                failure.violation,
                ops(trace)
            ),
            Outcome::Incompatible {
                trace,
                step,
                reason,
            } => write!(
                f,
                "step {step} unsupported: {reason}; minimal ops: {}",
                ops(trace)
            ),
            Outcome::Panicked { trace, message } => {
                write!(
                    f,
                    "the subject panicked: {message}; minimal ops: {}",
                    ops(trace)
                )
            }
        }
    }
}

/// Why a run could not give an [`Outcome`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// An option no case could run with.
    #[error("invalid state-machine option {field}: {reason}")]
    InvalidOptions {
        /// The option's field name.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The factory could not build the subject.
    #[error("cannot build the subject: {0}")]
    Build(SubjectError),
    /// Proptest gave up (too many rejected cases).
    #[error("proptest aborted: {0}")]
    Aborted(String),
    /// Proptest found a failure that the minimal case, judged again, does not show: the subject is
    /// not deterministic.
    #[error(
        "a failure did not reproduce on its minimal case ({0}): the subject is not deterministic"
    )]
    NotReproducible(String),
}
