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

pub mod arrival;
pub mod differential;
pub mod eviction;
pub mod invariants;
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
            OracleKind::Subject => "subject",
        }
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
