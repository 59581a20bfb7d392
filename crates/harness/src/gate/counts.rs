//! Runs counted by status, and the verdict decided from the counts.
//!
//! Promise: each run is in exactly one of passed, failed, errors or skipped, and every consumer (the
//! text summary, the JSON summary, the JUnit file, the exit code) reads these numbers rather than
//! counting again.

use serde::Serialize;

use crate::engine::{RunResult, Status};

/// Runs by status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Every run.
    pub runs: usize,
    /// Every oracle held and every reach target was reached.
    pub passed: usize,
    /// An oracle fired or a reach target was never reached.
    pub failed: usize,
    /// The subject could not be built or run at all.
    pub errors: usize,
    /// The subject cannot run the scenario (an unsupported op): it proved nothing.
    pub skipped: usize,
}

impl Counts {
    /// Counts `results`.
    pub fn of<'r>(results: impl IntoIterator<Item = &'r RunResult>) -> Counts {
        Counts::of_statuses(results.into_iter().map(|result| &result.status))
    }

    /// Counts statuses (a report's runs carry statuses only).
    pub fn of_statuses<'s>(statuses: impl IntoIterator<Item = &'s Status>) -> Counts {
        let mut counts = Counts::default();
        for status in statuses {
            counts.runs += 1;
            match status {
                Status::Pass => counts.passed += 1,
                Status::Fail { .. } | Status::Unreached { .. } => counts.failed += 1,
                Status::Error { .. } => counts.errors += 1,
                Status::Skipped { .. } => counts.skipped += 1,
            }
        }
        counts
    }

    /// The verdict of a gate with these counts. `stale`: some committed report differs.
    /// `allow_skips`: a gate whose runs all skipped may pass.
    pub fn verdict(&self, stale: bool, allow_skips: bool) -> Verdict {
        if self.errors > 0 {
            Verdict::Error
        } else if self.failed > 0 || stale {
            Verdict::Fail
        } else if self.passed == 0 && !(allow_skips && self.skipped > 0) {
            Verdict::NothingChecked
        } else {
            Verdict::Pass
        }
    }
}

/// The gate's judgement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Verdict {
    /// Something was checked and nothing failed.
    Pass,
    /// A run failed (a violation or an unreached target), or a committed report is stale.
    Fail,
    /// No run passed: every one skipped (or there were none), so the gate proved nothing.
    NothingChecked,
    /// A subject could not be built or run: the inputs, not the subject's decisions, are wrong.
    Error,
}

impl Verdict {
    /// True only for [`Verdict::Pass`].
    pub fn passed(self) -> bool {
        self == Verdict::Pass
    }

    /// The process exit code: 0 pass, 1 a failure or nothing checked, 2 an error.
    pub fn exit_code(self) -> u8 {
        match self {
            Verdict::Pass => 0,
            Verdict::Fail | Verdict::NothingChecked => 1,
            Verdict::Error => 2,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(passed: usize, failed: usize, errors: usize, skipped: usize) -> Counts {
        Counts {
            runs: passed + failed + errors + skipped,
            passed,
            failed,
            errors,
            skipped,
        }
    }

    #[test]
    fn every_status_is_counted_once() {
        let statuses = [
            Status::Pass,
            Status::Fail {
                violation: bucketproof_check::oracle::Violation::new(
                    bucketproof_check::oracle::OracleKind::Model,
                    "a wrong answer",
                    "allowed",
                    "denied",
                ),
            },
            Status::Unreached { events: vec![] },
            Status::Error {
                message: String::new(),
            },
            Status::Skipped {
                reason: String::new(),
            },
        ];
        assert_eq!(Counts::of_statuses(&statuses), counts(1, 2, 1, 1));
    }

    #[test]
    fn a_gate_that_checked_nothing_does_not_pass_unless_skips_are_allowed() {
        assert_eq!(
            counts(0, 0, 0, 2).verdict(false, false),
            Verdict::NothingChecked
        );
        assert_eq!(counts(0, 0, 0, 2).verdict(false, true), Verdict::Pass);
        assert_eq!(
            counts(0, 0, 0, 0).verdict(false, true),
            Verdict::NothingChecked
        );
        assert_eq!(counts(1, 0, 0, 2).verdict(false, false), Verdict::Pass);
    }

    #[test]
    fn errors_outrank_failures_which_outrank_an_empty_gate() {
        assert_eq!(counts(0, 1, 1, 0).verdict(false, false), Verdict::Error);
        assert_eq!(counts(0, 1, 0, 0).verdict(false, false), Verdict::Fail);
        assert_eq!(counts(3, 0, 0, 0).verdict(true, false), Verdict::Fail);
        assert_eq!(Verdict::Error.exit_code(), 2);
        assert_eq!(Verdict::NothingChecked.exit_code(), 1);
        assert_eq!(Verdict::Pass.exit_code(), 0);
    }
}
