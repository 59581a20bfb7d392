//! A [`bucketproof_postgres::PgLimiter`] as a source (feature `postgres`): one quota shared by
//! every instance behind the layer, in the database they already run.
//!
//! Promises: an outage is never a plain denial: fail-closed is [`SourceError::Unavailable`], and a
//! fallback's decision is flagged degraded; a settle has no fallback.

use bucketproof_limiter::{Decisions, Request, RequestId, Settle, Settled};
use bucketproof_postgres::{PgAcquireError, PgLimiter};

use super::error::{SettleFailure, SourceError};
use super::store::{store_degraded, store_set_outcome};
use super::traits::{DecisionSource, SettleSource};
use crate::outcome::Outcome;
use crate::set::SetOutcome;

/// Keys are the limiter's user ids. A decision made by a fallback while PostgreSQL is unavailable
/// (the limiter's `LocalBudget` or `FailOpen` policy) is flagged `degraded`; with `FailClosed`
/// the outage is [`SourceError::Unavailable`], which the layer answers with 503, never with 429.
/// The rows are durable, so no decision is made while recovering from a lost state.
///
/// A limiter of several bandwidths answers [`DecisionSource::decide_set`] with every part, one
/// item per bandwidth (`store_set_outcome`); [`DecisionSource::decide`] answers the binding part.
impl DecisionSource<String> for PgLimiter {
    async fn decide(&self, key: &String, cost: u64) -> Result<Outcome, SourceError> {
        let outcome = self.acquire(key, cost).await.map_err(source_error)?;
        Ok(Outcome::of(
            *outcome.decision(),
            cost,
            store_degraded(outcome.source, false),
        ))
    }

    async fn decide_set(&self, key: &String, cost: u64) -> Result<SetOutcome, SourceError> {
        decide_request(self, key, Request::cost(cost)).await
    }
}

/// Reserve, then settle on PostgreSQL: one quota shared by every instance on the namespace.
///
/// [`SettleSource::reserve_set`] is [`DecisionSource::decide_set`] with the request id (the
/// limiter's `acquire_set_with`), so the key's row records the decision under it;
/// [`SettleSource::settle_set`] is the limiter's `settle_set`, one call under the row's lock.
/// The ids must be unique across every instance on the namespace (the layer's
/// [`crate::layer::request_id`] are), and the limiter keeps the records for its dedupe window
/// and per-key count (`PgBuilder::dedupe`, the in-memory defaults).
///
/// An outage at reserve time follows the limiter's policy, as for any decision: fail-closed is
/// [`SourceError::Unavailable`] (503, nothing to settle); a fallback (`LocalBudget`,
/// `FailOpen`) decides locally and records nothing in the row, so the settle of such a
/// reservation finds no record ([`SettleFailure::Refused`] with `UnknownRequest`, or
/// [`SettleFailure::Unavailable`] while PostgreSQL stays away): it is reported failed and the
/// estimate stays as the fallback decided it. An outage at settle time is
/// [`SettleFailure::Unavailable`] after the limiter's attempts: the estimate stays charged in
/// the row (unless the last attempt committed unseen: a settle's effect is then unknown).
impl SettleSource<String> for PgLimiter {
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
        PgLimiter::settle_set(self, key, settle)
            .await
            .map_err(settle_failure)
    }
}

/// One decision over every bandwidth for `request` (at the server's time), as the layer
/// advertises it. One statement for one bandwidth or several: a set of one unnamed bandwidth
/// comes out as the single part `decide` would give.
async fn decide_request(
    limiter: &PgLimiter,
    key: &str,
    request: Request,
) -> Result<SetOutcome, SourceError> {
    let cost = request.cost;
    let outcome = (limiter.acquire_set_with(key, request).await).map_err(source_error)?;
    Ok(store_set_outcome(
        limiter.bandwidths(),
        outcome.decisions(),
        cost,
        store_degraded(outcome.source, false),
    ))
}

fn source_error(error: PgAcquireError) -> SourceError {
    match error {
        PgAcquireError::Invalid(invalid) => invalid.into(),
        PgAcquireError::Unavailable(_) => SourceError::Unavailable(error.to_string()),
        // PostgreSQL answered, but not with a decision (a row on another config, a refused
        // statement, a malformed reply): as unusable as no answer, and no denial.
        other => SourceError::Store(other.to_string()),
    }
}

fn settle_failure(error: PgAcquireError) -> SettleFailure {
    match error {
        PgAcquireError::Settle(refused) => SettleFailure::Refused(refused),
        PgAcquireError::Unavailable(_) => SettleFailure::Unavailable(error.to_string()),
        // PostgreSQL answered, but not with a settlement (a row on another config, a refused
        // statement, a malformed reply): nothing settled.
        other => SettleFailure::Store(other.to_string()),
    }
}
