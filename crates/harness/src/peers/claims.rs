//! What a note says about the counterexample it sits beside, in a form a machine can hold it to.
//!
//! A note in `peers/peers.toml` explains a violated property in words; its `claims` say the same in
//! a few checkable facts about the shrunk counterexample shown beside it (the clock stepped back, a
//! balance above capacity was reported, ...). [`contradictions`] checks every claim of every note
//! against the first counterexample of each property the note names; `bucketproof peers` refuses
//! to write a report with a contradiction, and the project's tests hold the committed report to it.
//!
//! Promise: a claim is checked only against the counterexample's own data (its setup, its ops, what
//! the oracle expected and what the peer did), never against the note's words; a note beside a
//! counterexample states at least one claim (the catalogue refuses one that states none).

use super::catalogue::{Claim, Peer};
use super::findings::{Found, PeerFindings, PropertyState};
use bucketproof_trace::trace::Op;

impl Claim {
    /// The name written in the catalogue.
    pub fn name(self) -> &'static str {
        match self {
            Claim::ClockStepsBack => "clock-steps-back",
            Claim::ClockNeverStepsBack => "clock-never-steps-back",
            Claim::AdmitsMore => "admits-more",
            Claim::ReportsAboveCapacity => "reports-above-capacity",
            Claim::ReportsBelowZero => "reports-below-zero",
            Claim::CostAboveCapacity => "cost-above-capacity",
            Claim::CostZero => "cost-zero",
            Claim::CapacityAbove2Pow53 => "capacity-above-2^53",
            Claim::RaisesError => "raises-error",
        }
    }

    /// Whether `found` bears the claim out.
    pub fn holds(self, found: &Found) -> bool {
        let capacity = found
            .setup
            .config
            .bandwidths()
            .iter()
            .map(|b| b.capacity)
            .min()
            .unwrap_or(0);
        match self {
            Claim::ClockStepsBack => steps_back(&found.ops),
            Claim::ClockNeverStepsBack => !steps_back(&found.ops),
            Claim::AdmitsMore => match (leading_number(&found.got), after(&found.expected, "<=")) {
                (Some(got), Some(bound)) => got > bound,
                _ => false,
            },
            Claim::ReportsAboveCapacity => {
                reported(found).is_some_and(|balance| balance > capacity as f64)
            }
            Claim::ReportsBelowZero => reported(found).is_some_and(|balance| balance < 0.0),
            Claim::CostAboveCapacity => {
                matches!(found.ops.last(), Some(Op::Acquire(a)) if a.cost > capacity)
            }
            Claim::CostZero => matches!(found.ops.last(), Some(Op::Acquire(a)) if a.cost == 0),
            Claim::CapacityAbove2Pow53 => capacity > 1 << 53,
            Claim::RaisesError => found.got.starts_with("store error"),
        }
    }
}

/// Some op's time is earlier than the latest time before it.
fn steps_back(ops: &[Op]) -> bool {
    let mut latest: Option<u64> = None;
    for op in ops {
        let now = match op {
            Op::Acquire(a) => a.now,
            Op::Settle(s) => s.now,
            Op::Reconfigure { now, .. } | Op::Sweep { now } => *now,
            Op::Forget { .. } => continue,
        };
        if latest.is_some_and(|latest| now < latest) {
            return true;
        }
        latest = Some(latest.map_or(now, |latest| latest.max(now)));
    }
    false
}

/// The balance a "reported remaining outside [0, capacity]" counterexample shows.
fn reported(found: &Found) -> Option<f64> {
    found
        .expected
        .starts_with("a balance in")
        .then(|| leading_number(&found.got))
        .flatten()
}

/// The number `text` starts with (an integer or a decimal, maybe negative).
fn leading_number(text: &str) -> Option<f64> {
    text.split_whitespace()
        .next()?
        .trim_end_matches(';')
        .parse()
        .ok()
}

/// The number after `marker` in `text`.
fn after(text: &str, marker: &str) -> Option<f64> {
    leading_number(&text[text.find(marker)? + marker.len()..])
}

/// A claim the counterexample beside its note does not bear out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Contradiction {
    /// The peer.
    pub peer: String,
    /// The property whose counterexample was checked.
    pub property: String,
    /// The claim.
    pub claim: Claim,
    /// Where the counterexample came from.
    pub scenario: String,
    /// Its seed.
    pub seed: u64,
}

impl std::fmt::Display for Contradiction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "peer {:?}: a note on {} claims {}, but its counterexample (scenario {} seed {}) does \
             not show it",
            self.peer,
            self.property,
            self.claim.name(),
            self.scenario,
            self.seed
        )
    }
}

/// Every claim of `peer`'s notes that the first counterexample of a property it names does not
/// bear out; `first` gives that counterexample per property, if the property was violated.
pub fn check<'a>(peer: &Peer, first: impl Fn(&str) -> Option<&'a Found>) -> Vec<Contradiction> {
    let mut out = Vec::new();
    for note in &peer.notes {
        for property in &note.properties {
            let Some(found) = first(property) else {
                continue;
            };
            for &claim in &note.claims {
                if !claim.holds(found) {
                    out.push(Contradiction {
                        peer: peer.name.clone(),
                        property: property.clone(),
                        claim,
                        scenario: found.scenario.clone(),
                        seed: found.seed,
                    });
                }
            }
        }
    }
    out
}

/// [`check`] over one peer's findings.
pub fn contradictions(findings: &PeerFindings) -> Vec<Contradiction> {
    check(&findings.peer, |property| {
        findings
            .properties
            .iter()
            .find(|p| p.property == property)
            .and_then(|p| match &p.state {
                PropertyState::Violated { first, .. } => Some(first.as_ref()),
                _ => None,
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bucketproof_trace::trace::{Acquire, ConfigSpec, Setup};

    fn found(ops: &[(u64, u64)], expected: &str, got: &str) -> Found {
        Found {
            scenario: "s".into(),
            seed: 1,
            setup: Setup::new(ConfigSpec::new(7, "7/10s")),
            ops: ops
                .iter()
                .map(|&(cost, now)| {
                    Op::Acquire(Acquire {
                        key: 0,
                        cost,
                        now,
                        request_id: None,
                    })
                })
                .collect(),
            what: "w".into(),
            expected: expected.into(),
            got: got.into(),
            shrink_budget_exhausted: false,
        }
    }

    #[test]
    fn each_claim_is_read_from_the_counterexample() {
        // redis-rate's first invariant counterexample: no step back, a denied cost above
        // capacity, a balance above capacity.
        let above = found(&[(1, 0), (8, 4_000_000_000)], "a balance in [0, 7]", "8");
        assert!(Claim::ClockNeverStepsBack.holds(&above));
        assert!(!Claim::ClockStepsBack.holds(&above));
        assert!(Claim::ReportsAboveCapacity.holds(&above));
        assert!(!Claim::ReportsBelowZero.holds(&above));
        assert!(Claim::CostAboveCapacity.holds(&above));
        assert!(!Claim::AdmitsMore.holds(&above));
        assert!(!Claim::CapacityAbove2Pow53.holds(&above));
        assert!(!Claim::CostZero.holds(&above));
        // An admitted cost of 0 after an admission (redis-rate's, npm limiter's at the first op).
        let zero = found(
            &[(1, 0), (0, 1_000_000_000)],
            "an error for cost 0",
            "allowed",
        );
        assert!(Claim::CostZero.holds(&zero));
        assert!(!Claim::CostAboveCapacity.holds(&zero));
        let back = found(&[(1, 5), (1, 9), (1, 7)], "a balance in [0, 7]", "-2");
        assert!(Claim::ClockStepsBack.holds(&back));
        assert!(Claim::ReportsBelowZero.holds(&back));
        assert!(!Claim::CostAboveCapacity.holds(&back));
        let over = found(
            &[(1, 0)],
            "<= 8453000999999 units over [6193000000000, 7446000000000]",
            "10800000000000 units",
        );
        assert!(Claim::AdmitsMore.holds(&over));
        let within = found(&[(1, 0)], "<= 10 units over [0, 1]", "10 units");
        assert!(!Claim::AdmitsMore.holds(&within));
        let raised = found(&[(1, 0)], "an answer", "store error: the script raised");
        assert!(Claim::RaisesError.holds(&raised));
        assert!(!Claim::RaisesError.holds(&above));
    }
}
