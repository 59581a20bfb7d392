//! The oracles: what "correct" means, checked step by step.
//!
//! 1. [`differential`]: the subject's decision equals the reference model's, exactly (remaining tokens
//!    compared as rationals, waits to the nanosecond, errors by kind).
//! 2. [`invariants`]: `0 <= tokens <= capacity`, the cursor never moves back, a denial leaves the
//!    refilled balance, an error changes nothing. Uses only what the subject shows.
//! 3. [`arrival`]: the arrival-curve bound (no overselling), independently of the model.
//! 4. [`retry_after`]: with no other traffic the same request succeeds at `now + retry_after` and
//!    fails 1 ns earlier, asked of the subject itself.
//! 5. [`eviction`]: a subject that evicts on its own drops only buckets whose loss changes no later
//!    decision, and refuses a key at its key bound only with cause.
//! 6. [`replay`]: a retried request id is a replay exactly while its record is live, and repeats
//!    the recorded decision, independently of the model.
//!
//! Each oracle can be switched off for a run ([`OracleSet`], in the runner's options); the default
//! runs them all. The model oracle covers both checks against the model's state (1 and 5, which
//! report as [`OracleKind::Model`]); with it off the runner still steps the model, to follow the
//! subject's legal choices and count events, but judges nothing by it. A subject's own failure (a
//! store error) is not an oracle and is always reported.

pub mod arrival;
pub mod differential;
pub mod eviction;
pub mod invariants;
pub mod replay;
pub mod retry_after;

use serde::{Deserialize, Serialize};

/// Which oracle a violation comes from (a stable name used in reports and the mutants table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OracleKind {
    /// Decision by decision against the reference model.
    Model,
    /// State invariants.
    Invariant,
    /// The arrival-curve bound.
    ArrivalCurve,
    /// Retry-after tightness.
    RetryAfter,
    /// Request-id replays.
    Replay,
    /// The subject failed (store error, unsupported op).
    Subject,
}

impl OracleKind {
    /// The stable name.
    pub fn name(self) -> &'static str {
        match self {
            OracleKind::Model => "model",
            OracleKind::Invariant => "invariant",
            OracleKind::ArrivalCurve => "arrival-curve",
            OracleKind::RetryAfter => "retry-after",
            OracleKind::Replay => "replay",
            OracleKind::Subject => "subject",
        }
    }
}

impl std::str::FromStr for OracleKind {
    type Err = String;

    /// A switchable oracle by its stable name (`model`, `invariant`, `arrival-curve`,
    /// `retry-after`, `replay`).
    fn from_str(name: &str) -> Result<OracleKind, String> {
        (OracleSet::SWITCHABLE.into_iter())
            .find(|kind| kind.name() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = OracleSet::SWITCHABLE.iter().map(|k| k.name()).collect();
                format!(
                    "unknown oracle {name:?}; the oracles are {}",
                    names.join(", ")
                )
            })
    }
}

/// Which oracles a run judges by. Every oracle is on by default; [`OracleSet::only`] and
/// [`OracleSet::without`] switch them one at a time (the mutants' per-oracle kill table runs each
/// alone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OracleSet {
    /// One bit per entry of [`OracleSet::SWITCHABLE`].
    bits: u8,
}

impl OracleSet {
    /// The oracles that can be switched, in report order. [`OracleKind::Subject`] is not one: a
    /// subject that fails is always reported.
    pub const SWITCHABLE: [OracleKind; 5] = [
        OracleKind::Model,
        OracleKind::Invariant,
        OracleKind::ArrivalCurve,
        OracleKind::RetryAfter,
        OracleKind::Replay,
    ];

    /// Every oracle on (the default).
    pub const ALL: OracleSet = OracleSet {
        bits: (1 << OracleSet::SWITCHABLE.len()) - 1,
    };

    /// Every switchable oracle off (a subject's failures are still reported).
    pub const NONE: OracleSet = OracleSet { bits: 0 };

    fn bit(kind: OracleKind) -> u8 {
        OracleSet::SWITCHABLE
            .iter()
            .position(|&k| k == kind)
            .map_or(0, |index| 1 << index)
    }

    /// `kind` alone.
    pub fn only(kind: OracleKind) -> OracleSet {
        OracleSet::NONE.with(kind)
    }

    /// This set with `kind` on.
    pub fn with(self, kind: OracleKind) -> OracleSet {
        OracleSet {
            bits: self.bits | OracleSet::bit(kind),
        }
    }

    /// This set with `kind` off.
    pub fn without(self, kind: OracleKind) -> OracleSet {
        OracleSet {
            bits: self.bits & !OracleSet::bit(kind),
        }
    }

    /// True if a violation of `kind` counts in this run (always, for [`OracleKind::Subject`]).
    pub fn judges(self, kind: OracleKind) -> bool {
        kind == OracleKind::Subject || self.bits & OracleSet::bit(kind) != 0
    }

    /// `violation` if its oracle is on.
    pub fn keep(self, violation: Option<Violation>) -> Option<Violation> {
        violation.filter(|v| self.judges(v.oracle))
    }

    /// The switchable oracles on, in report order.
    pub fn kinds(self) -> Vec<OracleKind> {
        (OracleSet::SWITCHABLE.into_iter())
            .filter(|&kind| self.judges(kind))
            .collect()
    }

    /// The set of exactly `kinds`.
    pub fn of(kinds: impl IntoIterator<Item = OracleKind>) -> OracleSet {
        kinds.into_iter().fold(OracleSet::NONE, OracleSet::with)
    }
}

/// Written as the list of the oracles on, so a counterexample file says which judged it.
impl Serialize for OracleSet {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.kinds().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for OracleSet {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<OracleSet, D::Error> {
        Ok(OracleSet::of(Vec::<OracleKind>::deserialize(deserializer)?))
    }
}

impl Default for OracleSet {
    fn default() -> Self {
        OracleSet::ALL
    }
}

/// One broken promise.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    /// Which oracle.
    pub oracle: OracleKind,
    /// What was wrong, in one stable line (no addresses, no timings).
    pub what: String,
    /// What the oracle expected.
    pub expected: String,
    /// What the subject did.
    pub got: String,
}

impl Violation {
    /// A violation from parts.
    pub fn new(
        oracle: OracleKind,
        what: impl Into<String>,
        expected: impl Into<String>,
        got: impl Into<String>,
    ) -> Violation {
        Violation {
            oracle,
            what: what.into(),
            expected: expected.into(),
            got: got.into(),
        }
    }

    /// The kind of mismatch without values, so a shrunk trace can be required to fail "the same way".
    pub fn signature(&self) -> (OracleKind, String) {
        let head = self
            .what
            .split(|c: char| c == ':' || c.is_ascii_digit())
            .next()
            .unwrap_or("")
            .trim()
            .to_owned();
        (self.oracle, head)
    }
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "[{}] {}: expected {}, got {}",
            self.oracle.name(),
            self.what,
            self.expected,
            self.got
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_oracle_set_switches_each_oracle_alone_and_never_the_subject() {
        for kind in OracleSet::SWITCHABLE {
            assert!(OracleSet::ALL.judges(kind));
            assert!(!OracleSet::ALL.without(kind).judges(kind));
            let alone = OracleSet::only(kind);
            for other in OracleSet::SWITCHABLE {
                assert_eq!(alone.judges(other), other == kind);
            }
        }
        assert!(OracleSet::NONE.judges(OracleKind::Subject));
        assert_eq!(OracleSet::default(), OracleSet::ALL);
    }
}
