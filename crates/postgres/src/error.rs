//! The crate's errors: why a limiter could not be built, and why an acquire or a settle has no
//! decision.
//!
//! Promises: an invalid cost is [`PgAcquireError::Invalid`] (the core's own error), a settle the core
//! would refuse [`PgAcquireError::Settle`] (the core's own error, the same case), a row on another
//! config [`PgAcquireError::ConfigMismatch`], a new key the key bound has no room for
//! [`PgAcquireError::KeyLimitReached`], a server that cannot be reached
//! [`PgAcquireError::Unavailable`]: never a denial.

use bucketproof_limiter::{AcquireError, SettleError};

/// Why [`crate::PgLimiter::connect`] failed; nothing was created.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The namespace is not a plain lower-case identifier.
    #[error(
        "namespace {0:?} is not a plain lower-case identifier (a-z, 0-9 and _, not starting with a \
         digit, 1 to 63 characters)"
    )]
    Namespace(String),
    /// The namespace holds the crate's schema at another version (or an unreadable one).
    #[error(
        "namespace {namespace} holds bucketproof schema version {found:?}; this crate reads version \
         {expected} and changes nothing else"
    )]
    SchemaVersion {
        /// The namespace.
        namespace: String,
        /// The version found (`None`: the version table is empty).
        found: Option<i32>,
        /// The version this crate reads.
        expected: i32,
    },
    /// A setting out of its range (named in the message).
    #[error("settings: {0}")]
    Settings(String),
    /// The connection string is not one tokio-postgres accepts.
    #[error("database URL: {0}")]
    Url(String),
    /// The pool could not give a connection.
    #[error("cannot connect to PostgreSQL: {0}")]
    Connect(#[from] deadpool_postgres::PoolError),
    /// PostgreSQL refused a statement.
    #[error("PostgreSQL: {0}")]
    Postgres(#[from] tokio_postgres::Error),
}

/// Why an acquire (or a settle, a peek, a reconfigure) has no answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PgAcquireError {
    /// An invalid cost (`0`, or above the key's smallest capacity): nothing changed.
    #[error(transparent)]
    Invalid(#[from] AcquireError),
    /// A settle the core refuses, as the core names it (an actual above the key's capacity, no
    /// live record of the request id, a denied request, a request settled with another actual):
    /// nothing changed.
    #[error(transparent)]
    Settle(#[from] SettleError),
    /// The key's row is on another config (another limiter on the same namespace): nothing changed.
    #[error("the stored bucket is on another config: {0}")]
    ConfigMismatch(String),
    /// PostgreSQL could not be reached, or the connection broke before an answer (the call may or may
    /// not have run), and the outage policy is to fail closed (a settle, which has no fallback:
    /// always). Not a denial.
    #[error("PostgreSQL unavailable: {0}")]
    Unavailable(String),
    /// PostgreSQL answered with an error of its own.
    #[error("PostgreSQL: {0}")]
    Postgres(tokio_postgres::Error),
    /// The key is new, its part of the table is at the key bound and the policy found no room
    /// (`RejectNewKeys`, or `EvictFull` with no removable row in the part's sample): nothing changed.
    #[error(
        "key table full: the new key's part holds {per_part} keys (bound {max_keys} over \
         {parts} parts)"
    )]
    KeyLimitReached {
        /// The bound for the whole table, as configured.
        max_keys: usize,
        /// The bound of each part (`max_keys / parts`, rounded up).
        per_part: u64,
        /// The number of parts ([`crate::KEY_PARTS`]).
        parts: u32,
    },
    /// What this limiter does not do (named in the message): nothing changed.
    #[error("not supported: {0}")]
    Unsupported(&'static str),
    /// The reply is no decision the transition could make (a bug, never rounded over).
    #[error("malformed reply: {0}")]
    Reply(&'static str),
}
