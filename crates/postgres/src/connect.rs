//! Connecting: [`PgBuilder::connect`] validates the settings, opens the pool, puts the schema in
//! place and makes the [`PgLimiter`] with its statements' texts.
//!
//! Promises: a limiter exists only with its schema in place at this crate's version, in the
//! namespace its settings name, and settings that passed [`PgBuilder`]'s validation.

use bucketproof_limiter::Bandwidths;
use bucketproof_limiter::outage::Fallback;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::NoTls;

use crate::builder::PgBuilder;
use crate::error::BuildError;
use crate::limiter::{PgLimiter, Words};
use crate::schema::migrate;

impl PgBuilder {
    /// Validates the settings, connects to `url` (a tokio-postgres connection string or URL), and
    /// creates the schema in the namespace if it has none (refusing one of another version).
    pub async fn connect(self, url: &str) -> Result<PgLimiter, BuildError> {
        let namespace = self.validate()?;
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

impl PgLimiter {
    /// Settings for a limiter with `config` for every key (a [`Config`](bucketproof_limiter::Config),
    /// or a [`Bandwidths`] set of several, all of which must cover a cost), to adjust and then
    /// [`connect`](PgBuilder::connect).
    pub fn builder(config: impl Into<Bandwidths>) -> PgBuilder {
        PgBuilder::new(config.into())
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
