//! What the gate found about one peer: its runs, the ops checked, each property held or violated
//! (with the first shrunk counterexample of each violation), and its distance from the model.
//!
//! Promise: a function of the runs alone, in job order: no timings, no paths of this machine, so the
//! report built from it compares byte for byte.

use serde::{Deserialize, Serialize};

use super::catalogue::{PROPERTIES, Peer};
use crate::engine::{RunResult, Status};
use crate::gate::Counts;
use bucketproof_check::oracle::OracleKind;
use bucketproof_trace::profile::Profile;
use bucketproof_trace::trace::{Op, Setup};

/// One peer's findings.
#[derive(Clone, Debug, Serialize)]
pub struct PeerFindings {
    /// The catalogue entry.
    pub peer: Peer,
    /// The profile it was checked under (the one its subject declares).
    pub profile: Option<Profile>,
    /// Runs by status.
    pub counts: Counts,
    /// Ops stepped through the peer, over every run that ran.
    pub ops_checked: u64,
    /// Each property, in [`PROPERTIES`] order.
    pub properties: Vec<PropertyFinding>,
    /// Scenario by scenario.
    pub runs: Vec<RunFinding>,
    /// Distance from the model over every run (acquires only).
    pub divergence: Divergence,
    /// Wall time of the checking runs (shrinking excluded): for terminal lines only, never in the
    /// report.
    #[serde(skip)]
    pub checking_time: std::time::Duration,
}

/// One property of one peer.
#[derive(Clone, Debug, Serialize)]
pub struct PropertyFinding {
    /// The property (an oracle's name).
    pub property: &'static str,
    /// Held, violated, or not judged.
    pub state: PropertyState,
}

/// What became of one property.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum PropertyState {
    /// No run violated it (each property is judged in runs of its own, with only its oracle on).
    Held {
        /// Runs that judged it.
        runs: usize,
    },
    /// Some runs stopped on it.
    Violated {
        /// How many.
        runs: usize,
        /// The first, shrunk.
        first: Box<Found>,
    },
    /// The profile does not judge it.
    NotJudged {
        /// Why.
        why: String,
    },
}

/// A shrunk counterexample, as the report shows it (and as its JSON reads back, for the notes'
/// claims to be checked against the committed report).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Found {
    /// The scenario it came from.
    pub scenario: String,
    /// Its seed.
    pub seed: u64,
    /// How the peer was set up.
    pub setup: Setup,
    /// The shrunk ops; the last one fails.
    pub ops: Vec<Op>,
    /// What was wrong.
    pub what: String,
    /// What the oracle expected.
    pub expected: String,
    /// What the peer did.
    pub got: String,
    /// Shrinking stopped at its budget.
    pub shrink_budget_exhausted: bool,
}

/// One run.
#[derive(Clone, Debug, Serialize)]
pub struct RunFinding {
    /// Scenario.
    pub scenario: String,
    /// Seed.
    pub seed: u64,
    /// `pass`, `fail`, `unreached`, `skipped` or `error`.
    pub status: &'static str,
    /// The violated property, or why it skipped or errored.
    pub detail: String,
    /// Ops stepped.
    pub steps: u64,
    /// The shrunk counterexample's length, for a failure.
    pub counterexample_ops: Option<usize>,
}

/// Distance from the model, summed over runs.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Divergence {
    /// Acquires whose admit/deny differs from the model's.
    pub decision_mismatches: u64,
    /// The peer admitted, the model denied.
    pub over_admissions: u64,
    /// The peer denied, the model admitted.
    pub under_admissions: u64,
    /// Same decision, another balance or wait.
    pub value_mismatches: u64,
    /// Largest `|peer remaining - model remaining|`, in tokens, printed with 6 decimals.
    pub max_token_error: String,
}

impl PeerFindings {
    /// The findings from `peer`'s runs: `all`, every oracle on (the run table, the counts, the
    /// distance from the model), and `alone`, for each switchable property the runs with only that
    /// oracle on, so that one violation does not hide another behind it.
    pub fn of(
        peer: &Peer,
        all: &[RunResult],
        alone: &[(OracleKind, Vec<RunResult>)],
    ) -> PeerFindings {
        let mut ops_checked = 0;
        let mut divergence = Divergence::default();
        let mut max_token_error = 0.0_f64;
        let mut runs = Vec::with_capacity(all.len());
        for result in all {
            let steps = result.report.as_ref().map_or(0, |report| report.steps);
            ops_checked += steps;
            if let Some(report) = &result.report {
                let d = &report.divergence;
                divergence.decision_mismatches += d.decision_mismatches;
                divergence.over_admissions += d.over_admissions;
                divergence.under_admissions += d.under_admissions;
                divergence.value_mismatches += d.value_mismatches;
                max_token_error = max_token_error.max(d.max_token_error);
            }
            let (status, detail) = match &result.status {
                Status::Pass => ("pass", String::new()),
                Status::Fail { violation } => ("fail", violation.oracle.name().to_owned()),
                Status::Unreached { events } => ("unreached", events.join(", ")),
                Status::Skipped { reason } => ("skipped", reason.clone()),
                Status::Error { message } => ("error", message.clone()),
            };
            runs.push(RunFinding {
                scenario: result.scenario.clone(),
                seed: result.seed,
                status,
                detail,
                steps,
                counterexample_ops: result.counterexample.as_ref().map(|c| c.ops.len()),
            });
        }
        divergence.max_token_error = format!("{max_token_error:.6}");
        let profile = all
            .iter()
            .find(|result| result.report.is_some())
            .map(|result| result.profile.clone());
        let safety = profile.as_ref().is_some_and(Profile::is_safety);
        let properties = PROPERTIES
            .iter()
            .map(|&kind| {
                let results = alone
                    .iter()
                    .find(|(alone_kind, _)| *alone_kind == kind)
                    .map_or(all, |(_, results)| results.as_slice());
                PropertyFinding {
                    property: kind.name(),
                    state: if kind == OracleKind::Model && safety {
                        PropertyState::NotJudged {
                            why: "the safety profile does not compare with the model decision by \
                                  decision (the distance below measures it)"
                                .to_owned(),
                        }
                    } else {
                        state_of(kind, results)
                    },
                }
            })
            .collect();
        PeerFindings {
            peer: peer.clone(),
            profile,
            counts: Counts::of(all),
            ops_checked,
            properties,
            runs,
            divergence,
            checking_time: all.iter().map(|result| result.elapsed).sum(),
        }
    }
}

/// Held or violated, from runs that judged `kind` (alone, or with every oracle for
/// [`OracleKind::Subject`]).
fn state_of(kind: OracleKind, results: &[RunResult]) -> PropertyState {
    let judged = results
        .iter()
        .filter(|r| {
            matches!(
                r.status,
                Status::Pass | Status::Fail { .. } | Status::Unreached { .. }
            )
        })
        .count();
    let violations: Vec<&RunResult> = results
        .iter()
        .filter(|r| matches!(&r.status, Status::Fail { violation } if violation.oracle == kind))
        .collect();
    let Some(first) = violations.iter().find_map(|r| r.counterexample.as_ref()) else {
        return if violations.is_empty() {
            match vacuous(kind, results) {
                Some(why) => PropertyState::NotJudged {
                    why: why.to_owned(),
                },
                None => PropertyState::Held { runs: judged },
            }
        } else {
            PropertyState::NotJudged {
                why: format!(
                    "violated in {} runs, but no counterexample was kept",
                    violations.len()
                ),
            }
        };
    };
    PropertyState::Violated {
        runs: violations.len(),
        first: Box::new(Found {
            scenario: first.scenario.clone(),
            seed: first.seed,
            setup: first.setup.clone(),
            ops: first.ops.clone(),
            what: first.violation.what.clone(),
            expected: first.violation.expected.clone(),
            got: first.violation.got.clone(),
            shrink_budget_exhausted: first.shrink_budget_exhausted,
        }),
    }
}

/// Why a property no run violated was never actually put to the test, if it was not: "held" would
/// claim what nothing checked.
fn vacuous(kind: OracleKind, results: &[RunResult]) -> Option<&'static str> {
    let total = |count: fn(&bucketproof_check::runner::Divergence) -> u64| -> u64 {
        results
            .iter()
            .filter_map(|r| r.report.as_ref())
            .map(|report| count(&report.divergence))
            .sum()
    };
    match kind {
        OracleKind::RetryAfter if total(|d| d.retry_after_probes) == 0 => Some(
            "no denial gave a retry-after the peer could be asked about (it reports none, or \
             cannot answer would_allow)",
        ),
        OracleKind::Replay if total(|d| d.replay_checks) == 0 => {
            Some("no run gave it a request id (it takes none)")
        }
        _ => None,
    }
}
