//! One subject's results in one cell of the grid or one named scenario ([`SubjectCell`]), and the
//! run options every one of them is judged with, so the grid and the Go reproductions count alike.

use serde::Serialize;

use bucketproof_check::runner::{RunOptions, RunReport, Verdict};
use bucketproof_trace::subject::SubjectError;

/// One subject's results in one cell (or one scenario).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SubjectCell {
    /// The subject's name.
    pub subject: String,
    /// `pass`, `diverged`, or why the subject could not run the cell.
    pub status: String,
    /// Ops run.
    pub steps: u64,
    /// Admit/deny differs from the model.
    pub decision_mismatches: u64,
    /// Admitted what the model denies (overselling).
    pub over_admissions: u64,
    /// Denied what the model admits.
    pub under_admissions: u64,
    /// Same decision, different balance or wait.
    pub value_mismatches: u64,
    /// Simulated time (ns) of the first answer that differs in any way.
    pub first_divergence_ns: Option<u64>,
    /// Largest `|subject remaining - model remaining|`, tokens.
    pub max_token_error: f64,
    /// Arrival-curve breaches.
    pub arrival_breaches: u64,
    /// Invariant and retry-after violations.
    pub other_violations: u64,
}

impl SubjectCell {
    pub(super) fn from_report(report: &RunReport) -> SubjectCell {
        let d = &report.divergence;
        let status = match &report.verdict {
            Verdict::Pass => "pass".to_owned(),
            Verdict::Fail(_) => "diverged".to_owned(),
            Verdict::Incompatible { step, reason } => {
                format!("stopped at step {step}: {reason}")
            }
            Verdict::Broken { step, message } => format!("broke at step {step}: {message}"),
        };
        SubjectCell {
            subject: report.subject.clone(),
            status,
            steps: report.steps,
            decision_mismatches: d.decision_mismatches,
            over_admissions: d.over_admissions,
            under_admissions: d.under_admissions,
            value_mismatches: d.value_mismatches,
            first_divergence_ns: d.first_divergence_at,
            max_token_error: d.max_token_error,
            arrival_breaches: d.arrival_breaches,
            other_violations: d.other_violations,
        }
    }

    pub(super) fn unsupported(subject: &str, error: &SubjectError) -> SubjectCell {
        SubjectCell {
            subject: subject.to_owned(),
            status: format!("not run: {error}"),
            steps: 0,
            decision_mismatches: 0,
            over_admissions: 0,
            under_admissions: 0,
            value_mismatches: 0,
            first_divergence_ns: None,
            max_token_error: 0.0,
            arrival_breaches: 0,
            other_violations: 0,
        }
    }

    /// Any difference from the model at all.
    pub fn diverged(&self) -> bool {
        self.decision_mismatches
            + self.value_mismatches
            + self.arrival_breaches
            + self.other_violations
            > 0
            || self.max_token_error != 0.0
    }
}

/// The options every comparison run uses: all oracles, every step judged (no stop at the first
/// failure), no plot series beyond two samples.
pub(super) fn comparison_options() -> RunOptions {
    RunOptions {
        stop_at_first: false,
        sample_key: None,
        max_samples: 2,
        ..RunOptions::default()
    }
}
