//! The acquire path: one `EVALSHA` of the transition script, its reply, and the retries.
//!
//! Owns: [`RedisLimiter::acquire`], [`RedisLimiter::acquire_at`], [`RedisLimiter::acquire_with`], the
//! script's arguments, the retry rule and its backoff, and which Redis errors count as "unavailable".
//!
//! Promises: a retry happens only when it cannot double-charge (a request id, or a refused
//! connection); a decision from Redis equals the core's (rebuilt by [`crate::script`]); every other
//! failure goes to the outage policy or is a typed error.

use std::time::Duration;

use bucketproof_limiter::{AcquireError, Acquired, Nanos, Request, RequestId};
use redis::RedisError;

use super::RedisLimiter;
use super::error::RedisAcquireError;
use super::policy::{Outcome, Source};
use super::stats::bump;
use crate::script::{Reply, limbs};

/// The longest pause between two attempts.
const MAX_BACKOFF: Duration = Duration::from_millis(100);

impl RedisLimiter {
    /// Takes `cost` tokens for `user` at the server's time.
    pub async fn acquire(&self, user: &str, cost: u64) -> Result<Outcome, RedisAcquireError> {
        self.acquire_with(user, Request::cost(cost)).await
    }

    /// Takes `cost` tokens for `user` at the injected time `now`.
    pub async fn acquire_at(
        &self,
        user: &str,
        cost: u64,
        now: Nanos,
    ) -> Result<Outcome, RedisAcquireError> {
        self.acquire_with(user, Request::cost(cost).at(now)).await
    }

    /// The full form, as the in-memory limiter's `acquire_with`: `request.now == None` uses the Redis
    /// server's `TIME`; a request id makes retries (ours and the caller's) charge at most once.
    pub async fn acquire_with(
        &self,
        user: &str,
        request: Request,
    ) -> Result<Outcome, RedisAcquireError> {
        let config = self.settings.config;
        // Step 1 of the semantics (cost 0 or above the key's capacity) is checked inside the script,
        // against the key's effective config (its override, if reconfigured): nothing changes.
        let key = self.redis_key(user);
        let mut invocation = self.script.key(&key);
        let (mode, now_s, now_n, ttl_floor_ms) = match request.now {
            Some(now) => {
                let (s, n) = limbs(now);
                let floor =
                    u64::try_from(self.settings.injected_ttl_floor.as_millis()).unwrap_or(u64::MAX);
                ("i", s, n, floor)
            }
            None => ("s", 0, 0, 0),
        };
        let (win_s, win_n) = self.window_arg;
        invocation
            .arg(mode)
            .arg(now_s)
            .arg(now_n)
            .arg(&self.fingerprint)
            .arg(&self.capacity_arg)
            .arg(config.units_per_nanosecond())
            .arg(request.cost)
            .arg(request.request_id.map(id_text).unwrap_or_default())
            .arg(win_s)
            .arg(win_n)
            .arg(self.settings.dedupe_per_key)
            .arg(ttl_floor_ms)
            .arg(&self.unit_arg)
            .arg(config.capacity());

        let mut backoff = self.settings.retry_backoff;
        let mut attempts = 0;
        let last = loop {
            attempts += 1;
            let mut conn = self.conn.clone();
            // The connection manager applies the response timeout to every command.
            let call = invocation.invoke_async::<Vec<i64>>(&mut conn).await;
            let error = match call {
                Ok(raw) => {
                    let reply = Reply::parse(raw)?;
                    let decision = reply.decision(&config)?;
                    bump(&self.counters.redis_decisions);
                    if reply.replayed {
                        bump(&self.counters.replayed);
                    }
                    return Ok(Outcome {
                        acquired: Acquired {
                            decision,
                            created: reply.created,
                            replayed: reply.replayed,
                        },
                        source: Source::Redis,
                        seq: reply.seq,
                    });
                }
                Err(e) if e.code() == Some("BPCOST") => {
                    let capacity = e
                        .detail()
                        .and_then(|d| d.trim().parse().ok())
                        .unwrap_or(config.capacity());
                    return Err(AcquireError::InvalidCost {
                        cost: request.cost,
                        capacity,
                    }
                    .into());
                }
                Err(e) if e.code() == Some("BPCONFIG") => {
                    return Err(RedisAcquireError::ConfigMismatch(
                        e.detail().unwrap_or_default().to_string(),
                    ));
                }
                Err(e) if is_unavailable(&e) => e,
                Err(e) => return Err(RedisAcquireError::Script(e)),
            };
            // Retrying is safe with a request id (a replay charges nothing) or when nothing was sent.
            let safe = request.request_id.is_some() || error.is_connection_refusal();
            if attempts >= self.settings.attempts || !safe {
                break error;
            }
            bump(&self.counters.retries);
            tokio::time::sleep(backoff).await;
            backoff = backoff.saturating_mul(2).min(MAX_BACKOFF);
        };
        self.unavailable(request, attempts, last)
    }
}

/// A request id as the script's hash field suffix: 32 hex digits.
fn id_text(id: RequestId) -> String {
    format!("{:032x}", id.0)
}

/// Errors that mean "Redis is not there right now", as opposed to a bug or a refused script.
pub(super) fn is_unavailable(e: &RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || matches!(
            e.kind(),
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::ReadOnly
            )
        )
        || e.code() == Some("BUSY")
}
