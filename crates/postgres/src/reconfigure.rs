//! Per-key reconfigure: a key moved to a config of its own.
//!
//! Owns: [`PgLimiter::reconfigure`] and its statement (`reconfigure.sql`, calling the schema's
//! `reconfigure` function).
//!
//! Promises: the rule of docs/semantics.md ("reconfigure"), in one call under the key's row lock:
//! refill under the old config, convert rounding down (never creating tokens), clamp, keep the cursor;
//! the override is explicit state (the cleanup never removes the key; `forget` does); an invalid new
//! config is refused before anything is sent; a limiter of several bandwidths refuses
//! ([`PgAcquireError::Unsupported`]), as the Redis limiter does.

use bucketproof_limiter::{Config, Nanos};

use crate::error::PgAcquireError;
use crate::limiter::{PgLimiter, classify};

impl PgLimiter {
    /// Moves `user` to `config` at `now` (`None`: the server's clock); a key with no bucket is
    /// created first, as an acquire would (meeting the key bound as an acquire does). Answers the key's config version after the change.
    pub async fn reconfigure(
        &self,
        user: &str,
        config: Config,
        now: Option<Nanos>,
    ) -> Result<u32, PgAcquireError> {
        if self.settings.bandwidths.len() > 1 {
            return Err(PgAcquireError::Unsupported(
                "per-key reconfigure of a limiter of several bandwidths",
            ));
        }
        let (client, statement) = self.prepared(&self.reconfigure).await?;
        let w = &self.words;
        let now = now.map(|now| now.to_string());
        let rate = config.rate();
        let row = client
            .query_one(
                &statement,
                &[
                    &user,
                    &now,
                    &w.capacity_units,
                    &w.p,
                    &w.unit,
                    &w.fingerprint,
                    &config.capacity_units().to_string(),
                    &config.units_per_nanosecond().to_string(),
                    &config.units_per_token().to_string(),
                    &format!("{}/{}/{}", config.capacity(), rate.numer(), rate.denom()),
                    &w.per_part,
                    &w.evict,
                ],
            )
            .await
            .map_err(classify)?;
        if row.get::<_, bool>(0) {
            return Err(PgAcquireError::ConfigMismatch(format!(
                "the stored bucket of {user:?} is on another config than {}",
                w.fingerprint
            )));
        }
        if row.get::<_, bool>(2) {
            return Err(self.key_limit());
        }
        u32::try_from(row.get::<_, i32>(1)).map_err(|_| PgAcquireError::Reply("a negative version"))
    }
}
