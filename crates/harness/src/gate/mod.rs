//! The gate: every scenario x seed x subject through the [`Engine`], judged as one verdict, with the
//! files a CI run leaves behind (counterexamples, scenario reports and their plots, JUnit).
//!
//! Owns: the job list (the one place a scenario is scaled and its seeds are chosen), where files are
//! written (only under [`GateOptions::reports_dir`] and at [`GateOptions::junit`], never beside a
//! scenario), the run counts (counted once, in [`Counts`]; the text summary, the JSON summary and the
//! JUnit file all read them), the stale-report check, and the [`Verdict`] with its exit code.
//!
//! Promises: every option that names an output path is checked by [`Gate::new`], before any run;
//! a gate that checked nothing (every run skipped) is not a pass unless [`GateOptions::allow_skips`]
//! says so; everything written except the terminal lines of an [`Observer`] is a function of the
//! scenarios, seeds, subjects and options, so committed reports compare byte for byte.
//!
//! A gate over your own subject, from a `#[test]` of your repository: your limiter behind
//! [`Subject`](bucketproof_trace::Subject), a [`SubjectFactory`](bucketproof_trace::SubjectFactory) that names and builds it,
//! and the scenarios you choose (this crate's `scenarios/`, or your own). A limiter in another
//! language is the same with `.with(ExecSubjects::new("."))` and a subject named `exec:<command
//! line>` (`bucketproof-protocol`, docs/subject-protocol.md).
//!
//! ```
//! use std::path::Path;
//!
//! use bucketproof_harness::gate::{Gate, GateOptions, Verdict};
//! use bucketproof_scenario::Scenario;
//! use bucketproof_check::subjects::CoreSubject;
//! use bucketproof_harness::Registry;
//! use bucketproof_trace::{Setup, Subject, SubjectError, SubjectFactory};
//!
//! /// Builds "mine": here the built-in core stands in for your limiter's `Subject` adapter.
//! struct Mine;
//! impl SubjectFactory for Mine {
//!     fn names(&self) -> Vec<String> {
//!         vec!["mine".into()]
//!     }
//!     fn build(&self, name: &str, setup: &Setup) -> Option<Result<Box<dyn Subject>, SubjectError>> {
//!         (name == "mine").then(|| Ok(Box::new(CoreSubject::new(setup)?) as Box<dyn Subject>))
//!     }
//! }
//!
//! let scenario = Scenario::parse(
//!     r#"
//!     length = 200
//!     reach = ["allowed", "denied"]
//!     [setup]
//!     capacity = 3
//!     rate = "2/s"
//!     [arrivals]
//!     gap = "100ms"
//!     "#,
//!     Path::new("doc-example.toml"),
//! )?;
//! let registry = Registry::default().with(Mine);
//! let mut options = GateOptions::new(std::env::temp_dir().join("bucketproof-gate-doc-example"));
//! options.subjects = vec!["mine".into()];
//! options.junit = Some(std::env::temp_dir().join("bucketproof-gate-doc-example.xml"));
//! let gate = Gate::new(&registry, options)?;
//! let outcome = gate.check(&[scenario], &mut ())?;
//! assert_eq!(outcome.verdict(), Verdict::Pass, "{}", outcome.summary_line());
//! assert_eq!(outcome.counts().passed, 1);
//! // What `bucketproof check` would exit with.
//! assert_eq!(outcome.verdict().exit_code(), 0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod counts;
mod each;
mod error;
mod files;
mod junit;
mod options;
mod plan;
mod plots;
mod summary;

use std::path::{Path, PathBuf};

pub use self::counts::{Counts, Verdict};
pub use self::each::{EachOracle, each_oracle};
pub use self::error::GateError;
pub use self::options::{GateOptions, ReportMode, writable};
pub use self::plan::{known_subjects, load_scenarios, ready_subject};

use crate::Registry;
use crate::engine::{Engine, EngineOptions, RunResult};
use crate::report::ScenarioReport;
use bucketproof_scenario::Scenario;

/// Where a failing run's counterexample went.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Saved {
    /// Written to this file (the one its replay command names).
    Written(PathBuf),
    /// Could not be written; the run still failed.
    NotWritten {
        /// The file it was meant for.
        path: PathBuf,
        /// Why.
        error: String,
    },
}

/// Hears about each run as it happens (a progress bar, CI log lines). `()` hears nothing.
pub trait Observer {
    /// The gate is about to run `runs` jobs.
    fn planned(&mut self, runs: usize) {
        let _ = runs;
    }
    /// A job starts.
    fn started(&mut self, scenario: &str, seed: u64, subject: &str) {
        let _ = (scenario, seed, subject);
    }
    /// A job ended; `saved` says where a failure's counterexample went.
    fn finished(&mut self, result: &RunResult, saved: Option<&Saved>) {
        let _ = (result, saved);
    }
}

impl Observer for () {}

/// Runs scenarios through a registry's subjects and judges the whole.
pub struct Gate<'a> {
    registry: &'a Registry,
    options: GateOptions,
    engine: Engine<'a>,
}

impl<'a> Gate<'a> {
    /// A gate over `registry`. Checks every option first, output paths included, so a typo in a
    /// path fails here rather than after the runs.
    pub fn new(registry: &'a Registry, options: GateOptions) -> Result<Gate<'a>, GateError> {
        options.validate()?;
        let engine = Engine::new(
            registry,
            EngineOptions {
                failures_dir: options.failures_dir().display().to_string(),
                ..options.engine.clone()
            },
        );
        Ok(Gate {
            registry,
            options,
            engine,
        })
    }

    /// The options this gate runs with.
    pub fn options(&self) -> &GateOptions {
        &self.options
    }

    /// Runs every scenario x seed x subject, writes counterexamples, reports (per
    /// [`GateOptions::reports`]) and JUnit, and returns the verdict. An `Err` is a problem with the
    /// inputs or an output file, never a failing run.
    pub fn check(
        &self,
        scenarios: &[Scenario],
        observer: &mut dyn Observer,
    ) -> Result<GateOutcome, GateError> {
        let plan = plan::Plan::new(self.registry, &self.options, scenarios)?;
        observer.planned(plan.jobs.len());
        let mut results: Vec<Vec<RunResult>> = vec![Vec::new(); plan.scenarios.len()];
        for job in &plan.jobs {
            let scenario = &plan.scenarios[job.scenario];
            observer.started(&scenario.name, job.seed, &job.subject);
            let result = self.engine.run(scenario, job.seed, &job.subject);
            let saved = self.save(&result);
            observer.finished(&result, saved.as_ref());
            results[job.scenario].push(result);
        }
        let reports: Vec<ScenarioReport> = plan
            .scenarios
            .iter()
            .zip(&results)
            .map(|(scenario, runs)| ScenarioReport::new(scenario, runs))
            .collect();
        let counts = Counts::of(results.iter().flatten());
        // JUnit first: a CI dashboard still gets the runs if a report cannot be written.
        if let Some(path) = &self.options.junit {
            files::write(path, &junit::render(&reports, &counts))?;
        }
        let stale = files::reports(&self.options, &reports)?;
        Ok(GateOutcome {
            verdict: counts.verdict(!stale.is_empty(), self.options.allow_skips),
            counts,
            scenarios: plan.scenarios.len(),
            reports,
            results: results.into_iter().flatten().collect(),
            stale,
        })
    }

    /// One scenario, seed and subject, as `check` runs it (scaled the same way, its counterexample
    /// written the same way), without reports or JUnit.
    pub fn run(
        &self,
        scenario: &Scenario,
        seed: u64,
        subject: &str,
    ) -> Result<(RunResult, Option<Saved>), GateError> {
        plan::known_subjects(self.registry, std::slice::from_ref(&subject.to_owned()))?;
        plan::ready_subject(self.registry, subject)?;
        let scenario = plan::scaled(scenario, self.options.scale)?;
        let result = self.engine.run(&scenario, seed, subject);
        let saved = self.save(&result);
        Ok((result, saved))
    }

    fn save(&self, result: &RunResult) -> Option<Saved> {
        let counterexample = result.counterexample.as_ref()?;
        let path = self.options.failures_dir().join(counterexample.file_name());
        Some(match files::counterexample(&path, counterexample) {
            Ok(()) => Saved::Written(path),
            Err(error) => Saved::NotWritten {
                path,
                error: error.to_string(),
            },
        })
    }
}

/// What a gate run found.
#[derive(Debug)]
pub struct GateOutcome {
    verdict: Verdict,
    counts: Counts,
    scenarios: usize,
    reports: Vec<ScenarioReport>,
    results: Vec<RunResult>,
    stale: Vec<PathBuf>,
}

impl GateOutcome {
    /// The verdict; [`Verdict::exit_code`] maps it to a process exit code.
    pub fn verdict(&self) -> Verdict {
        self.verdict
    }

    /// Runs by status, counted once.
    pub fn counts(&self) -> &Counts {
        &self.counts
    }

    /// One report per scenario, in the order given.
    pub fn reports(&self) -> &[ScenarioReport] {
        &self.reports
    }

    /// Every run, scenario by scenario, in job order.
    pub fn results(&self) -> &[RunResult] {
        &self.results
    }

    /// Committed reports that differ from this run's (with [`ReportMode::Check`]).
    pub fn stale_reports(&self) -> &[PathBuf] {
        &self.stale
    }

    /// The one-line text summary.
    pub fn summary_line(&self) -> String {
        summary::line(self)
    }

    /// The JSON summary (pretty, trailing newline, no timings).
    pub fn to_json(&self) -> String {
        summary::json(self)
    }
}

/// Joins paths for messages.
fn joined(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|path| path.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The directory a path's file lives in (`.` for a bare file name).
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}
