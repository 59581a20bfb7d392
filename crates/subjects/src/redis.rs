//! The Redis subject: the harness against `bucketproof-redis`'s atomic Lua script, in injected-time
//! mode, so every decision can be compared with the reference model.
//!
//! Needs a Redis at `REDIS_URL` (default `redis://127.0.0.1:6379/`). Each subject instance uses its own
//! key prefix, so runs never see each other's buckets. The script has no sweep (Redis expires keys by
//! TTL on its own clock), so `sweep` is a no-op and the runner follows any creation the script reports.
//!
//! A setup of several bandwidths per key runs on the limiter's set script; a reconfigure to or from
//! several bandwidths is unsupported (the Redis limiter refuses it), so such a trace stops visibly.
//!
//! What the script cannot express is declared, so the engine skips such a run rather than judging
//! it: a config outside the exact range (`bucketproof_redis::check_exact`, as the setup's config or
//! a reconfigure's) and a key bound (Redis keeps every key until its TTL).

use std::sync::atomic::{AtomicU64, Ordering};

use bucketproof_limiter::Bandwidths;
use bucketproof_redis::{RedisAcquireError, RedisLimiter, RedisSettleError};

use bucketproof_check::subjects::core::{
    observe_acquired, observe_set, request, settle_error, settle_request, subject_error,
};
use bucketproof_trace::subject::{Observed, Subject, SubjectError};
use bucketproof_trace::trace::{Acquire, ConfigSpec, Settle, Setup};

/// Distinguishes subjects made by one process; the process id distinguishes processes.
static INSTANCE: AtomicU64 = AtomicU64::new(0);

/// The Redis limiter behind the subject interface.
pub struct RedisSubject {
    runtime: tokio::runtime::Runtime,
    limiter: RedisLimiter,
    /// The default config has several bandwidths.
    several: bool,
}

fn build(e: impl std::fmt::Display) -> SubjectError {
    SubjectError::Build(e.to_string())
}

fn store(error: RedisAcquireError) -> SubjectError {
    match error {
        RedisAcquireError::Invalid(error) => subject_error(error),
        other => SubjectError::Store(other.to_string()),
    }
}

/// A config of which some bandwidth is outside the script's exact range cannot be expressed on
/// Redis: the limiter would refuse it, so a run that needs it is skipped, never judged.
fn exact_on_redis(config: &Bandwidths) -> Result<(), SubjectError> {
    (config.as_slice().iter())
        .try_for_each(|bandwidth| bucketproof_redis::check_exact(bandwidth.config()))
        .map_err(|error| SubjectError::Inexpressible(error.to_string()))
}

impl RedisSubject {
    /// Connects to `REDIS_URL` with the setup's config and dedupe settings.
    pub fn new(setup: &Setup) -> Result<RedisSubject, SubjectError> {
        let url =
            std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".to_owned());
        let config = setup.config.to_bandwidths().map_err(build)?;
        exact_on_redis(&config)?;
        let several = config.len() > 1;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(build)?;
        let prefix = format!(
            "bp-harness:{}:{}:",
            std::process::id(),
            INSTANCE.fetch_add(1, Ordering::Relaxed)
        );
        let limiter = runtime
            .block_on(
                RedisLimiter::builder(config)
                    .prefix(prefix)
                    .dedupe(
                        std::time::Duration::from_nanos(setup.dedupe_window_ns),
                        setup.dedupe_per_key,
                    )
                    // Each trace's fresh prefix is a new, unprovisioned Redis: judged against
                    // the model, which loses nothing, its buckets start full. The default policy's
                    // rule after a loss is the redis crate's recovery and fault tests' to judge.
                    .recovery(bucketproof_redis::Recovery::Trusting)
                    .connect(&url),
            )
            .map_err(|e| build(format!("redis subject at {url}: {e}")))?;
        Ok(RedisSubject {
            runtime,
            limiter,
            several,
        })
    }
}

impl Subject for RedisSubject {
    fn name(&self) -> String {
        "redis".into()
    }

    fn acquire(&mut self, acquire: Acquire) -> Result<Observed, SubjectError> {
        if self.several {
            let outcome = self
                .runtime
                .block_on(
                    self.limiter
                        .acquire_set_with(&acquire.key.to_string(), request(acquire)),
                )
                .map_err(store)?;
            let acquired = &outcome.acquired;
            return Ok(observe_set(
                &acquired.decision,
                acquired.created,
                acquired.replayed,
            ));
        }
        let outcome = self
            .runtime
            .block_on(
                self.limiter
                    .acquire_with(&acquire.key.to_string(), request(acquire)),
            )
            .map_err(store)?;
        Ok(observe_acquired(&outcome.acquired))
    }

    fn settle(&mut self, settle: Settle) -> Result<Observed, SubjectError> {
        let outcome = self
            .runtime
            .block_on(
                self.limiter
                    .settle_set(&settle.key.to_string(), settle_request(settle)),
            )
            .map_err(|error| match error {
                RedisSettleError::Refused(error) => settle_error(error),
                other => SubjectError::Store(other.to_string()),
            })?;
        let settled = &outcome.settled;
        Ok(observe_set(&settled.decision, false, settled.replayed))
    }

    fn reconfigure(&mut self, key: u64, config: &ConfigSpec, now: u64) -> Result<(), SubjectError> {
        if self.several {
            return Err(SubjectError::Unsupported(
                "reconfigure of a key of several bandwidths on Redis",
            ));
        }
        let config = bucketproof_trace::subject::one_bandwidth(config)?;
        exact_on_redis(&Bandwidths::from(config))?;
        self.runtime
            .block_on(
                self.limiter
                    .reconfigure(&key.to_string(), config, Some(now)),
            )
            .map(drop)
            .map_err(|e| SubjectError::Store(e.to_string()))
    }

    fn forget(&mut self, key: u64) -> Result<(), SubjectError> {
        self.runtime
            .block_on(self.limiter.forget(&key.to_string()))
            .map(drop)
            .map_err(|e| SubjectError::Store(e.to_string()))
    }

    fn sweep(&mut self, _now: u64) -> Result<(), SubjectError> {
        Ok(())
    }

    fn would_allow(&mut self, acquire: Acquire) -> Option<bool> {
        let peeks = self
            .runtime
            .block_on(
                self.limiter
                    .peek_set(&acquire.key.to_string(), Some(acquire.now)),
            )
            .ok()?;
        Some(peeks.iter().all(|peek| {
            peek.remaining.units() >= acquire.cost as u128 * peek.remaining.units_per_token()
        }))
    }

    fn may_evict(&self) -> bool {
        true
    }

    /// Keys expire by TTL only: the script has no key bound.
    fn has_key_bound(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use bucketproof_trace::boundary::{REDIS_EXACT_LIMIT, REDIS_TIME_HEADROOM, configs};

    /// The boundary menu's Redis exactness line (the vocabulary crate knows no Redis) is the
    /// script's own.
    #[test]
    fn the_redis_lines_are_the_scripts() {
        assert_eq!(REDIS_EXACT_LIMIT, bucketproof_redis::EXACT_LIMIT);
        assert_eq!(
            REDIS_TIME_HEADROOM as u128,
            bucketproof_redis::range::TIME_HEADROOM
        );
        let specs = configs();
        let config = |index: usize| specs[index].to_config().unwrap();
        assert!(bucketproof_redis::check_exact(&config(5)).is_ok());
        assert!(bucketproof_redis::check_exact(&config(6)).is_err());
    }
}
