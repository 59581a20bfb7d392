//! The scenario engine: runs scenario x seed x subject through [`run_trace`] (the reference model in
//! lockstep and every oracle), checks the scenario's reach targets, and turns a violation into a
//! shrunk, self-contained [`Counterexample`] that [`crate::counterexample::replay`] reproduces.
//!
//! Promises: the op stream is consumed lazily (memory flat in trace length; only a failure's prefix is
//! materialized, to shrink it); everything a run returns except [`RunResult::elapsed`] is a function of
//! (scenario, seed, subject), so reports built from it are reproducible byte for byte. The elapsed time
//! exists only for throughput lines on the terminal. One exception, which the counterexample states
//! (`shrink_budget_exhausted`): a shrink cut short by the time part of its [`ShrinkBudget`] depends
//! on the machine's speed. Pinned keys (tiers) that a subject's key bound cannot hold are a setup
//! error ([`Status::Error`]) before the run ([`bucketproof_trace::Subject::check_pinned`]).
//!
//! One skip rule for every subject: a setup or an op the subject cannot run or express
//! ([`SubjectError::Unsupported`], [`SubjectError::Inexpressible`]: a key bound it has none of, a
//! config outside its exact range, at build or at any op) is [`Status::Skipped`] with the reason,
//! never a failure or an error; a run fails only on a property the subject violated.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::Registry;
use crate::counterexample::{COUNTEREXAMPLE_FORMAT, Counterexample};
use bucketproof_check::oracle::Violation;
use bucketproof_check::runner::{Failure, RunOptions, RunReport, Verdict, failure_of, run_trace};
use bucketproof_check::shrink::{ShrinkBudget, shrink};
use bucketproof_scenario::Scenario;
use bucketproof_trace::profile::Profile;
use bucketproof_trace::subject::{Subject, SubjectError};
use bucketproof_trace::trace::{PolicySpec, Setup, Trace};

/// How a run ended, judged with the reach targets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Status {
    /// Every oracle held and every reach target was reached.
    Pass,
    /// An oracle fired.
    Fail {
        /// The (shrunk) violation.
        violation: Violation,
    },
    /// Every oracle held, but the run never reached these events: it proved nothing about them.
    Unreached {
        /// The events with a count of zero.
        events: Vec<String>,
    },
    /// The subject cannot run this scenario (e.g. a float bucket has no reconfigure).
    Skipped {
        /// Why.
        reason: String,
    },
    /// The subject could not be built.
    Error {
        /// Why.
        message: String,
    },
}

impl Status {
    /// Stable one-word name.
    pub fn word(&self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail { .. } => "fail",
            Status::Unreached { .. } => "unreached",
            Status::Skipped { .. } => "skipped",
            Status::Error { .. } => "error",
        }
    }

    /// True for a failure of the gate (a violation or an unreached target).
    pub fn is_failure(&self) -> bool {
        matches!(self, Status::Fail { .. } | Status::Unreached { .. })
    }

    /// A one-line explanation (empty for a pass).
    pub fn detail(&self) -> String {
        match self {
            Status::Pass => String::new(),
            Status::Fail { violation } => violation.to_string(),
            Status::Unreached { events } => format!("never reached: {}", events.join(", ")),
            Status::Skipped { reason } => reason.clone(),
            Status::Error { message } => message.clone(),
        }
    }
}

/// One scenario x seed x subject.
#[derive(Clone, Debug)]
pub struct RunResult {
    /// Scenario name.
    pub scenario: String,
    /// Seed.
    pub seed: u64,
    /// Subject name.
    pub subject: String,
    /// What the runner saw (absent if the subject could not be built).
    pub report: Option<RunReport>,
    /// The verdict with reach targets applied.
    pub status: Status,
    /// The shrunk counterexample of a failure.
    pub counterexample: Option<Counterexample>,
    /// Wall time of the checking run (not the shrinking): for throughput lines only, never in reports.
    pub elapsed: Duration,
    /// The profile the subject was checked under.
    pub profile: Profile,
}

impl RunResult {
    /// Differential steps per second of the checking run (terminal output only).
    pub fn steps_per_second(&self) -> f64 {
        let steps = self.report.as_ref().map_or(0, |r| r.steps);
        steps as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Knobs of the engine.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    /// Oracles and sampling for checking runs (the sample key comes from the scenario).
    pub run: RunOptions,
    /// The bounds on shrinking one failure.
    pub shrink_budget: ShrinkBudget,
    /// Directory named in replay commands (e.g. `reports/failures`).
    pub failures_dir: String,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            run: RunOptions::default(),
            shrink_budget: ShrinkBudget::default(),
            failures_dir: "reports/failures".into(),
        }
    }
}

/// Runs scenarios against subjects from a registry.
pub struct Engine<'a> {
    registry: &'a Registry,
    options: EngineOptions,
}

impl<'a> Engine<'a> {
    /// An engine over `registry`.
    pub fn new(registry: &'a Registry, options: EngineOptions) -> Engine<'a> {
        Engine { registry, options }
    }

    /// Runs one scenario, seed and subject; shrinks a failure.
    pub fn run(&self, scenario: &Scenario, seed: u64, subject_name: &str) -> RunResult {
        let setup = scenario.setup();
        let mut result = RunResult {
            scenario: scenario.name.clone(),
            seed,
            subject: subject_name.to_owned(),
            report: None,
            status: Status::Pass,
            counterexample: None,
            elapsed: Duration::ZERO,
            profile: Profile::exact(),
        };
        let tiers: Vec<[u64; 2]> = scenario.tiers.iter().map(|tier| tier.keys).collect();
        let built = self
            .registry
            .build(subject_name, &setup)
            .and_then(|subject| expresses_key_bound(subject.as_ref(), &setup).map(|()| subject))
            .and_then(|subject| subject.check_pinned(&tiers).map(|()| subject));
        let mut subject = match built {
            Ok(subject) => subject,
            // A subject that cannot run or express the setup cannot run this scenario.
            Err(SubjectError::Unsupported(what)) => {
                result.status = Status::Skipped {
                    reason: format!("unsupported: {what}"),
                };
                return result;
            }
            Err(SubjectError::Inexpressible(what)) => {
                result.status = Status::Skipped {
                    reason: format!("unsupported: {what}"),
                };
                return result;
            }
            Err(error) => {
                result.status = Status::Error {
                    message: error.to_string(),
                };
                return result;
            }
        };
        let options = RunOptions {
            sample_key: Some(scenario.sample_key),
            ..self.options.run.clone()
        };
        result.profile = subject.profile();
        let exec = subject.exec_spec();
        let started = Instant::now();
        let report = run_trace(&setup, scenario.expand(seed), subject.as_mut(), &options);
        result.elapsed = started.elapsed();
        // The checking run's subject may hold a million keys: free it before shrinking builds more.
        drop(subject);
        let report = match report {
            Ok(report) => report,
            Err(error) => {
                result.status = Status::Error {
                    message: error.to_string(),
                };
                return result;
            }
        };
        result.status = match &report.verdict {
            Verdict::Pass => {
                let missing: Vec<String> = scenario
                    .reach
                    .iter()
                    .filter(|event| report.events.get(&event.0).copied().unwrap_or(0) == 0)
                    .map(|event| event.0.clone())
                    .collect();
                if missing.is_empty() {
                    Status::Pass
                } else {
                    Status::Unreached { events: missing }
                }
            }
            Verdict::Incompatible { step, reason } => Status::Skipped {
                reason: format!("{reason} (at op {step})"),
            },
            Verdict::Broken { step, message } => Status::Error {
                message: format!("at op {step}: {message}"),
            },
            Verdict::Fail(failure) => {
                let mut counterexample = self.shrink_failure(
                    scenario,
                    seed,
                    subject_name,
                    failure.step,
                    &failure.violation,
                );
                counterexample.profile = result.profile.clone();
                counterexample.exec = exec;
                let status = Status::Fail {
                    violation: counterexample.violation.clone(),
                };
                result.counterexample = Some(counterexample);
                status
            }
        };
        result.report = Some(report);
        result
    }

    /// Regenerates the failing prefix and shrinks it.
    fn shrink_failure(
        &self,
        scenario: &Scenario,
        seed: u64,
        subject_name: &str,
        step: u64,
        violation: &Violation,
    ) -> Counterexample {
        let setup = scenario.setup();
        let trace = Trace {
            setup: setup.clone(),
            ops: scenario.prefix(seed, step + 1),
        };
        let options = RunOptions {
            sample_key: None,
            ..self.options.run.clone()
        };
        let shrunk = shrink(trace, violation, &self.options.shrink_budget, |candidate| {
            first_failure(self.registry, subject_name, candidate, &options)
        });
        let mut counterexample = Counterexample {
            format: COUNTEREXAMPLE_FORMAT,
            scenario: scenario.name.clone(),
            seed,
            subject: subject_name.to_owned(),
            original_step: step,
            setup: shrunk.trace.setup,
            ops: shrunk.trace.ops,
            violation: shrunk.violation,
            replay: String::new(),
            shrink_budget_exhausted: shrunk.budget_exhausted,
            profile: Profile::exact(),
            exec: None,
            oracles: self.options.run.oracles,
        };
        counterexample.replay = format!(
            "bucketproof replay {}/{}",
            self.options.failures_dir.trim_end_matches('/'),
            counterexample.file_name()
        );
        counterexample
    }
}

/// The skip rule for a key bound, one for every subject: a setup whose key bound is below the
/// default asks for the bound's events (a refusal, an eviction), which a subject without a key bound
/// can never show, so it cannot express the setup ([`SubjectError::Inexpressible`]). Under
/// `EvictKeepingDeficit` a recreated bucket may start owing, which the runner can follow only from
/// the state the subject shows: a subject that evicts and shows none cannot be judged there either.
fn expresses_key_bound(subject: &dyn Subject, setup: &Setup) -> Result<(), SubjectError> {
    if setup.max_keys >= bucketproof_limiter::defaults::MAX_KEYS {
        return Ok(());
    }
    if !subject.has_key_bound() {
        return Err(SubjectError::Inexpressible(format!(
            "a key bound (max_keys = {}): {} has none",
            setup.max_keys,
            subject.name()
        )));
    }
    if setup.policy == PolicySpec::EvictKeepingDeficit && !subject.shows_state() {
        return Err(SubjectError::Inexpressible(format!(
            "evict_keeping_deficit at a key bound: {} shows no state (no inspect), so a bucket it \
             recreated owing cannot be followed",
            subject.name()
        )));
    }
    Ok(())
}

/// Runs `trace` on a fresh `subject_name` and returns its first failure.
pub fn first_failure(
    registry: &Registry,
    subject_name: &str,
    trace: &Trace,
    options: &RunOptions,
) -> Option<Failure> {
    let mut subject = registry.build(subject_name, &trace.setup).ok()?;
    failure_of(trace, subject.as_mut(), options)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::counterexample::{Replayed, replay};
    use bucketproof_check::subjects::broken::{BrokenSubjects, CHARGES_DENIALS};

    const SCENARIO: &str = r#"
length = 400
reach = ["denied", "saturated"]
[setup]
capacity = 3
rate = "2/s"
[keys]
count = 3
[arrivals]
gap = "100ms"
"#;

    fn scenario() -> Scenario {
        Scenario::parse(SCENARIO, Path::new("engine-test.toml")).unwrap()
    }

    #[test]
    fn the_core_passes_and_reaches_its_targets() {
        let registry = Registry::default();
        let engine = Engine::new(&registry, EngineOptions::default());
        let result = engine.run(&scenario(), 1, "core");
        assert_eq!(result.status, Status::Pass, "{}", result.status.detail());
    }

    #[test]
    fn an_unreachable_target_fails_the_run() {
        let mut scenario = scenario();
        scenario
            .reach
            .push(bucketproof_scenario::EventName("near_clock_end".into()));
        let registry = Registry::default();
        let result = Engine::new(&registry, EngineOptions::default()).run(&scenario, 1, "core");
        assert_eq!(
            result.status,
            Status::Unreached {
                events: vec!["near_clock_end".into()]
            }
        );
    }

    /// A shrink cut short by its budget still writes a counterexample that fails the same way, and
    /// the file says it may not be minimal.
    #[test]
    fn a_counterexample_says_when_the_shrink_budget_ran_out() {
        let registry = Registry::default().with(BrokenSubjects);
        let options = EngineOptions {
            shrink_budget: ShrinkBudget::runs(1),
            ..EngineOptions::default()
        };
        let result = Engine::new(&registry, options).run(&scenario(), 1, CHARGES_DENIALS);
        let counterexample = result.counterexample.expect("a counterexample");
        assert!(counterexample.shrink_budget_exhausted);
        assert!(
            (counterexample.to_json()).contains("\"shrink_budget_exhausted\": true"),
            "{}",
            counterexample.to_json()
        );
        assert_eq!(
            replay(&registry, &counterexample),
            Replayed::Reproduced(counterexample.violation.clone())
        );
    }

    /// Eight pinned keys under a bound of eight over the core's four shards: the hash cannot put
    /// exactly two in each, so the setup is refused before the run, naming the tier, shard and bound.
    #[test]
    fn pinned_keys_that_cannot_fit_the_key_bound_are_a_setup_error() {
        let text = |max_keys: u64| {
            format!(
                "length = 50\nreach = [\"allowed\"]\n[setup]\ncapacity = 3\nrate = \"1/s\"\n\
                 max_keys = {max_keys}\n[[tiers]]\nkeys = [0, 7]\ncapacity = 5\nrate = \"2/s\"\n\
                 [keys]\ncount = 8\n"
            )
        };
        let registry = Registry::default();
        let engine = Engine::new(&registry, EngineOptions::default());
        let tight = Scenario::parse(&text(8), Path::new("pinned.toml")).unwrap();
        let result = engine.run(&tight, 1, "core");
        let Status::Error { message } = &result.status else {
            panic!("expected a setup error, got {:?}", result.status);
        };
        assert!(result.report.is_none(), "nothing ran");
        for part in [
            "tiers[0]",
            "of shard",
            "holds at most 2",
            "key bound 8 over 4 shards",
        ] {
            assert!(message.contains(part), "{part:?} missing from {message}");
        }
        let roomy = Scenario::parse(&text(64), Path::new("pinned.toml")).unwrap();
        assert_eq!(engine.run(&roomy, 1, "core").status, Status::Pass);
    }

    /// One skip rule for every subject: a key bound below the default on a subject with none (the
    /// model) is skipped naming it, never "unreached" for the bound's events it cannot show.
    #[test]
    fn a_key_bound_on_a_subject_without_one_is_skipped() {
        let text = "length = 50\nreach = [\"evicted\"]\n[setup]\ncapacity = 3\nrate = \"1/s\"\n\
                    max_keys = 4\npolicy = \"evict_least_recent\"\n[keys]\ncount = 40\n";
        let scenario = Scenario::parse(text, Path::new("bounded.toml")).unwrap();
        let registry = Registry::default();
        let engine = Engine::new(&registry, EngineOptions::default());
        assert_eq!(
            engine.run(&scenario, 1, "model").status,
            Status::Skipped {
                reason: "unsupported: a key bound (max_keys = 4): model has none".into()
            }
        );
        assert_eq!(engine.run(&scenario, 1, "core").status, Status::Pass);
    }

    #[test]
    fn a_broken_subject_fails_with_a_small_counterexample_that_replays() {
        let registry = Registry::default().with(BrokenSubjects);
        let engine = Engine::new(&registry, EngineOptions::default());
        let result = engine.run(&scenario(), 1, CHARGES_DENIALS);
        assert_eq!(result.status.word(), "fail");
        let counterexample = result.counterexample.expect("a counterexample");
        assert!(
            counterexample.ops.len() <= crate::counterexample::MAX_COUNTEREXAMPLE_OPS,
            "{:?}",
            counterexample.ops
        );
        assert_eq!(
            replay(&registry, &counterexample),
            Replayed::Reproduced(counterexample.violation.clone())
        );
        let text = counterexample.to_json();
        let back: Counterexample = serde_json::from_str(&text).unwrap();
        assert_eq!(back, counterexample);
        // Within budget, the file is what it was before budgets existed.
        assert!(!counterexample.shrink_budget_exhausted);
        assert!(!text.contains("shrink_budget_exhausted"), "{text}");
        assert_eq!(
            counterexample.replay,
            "bucketproof replay reports/failures/engine-test-seed1-broken-charges-denials.json"
        );
    }
}
