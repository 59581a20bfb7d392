//! The seam between the layer and what decides: [`DecisionSource`] (decide now) and
//! [`SettleSource`] (reserve under a request id, then settle), and their forwarding through an
//! [`Arc`].
//!
//! Promises: a source that knows one bandwidth per key implements `decide` alone and answers
//! `decide_set` as that one part; an error of either trait is never a denial.

use std::future::Future;
use std::sync::Arc;

use bucketproof_limiter::{Decisions, RequestId, Settle, Settled};

use super::error::{SettleFailure, SourceError};
use crate::outcome::Outcome;
use crate::set::SetOutcome;

/// Something that decides whether `key` may spend `cost` now.
///
/// The answer is a future: the in-memory limiter answers at once (a ready future, no allocation), a
/// shared store after a round trip. The layer awaits it before it calls the inner service.
pub trait DecisionSource<K>: Send + Sync {
    /// One decision at the source's own clock.
    fn decide<'a>(
        &'a self,
        key: &'a K,
        cost: u64,
    ) -> impl Future<Output = Result<Outcome, SourceError>> + Send + 'a;

    /// One decision with every bandwidth's part, at the source's own clock: what the layer
    /// advertises. The provided body is [`DecisionSource::decide`] as a one-bandwidth decision,
    /// which is the whole answer of a source that knows one bandwidth per key.
    fn decide_set<'a>(
        &'a self,
        key: &'a K,
        cost: u64,
    ) -> impl Future<Output = Result<SetOutcome, SourceError>> + Send + 'a {
        let decided = self.decide(key, cost);
        async move { decided.await.map(SetOutcome::single) }
    }
}

/// A source that can reserve, then settle: decide with a request id, and once the work is done
/// reconcile that request's charge with its actual cost (docs/semantics.md, "settle").
///
/// The in-memory [`Limiter`](bucketproof_limiter::Limiter) implements it (it needs its request-id records on, the default: see
/// `Builder::dedupe`), and so do the `RedisLimiter` (module `redis`) and the `PgLimiter` (module
/// `postgres`), whose records are shared by every instance on the store: there the request ids
/// must be unique across instances, not only within a process ([`crate::layer::request_id`] is).
pub trait SettleSource<K>: DecisionSource<K> {
    /// [`DecisionSource::decide_set`] for `cost`, recording the decision under `request_id` so that
    /// [`SettleSource::settle_set`] can find it; an admitted reservation is charged `cost` now. An
    /// outage follows the source's outage policy, as for `decide_set`.
    fn reserve_set<'a>(
        &'a self,
        key: &'a K,
        cost: u64,
        request_id: RequestId,
    ) -> impl Future<Output = Result<SetOutcome, SourceError>> + Send + 'a;

    /// Reconciles the charge of the reservation `settle.request_id` on `key` with `settle.actual`
    /// (the limiter's `settle_set`): a refund when it is lower, the extra by the normal rule when it
    /// is higher (a denied extra charges nothing and is `Ok` with a denied decision). An error
    /// ([`SettleFailure`]) leaves the estimate charged: a refusal or a store error changed
    /// nothing, and an unavailable store's last attempt is not known to have run.
    fn settle_set<'a>(
        &'a self,
        key: &'a K,
        settle: Settle,
    ) -> impl Future<Output = Result<Settled<Decisions>, SettleFailure>> + Send + 'a;
}

impl<K, T: SettleSource<K> + ?Sized> SettleSource<K> for Arc<T> {
    fn reserve_set<'a>(
        &'a self,
        key: &'a K,
        cost: u64,
        request_id: RequestId,
    ) -> impl Future<Output = Result<SetOutcome, SourceError>> + Send + 'a {
        (**self).reserve_set(key, cost, request_id)
    }

    fn settle_set<'a>(
        &'a self,
        key: &'a K,
        settle: Settle,
    ) -> impl Future<Output = Result<Settled<Decisions>, SettleFailure>> + Send + 'a {
        (**self).settle_set(key, settle)
    }
}

impl<K, T: DecisionSource<K> + ?Sized> DecisionSource<K> for Arc<T> {
    fn decide<'a>(
        &'a self,
        key: &'a K,
        cost: u64,
    ) -> impl Future<Output = Result<Outcome, SourceError>> + Send + 'a {
        (**self).decide(key, cost)
    }

    fn decide_set<'a>(
        &'a self,
        key: &'a K,
        cost: u64,
    ) -> impl Future<Output = Result<SetOutcome, SourceError>> + Send + 'a {
        (**self).decide_set(key, cost)
    }
}
