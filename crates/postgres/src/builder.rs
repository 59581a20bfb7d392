//! The settings of a [`PgLimiter`](crate::PgLimiter) and their defaults.
//!
//! Owns: [`PgBuilder`] with every default (the dedupe defaults and the outage policy's are those of
//! the in-memory and Redis limiters), their validation, and the key bound per part. Connecting
//! ([`PgBuilder::connect`]) is `connect.rs`'s; the limiter keeps the settings it was built with.
//!
//! Promises: a limiter exists only with settings the statement runs as documented (records per key
//! within [`MAX_RECORDS_PER_KEY`], at least one attempt, a bound of at least one key under a policy
//! PostgreSQL supports).

use std::time::Duration;

use bucketproof_limiter::outage::Unavailable;
use bucketproof_limiter::{Bandwidths, EvictionPolicy, Nanos, defaults};

use crate::error::BuildError;
use crate::schema::{KEY_PARTS, Namespace};

/// Upper bound on request-id records per key (they live in the key's row).
pub const MAX_RECORDS_PER_KEY: usize = 1024;

/// Settings of a [`PgLimiter`](crate::PgLimiter); build one with
/// [`PgLimiter::builder`](crate::PgLimiter::builder).
#[derive(Clone, Debug)]
pub struct PgBuilder {
    /// Every key's bandwidths (one, or several: all kept in the key's one row).
    pub(crate) bandwidths: Bandwidths,
    pub(crate) namespace: String,
    pub(crate) dedupe_window: Nanos,
    pub(crate) dedupe_per_key: usize,
    pub(crate) unavailable: Unavailable,
    pub(crate) attempts: u32,
    pub(crate) pool_size: usize,
    /// The key bound and its policy; `None`: no bound.
    pub(crate) max_keys: Option<(usize, EvictionPolicy)>,
}

impl PgBuilder {
    /// The schema (a plain lower-case identifier) the limiter's tables live in; give each
    /// application its own. Default `bucketproof`.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// Request-id records: live `window` long, at most `per_key` per key. Default: the in-memory
    /// limiter's, [`defaults::DEDUPE_WINDOW`] and [`defaults::DEDUPE_PER_KEY`]. A window of zero turns
    /// request ids off (nothing is recorded).
    pub fn dedupe(mut self, window: Duration, per_key: usize) -> Self {
        self.dedupe_window = u64::try_from(window.as_nanos()).unwrap_or(u64::MAX);
        self.dedupe_per_key = per_key;
        self
    }

    /// The policy when PostgreSQL is unavailable: the same type and behaviour as the Redis limiter's.
    /// Default [`Unavailable::FailClosed`].
    pub fn on_unavailable(mut self, policy: Unavailable) -> Self {
        self.unavailable = policy;
        self
    }

    /// Attempts per acquire; a retry happens only when it cannot double-charge (see the crate docs).
    /// Default 3.
    pub fn attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts;
        self
    }

    /// Bounds the table at `max_keys` rows, rounded up to a multiple of [`KEY_PARTS`] and enforced
    /// per part (a key's part is a hash of the key), as the in-memory limiter enforces its bound per
    /// shard. A new key whose part is full: under [`EvictionPolicy::RejectNewKeys`] refused
    /// ([`PgAcquireError::KeyLimitReached`](crate::PgAcquireError::KeyLimitReached), nothing
    /// changed); under [`EvictionPolicy::EvictFull`] it replaces a removable row of its part (full,
    /// no live record, no override: dropping it loses nothing, the horizon is raised as the cleanup
    /// raises it), found among a sample of the part's next 64 keys, and is refused if the sample has
    /// none. The lossy and deficit-keeping policies are refused here ([`BuildError::Settings`]).
    ///
    /// Default: no bound, the table grows with the keys until the cleanup removes full rows. A
    /// table's size is the database's to budget, and every row is counted either way (so a bound can
    /// be set on a namespace that has run without one).
    pub fn max_keys(mut self, max_keys: usize, policy: EvictionPolicy) -> Self {
        self.max_keys = Some((max_keys, policy));
        self
    }

    /// Connections the pool keeps at most. Default 16.
    pub fn pool_size(mut self, connections: usize) -> Self {
        self.pool_size = connections;
        self
    }
}

impl PgBuilder {
    /// Settings for `bandwidths` with every default.
    pub(crate) fn new(bandwidths: Bandwidths) -> PgBuilder {
        PgBuilder {
            bandwidths,
            namespace: "bucketproof".into(),
            dedupe_window: defaults::DEDUPE_WINDOW,
            dedupe_per_key: defaults::DEDUPE_PER_KEY,
            unavailable: Unavailable::FailClosed,
            attempts: 3,
            pool_size: 16,
            max_keys: None,
        }
    }

    /// Checks the settings, in the order `connect` reports them; the namespace is the first check.
    pub(crate) fn validate(&self) -> Result<Namespace, BuildError> {
        let namespace = Namespace::new(&self.namespace)?;
        if self.dedupe_per_key == 0 || self.dedupe_per_key > MAX_RECORDS_PER_KEY {
            return Err(BuildError::Settings(format!(
                "dedupe_per_key is {}; it must be 1 to {MAX_RECORDS_PER_KEY}",
                self.dedupe_per_key
            )));
        }
        if self.attempts == 0 || self.pool_size == 0 {
            return Err(BuildError::Settings(
                "attempts and pool_size must be at least 1".into(),
            ));
        }
        if let Some((max_keys, policy)) = self.max_keys {
            if max_keys == 0 {
                return Err(BuildError::Settings("max_keys must be at least 1".into()));
            }
            if !matches!(
                policy,
                EvictionPolicy::RejectNewKeys | EvictionPolicy::EvictFull
            ) {
                return Err(BuildError::Settings(format!(
                    "eviction policy {policy:?} is not supported on PostgreSQL (RejectNewKeys or \
                     EvictFull)"
                )));
            }
        }
        Ok(namespace)
    }

    /// The key bound of each part: `max_keys / KEY_PARTS`, rounded up.
    pub(crate) fn per_part(&self) -> Option<u64> {
        (self.max_keys).map(|(max_keys, _)| (max_keys as u64).div_ceil(u64::from(KEY_PARTS)))
    }
}
