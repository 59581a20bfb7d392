//! A tower [`Layer`] that rate-limits requests with a keyed limiter and speaks draft-11 on the wire.
//!
//! Per request: a [`KeyExtractor`] finds the limiter key in the request head, a user function gives
//! its cost (default 1), the [`DecisionSource`] decides ([`DecisionSource::decide_set`]), and
//! - **key refused** ([`KeyRejection`]: with [`HeaderKey`], a missing, repeated, empty, over-long
//!   or not visible ASCII key, [`crate::key`]): `431` for an over-long key, `400` for the others,
//!   each with a problem body; no decision is made and the inner service is not called, so a
//!   malformed key never spends anyone's quota;
//! - **allowed**: the inner service runs; its response gets `RateLimit-Policy` and `RateLimit` when
//!   [`RateLimitLayer::emit_on_success`] is on (the default), except on redirections unless
//!   [`RateLimitLayer::emit_on_redirect`] is on: draft-11 Section 6 warns that a low `r` on a 3xx can
//!   stall a client before it follows `Location`;
//! - **denied**: `429 Too Many Requests` with `Retry-After` (delay seconds, rounded up, never earlier
//!   than the `t` of an item whose `r` does not cover the cost, draft-11 Section 6), both fields, and
//!   an `application/problem+json` body of type quota-exceeded listing the violated policies. The
//!   inner service is not called;
//! - **cost above capacity**: `413` with a problem body (no wait would help, so it is not a 429);
//! - **source unavailable / key table full**: `503` with a temporary-reduced-capacity problem body;
//! - **decided by a fallback, or by a store recovering from a detected loss of its state**
//!   ([`Outcome::degraded`]): handled as above, plus the header [`DEGRADED_HEADER`]` : ?1` so the
//!   outage or the recovery is visible, never disguised.
//!
//! A key of one unnamed bandwidth is one item in each field, named [`Advertiser::policy`]. A key of
//! several bandwidths is one item per bandwidth in each field, in the set's order, named after the
//! bandwidth ([`crate::set`]); `Retry-After` is the combined wait, after which every bandwidth covers
//! the cost, and a denial's violated policies are the bandwidths that did not cover it. Errors
//! (413, 503) name [`Advertiser::policy`]: no decision was made, so no bandwidth is to blame.
//!
//! ## Reserve, then settle
//!
//! With [`RateLimitLayer::settle`] (a [`SettleSource`]: the in-memory limiter, or a Redis or
//! PostgreSQL limiter shared by every instance) the cost of a request is an *estimate*, reserved at
//! admission under a request id the layer makes ([`request_id`]: unique across the instances
//! sharing a store, see there); once the inner service has answered, `actual(response head)` gives what the work
//! really cost, and the layer settles (docs/semantics.md, "settle"): a lower actual gives the
//! difference back (never above capacity), a higher one charges the extra by the normal rule.
//! - **The fields describe the reservation.** A response's `RateLimit` (and a 429's `Retry-After`)
//!   are computed at admission, from the balance right after the estimate was charged, like every
//!   other response's: hints, never promises. A refund makes them conservative; an extra charged
//!   after them makes them overstate the balance by that extra until the key's next response, as a
//!   concurrent request's charge would.
//! - **A denied extra.** The response is produced already: it is returned as it is. The key's
//!   balance is never taken below 0, so the extra is not charged (the limiter leaves the request
//!   open; the layer does not retry it): the key has used `actual - estimate` more than it was
//!   charged. That is reported ([`RateLimitLayer::on_settle`], [`SettleReport::unpaid`]) and, with
//!   feature `metrics`, counted (`layer_metrics`).
//! - **A failed settle** ([`SettleFailure`]: the record left the limiter's dedupe window or its
//!   per-key FIFO, an actual above the capacity, a shared store unreachable or answering with no
//!   settlement, ...): nothing changes, the estimate stays charged, the response is returned, and
//!   the error is reported the same way. A settle is never retried by the layer. `actual` answering
//!   `None` (e.g. no `Content-Length`), an inner service that fails, or a response future dropped
//!   before it completes settle nothing: the estimate stays charged.
//! - **A shared store's outage.** At admission the source's outage policy decides, as without
//!   settling (fail-closed: a 503, nothing to settle). A reservation a fallback decided (flagged
//!   degraded) has no record in the store, so its settle fails (`Refused(UnknownRequest)` once the
//!   store is back, `Unavailable` while it is away) and the estimate stays as the fallback charged
//!   it. An outage between admission and settle fails the settle as `Unavailable`: the estimate
//!   stays charged in the store. The settle runs before the response is returned, so while a store
//!   is away each settled response also waits for the source's attempts and timeouts.
//!
//! Fields are only ever written to the header section, never to trailers (draft-11 Sections 3.1 and
//! 4.1). `pk` is the keyed hash of the limiter key ([`crate::pk`]) under [`Advertiser::policy`], the
//! same on every item of a response; the raw key never reaches a header.

mod advertiser;
mod request_id;
mod service;
mod settling;

use std::sync::Arc;

use tower_layer::Layer;

use crate::field::{PolicyName, QuotaUnit};
#[cfg(doc)]
use crate::key::HeaderKey;
use crate::key::{KeyExtractor, KeyRejection};
#[cfg(doc)]
use crate::mapping::AdvertiseOptions;
use crate::pk::PartitionKeyHasher;
use crate::profile::Profile;
use crate::source::{DecisionSource, SettleSource, SourceError};
#[cfg(doc)]
use crate::source::{Outcome, SettleFailure};
#[cfg(feature = "metrics")]
use service::Recorder;
use service::{CostFn, ErrorFn, KeyFn, SettleFn, Shared};
use settling::{Settles, Settling};

pub use advertiser::{Advertisement, Advertiser, DEGRADED_HEADER, PartitionBytes};
pub use request_id::request_id;
pub use service::RateLimitService;
pub use settling::SettleReport;

/// The layer. Configure it with the builder methods, then hand it to tower / axum.
pub struct RateLimitLayer<K, S> {
    source: Arc<S>,
    key: Arc<KeyFn<K>>,
    cost: Arc<CostFn>,
    on_error: Arc<ErrorFn>,
    settling: Option<Settling<K>>,
    on_settle: Arc<SettleFn>,
    advertiser: Advertiser,
    emit_on_success: bool,
    emit_on_redirect: bool,
    #[cfg(feature = "metrics")]
    recorder: Recorder,
}

impl<K, S> Clone for RateLimitLayer<K, S> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            source: Arc::clone(&self.source),
            key: Arc::clone(&self.key),
            cost: Arc::clone(&self.cost),
            on_error: Arc::clone(&self.on_error),
            settling: self.settling.clone(),
            on_settle: Arc::clone(&self.on_settle),
            advertiser: self.advertiser.clone(),
            emit_on_success: self.emit_on_success,
            emit_on_redirect: self.emit_on_redirect,
            #[cfg(feature = "metrics")]
            recorder: self.recorder.clone(),
        }
    }
}

impl<K, S> RateLimitLayer<K, S>
where
    K: PartitionBytes + Send + Sync + 'static,
    S: DecisionSource<K> + 'static,
{
    /// Limits with `source`, advertising the policy `policy` (keep it stable and versioned, e.g.
    /// `PolicyName::versioned("api", 1)`), keyed by `key(request head)`, taken as it is: for a key
    /// the server chose (a tenant, an authenticated user id). A key a client sends in a header
    /// wants [`RateLimitLayer::keyed`] with a [`HeaderKey`], which bounds and checks it and keys
    /// the limiter by a fixed-size digest: a raw client string costs the limiter its length.
    pub fn new(
        source: S,
        policy: PolicyName,
        key: impl Fn(&http::request::Parts) -> K + Send + Sync + 'static,
    ) -> Self {
        Self::keyed(source, policy, move |head: &http::request::Parts| {
            Ok::<K, KeyRejection>(key(head))
        })
    }

    /// Limits with `source`, advertising the policy `policy`, keyed by what `key` extracts from
    /// the request head: [`HeaderKey`] (the library's extractor: one header, checked and
    /// digested, [`crate::key`]) or a function that may refuse a request with a
    /// [`KeyRejection`], answered with its 4xx problem before any decision.
    pub fn keyed(source: S, policy: PolicyName, key: impl KeyExtractor<K>) -> Self {
        RateLimitLayer {
            source: Arc::new(source),
            key: Arc::new(key),
            cost: Arc::new(|_| 1),
            on_error: Arc::new(|_| {}),
            settling: None,
            on_settle: Arc::new(|_| {}),
            advertiser: Advertiser::new(policy),
            emit_on_success: true,
            emit_on_redirect: false,
            #[cfg(feature = "metrics")]
            recorder: None,
        }
    }

    /// Cost of a request in quota units (default 1).
    pub fn cost(
        mut self,
        cost: impl Fn(&http::request::Parts) -> u64 + Send + Sync + 'static,
    ) -> Self {
        self.cost = Arc::new(cost);
        self
    }

    /// The quota unit advertised in `qu` (default requests).
    pub fn unit(mut self, unit: QuotaUnit) -> Self {
        self.advertiser.unit = unit;
        self
    }

    /// Adds `pk` to both fields: the keyed hash of the limiter key under `hasher`'s secret.
    pub fn partition_keys(mut self, hasher: PartitionKeyHasher) -> Self {
        self.advertiser.pk = Some(hasher);
        self
    }

    /// Caps the advertised `r / t` ratio (draft-11 Section 6); see [`AdvertiseOptions::max_ratio`].
    pub fn max_ratio(mut self, ratio: u64) -> Self {
        self.advertiser.options.max_ratio = Some(ratio);
        self
    }

    /// Whether allowed responses carry the fields too (default `true`; denials always do).
    pub fn emit_on_success(mut self, on: bool) -> Self {
        self.emit_on_success = on;
        self
    }

    /// Called with every [`SourceError`] (store down, key table full, invalid cost) before the
    /// error response is sent, e.g. to log it: the details never go to the client.
    pub fn on_error(mut self, f: impl Fn(&SourceError) + Send + Sync + 'static) -> Self {
        self.on_error = Arc::new(f);
        self
    }

    /// Whether allowed 3xx responses carry the fields (default `false`, see the module docs).
    pub fn emit_on_redirect(mut self, on: bool) -> Self {
        self.emit_on_redirect = on;
        self
    }

    /// Sends the layer's numbers ([`crate::layer_metrics`]) to `recorder` instead of the current
    /// (global) recorder: for a process that keeps one recorder per server, or a test.
    #[cfg(feature = "metrics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    pub fn metrics_recorder(mut self, recorder: Arc<dyn metrics::Recorder + Send + Sync>) -> Self {
        self.recorder = Some(recorder);
        self
    }

    /// The wire profile (default [`Profile::Draft11`]).
    pub fn profile(mut self, profile: Profile) -> Self {
        self.advertiser.profile = profile;
        self
    }
}

impl<K, S> RateLimitLayer<K, S>
where
    K: PartitionBytes + Send + Sync + 'static,
    S: SettleSource<K> + 'static,
{
    /// Reserve, then settle (see the module docs): [`RateLimitLayer::cost`] becomes an estimate,
    /// reserved at admission under a fresh [`request_id`], and every admitted request is settled
    /// with `actual(head of the inner service's response)` once it has answered; `None` settles
    /// nothing (the estimate stays charged). `actual` is in the quota's unit, like the cost: e.g.
    /// the `Content-Length` with [`QuotaUnit::ContentBytes`].
    ///
    /// The source must keep request-id records for at least the longest response time and for as
    /// many requests in flight per key as there are (the limiters' `dedupe` builder option; its
    /// default is 60 s and 8, for the in-memory limiter, Redis and PostgreSQL alike): a settle
    /// whose record is gone fails and leaves the estimate charged. On a shared store that count is
    /// per key across every instance.
    pub fn settle(
        mut self,
        actual: impl Fn(&http::response::Parts) -> Option<u64> + Send + Sync + 'static,
    ) -> Self {
        self.settling = Some(Settling {
            source: Arc::clone(&self.source) as Arc<dyn Settles<K>>,
            actual: Arc::new(actual),
        });
        self
    }

    /// Called with the [`SettleReport`] of every settle the layer makes
    /// ([`RateLimitLayer::settle`]), e.g. to log a denied extra: the response is returned either way.
    pub fn on_settle(mut self, f: impl Fn(&SettleReport) + Send + Sync + 'static) -> Self {
        self.on_settle = Arc::new(f);
        self
    }
}

impl<K, S, Inner> Layer<Inner> for RateLimitLayer<K, S> {
    type Service = RateLimitService<K, S, Inner>;

    fn layer(&self, inner: Inner) -> Self::Service {
        RateLimitService::new(
            Arc::new(Shared {
                source: Arc::clone(&self.source),
                key: Arc::clone(&self.key),
                cost: Arc::clone(&self.cost),
                on_error: Arc::clone(&self.on_error),
                settling: self.settling.clone(),
                on_settle: Arc::clone(&self.on_settle),
                advertiser: self.advertiser.clone(),
                emit_on_success: self.emit_on_success,
                emit_on_redirect: self.emit_on_redirect,
                #[cfg(feature = "metrics")]
                recorder: self.recorder.clone(),
            }),
            inner,
        )
    }
}
