//! Why a source could not decide ([`SourceError`]) or settle ([`SettleFailure`]).
//!
//! Promises: none of these is a denial, and none changed the key; the store cases are the same two
//! for deciding and settling (unreachable, or an answer that is no decision or settlement).

use bucketproof_limiter::{AcquireError, SettleError};

/// Why a source could not decide. None of these is a denial.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SourceError {
    /// The cost is 0 or above the capacity: waiting would never help.
    #[error("invalid cost {cost} for capacity {capacity}")]
    InvalidCost {
        /// The cost asked for.
        cost: u64,
        /// The key's capacity.
        capacity: u64,
    },
    /// The limiter's key table is full and its policy refuses new keys.
    #[error("limiter key table full (bound {max_keys})")]
    KeyLimitReached {
        /// The configured bound.
        max_keys: usize,
    },
    /// The backing store is unavailable and the outage policy fails closed.
    #[error("limiter store unavailable: {0}")]
    Unavailable(String),
    /// The backing store answered with something that is not a decision (a refused script, a
    /// bucket written under another config, a malformed reply).
    #[error("limiter store failed: {0}")]
    Store(String),
}

/// Why a source could not settle a reservation ([`SettleSource::settle_set`](super::SettleSource::settle_set)). None of these
/// changed the key: the estimate stays charged. A denied extra is no error (it is an `Ok` settlement
/// with a denied decision).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SettleFailure {
    /// The rule refused the settle (docs/semantics.md, "settle"): no live record of the request id
    /// on the key (its dedupe window or per-key records passed, the key was forgotten, or a
    /// fallback decided the reservation and kept no record in the store), a denied reservation, a
    /// request settled already with another actual, an actual above the capacity.
    #[error(transparent)]
    Refused(#[from] SettleError),
    /// The backing store could not be reached (a settle has no fallback). Whether the settle ran
    /// is unknown; a settle with the same actual, while the record is live, would replay it or
    /// make it.
    #[error("limiter store unavailable, settle not confirmed: {0}")]
    Unavailable(String),
    /// The backing store answered with something that is not a settlement (a key written under
    /// another config, a refused script or statement, a malformed reply).
    #[error("limiter store failed: {0}")]
    Store(String),
}

impl From<AcquireError> for SourceError {
    fn from(e: AcquireError) -> SourceError {
        match e {
            AcquireError::InvalidCost { cost, capacity } => {
                SourceError::InvalidCost { cost, capacity }
            }
            AcquireError::KeyLimitReached { max_keys, .. } => {
                SourceError::KeyLimitReached { max_keys }
            }
            // A refusal this version does not know: still the store's error, never a denial.
            other => SourceError::Store(other.to_string()),
        }
    }
}
