//! What the shared stores (Redis, PostgreSQL) have in common as sources: which of their decisions
//! are flagged degraded (`store_degraded`), how a store's decision over its set becomes the
//! advertised parts (`store_set_outcome`), and the digest keys of [`crate::key::HeaderKey`] on
//! either (`keyed_by_digest`).
//!
//! Promises: one rule for every store, so the sources cannot drift apart on it; a [`KeyDigest`]
//! names a store's row by its 32 hex digits, so every key costs the store the same bytes.

use std::future::Future;

use bucketproof_limiter::outage::Source;
use bucketproof_limiter::{Decisions, RequestId, Settle, Settled};

use super::error::{SettleFailure, SourceError};
use super::traits::{DecisionSource, SettleSource};
use crate::key::KeyDigest;
use crate::outcome::Outcome;
use crate::set::SetOutcome;

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
pub(super) fn store_degraded(source: Source, recovering: bool) -> bool {
    source != Source::Store || recovering
}

/// A shared store's decision over its limiter's set `set`, as the layer advertises it: one part per
/// bandwidth, named after it. The set is fixed when the store's limiter is built, so the names match
/// every decision the store makes; a fallback decision of the local budget, which keeps one bucket,
/// does not match, and is advertised as that one part under the layer's policy name.
pub(super) fn store_set_outcome(
    set: &bucketproof_limiter::Bandwidths,
    decisions: &bucketproof_limiter::Decisions,
    cost: u64,
    degraded: bool,
) -> SetOutcome {
    SetOutcome::of_set(set, decisions, cost, degraded)
        .unwrap_or_else(|| SetOutcome::single(Outcome::of(*decisions.binding(), cost, degraded)))
}
