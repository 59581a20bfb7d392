//! Where the layer gets its decisions: the in-memory limiter, or a store shared by every instance,
//! Redis or PostgreSQL.
//!
//! [`DecisionSource`] is the seam. The in-memory [`Limiter`] implements it and never fails for a
//! store reason; the `RedisLimiter` (feature `redis`, module `redis`) and the `PgLimiter` (feature
//! `postgres`, module `postgres`) implement it too, and report an outage as
//! [`SourceError::Unavailable`] (fail closed) or as an [`Outcome`] with `degraded = true` (a local
//! fallback budget or fail-open decided it). The layer turns the first into a 503 and flags the
//! second with a response header: an outage is never disguised as an ordinary denial or approval.
//! Both stores share one outage policy and the [`bucketproof_limiter::outage::Source`] of a
//! decision, so what "degraded" means is stated once, here (`store_degraded`), and so is how a
//! store's decision over a set becomes the advertised parts (`store_set_outcome`).
//!
//! A source answers with one [`Outcome`] ([`DecisionSource::decide`]) or with every bandwidth's
//! part of the decision ([`DecisionSource::decide_set`], a [`SetOutcome`]); the layer asks for the
//! latter. Its provided body wraps `decide`, so a source that knows one bandwidth per key implements
//! `decide` alone. The in-memory [`Limiter`] answers `decide_set` with every bandwidth of a key of
//! several ([`decide_set_at`]), and so do the `RedisLimiter` (its set script) and the `PgLimiter`
//! (its function keeps every bandwidth in the key's row) built with several.
//!
//! Reserve, then settle ([`SettleSource`]): a source that can decide with a request id and later
//! reconcile that request's charge with its actual cost (docs/semantics.md, "settle"). The in-memory
//! [`Limiter`], the `RedisLimiter` and the `PgLimiter` implement it; the layer uses it when built
//! with [`crate::layer::RateLimitLayer::settle`]. A settle that did not happen is a
//! [`SettleFailure`]: the rule refused it ([`SettleFailure::Refused`]), or the store could not be
//! reached or did not answer with a settlement ([`SettleFailure::Unavailable`],
//! [`SettleFailure::Store`], the same two store cases as [`SourceError`]). A settle has no outage
//! fallback on either store: a reservation a fallback decided has no record there, and its settle
//! fails (see the store modules).
//!
//! The layer's digest keys ([`crate::key::KeyDigest`], from [`crate::key::HeaderKey`]) work with
//! every source: the in-memory limiter as a `Limiter<KeyDigest>` (16 bytes inline per key), the
//! Redis and PostgreSQL limiters under the digest's 32 hex digits (`keyed_by_digest`).
//!
//! This module also owns the glue from one limiter [`Decision`] to the advertised numbers
//! ([`Outcome::advertised`], [`Outcome::retry_after_secs`]), using [`crate::mapping`]'s rounding;
//! [`SetOutcome`] uses the same glue for each of its parts.

use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;

#[cfg(any(feature = "redis", feature = "postgres"))]
use bucketproof_limiter::outage::Source;
use bucketproof_limiter::{
    AcquireError, Clock, Config, Decision, Decisions, Limiter, Nanos, Request, RequestId, Settle,
    SettleError, Settled, Wait,
};

#[cfg(any(feature = "redis", feature = "postgres"))]
use crate::key::KeyDigest;
use crate::mapping::{self, AdvertiseOptions, Advertised};
use crate::set::SetOutcome;

/// One decision with the configuration it was made under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The limiter's decision.
    pub decision: Decision,
    /// The key's configuration at the time (capacity and rate, for the policy field).
    pub config: Config,
    /// The cost that was asked for.
    pub cost: u64,
    /// True when the store could not be reached and a fallback decided (local budget or fail-open),
    /// or the store decided while recovering from a detected loss of its state.
    pub degraded: bool,
}

/// Why a source could not decide. None of these is a denial.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SourceError {
    /// The cost is 0 or above the capacity: waiting would never help.
    #[error("invalid cost {cost} for capacity {capacity}")]
    InvalidCost {
        /// The cost asked for.
        cost: u64,
        /// The key's capacity.
        capacity: u64,
    },
    /// The limiter's key table is full and its policy refuses new keys.
    #[error("limiter key table full (bound {max_keys})")]
    KeyLimitReached {
        /// The configured bound.
        max_keys: usize,
    },
    /// The backing store is unavailable and the outage policy fails closed.
    #[error("limiter store unavailable: {0}")]
    Unavailable(String),
    /// The backing store answered with something that is not a decision (a refused script, a
    /// bucket written under another config, a malformed reply).
    #[error("limiter store failed: {0}")]
    Store(String),
}

/// Why a source could not settle a reservation ([`SettleSource::settle_set`]). None of these
/// changed the key: the estimate stays charged. A denied extra is no error (it is an `Ok` settlement
/// with a denied decision).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SettleFailure {
    /// The rule refused the settle (docs/semantics.md, "settle"): no live record of the request id
    /// on the key (its dedupe window or per-key records passed, the key was forgotten, or a
    /// fallback decided the reservation and kept no record in the store), a denied reservation, a
    /// request settled already with another actual, an actual above the capacity.
    #[error(transparent)]
    Refused(#[from] SettleError),
    /// The backing store could not be reached (a settle has no fallback). Whether the settle ran
    /// is unknown; a settle with the same actual, while the record is live, would replay it or
    /// make it.
    #[error("limiter store unavailable, settle not confirmed: {0}")]
    Unavailable(String),
    /// The backing store answered with something that is not a settlement (a key written under
    /// another config, a refused script or statement, a malformed reply).
    #[error("limiter store failed: {0}")]
    Store(String),
}

impl From<AcquireError> for SourceError {
    fn from(e: AcquireError) -> SourceError {
        match e {
            AcquireError::InvalidCost { cost, capacity } => {
                SourceError::InvalidCost { cost, capacity }
            }
            AcquireError::KeyLimitReached { max_keys, .. } => {
                SourceError::KeyLimitReached { max_keys }
            }
            // A refusal this version does not know: still the store's error, never a denial.
            other => SourceError::Store(other.to_string()),
        }
    }
}

/// A [`bucketproof_redis::RedisLimiter`] as a source (feature `redis`): one quota shared by every
/// instance behind the layer.
#[cfg(feature = "redis")]
pub mod redis {
    use bucketproof_limiter::{Decisions, Request, RequestId, Settle, Settled};
    use bucketproof_redis::{RedisAcquireError, RedisLimiter, RedisSettleError};

    use super::{
        DecisionSource, Outcome, SetOutcome, SettleFailure, SettleSource, SourceError,
        store_degraded, store_set_outcome,
    };

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
}

/// A [`bucketproof_postgres::PgLimiter`] as a source (feature `postgres`): one quota shared by
/// every instance behind the layer, in the database they already run.
#[cfg(feature = "postgres")]
pub mod postgres {
    use bucketproof_limiter::{Decisions, Request, RequestId, Settle, Settled};
    use bucketproof_postgres::{PgAcquireError, PgLimiter};

    use super::{
        DecisionSource, Outcome, SetOutcome, SettleFailure, SettleSource, SourceError,
        store_degraded, store_set_outcome,
    };

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
}

/// A shared store's rows are named by text; a [`KeyDigest`] ([`crate::key::HeaderKey`]'s keys)
/// names its row by its 32 hex digits, so every key costs the store the same bytes and every
/// instance keyed with the same secret finds the same row. Each method is the store's `String`
/// method on that name.
#[cfg(any(feature = "redis", feature = "postgres"))]
macro_rules! keyed_by_digest {
    ($store:ty) => {
        impl DecisionSource<KeyDigest> for $store {
            fn decide<'a>(
                &'a self,
                key: &'a KeyDigest,
                cost: u64,
            ) -> impl Future<Output = Result<Outcome, SourceError>> + Send + 'a {
                async move { DecisionSource::<String>::decide(self, &key.to_hex(), cost).await }
            }

            fn decide_set<'a>(
                &'a self,
                key: &'a KeyDigest,
                cost: u64,
            ) -> impl Future<Output = Result<SetOutcome, SourceError>> + Send + 'a {
                async move { DecisionSource::<String>::decide_set(self, &key.to_hex(), cost).await }
            }
        }

        impl SettleSource<KeyDigest> for $store {
            fn reserve_set<'a>(
                &'a self,
                key: &'a KeyDigest,
                cost: u64,
                request_id: RequestId,
            ) -> impl Future<Output = Result<SetOutcome, SourceError>> + Send + 'a {
                async move {
                    SettleSource::<String>::reserve_set(self, &key.to_hex(), cost, request_id).await
                }
            }

            fn settle_set<'a>(
                &'a self,
                key: &'a KeyDigest,
                settle: Settle,
            ) -> impl Future<Output = Result<Settled<Decisions>, SettleFailure>> + Send + 'a {
                async move { SettleSource::<String>::settle_set(self, &key.to_hex(), settle).await }
            }
        }
    };
}

#[cfg(feature = "redis")]
keyed_by_digest!(bucketproof_redis::RedisLimiter);
#[cfg(feature = "postgres")]
keyed_by_digest!(bucketproof_postgres::PgLimiter);

/// Whether a shared store's decision is flagged degraded: a fallback of the outage policy made it
/// (its source is not the store), or the store made it while recovering from a detected loss of
/// its state. The one rule for every store, so the sources cannot drift apart on it.
#[cfg(any(feature = "redis", feature = "postgres"))]
fn store_degraded(source: Source, recovering: bool) -> bool {
    source != Source::Store || recovering
}

/// A shared store's decision over its limiter's set `set`, as the layer advertises it: one part per
/// bandwidth, named after it. The set is fixed when the store's limiter is built, so the names match
/// every decision the store makes; a fallback decision of the local budget, which keeps one bucket,
/// does not match, and is advertised as that one part under the layer's policy name.
#[cfg(any(feature = "redis", feature = "postgres"))]
fn store_set_outcome(
    set: &bucketproof_limiter::Bandwidths,
    decisions: &bucketproof_limiter::Decisions,
    cost: u64,
    degraded: bool,
) -> SetOutcome {
    SetOutcome::of_set(set, decisions, cost, degraded)
        .unwrap_or_else(|| SetOutcome::single(Outcome::of(*decisions.binding(), cost, degraded)))
}

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

impl<K, C> DecisionSource<K> for Limiter<K, C>
where
    K: Hash + Eq + Clone + Send + Sync,
    C: Clock,
    Limiter<K, C>: Send + Sync,
{
    fn decide<'a>(
        &'a self,
        key: &'a K,
        cost: u64,
    ) -> impl Future<Output = Result<Outcome, SourceError>> + Send + 'a {
        std::future::ready(
            self.acquire(key, cost)
                .map(|decision| Outcome::of(decision, cost, false))
                .map_err(SourceError::from),
        )
    }

    fn decide_set<'a>(
        &'a self,
        key: &'a K,
        cost: u64,
    ) -> impl Future<Output = Result<SetOutcome, SourceError>> + Send + 'a {
        std::future::ready(decide_set_at(self, key, cost, self.clock().now()))
    }
}

/// A source that can reserve, then settle: decide with a request id, and once the work is done
/// reconcile that request's charge with its actual cost (docs/semantics.md, "settle").
///
/// The in-memory [`Limiter`] implements it (it needs its request-id records on, the default: see
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

impl<K, C> SettleSource<K> for Limiter<K, C>
where
    K: Hash + Eq + Clone + Send + Sync,
    C: Clock,
    Limiter<K, C>: Send + Sync,
{
    fn reserve_set<'a>(
        &'a self,
        key: &'a K,
        cost: u64,
        request_id: RequestId,
    ) -> impl Future<Output = Result<SetOutcome, SourceError>> + Send + 'a {
        let request = Request::cost(cost).at(self.clock().now()).id(request_id);
        std::future::ready(decide_request(self, key, request))
    }

    fn settle_set<'a>(
        &'a self,
        key: &'a K,
        settle: Settle,
    ) -> impl Future<Output = Result<Settled<Decisions>, SettleFailure>> + Send + 'a {
        std::future::ready(Limiter::settle_set(self, key, settle).map_err(SettleFailure::from))
    }
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

/// The in-memory limiter's answer to [`DecisionSource::decide_set`] at `now` (the simulation in
/// [`crate::sim`] calls it at virtual time).
///
/// A key of one unnamed bandwidth takes the one-bandwidth path ([`Limiter::acquire_with`]), as
/// [`DecisionSource::decide`] does. Any other key takes the set path
/// ([`Limiter::acquire_set_with`]) and is labelled with the names of its set, read beside the
/// decision. The limiter does not hand out the set a decision was made under, so the names are
/// checked against the decision's own configs ([`SetOutcome::of_set`]); when a concurrent
/// reconfiguration changed them, the set is read again, and if that does not match either, the
/// response carries the decision's binding part alone under the layer's policy name: the one
/// number the limiter itself reports for such a key ([`bucketproof_limiter::Decisions::binding`]).
/// A reconfiguration that only renames bandwidths, racing with the decision, can label one
/// response's numbers with the names of the set before or after it; the numbers are the decision's.
pub fn decide_set_at<K, C>(
    limiter: &Limiter<K, C>,
    key: &K,
    cost: u64,
    now: Nanos,
) -> Result<SetOutcome, SourceError>
where
    K: Hash + Eq + Clone,
    C: Clock,
{
    decide_request(limiter, key, Request::cost(cost).at(now))
}

/// [`decide_set_at`] for a whole [`Request`]: with a request id, the decision is recorded under it
/// ([`SettleSource::reserve_set`]).
fn decide_request<K, C>(
    limiter: &Limiter<K, C>,
    key: &K,
    request: Request,
) -> Result<SetOutcome, SourceError>
where
    K: Hash + Eq + Clone,
    C: Clock,
{
    let cost = request.cost;
    let set = limiter.bandwidths_for(key);
    if set.single().is_some() {
        let decision = limiter.acquire_with(key, request)?.decision;
        return Ok(SetOutcome::single(Outcome::of(decision, cost, false)));
    }
    let decisions = limiter.acquire_set_with(key, request)?.decision;
    if let Some(outcome) = SetOutcome::of_set(&set, &decisions, cost, false) {
        return Ok(outcome);
    }
    let after = limiter.bandwidths_for(key);
    Ok(SetOutcome::of_set(&after, &decisions, cost, false)
        .unwrap_or_else(|| SetOutcome::single(Outcome::of(*decisions.binding(), cost, false))))
}

/// How far the refill cursor was ahead of `decision`'s `now`, in ns, recovered exactly from a wait
/// the decision exposes, for a decision on a bucket of `config` for `cost` tokens.
///
/// The limiter folds this lag into its waits but does not expose it. A denial that this bucket did
/// not cover has `retry_after = lag + ceil(short / rate)`; a bucket that is not full has
/// `reset_after = lag + ceil(missing / rate)` (every allowed decision charged at least one token, so
/// its bucket is not full). `None` when neither applies (a bucket that covered a denied cost and is
/// full: both waits are 0 whatever the lag), when the rate is zero or when the wait is `Never`.
pub(crate) fn exposed_lag(config: &Config, decision: &Decision, cost: u64) -> Option<u64> {
    let per_ns = config.units_per_nanosecond() as u128;
    if per_ns == 0 {
        return None;
    }
    let units = decision.remaining().units();
    let cost_units = cost as u128 * config.units_per_token();
    let (wait, missing) = if !decision.is_allowed() && units < cost_units {
        (
            decision.retry_after().unwrap_or(Wait::Never),
            cost_units - units,
        )
    } else if units < config.capacity_units() {
        (decision.reset_after(), config.capacity_units() - units)
    } else {
        return None;
    };
    let Wait::After(total) = wait else {
        return None;
    };
    let refill = u64::try_from(missing.div_ceil(per_ns)).ok()?;
    Some(total.saturating_sub(refill))
}

/// `r` and `t` for `decision` on a bucket of `config` whose cursor led the decision by `lag` ns
/// (see [`crate::mapping`] for the rounding); no `t` when the lag is unknown (`None`).
pub(crate) fn advertise_balance(
    config: &Config,
    decision: &Decision,
    lag: Option<u64>,
    options: AdvertiseOptions,
) -> Advertised {
    let rate = config.rate();
    let (units, per_token) = decision.remaining().as_ratio();
    let mut adv = mapping::advertise(
        units,
        per_token,
        rate.numer(),
        rate.denom(),
        lag.unwrap_or(0),
        options,
    );
    if lag.is_none() {
        // No refill to wait for (zero rate) or one beyond the clock's range: no window.
        adv.reset = None;
    }
    adv
}

impl Outcome {
    /// A decision with the config it was made under (so a concurrent reconfigure cannot make the
    /// advertised policy disagree with the decision).
    pub fn of(decision: Decision, cost: u64, degraded: bool) -> Outcome {
        Outcome {
            decision,
            config: decision.config(),
            cost,
            degraded,
        }
    }

    /// How far the bucket's refill cursor was ahead of the decision's `now`, in ns.
    ///
    /// The limiter folds this lag into its waits but does not expose it, so it is recovered exactly
    /// from a wait the decision does expose: an allowed decision charged at least one token, so its
    /// bucket is not full and `reset_after = lag + ceil(missing / rate)`; a denial has
    /// `retry_after = lag + ceil(short / rate)`. `None` when the rate is zero or a wait is `Never`.
    pub fn lag_ns(&self) -> Option<u64> {
        exposed_lag(&self.config, &self.decision, self.cost)
    }

    /// `r` and `t` for this decision (see [`crate::mapping`] for the rounding).
    pub fn advertised(&self, options: AdvertiseOptions) -> Advertised {
        advertise_balance(&self.config, &self.decision, self.lag_ns(), options)
    }

    /// `Retry-After` in delay seconds for a denial (rounded up, never 0 for a positive wait); `None`
    /// when allowed or when the wait is `Never` (the quota will not come back).
    pub fn retry_after_secs(&self) -> Option<u64> {
        wait_secs(self.decision.retry_after())
    }
}

/// A denial's wait as `Retry-After` delay seconds: `None` when allowed (`None`) or `Never`.
pub(crate) fn wait_secs(wait: Option<Wait>) -> Option<u64> {
    match wait? {
        Wait::After(ns) => Some(mapping::retry_after_secs(ns)),
        Wait::Never => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bucketproof_limiter::{ManualClock, Rate};

    fn limiter(capacity: u64, rate: Rate) -> Limiter<&'static str, ManualClock> {
        Limiter::builder(Config::new(capacity, rate).unwrap())
            .clock(ManualClock::new(1_000_000_000))
            .build()
    }

    #[tokio::test]
    async fn allowed_decision_advertises_floor_and_next_token() {
        let l = limiter(10, Rate::per_second(2));
        let o = l.decide(&"k", 3).await.unwrap();
        assert!(o.decision.is_allowed());
        assert_eq!(o.lag_ns(), Some(0));
        // 7 left, next token after 0.5 s -> t = 1.
        let a = o.advertised(AdvertiseOptions::default());
        assert_eq!((a.remaining, a.reset), (7, Some(1)));
        assert_eq!(o.retry_after_secs(), None);
    }

    #[tokio::test]
    async fn denial_rounds_retry_after_up() {
        let l = limiter(2, Rate::new(2, 3).unwrap()); // 2/3 token per second: 1 token every 1.5 s
        l.decide(&"k", 2).await.unwrap();
        let o = l.decide(&"k", 1).await.unwrap();
        assert!(!o.decision.is_allowed());
        assert_eq!(o.decision.retry_after(), Some(Wait::After(1_500_000_000)));
        assert_eq!(o.retry_after_secs(), Some(2));
        assert_eq!(o.advertised(AdvertiseOptions::default()).reset, Some(2));
    }

    #[tokio::test]
    async fn zero_rate_has_no_window_and_no_retry_after() {
        let l = limiter(1, Rate::ZERO);
        l.decide(&"k", 1).await.unwrap();
        let o = l.decide(&"k", 1).await.unwrap();
        assert!(!o.decision.is_allowed());
        assert_eq!(o.retry_after_secs(), None);
        assert_eq!(o.advertised(AdvertiseOptions::default()).reset, None);
    }

    #[tokio::test]
    async fn errors_are_not_denials() {
        let l = limiter(5, Rate::per_second(1));
        assert_eq!(
            l.decide(&"k", 6).await.unwrap_err(),
            SourceError::InvalidCost {
                cost: 6,
                capacity: 5
            }
        );
    }
}
