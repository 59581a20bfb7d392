//! A [`bucketproof_redis::RedisLimiter`] as a source (feature `redis`): one quota shared by every
//! instance behind the layer.
//!
//! Promises: an outage is never a plain denial: fail-closed is [`SourceError::Unavailable`], and a
//! fallback's decision is flagged degraded; a settle has no fallback.

use bucketproof_limiter::{Decisions, Request, RequestId, Settle, Settled};
use bucketproof_redis::{RedisAcquireError, RedisLimiter, RedisSettleError};

use super::error::{SettleFailure, SourceError};
use super::store::{store_degraded, store_set_outcome};
use super::traits::{DecisionSource, SettleSource};
use crate::outcome::Outcome;
use crate::set::SetOutcome;

/// Keys are the Redis user ids. A decision made by a fallback while Redis is unreachable (the
/// limiter's `LocalBudget` or `FailOpen` policy) is flagged `degraded`, and so is one that created
/// a bucket while its slot recovered from a detected state loss (`Outcome::recovering`, under
/// either recovery policy); with `FailClosed` the
/// outage is [`SourceError::Unavailable`], which the layer answers with 503, never with 429.
///
/// A limiter of several bandwidths answers [`DecisionSource::decide_set`] with every part, one
/// item per bandwidth (`store_set_outcome`; Redis keys of several bandwidths are not
/// reconfigured).
impl DecisionSource<String> for RedisLimiter {
    async fn decide(&self, key: &String, cost: u64) -> Result<Outcome, SourceError> {
        let outcome = self.acquire(key, cost).await.map_err(source_error)?;
        Ok(Outcome::of(
            outcome.decision(),
            cost,
            store_degraded(outcome.source, outcome.recovering),
        ))
    }

    async fn decide_set(&self, key: &String, cost: u64) -> Result<SetOutcome, SourceError> {
        decide_request(self, key, Request::cost(cost)).await
    }
}

/// Reserve, then settle on Redis: one quota shared by every instance, so a refund given back
/// by one instance is spent by the others.
///
/// [`SettleSource::reserve_set`] is [`DecisionSource::decide_set`] with the request id (the
/// limiter's `acquire_with` / `acquire_set_with`), so the store records the decision under it;
/// [`SettleSource::settle_set`] is the limiter's `settle_set`, one script call, atomic with
/// every acquire and settle of the key. The ids must be unique across every instance on the
/// store (the layer's [`crate::layer::request_id`] are), and the limiter keeps the records for
/// its dedupe window and per-key count (`RedisBuilder::dedupe`, the in-memory defaults).
///
/// An outage at reserve time follows the limiter's policy, as for any decision: fail-closed is
/// [`SourceError::Unavailable`] (503, nothing to settle); a fallback (`LocalBudget`,
/// `FailOpen`) decides locally and records nothing in Redis, so the settle of such a
/// reservation finds no record ([`SettleFailure::Refused`] with `UnknownRequest`, or
/// [`SettleFailure::Unavailable`] while Redis stays away): it is reported failed and the
/// estimate stays as the fallback decided it. An outage at settle time is
/// [`SettleFailure::Unavailable`] after the limiter's attempts: the estimate stays charged in
/// Redis (unless the last attempt ran there unseen: a settle's effect is then unknown).
impl SettleSource<String> for RedisLimiter {
    async fn reserve_set(
        &self,
        key: &String,
        cost: u64,
        request_id: RequestId,
    ) -> Result<SetOutcome, SourceError> {
        decide_request(self, key, Request::cost(cost).id(request_id)).await
    }

    async fn settle_set(
        &self,
        key: &String,
        settle: Settle,
    ) -> Result<Settled<Decisions>, SettleFailure> {
        let outcome = RedisLimiter::settle_set(self, key, settle)
            .await
            .map_err(settle_failure)?;
        Ok(outcome.settled)
    }
}

/// One decision over every bandwidth for `request` (at the server's time), as the layer
/// advertises it: a key of one bandwidth takes `acquire_with`, as `decide` does.
async fn decide_request(
    limiter: &RedisLimiter,
    key: &str,
    request: Request,
) -> Result<SetOutcome, SourceError> {
    let cost = request.cost;
    if limiter.bandwidths().single().is_some() {
        let outcome = (limiter.acquire_with(key, request).await).map_err(source_error)?;
        let degraded = store_degraded(outcome.source, outcome.recovering);
        return Ok(SetOutcome::single(Outcome::of(
            outcome.decision(),
            cost,
            degraded,
        )));
    }
    let outcome = (limiter.acquire_set_with(key, request).await).map_err(source_error)?;
    let degraded = store_degraded(outcome.source, outcome.recovering);
    Ok(store_set_outcome(
        limiter.bandwidths(),
        outcome.decisions(),
        cost,
        degraded,
    ))
}

fn source_error(error: RedisAcquireError) -> SourceError {
    match error {
        RedisAcquireError::Invalid(invalid) => invalid.into(),
        RedisAcquireError::Unavailable { .. } => SourceError::Unavailable(error.to_string()),
        // Redis answered, but not with a decision: as unusable as no answer, and no denial.
        other => SourceError::Store(other.to_string()),
    }
}

fn settle_failure(error: RedisSettleError) -> SettleFailure {
    match error {
        RedisSettleError::Refused(refused) => SettleFailure::Refused(refused),
        RedisSettleError::Unavailable { .. } => SettleFailure::Unavailable(error.to_string()),
        // Redis answered, but not with a settlement (another config, a refused script, a
        // malformed reply): nothing settled.
        other => SettleFailure::Store(other.to_string()),
    }
}
