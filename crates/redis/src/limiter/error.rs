//! The errors of the Redis limiter's calls.
//!
//! Owns: [`RedisAcquireError`] (acquire and peek), [`RedisSettleError`], [`BuildError`] (building
//! and connecting) and [`ReconfigureError`].
//!
//! Promises: every error enum is `#[non_exhaustive]`; each variant says whether anything changed in
//! Redis (for an acquire error or a reconfigure error: nothing did, except that an unavailable call's
//! effect is unknown, which is why the limiter retries only when that is safe).

use bucketproof_limiter::{AcquireError, SettleError};
use redis::RedisError;

use super::builder::MAX_RECORDS_PER_KEY;
use crate::range::RangeError;
use crate::script::ReplyError;

/// Why an acquire has no decision.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisAcquireError {
    /// The request is invalid (cost 0 or above capacity, for several bandwidths the smallest);
    /// nothing changed.
    #[error(transparent)]
    Invalid(#[from] AcquireError),
    /// Redis could not be reached and the policy is [`Unavailable::FailClosed`](super::Unavailable::FailClosed). Not a denial.
    #[error("Redis unavailable after {attempts} attempt(s) (fail-closed): {last}")]
    Unavailable {
        /// Attempts made.
        attempts: u32,
        /// The last error.
        #[source]
        last: RedisError,
    },
    /// The key's bucket in Redis was written under another config (another unit grid). Nothing changed.
    #[error("stored bucket has another config: {0}")]
    ConfigMismatch(String),
    /// Redis answered with something that is not a valid transition: a bug, never rounded over.
    #[error(transparent)]
    Reply(#[from] ReplyError),
    /// Redis answered with an error that is neither unavailability nor a config mismatch.
    #[error("script failed: {0}")]
    Script(#[source] RedisError),
}

/// Why a settle has no settlement. Settle has no outage fallback: an unreachable Redis is an error,
/// never a settlement.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisSettleError {
    /// The settle was refused by the rule (docs/semantics.md, "settle"): an actual above the key's
    /// capacity, no live record of the request id on the key, a record of a denied acquire, or a
    /// request settled already with another actual. Nothing changed.
    #[error(transparent)]
    Refused(#[from] SettleError),
    /// Redis could not be reached, after `attempts` attempts (a settle is retried: a retry of one
    /// that ran replays it). Whether the last attempt ran is unknown: settle again with the same
    /// actual, which replays a settlement that happened and makes one that did not.
    #[error("Redis unavailable after {attempts} attempt(s), settle not confirmed: {last}")]
    Unavailable {
        /// Attempts made.
        attempts: u32,
        /// The last error.
        #[source]
        last: RedisError,
    },
    /// The key in Redis was written under another config or layout. Nothing changed.
    #[error("stored bucket has another config: {0}")]
    ConfigMismatch(String),
    /// Redis answered with something that is not a valid settle: a bug, never rounded over.
    #[error(transparent)]
    Reply(#[from] ReplyError),
    /// Redis answered with an error that is neither unavailability nor one of the above.
    #[error("script failed: {0}")]
    Script(#[source] RedisError),
}

/// Why a limiter could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The config is outside the range the script computes exactly.
    #[error(transparent)]
    Range(#[from] RangeError),
    /// The key prefix contains `{` or `}`, which would change the keys' hash tag.
    #[error("key prefix {0:?} must not contain '{{' or '}}' (keys are PREFIX{{user}})")]
    Prefix(String),
    /// More request-id records per key than the script's bound.
    #[error("dedupe per key {0} exceeds the bound {MAX_RECORDS_PER_KEY}")]
    TooManyRecords(usize),
    /// Attempts must be at least 1.
    #[error("attempts must be at least 1")]
    NoAttempts,
    /// Connecting to Redis failed.
    #[error("cannot connect to Redis: {0}")]
    Connect(#[source] RedisError),
}

/// Why a reconfigure did not happen. Nothing was changed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReconfigureError {
    /// The new config is outside the exact range.
    #[error(transparent)]
    Range(#[from] RangeError),
    /// The stored bucket has another config and no override: it was not written by this limiter.
    #[error("stored bucket has another config: {0}")]
    ConfigMismatch(String),
    /// The stored bucket cannot be read as exact integers.
    #[error("stored {0} is not readable")]
    Corrupt(&'static str),
    /// Redis failed or could not be reached.
    #[error("Redis error during reconfigure: {0}")]
    Redis(#[source] RedisError),
    /// The limiter's keys have several bandwidths, and a key of several bandwidths cannot be
    /// reconfigured per key on Redis (not supported yet). Nothing was sent.
    #[error(
        "reconfigure of a key with {bandwidths} bandwidths is not supported on Redis \
         (per-key overrides exist for limiters of one bandwidth only)"
    )]
    SeveralBandwidths {
        /// The bandwidths of the limiter's keys.
        bandwidths: usize,
    },
}
