//! Per-key administration: reconfigure and forget.
//!
//! Owns: [`RedisLimiter::reconfigure`] (the optimistic WATCH/MULTI/EXEC transaction and the override
//! descriptor it writes) and [`RedisLimiter::forget`].
//!
//! Promises: a reconfigure is atomic and uses the core's exact `reconfigured`; on any error nothing
//! was changed.

use bucketproof_limiter::{BucketState, Config, NANOS_PER_SECOND, Nanos};
use redis::RedisError;

use super::RedisLimiter;
use super::error::ReconfigureError;
use super::stats::bump;
use crate::epoch::Marker;
use crate::range::check_exact;
use crate::script::{Packed, limbs, packed_config};

impl RedisLimiter {
    /// Moves `user` to `new` at `now` (`None`: the server's time), as the in-memory limiter's
    /// `reconfigure_at`: refill under the old config up to `max(now, last)`, convert to the new unit grid
    /// rounding down, clamp to the new capacity. Returns the key's new config version (1 for the first).
    ///
    /// Atomic by optimistic locking (WATCH, read, compute with the core's exact `reconfigured`,
    /// MULTI/EXEC, retry if another instance wrote in between) on a connection of its own: rare, so it
    /// does not need a second Lua script with its own arithmetic. The override is stored with the
    /// bucket, every later acquire of the key uses it, and the key no longer expires until
    /// [`RedisLimiter::forget`] (as the in-memory limiter keeps overrides). `new` must be in the exact
    /// range like every config. A key with no bucket starts as an acquire would create it, by the
    /// recovery policy ([`crate::Recovery`]); a missing epoch marker is detected and written here too,
    /// and counted in [`crate::RedisStats`] as the acquire would count it.
    ///
    /// A limiter of several bandwidths has no per-key override: its keys are refused with
    /// [`ReconfigureError::SeveralBandwidths`] before anything is sent (nothing changes).
    pub async fn reconfigure(
        &self,
        user: &str,
        new: Config,
        now: Option<Nanos>,
    ) -> Result<u64, ReconfigureError> {
        if self.set.is_some() {
            return Err(ReconfigureError::SeveralBandwidths {
                bandwidths: self.settings.bandwidths.len(),
            });
        }
        check_exact(&new)?;
        let key = self.redis_key(user);
        let mut conn = self
            .client
            .get_multiplexed_async_connection()
            .await
            .map_err(ReconfigureError::Redis)?;
        loop {
            let marker_key = self.marker_key(&key);
            // The marker too: a loss detected by another instance between this read and the write
            // must not be overwritten by this one's view of it.
            let _: () = redis::cmd("WATCH")
                .arg(&key)
                .arg(&marker_key)
                .query_async(&mut conn)
                .await
                .map_err(ReconfigureError::Redis)?;
            let now = match now {
                Some(now) => now,
                None => {
                    let (s, us): (u64, u64) = redis::cmd("TIME")
                        .query_async(&mut conn)
                        .await
                        .map_err(ReconfigureError::Redis)?;
                    s.saturating_mul(NANOS_PER_SECOND)
                        .saturating_add(us.saturating_mul(1000))
                }
            };
            let stored: Option<Vec<u8>> = redis::cmd("GET")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .map_err(|e| {
                    if e.code() == Some("WRONGTYPE") {
                        ReconfigureError::ConfigMismatch(
                            "the stored key is not a one-bandwidth bucket".into(),
                        )
                    } else {
                        ReconfigureError::Redis(e)
                    }
                })?;
            let packed = stored
                .as_deref()
                .map(Packed::decode)
                .transpose()
                .map_err(|_| ReconfigureError::Corrupt("bucket"))?;
            let (version, old) = match &packed {
                Some(packed) => match packed
                    .override_config()
                    .map_err(|_| ReconfigureError::Corrupt("override"))?
                {
                    Some(found) => found,
                    None if packed.config == self.conf => (0, self.settings.config),
                    None => {
                        return Err(ReconfigureError::ConfigMismatch(
                            "the stored bucket is on another config".into(),
                        ));
                    }
                },
                None => (0, self.settings.config),
            };
            let stored = match &packed {
                Some(packed) => Some(
                    BucketState::new(&old, packed.balance, packed.last_refill)
                        .ok_or(ReconfigureError::Corrupt("bucket"))?,
                ),
                None => None,
            };
            // A key with no bucket starts as an acquire would create it (the recovery policy), and
            // a missing marker is detected here as it would be there.
            let (state, marker, start) = match stored {
                Some(state) => (state, None, None),
                None => {
                    let value: Option<String> = redis::cmd("GET")
                        .arg(&marker_key)
                        .query_async(&mut conn)
                        .await
                        .map_err(ReconfigureError::Redis)?;
                    let marker = Marker::parse(value.as_deref());
                    let start = self.settings.recovery.start([&old], marker, now);
                    (start.state(&old, now), Some(marker), Some(start))
                }
            };
            let next = state.reconfigured(&old, &new, now);
            let version = version + 1;
            // The key keeps its counter and its records' expiry; the override's config and version
            // replace the default config's bytes.
            let bucket = Packed {
                balance: next.balance(),
                last_refill: next.last_refill(),
                seq: packed.as_ref().map_or(0, |p| p.seq),
                records_until: packed.as_ref().map_or((-1, 0), |p| p.records_until),
                config: packed_config(&new),
                override_version: Some(version),
            };
            let mut transaction = redis::pipe();
            transaction.atomic();
            if marker == Some(Marker::Missing) {
                let (s, n) = limbs(now);
                transaction
                    .cmd("SET")
                    .arg(&marker_key)
                    .arg(format!("{s}:{n}"))
                    .ignore();
            }
            // SET without PX: a key with an override never expires.
            let written: Option<redis::Value> = transaction
                .cmd("SET")
                .arg(&key)
                .arg(bucket.encode())
                .ignore()
                .query_async(&mut conn)
                .await
                .map_err(ReconfigureError::Redis)?;
            if written.is_some() {
                if start.is_some_and(|start| start.recovering) {
                    bump(&self.counters.recovering);
                }
                if marker == Some(Marker::Missing) {
                    bump(&self.counters.losses_detected);
                }
                return Ok(version);
            }
            // EXEC returned nil: another instance wrote the key after our WATCH; read again.
        }
    }

    /// Drops `user`'s bucket and request-id records; the next access is fresh.
    pub async fn forget(&self, user: &str) -> Result<bool, RedisError> {
        let mut conn = self.conn.clone();
        let key = self.redis_key(user);
        let removed: u64 = redis::cmd("DEL")
            .arg(&key)
            .arg(self.records_key(&key))
            .query_async(&mut conn)
            .await?;
        Ok(removed > 0)
    }
}
