//! A [`Counterexample`]: a shrunk failing trace with everything needed to replay it, as written to
//! `reports/failures/`, and [`replay`], which runs one again.
//!
//! Promise: the file is plain, deterministic JSON ([`Counterexample::to_json`]) of the trace, the
//! violation, the profile and oracles that judged it and, for a child-process subject, the command
//! that starts it, so `replay` judges the same subject by the same rules without the subject file.

use serde::{Deserialize, Serialize};

use crate::Registry;
use bucketproof_check::oracle::{OracleSet, Violation};
use bucketproof_check::runner::{RunOptions, Verdict, run_trace};
use bucketproof_trace::profile::Profile;
use bucketproof_trace::subject::{Subject, SubjectError};
use bucketproof_trace::subject_file::ExecSpec;
use bucketproof_trace::trace::{Op, Setup};

/// The largest shrunk counterexample a caught bug may have: the gate's tests and the mutation
/// self-test hold the shrinker to it.
pub const MAX_COUNTEREXAMPLE_OPS: usize = 6;

/// A minimal failing trace with everything needed to replay it, as written to `reports/failures/`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Counterexample {
    /// File format version.
    pub format: u32,
    /// The scenario it came from.
    pub scenario: String,
    /// The seed that generated the original trace.
    pub seed: u64,
    /// The subject that failed.
    pub subject: String,
    /// Index of the failing op in the original trace.
    pub original_step: u64,
    /// How subjects are built.
    pub setup: Setup,
    /// The shrunk ops; the last one fails.
    pub ops: Vec<Op>,
    /// The oracle's verdict on the shrunk trace: what was expected and what the subject did.
    pub violation: Violation,
    /// The command that replays this file (relative to the directory `check` ran in).
    pub replay: String,
    /// Shrinking stopped at its budget: `ops` still fails this way but may not be minimal.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shrink_budget_exhausted: bool,
    /// The profile the subject was checked under (absent in older files: exact).
    #[serde(default, skip_serializing_if = "is_exact")]
    pub profile: Profile,
    /// For a child-process subject, the command that starts it (and the profile), so `replay`
    /// starts the same command without the subject file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<ExecSpec>,
    /// The oracles that judged the run (absent: all), so a replay judges by the same ones.
    #[serde(default, skip_serializing_if = "is_all")]
    pub oracles: OracleSet,
}

fn is_all(oracles: &OracleSet) -> bool {
    *oracles == OracleSet::ALL
}

fn is_exact(profile: &Profile) -> bool {
    *profile == Profile::exact()
}

/// File format version of [`Counterexample`].
pub const COUNTEREXAMPLE_FORMAT: u32 = 1;

impl Counterexample {
    /// A file name that names the case: `<scenario>-seed<seed>-<subject>.json`.
    pub fn file_name(&self) -> String {
        let subject: String = self
            .subject
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        format!("{}-seed{}-{}.json", self.scenario, self.seed, subject)
    }

    /// Pretty JSON with a trailing newline (deterministic).
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("plain data serializes");
        text.push('\n');
        text
    }
}

/// What replaying a counterexample showed.
#[derive(Clone, Debug, PartialEq)]
pub enum Replayed {
    /// It fails the same way as recorded.
    Reproduced(Violation),
    /// It fails, but differently.
    Different(Violation),
    /// It passes now (fixed, or the file was edited).
    Passed,
    /// The subject could not run it.
    Incompatible(String),
}

/// Replays a counterexample against its subject: the recorded command for a child-process subject
/// (with the recorded profile), else the registry's subject of that name.
pub fn replay(registry: &Registry, counterexample: &Counterexample) -> Replayed {
    let name = &counterexample.subject;
    let setup = &counterexample.setup;
    let built: Result<Box<dyn Subject>, SubjectError> = match &counterexample.exec {
        #[cfg(feature = "exec")]
        Some(spec) => bucketproof_protocol::ExecSubjects::new(".")
            .build_spec(name, spec, setup)
            .map(|s| Box::new(s) as Box<dyn Subject>),
        #[cfg(not(feature = "exec"))]
        Some(_) => Err(SubjectError::Build(format!(
            "{name} is a child process: replaying it needs the harness's `exec` feature"
        ))),
        None => registry.build(name, setup),
    };
    let mut subject = match built {
        Ok(subject) => subject,
        Err(error) => return Replayed::Incompatible(error.to_string()),
    };
    let options = RunOptions {
        oracles: counterexample.oracles,
        ..RunOptions::default()
    };
    let report = match run_trace(
        &counterexample.setup,
        counterexample.ops.iter().cloned(),
        subject.as_mut(),
        &options,
    ) {
        Ok(report) => report,
        Err(error) => return Replayed::Incompatible(error.to_string()),
    };
    match report.verdict {
        Verdict::Pass => Replayed::Passed,
        Verdict::Incompatible { reason, .. } => Replayed::Incompatible(reason),
        Verdict::Broken { step, message } => {
            Replayed::Incompatible(format!("the subject broke at op {step}: {message}"))
        }
        Verdict::Fail(failure) if failure.violation == counterexample.violation => {
            Replayed::Reproduced(failure.violation)
        }
        Verdict::Fail(failure) => Replayed::Different(failure.violation),
    }
}
