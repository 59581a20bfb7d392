//! The driver: runs proptest over the generated op lists, one fresh subject and stepper per case, and
//! turns proptest's minimal failing case into an [`Outcome`].
//!
//! Owns the proptest configuration (cases, regression file, seed) and the judging of one case.
//! Promises: a case ends at its first violation and counts only the ops it ran, so shrinking first
//! drops the ops after the failure; the minimal case is judged again by the same function, so the
//! outcome's violation is the one its trace shows.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::test_runner::{
    Config as ProptestConfig, FileFailurePersistence, TestCaseError, TestError, TestRng, TestRunner,
};
use proptest_state_machine::Sequential;

use super::reference::Reference;
use super::{Build, Error, Options, Outcome, transitions};
use crate::runner::{Failure, RunOptions, Stepper, Verdict};
use bucketproof_trace::subject::SubjectError;
use bucketproof_trace::trace::{Op, Setup, Trace};

/// Runs the state-machine property of `options` against the subjects `build` makes: persisted
/// regressions first, then `options.cases` generated cases; on a failure, shrinks it and returns the
/// minimal trace with what it violated.
pub fn run(build: &Build<'_>, options: &Options) -> Result<Outcome, Error> {
    options.check()?;
    // Fail fast on a factory that cannot build for this setup, rather than shrinking that.
    drop(build(&options.setup).map_err(Error::Build)?);
    let run_options = RunOptions {
        stop_at_first: true,
        ..options.run.clone()
    };
    let config = ProptestConfig {
        cases: options.cases,
        max_shrink_iters: options.max_shrink_iters,
        failure_persistence: Some(match options.regressions {
            Some(path) => Box::new(FileFailurePersistence::Direct(path)),
            None => Box::new(FileFailurePersistence::Off),
        }),
        ..ProptestConfig::default()
    };
    let mut runner = if options.deterministic {
        TestRunner::new_with_rng(
            config.clone(),
            TestRng::deterministic_rng(config.rng_algorithm),
        )
    } else {
        TestRunner::new(config)
    };
    let generator = Arc::new(options.clone());
    let (for_init, for_next) = (generator.clone(), generator);
    let strategy = Sequential::new(
        options.ops_per_case.clone().into(),
        move || transitions::init_state(&for_init),
        |_: &Reference, _: &Op| true,
        move |state: &Reference| transitions::next_op(&for_next, state),
        Reference::apply,
    );
    let setup = &options.setup;
    let result = runner.run(&strategy, |(_, ops, seen)| {
        match judge(build, setup, &run_options, &ops, seen.as_deref()) {
            Judged::Pass => Ok(()),
            failed => Err(TestCaseError::fail(failed.to_string())),
        }
    });
    match result {
        Ok(()) => Ok(Outcome::Pass {
            cases: options.cases,
        }),
        Err(TestError::Abort(reason)) => Err(Error::Aborted(reason.to_string())),
        Err(TestError::Fail(reason, (_, ops, _))) => {
            let trace = |ran: usize| Trace {
                setup: setup.clone(),
                ops: ops.iter().take(ran).cloned().collect(),
            };
            let end = |step: u64| usize::try_from(step).map_or(usize::MAX, |step| step + 1);
            match judge(build, setup, &run_options, &ops, None) {
                Judged::Pass => Err(Error::NotReproducible(reason.to_string())),
                Judged::Build(error) => Err(Error::Build(error)),
                Judged::Violated(failure) => Ok(Outcome::Violated {
                    trace: trace(end(failure.step)),
                    failure,
                }),
                Judged::Incompatible { step, reason } => Ok(Outcome::Incompatible {
                    trace: trace(end(step)),
                    step,
                    reason,
                }),
                Judged::Panicked { ran, message } => Ok(Outcome::Panicked {
                    trace: trace(ran),
                    message,
                }),
            }
        }
    }
}

/// How one case ended.
enum Judged {
    Pass,
    Violated(Failure),
    Incompatible {
        step: u64,
        reason: String,
    },
    /// After `ran` ops had started.
    Panicked {
        ran: usize,
        message: String,
    },
    Build(SubjectError),
}

impl std::fmt::Display for Judged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Judged::Pass => write!(f, "pass"),
            Judged::Violated(failure) => {
                write!(f, "step {} violated: {}", failure.step, failure.violation)
            }
            Judged::Incompatible { step, reason } => write!(f, "step {step} unsupported: {reason}"),
            Judged::Panicked { ran, message } => write!(f, "op {ran} panicked: {message}"),
            Judged::Build(error) => write!(f, "cannot build the subject: {error}"),
        }
    }
}

/// Runs `ops` through a fresh subject and the model, every oracle after every op, up to the first
/// violation. `seen` counts the ops that ran, which proptest-state-machine uses to drop the rest
/// first when it shrinks. The subject is dropped before this returns.
fn judge(
    build: &Build<'_>,
    setup: &Setup,
    options: &RunOptions,
    ops: &[Op],
    seen: Option<&AtomicUsize>,
) -> Judged {
    let ran = AtomicUsize::new(0);
    let case = catch_unwind(AssertUnwindSafe(|| {
        let subject = match build(setup) {
            Ok(subject) => subject,
            Err(error) => return Judged::Build(error),
        };
        let mut stepper = match Stepper::owning(setup, subject, options) {
            Ok(stepper) => stepper,
            Err(error) => return Judged::Build(error),
        };
        for op in ops {
            ran.fetch_add(1, Ordering::Relaxed);
            if let Some(seen) = seen {
                seen.fetch_add(1, Ordering::SeqCst);
            }
            if !stepper.step(op.clone()) {
                break;
            }
        }
        match stepper.verdict() {
            Verdict::Pass => Judged::Pass,
            Verdict::Fail(failure) => Judged::Violated(failure.clone()),
            Verdict::Incompatible { step, reason } => Judged::Incompatible {
                step: *step,
                reason: reason.clone(),
            },
            // A subject that broke (a child process that died) cannot run the case either; the
            // reason says so, so the outcome is never mistaken for a pass.
            Verdict::Broken { step, message } => Judged::Incompatible {
                step: *step,
                reason: format!("the subject broke: {message}"),
            },
        }
    }));
    case.unwrap_or_else(|panic| Judged::Panicked {
        ran: ran.load(Ordering::Relaxed),
        message: panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a non-string panic".into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state_machine::OpKinds;
    use crate::subjects::CoreSubject;
    use crate::subjects::broken::{Bug, Classic};
    use bucketproof_trace::subject::{Observed, Subject};
    use bucketproof_trace::trace::{Acquire, ConfigSpec};

    fn classic(bug: Bug) -> impl Fn(&Setup) -> Result<Box<dyn Subject>, SubjectError> {
        move |setup| Ok(Box::new(Classic::new(bug, setup)?))
    }

    /// A failure is appended to the caller's regression file, and the next run replays it first: one
    /// random case then fails with the same minimal trace.
    #[test]
    fn failures_persist_in_the_callers_file_and_replay_first() {
        let path = std::env::temp_dir().join(format!(
            "bucketproof-state-machine-{}.proptest-regressions",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&path);
        let path: &'static str = Box::leak(path.to_string_lossy().into_owned().into_boxed_str());
        let mut options = Options::new(Setup::new(ConfigSpec::new(4, "3/2s")));
        options.ops = OpKinds::acquires_only();
        options.regressions = Some(path);
        options.deterministic = true;
        options.cases = 512;
        let first = run(&classic(Bug::CursorFollowsRollback), &options).unwrap();
        let written = std::fs::read_to_string(path).unwrap();
        assert_eq!(
            written.lines().filter(|l| l.starts_with("cc ")).count(),
            1,
            "{written}"
        );
        options.deterministic = false;
        options.cases = 1;
        let again = run(&classic(Bug::CursorFollowsRollback), &options).unwrap();
        std::fs::remove_file(path).unwrap();
        assert!(first.trace().is_some(), "{first}");
        assert_eq!(first.trace(), again.trace(), "{again}");
    }

    /// A subject that refuses an op kind ends as incompatible at that op, not as a violation.
    #[test]
    fn an_unsupported_op_is_incompatible_and_names_its_step() {
        /// The core, but only its acquires.
        struct AcquireOnly(CoreSubject);
        impl Subject for AcquireOnly {
            fn name(&self) -> String {
                "acquire-only".into()
            }
            fn acquire(&mut self, acquire: Acquire) -> Result<Observed, SubjectError> {
                self.0.acquire(acquire)
            }
            fn may_evict(&self) -> bool {
                true
            }
        }
        let mut options = Options::new(Setup::new(ConfigSpec::new(4, "3/2s")));
        options.deterministic = true;
        let build = |setup: &Setup| -> Result<Box<dyn Subject>, SubjectError> {
            Ok(Box::new(AcquireOnly(CoreSubject::new(setup)?)))
        };
        let outcome = run(&build, &options).unwrap();
        let Outcome::Incompatible { trace, step, .. } = &outcome else {
            panic!("{outcome}");
        };
        assert_eq!(trace.ops.len() as u64, step + 1);
        assert!(
            !matches!(trace.ops[*step as usize], Op::Acquire(_)),
            "{outcome}"
        );
    }

    /// Each case's subject is dropped with the case, so a long run holds one case's resources at a
    /// time (a Redis subject is a connection and a runtime).
    #[test]
    fn each_case_drops_its_subject() {
        /// Holds a clone of the token while it is alive.
        struct Probe(#[allow(dead_code)] Arc<()>);
        impl Subject for Probe {
            fn name(&self) -> String {
                "probe".into()
            }
            fn acquire(&mut self, _: Acquire) -> Result<Observed, SubjectError> {
                Err(SubjectError::Unsupported("acquire"))
            }
        }
        let token = Arc::new(());
        let build = |_: &Setup| -> Result<Box<dyn Subject>, SubjectError> {
            Ok(Box::new(Probe(token.clone())))
        };
        let outcome = run(&build, &Options::new(Setup::new(ConfigSpec::new(4, "1/s")))).unwrap();
        assert!(matches!(outcome, Outcome::Incompatible { .. }), "{outcome}");
        assert_eq!(Arc::strong_count(&token), 1, "subjects still alive");
    }

    /// Extra gaps, instants and costs are drawn: a subject that records what it is sent sees each
    /// extra instant, a time one extra gap after an earlier op, and each extra cost.
    #[test]
    fn extra_values_reach_the_subject() {
        use std::cell::RefCell;
        use std::rc::Rc;
        /// The core, recording every acquire.
        struct Recorder(CoreSubject, Rc<RefCell<Vec<Acquire>>>);
        impl Subject for Recorder {
            fn name(&self) -> String {
                "recorder".into()
            }
            fn acquire(&mut self, acquire: Acquire) -> Result<Observed, SubjectError> {
                self.1.borrow_mut().push(acquire);
                self.0.acquire(acquire)
            }
            fn may_evict(&self) -> bool {
                true
            }
        }
        let seen = Rc::new(RefCell::new(Vec::new()));
        let build = |setup: &Setup| -> Result<Box<dyn Subject>, SubjectError> {
            Ok(Box::new(Recorder(CoreSubject::new(setup)?, seen.clone())))
        };
        let (gap, instant, cost) = (1u64 << 40, u64::MAX - 7, 3);
        let mut options = Options::new(Setup::new(ConfigSpec::new(2, "1/s")));
        options.ops = OpKinds::acquires_only();
        options.deterministic = true;
        options.extra = crate::state_machine::ExtraValues {
            gaps: vec![gap],
            instants: vec![instant],
            costs: vec![cost],
        };
        let outcome = run(&build, &options).unwrap();
        assert!(outcome.passed(), "{outcome}");
        let seen = seen.borrow();
        assert!(seen.iter().any(|a| a.now == instant));
        assert!(seen.iter().any(|a| a.cost == cost), "no extra cost drawn");
        let times: std::collections::BTreeSet<u64> = seen.iter().map(|a| a.now).collect();
        assert!(
            times.iter().any(|t| t
                .checked_sub(gap)
                .is_some_and(|before| times.contains(&before))),
            "no extra gap drawn"
        );
    }

    /// Options no case could run with are refused by field name, before anything runs.
    #[test]
    fn bad_options_name_their_field() {
        let field = |change: fn(&mut Options)| {
            let mut options = Options::new(Setup::new(ConfigSpec::new(4, "1/s")));
            change(&mut options);
            match run(&classic(Bug::StrictAllow), &options) {
                Err(Error::InvalidOptions { field, .. }) => field,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(field(|o| o.keys = 0), "keys");
        assert_eq!(field(|o| o.cases = 0), "cases");
        assert_eq!(field(|o| o.ops_per_case = 0..5), "ops_per_case");
        assert_eq!(
            field(|o| o.setup.config = ConfigSpec::new(0, "1/s")),
            "setup.config"
        );
        assert_eq!(field(|o| o.tier_rates = vec!["fast".into()]), "tier_rates");
    }
}
