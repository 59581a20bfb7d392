//! The gate's summaries: one text line and a JSON document, both from the same [`super::Counts`].
//!
//! Promise: no timings (the JSON is as reproducible as the reports); the text line's passed, failed,
//! errors and skipped, the JSON's `runs`, `failures`, `errors` and `skipped`, and the JUnit file's
//! totals are the same [`super::Counts`].

use serde::Serialize;

use super::{GateOutcome, Verdict};
use crate::report::ScenarioReport;

/// The summary `--json` prints.
#[derive(Serialize)]
pub(super) struct JsonSummary<'a> {
    passed: bool,
    verdict: Verdict,
    runs: usize,
    failures: usize,
    errors: usize,
    skipped: usize,
    scenarios: &'a [ScenarioReport],
    stale_reports: Vec<String>,
}

pub(super) fn json(outcome: &GateOutcome) -> String {
    let mut text = serde_json::to_string_pretty(&of(outcome)).expect("plain data serializes");
    text.push('\n');
    text
}

/// The JSON summary of `outcome`, as data.
pub(super) fn of(outcome: &GateOutcome) -> JsonSummary<'_> {
    let counts = &outcome.counts;
    JsonSummary {
        passed: outcome.verdict.passed(),
        verdict: outcome.verdict,
        runs: counts.runs,
        failures: counts.failed,
        errors: counts.errors,
        skipped: counts.skipped,
        scenarios: &outcome.reports,
        stale_reports: outcome
            .stale
            .iter()
            .map(|path| path.display().to_string())
            .collect(),
    }
}

/// `; profile exact` when every run that ran had one profile, else `; profiles: exact 40, safety 8`
/// (a run skipped or in error before its subject was built has no profile to name).
fn profiles(outcome: &GateOutcome) -> String {
    let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
    let ran = outcome.reports.iter().flat_map(|report| &report.runs);
    for run in ran.filter(|run| run.steps > 0) {
        *counts.entry(run.profile.as_str()).or_default() += 1;
    }
    match counts.len() {
        0 => String::new(),
        1 => format!("; profile {}", counts.keys().next().expect("one")),
        _ => {
            let each: Vec<String> = counts.iter().map(|(p, n)| format!("{p} {n}")).collect();
            format!("; profiles: {}", each.join(", "))
        }
    }
}

pub(super) fn line(outcome: &GateOutcome) -> String {
    let counts = &outcome.counts;
    let mut line = format!(
        "bucketproof check: {} scenarios, {} runs: {} passed, {} failed, {} errors, {} skipped",
        outcome.scenarios, counts.runs, counts.passed, counts.failed, counts.errors, counts.skipped
    );
    line.push_str(&profiles(outcome));
    if !outcome.stale.is_empty() {
        line.push_str(&format!(", {} stale reports", outcome.stale.len()));
    }
    if outcome.verdict == Verdict::NothingChecked {
        line.push_str("; nothing was checked: no run passed");
    }
    line
}
