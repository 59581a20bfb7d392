//! The decision and error types of the float buckets, self-contained (no dependency on the
//! exact limiter's types), so the harness maps them onto its own vocabulary.

use std::fmt;

/// The outcome of one `acquire` (or `peek`) on a float bucket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FloatDecision {
    /// Whether the request was admitted (and charged).
    pub allowed: bool,
    /// Tokens left after the decision, as the bucket holds them (may be slightly negative in the
    /// Go-style bucket, which admits sub-nanosecond deficits).
    pub remaining: f64,
    /// Denied only: ns from `now` until the same request would be admitted; `None` = never
    /// (no refill, or `now + value` would exceed `u64::MAX`). Always `None` when allowed.
    pub retry_after_ns: Option<u64>,
    /// ns from `now` until the bucket is full again with no traffic; `None` = never.
    pub reset_after_ns: Option<u64>,
}

/// Errors of the float buckets; an error leaves the bucket unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloatError {
    /// `cost == 0` or `cost > capacity`.
    InvalidCost {
        /// The requested cost.
        cost: u64,
        /// The bucket's capacity.
        capacity: u64,
    },
    /// A configuration that cannot describe a bucket (capacity 0, denominator 0, NaN rate, ...).
    InvalidConfig(&'static str),
}

impl fmt::Display for FloatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FloatError::InvalidCost { cost, capacity } => {
                write!(f, "invalid cost {cost}: must be in 1..={capacity}")
            }
            FloatError::InvalidConfig(why) => write!(f, "invalid config: {why}"),
        }
    }
}

impl std::error::Error for FloatError {}
