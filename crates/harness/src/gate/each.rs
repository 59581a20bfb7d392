//! The gate once per oracle: each property judged alone, in runs of its own, so a violation of one
//! (say, an invented balance the invariants reject) cannot stop the run before another (an
//! over-admission the arrival curve sees) is judged. What `bucketproof peers` reports for every
//! peer, and what `bucketproof check --each-oracle` does.
//!
//! Promise: one [`GateOutcome`] per oracle, in report order, each a whole gate with only that
//! oracle on and its counterexamples under `<reports dir>/<oracle>/failures/`; the verdict is the
//! worst of theirs. Scenario reports and JUnit are of runs with every oracle on, so this mode writes
//! neither.

use serde::Serialize;

use super::{Gate, GateError, GateOptions, GateOutcome, Observer, ReportMode, Verdict, summary};
use crate::Registry;
use bucketproof_check::oracle::{OracleKind, OracleSet};
use bucketproof_scenario::Scenario;

/// What one gate per oracle found.
#[derive(Debug)]
pub struct EachOracle {
    /// Each oracle's gate, in report order.
    pub outcomes: Vec<(OracleKind, GateOutcome)>,
}

/// Runs the gate of `options` once per oracle of `oracles`, with only that oracle on.
pub fn each_oracle(
    registry: &Registry,
    options: &GateOptions,
    oracles: OracleSet,
    scenarios: &[Scenario],
    observer: &mut dyn Observer,
) -> Result<EachOracle, GateError> {
    if options.reports != ReportMode::Skip || options.junit.is_some() {
        return Err(GateError::EachOracleFiles);
    }
    let mut outcomes = Vec::new();
    for kind in oracles.kinds() {
        let mut alone = options.clone();
        alone.reports_dir = options.reports_dir.join(kind.name());
        alone.engine.run.oracles = OracleSet::only(kind);
        let outcome = Gate::new(registry, alone)?.check(scenarios, observer)?;
        outcomes.push((kind, outcome));
    }
    Ok(EachOracle { outcomes })
}

impl EachOracle {
    /// The worst verdict of the oracles' gates (an error, then a failure, then nothing checked).
    pub fn verdict(&self) -> Verdict {
        let rank = |verdict: Verdict| match verdict {
            Verdict::Error => 3,
            Verdict::Fail => 2,
            Verdict::NothingChecked => 1,
            _ => 0,
        };
        (self.outcomes.iter())
            .map(|(_, outcome)| outcome.verdict())
            .max_by_key(|&verdict| rank(verdict))
            .unwrap_or(Verdict::NothingChecked)
    }

    /// One summary line per oracle, `<oracle> alone: <the gate's line>`.
    pub fn summary_lines(&self) -> Vec<String> {
        (self.outcomes.iter())
            .map(|(kind, outcome)| format!("{} alone: {}", kind.name(), outcome.summary_line()))
            .collect()
    }

    /// The JSON summary: the verdict, and each oracle's gate summary.
    pub fn to_json(&self) -> String {
        #[derive(Serialize)]
        struct PerOracle<'a> {
            oracle: &'static str,
            summary: summary::JsonSummary<'a>,
        }
        #[derive(Serialize)]
        struct Each<'a> {
            passed: bool,
            verdict: Verdict,
            oracles: Vec<PerOracle<'a>>,
        }
        let each = Each {
            passed: self.verdict().passed(),
            verdict: self.verdict(),
            oracles: (self.outcomes.iter())
                .map(|(kind, outcome)| PerOracle {
                    oracle: kind.name(),
                    summary: summary::of(outcome),
                })
                .collect(),
        };
        let mut text = serde_json::to_string_pretty(&each).expect("plain data serializes");
        text.push('\n');
        text
    }
}
