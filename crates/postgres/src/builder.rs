//! Building a [`PgLimiter`]: its settings, their defaults, and connecting.
//!
//! Owns: [`PgBuilder`] with every default (the dedupe defaults and the outage policy's are those of
//! the in-memory and Redis limiters) and [`PgBuilder::connect`].
//!
//! Promises: a limiter exists only with its schema in place at this crate's version, and settings the
//! statement runs as documented (records per key within [`MAX_RECORDS_PER_KEY`], at least one attempt).

use std::time::Duration;

use bucketproof_limiter::outage::{Fallback, Unavailable};
use bucketproof_limiter::{Bandwidths, EvictionPolicy, Nanos, defaults};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::NoTls;

use crate::error::BuildError;
use crate::limiter::{PgLimiter, Words};
use crate::schema::{KEY_PARTS, Namespace, migrate};

/// Upper bound on request-id records per key (they live in the key's row).
pub const MAX_RECORDS_PER_KEY: usize = 1024;

/// Settings of a [`PgLimiter`]; build one with [`PgLimiter::builder`].
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

    /// Validates the settings, connects to `url` (a tokio-postgres connection string or URL), and
    /// creates the schema in the namespace if it has none (refusing one of another version).
    pub async fn connect(self, url: &str) -> Result<PgLimiter, BuildError> {
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
        let pg: tokio_postgres::Config =
            url.parse().map_err(|e| BuildError::Url(format!("{e}")))?;
        let manager = Manager::from_config(
            pg,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(self.pool_size)
            .build()
            .map_err(|e| BuildError::Url(format!("{e}")))?;
        let mut client = pool.get().await?;
        migrate(&mut client, &namespace).await?;
        drop(client);
        Ok(PgLimiter {
            pool,
            words: Words::new(&self),
            acquire: namespace.fill(include_str!("acquire.sql")),
            cleanup: namespace.fill(include_str!("cleanup.sql")),
            peek: namespace.fill(include_str!("peek.sql")),
            reconfigure: namespace.fill(include_str!("reconfigure.sql")),
            settle: namespace.fill(include_str!("settle.sql")),
            forget: namespace.fill(include_str!("forget.sql")),
            fallback: Fallback::new(self.unavailable),
            cleaned_up_to: std::sync::Mutex::new(String::new()),
            namespace,
            settings: self,
        })
    }
}

impl PgBuilder {
    /// The key bound of each part: `max_keys / KEY_PARTS`, rounded up.
    pub(crate) fn per_part(&self) -> Option<u64> {
        (self.max_keys).map(|(max_keys, _)| (max_keys as u64).div_ceil(u64::from(KEY_PARTS)))
    }
}

impl PgLimiter {
    /// Settings for a limiter with `config` for every key (a [`Config`](bucketproof_limiter::Config),
    /// or a [`Bandwidths`] set of several, all of which must cover a cost), to adjust and then
    /// [`connect`](PgBuilder::connect).
    pub fn builder(config: impl Into<Bandwidths>) -> PgBuilder {
        PgBuilder {
            bandwidths: config.into(),
            namespace: "bucketproof".into(),
            dedupe_window: defaults::DEDUPE_WINDOW,
            dedupe_per_key: defaults::DEDUPE_PER_KEY,
            unavailable: Unavailable::FailClosed,
            attempts: 3,
            pool_size: 16,
            max_keys: None,
        }
    }

    /// Shorthand for `PgLimiter::builder(config).namespace(namespace).connect(url)`.
    pub async fn connect(
        url: &str,
        namespace: &str,
        config: impl Into<Bandwidths>,
    ) -> Result<PgLimiter, BuildError> {
        PgLimiter::builder(config)
            .namespace(namespace)
            .connect(url)
            .await
    }
}
