//! The one interface the harness talks to: a [`Subject`] is an implementation under test (the exact
//! core, a float bucket, Redis, a mutant, a peer). Adapters are small; everything the oracles need is
//! in [`Observed`].

use bucketproof_limiter::Wait;

pub use crate::amount::Amount;
use crate::profile::Profile;
use crate::subject_file::ExecSpec;
use crate::trace::{Acquire, ConfigSpec, Op, Settle, Setup};

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
