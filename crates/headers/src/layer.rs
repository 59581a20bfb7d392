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

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use tower_layer::Layer;
use tower_service::Service;

use crate::field::{PolicyName, QuotaPolicy, QuotaUnit, RateLimit, RateLimitPolicy, ServiceLimit};
#[cfg(doc)]
use crate::key::HeaderKey;
use crate::key::{KeyExtractor, KeyRejection};
use crate::mapping::{self, AdvertiseOptions};
use crate::pk::PartitionKeyHasher;
use crate::problem;
use crate::profile::Profile;
use crate::set::{Part, SetOutcome};
use crate::source::{DecisionSource, Outcome, SettleFailure, SettleSource, SourceError};
use bucketproof_limiter::{Decisions, RequestId, Settle, Settled};

/// Set to `?1` (a Structured Field Boolean) on every response decided while the limiter's store was
/// unavailable and a fallback (local budget, fail-open) decided instead, or while the store recovered
/// from a detected loss of its state (a shared-state source's recovery policy).
pub const DEGRADED_HEADER: HeaderName = HeaderName::from_static("bucketproof-degraded");

/// The bytes a limiter key contributes to its partition key hash.
pub trait PartitionBytes {
    /// A stable byte encoding of the key.
    fn partition_bytes(&self) -> Cow<'_, [u8]>;
}

impl PartitionBytes for String {
    fn partition_bytes(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(self.as_bytes())
    }
}
impl PartitionBytes for &str {
    fn partition_bytes(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(self.as_bytes())
    }
}
impl PartitionBytes for Vec<u8> {
    fn partition_bytes(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(self)
    }
}
impl PartitionBytes for u64 {
    fn partition_bytes(&self) -> Cow<'_, [u8]> {
        Cow::Owned(self.to_be_bytes().to_vec())
    }
}
impl PartitionBytes for std::net::IpAddr {
    fn partition_bytes(&self) -> Cow<'_, [u8]> {
        match self {
            std::net::IpAddr::V4(v4) => Cow::Owned(v4.octets().to_vec()),
            std::net::IpAddr::V6(v6) => Cow::Owned(v6.octets().to_vec()),
        }
    }
}

type KeyFn<K> = dyn KeyExtractor<K>;
type CostFn = dyn Fn(&http::request::Parts) -> u64 + Send + Sync;
type ErrorFn = dyn Fn(&SourceError) + Send + Sync;
type ActualFn = dyn Fn(&http::response::Parts) -> Option<u64> + Send + Sync;
type SettleFn = dyn Fn(&SettleReport) + Send + Sync;
/// Where the layer's numbers go (feature `metrics`): a recorder of the caller's, or `None` for the
/// current one (the global recorder).
#[cfg(feature = "metrics")]
type Recorder = Option<Arc<dyn metrics::Recorder + Send + Sync>>;

/// Turns one [`Outcome`] into header values: the policy, the limit and `Retry-After`.
///
/// The layer uses it for every response; simulations use it to put exactly the same bytes in front
/// of a client without a socket.
#[derive(Clone, Debug)]
pub struct Advertiser {
    /// The wire profile.
    pub profile: Profile,
    /// The advertised policy name (stable, versioned): the one item of a key of one unnamed
    /// bandwidth, and what `pk` is bound to.
    pub policy: PolicyName,
    /// `qu`.
    pub unit: QuotaUnit,
    /// DoS ratio cap and friends.
    pub options: AdvertiseOptions,
    /// Partition key hashing; `None` sends no `pk`.
    pub pk: Option<PartitionKeyHasher>,
}

impl Advertiser {
    /// Draft-11, requests, no ratio cap, no `pk`.
    pub fn new(policy: PolicyName) -> Advertiser {
        Advertiser {
            profile: Profile::Draft11,
            policy,
            unit: QuotaUnit::Requests,
            options: AdvertiseOptions::default(),
            pk: None,
        }
    }

    /// The values for `outcome`, decided for a key whose partition bytes are `key`: one item under
    /// [`Advertiser::policy`].
    pub fn advertisement(&self, key: &[u8], outcome: &Outcome) -> Advertisement {
        self.set_advertisement(key, &SetOutcome::single(*outcome))
    }

    /// The values for a decision over a key's bandwidths: one `RateLimit-Policy` item and one
    /// `RateLimit` item per part, in order, each named by [`Advertiser::item_name`], and
    /// `Retry-After` from the combined wait.
    pub fn set_advertisement(&self, key: &[u8], outcome: &SetOutcome) -> Advertisement {
        // One partition key for every item: all of a key's bandwidths limit the same requests, so
        // they are one partition under several policies, and a client can tell so from `pk`.
        let pk = self.pk.as_ref().map(|h| h.partition_key(&self.policy, key));
        let advertised = outcome.advertised(self.options);
        let mut policies = Vec::with_capacity(advertised.len());
        let mut limits = Vec::with_capacity(advertised.len());
        let mut window_floor = 0;
        for (part, adv) in outcome.parts().iter().zip(&advertised) {
            let name = self.item_name(part);
            let config = part.config();
            let rate = config.rate();
            policies.push(QuotaPolicy {
                name: name.clone(),
                quota: mapping::policy_quota(config.capacity()),
                unit: self.unit.clone(),
                window: mapping::policy_window_secs(config.capacity(), rate.numer(), rate.denom()),
                partition_key: pk.clone(),
            });
            limits.push(ServiceLimit {
                name: name.clone(),
                remaining: adv.remaining,
                reset: adv.reset,
                partition_key: pk.clone(),
            });
            if adv.remaining < outcome.cost() {
                window_floor = window_floor.max(adv.reset.unwrap_or(0));
            }
        }
        // Section 6: Retry-After SHOULD NOT be earlier than the end of the effective window. Of the
        // items whose `r` does not cover the cost, that is: an item that still covers it does not
        // forbid the retry, so its window need not delay it.
        let retry_after = outcome.retry_after_secs().map(|ra| ra.max(window_floor));
        Advertisement {
            policy: RateLimitPolicy { policies },
            limit: RateLimit { limits },
            retry_after,
        }
    }

    /// The name `part`'s items carry: its bandwidth's ([`crate::set`], "Names on the wire"), or
    /// [`Advertiser::policy`] for the one part of a key of one unnamed bandwidth.
    pub fn item_name<'a>(&'a self, part: &'a Part) -> &'a PolicyName {
        part.name().unwrap_or(&self.policy)
    }

    /// The policies a denial names as violated (draft-11 Section 5.1): the items of the bandwidths
    /// that did not cover the cost. Empty when allowed.
    pub fn violated<'a>(&'a self, outcome: &'a SetOutcome) -> Vec<&'a PolicyName> {
        outcome
            .parts()
            .iter()
            .filter(|p| p.violated())
            .map(|p| self.item_name(p))
            .collect()
    }

    /// Writes the fields (and `Retry-After`, and the degraded flag) into a header section.
    pub fn write(&self, headers: &mut HeaderMap, adv: &Advertisement, degraded: bool) {
        // Values built here always serialize; if one ever did not, sending no hint is safer than
        // sending a wrong one.
        if let Ok(v) = adv.policy.to_header_value(self.profile) {
            headers.insert(self.profile.policy_field(), v);
        }
        if let Ok(v) = adv.limit.to_header_value(self.profile) {
            headers.insert(self.profile.limit_field(), v);
        }
        if let Some(ra) = adv.retry_after {
            headers.insert(RETRY_AFTER, HeaderValue::from(ra));
        }
        if degraded {
            headers.insert(DEGRADED_HEADER, HeaderValue::from_static("?1"));
        }
    }
}

struct Shared<K, S> {
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

/// What became of one admitted request's settle ([`RateLimitLayer::settle`]), given to
/// [`RateLimitLayer::on_settle`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettleReport {
    /// The estimate the request reserved: its [`RateLimitLayer::cost`].
    pub reserved: u64,
    /// The actual cost computed from its response.
    pub actual: u64,
    /// The source's answer: an allowed settlement (the refund given, or the extra charged), a
    /// denied one (the extra was not covered: nothing charged, see [`SettleReport::unpaid`]), or
    /// why it could not settle ([`SettleFailure`]: refused by the rule, or the store unavailable or
    /// failing; the estimate stays charged).
    pub result: Result<Settled<Decisions>, SettleFailure>,
}

impl SettleReport {
    /// What the request used beyond what its key was charged: the extra of a denied settle, 0
    /// otherwise (a failed settle leaves the estimate charged: its shortfall, if any, is not
    /// known to be an extra the limiter refused).
    pub fn unpaid(&self) -> u64 {
        match &self.result {
            Ok(settled) if !settled.decision.is_allowed() => {
                self.actual.saturating_sub(self.reserved)
            }
            _ => 0,
        }
    }
}

/// The low 64 bits of the next [`request_id`]: a process-wide counter.
static NEXT_REQUEST: AtomicU64 = AtomicU64::new(0);

/// The high 64 bits of every [`request_id`] of this process: drawn once, on the first reservation.
static INSTANCE: OnceLock<u64> = OnceLock::new();

/// Replaces a drawn instance nonce of 0, which would make ids a caller builds from a `u64`.
const ZERO_NONCE: u64 = 0x6275_636b_6574_7072;

/// A fresh request id for one reservation of the layer.
///
/// The high 64 bits are this process's instance nonce, drawn once from the operating system's
/// random source (`getrandom`, through `rand_core::OsRng`) and never 0; the low 64 bits count the
/// process's reservations. So an id is
/// - unique within the process (the scope of the in-memory limiter's records);
/// - unique across the processes sharing a store (Redis, PostgreSQL), whose records of every
///   instance live side by side: two instances, or one instance and its own restart (which starts
///   counting from 0 again while its previous run's records are still live), collide only if
///   their nonces are equal, about one chance in 2^64 per pair;
/// - never equal to an id a caller builds from a `u64` (its high bits are 0), so it cannot replay
///   another caller's record on a shared limiter.
///
/// If the operating system has no randomness to give, the nonce falls back to one built from the
/// time, the process id and std's per-process hash keys: still distinct per process in practice,
/// never a panic.
pub fn request_id() -> RequestId {
    let instance = *INSTANCE.get_or_init(instance_nonce);
    let count = NEXT_REQUEST.fetch_add(1, Ordering::Relaxed);
    RequestId(u128::from(instance) << 64 | u128::from(count))
}

/// This process's instance nonce (see [`request_id`]).
fn instance_nonce() -> u64 {
    use rand_core::RngCore;
    let mut bytes = [0; 8];
    let drawn = match rand_core::OsRng.try_fill_bytes(&mut bytes) {
        Ok(()) => u64::from_le_bytes(bytes),
        Err(_) => fallback_nonce(),
    };
    if drawn == 0 { ZERO_NONCE } else { drawn }
}

/// A nonce without the operating system's random source: the wall clock, the process id and std's
/// randomly keyed hasher (keys it seeds per process as best it can).
fn fallback_nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    hasher.write_u128(nanos);
    hasher.write_u32(std::process::id());
    hasher.finish()
}

type RefFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A [`SettleSource`] with its type erased, so the layer keeps one type with or without settling.
trait Settles<K>: Send + Sync {
    fn reserve_set<'a>(
        &'a self,
        key: &'a K,
        cost: u64,
        request_id: RequestId,
    ) -> RefFuture<'a, Result<SetOutcome, SourceError>>;

    fn settle_set<'a>(
        &'a self,
        key: &'a K,
        settle: Settle,
    ) -> RefFuture<'a, Result<Settled<Decisions>, SettleFailure>>;
}

impl<K, T: SettleSource<K>> Settles<K> for T {
    fn reserve_set<'a>(
        &'a self,
        key: &'a K,
        cost: u64,
        request_id: RequestId,
    ) -> RefFuture<'a, Result<SetOutcome, SourceError>> {
        Box::pin(SettleSource::reserve_set(self, key, cost, request_id))
    }

    fn settle_set<'a>(
        &'a self,
        key: &'a K,
        settle: Settle,
    ) -> RefFuture<'a, Result<Settled<Decisions>, SettleFailure>> {
        Box::pin(SettleSource::settle_set(self, key, settle))
    }
}

/// The layer's settling: the source as a [`SettleSource`], and how to read the actual cost.
struct Settling<K> {
    source: Arc<dyn Settles<K>>,
    actual: Arc<ActualFn>,
}

impl<K> Clone for Settling<K> {
    fn clone(&self) -> Self {
        Settling {
            source: Arc::clone(&self.source),
            actual: Arc::clone(&self.actual),
        }
    }
}

impl<K, S, Inner> Layer<Inner> for RateLimitLayer<K, S> {
    type Service = RateLimitService<K, S, Inner>;

    fn layer(&self, inner: Inner) -> Self::Service {
        RateLimitService {
            shared: Arc::new(Shared {
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
        }
    }
}

/// The service the layer wraps around `Inner`.
pub struct RateLimitService<K, S, Inner> {
    shared: Arc<Shared<K, S>>,
    inner: Inner,
}

impl<K, S, Inner: Clone> Clone for RateLimitService<K, S, Inner> {
    fn clone(&self) -> Self {
        RateLimitService {
            shared: Arc::clone(&self.shared),
            inner: self.inner.clone(),
        }
    }
}

/// The header values computed for one decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Advertisement {
    /// `RateLimit-Policy`.
    pub policy: RateLimitPolicy,
    /// `RateLimit`.
    pub limit: RateLimit,
    /// `Retry-After` delay seconds (denials that will ever be allowed only).
    pub retry_after: Option<u64>,
}

fn problem_response<B: From<String>>(status: StatusCode, body: String) -> Response<B> {
    let mut resp = Response::new(B::from(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static(problem::PROBLEM_JSON),
    );
    resp
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<K, S, Inner, ReqB, ResB> Service<Request<ReqB>> for RateLimitService<K, S, Inner>
where
    K: PartitionBytes + Send + Sync + 'static,
    S: DecisionSource<K> + 'static,
    Inner: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    Inner::Future: Send + 'static,
    Inner::Error: 'static,
    ReqB: Send + 'static,
    ResB: From<String> + Send + 'static,
{
    type Response = Response<ResB>;
    type Error = Inner::Error;
    type Future = BoxFuture<Result<Response<ResB>, Inner::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let shared = Arc::clone(&self.shared);
        // The decision may wait on a store, so the inner service is called from the future: take the
        // instance `poll_ready` readied and leave a clone in its place (tower's documented pattern).
        let fresh = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, fresh);
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let key = match shared.key.extract(&parts) {
                Ok(key) => key,
                Err(refused) => {
                    let resp = problem_response::<ResB>(refused.status(), refused.problem());
                    shared.observe(resp.status(), None);
                    return Ok(resp);
                }
            };
            let cost = (shared.cost)(&parts);
            let req = Request::from_parts(parts, body);
            let reservation = shared.settling.as_ref().map(|s| (s, request_id()));
            let decided = match reservation {
                Some((settling, id)) => settling.source.reserve_set(&key, cost, id).await,
                None => shared.source.decide_set(&key, cost).await,
            };
            let outcome = match decided {
                Ok(o) => o,
                Err(err) => {
                    (shared.on_error)(&err);
                    let resp = error_response::<ResB>(&shared.advertiser.policy, &err);
                    shared.observe(resp.status(), None);
                    return Ok(resp);
                }
            };
            let advertiser = &shared.advertiser;
            let adv = advertiser.set_advertisement(&key.partition_bytes(), &outcome);
            let resp = if outcome.is_allowed() {
                let mut resp = inner.call(req).await?;
                if let Some((settling, id)) = reservation {
                    let (head, body) = resp.into_parts();
                    if let Some(actual) = (settling.actual)(&head) {
                        let settle = Settle::new(id, actual);
                        let result = settling.source.settle_set(&key, settle).await;
                        let report = SettleReport {
                            reserved: cost,
                            actual,
                            result,
                        };
                        (shared.on_settle)(&report);
                        shared.observe_settle(&report);
                    }
                    resp = Response::from_parts(head, body);
                }
                let emit = shared.emit_on_success
                    && (shared.emit_on_redirect || !resp.status().is_redirection());
                let headers = resp.headers_mut();
                if emit {
                    advertiser.write(headers, &adv, outcome.degraded());
                } else if outcome.degraded() {
                    headers.insert(DEGRADED_HEADER, HeaderValue::from_static("?1"));
                }
                resp
            } else {
                let body = problem::quota_exceeded(&advertiser.violated(&outcome), adv.retry_after);
                let mut resp = problem_response::<ResB>(StatusCode::TOO_MANY_REQUESTS, body);
                advertiser.write(resp.headers_mut(), &adv, outcome.degraded());
                resp
            };
            shared.observe(resp.status(), Some((&adv, &outcome)));
            Ok(resp)
        })
    }
}

impl<K, S> Shared<K, S> {
    /// Emits one response's numbers (feature `metrics`, [`crate::layer_metrics`]) on the layer's
    /// recorder, or the current one; nothing without the feature.
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    fn observe(&self, status: StatusCode, decided: Option<(&Advertisement, &SetOutcome)>) {
        #[cfg(feature = "metrics")]
        {
            let emit = || crate::layer_metrics::response(&self.advertiser, status, decided);
            match &self.recorder {
                Some(recorder) => metrics::with_local_recorder(recorder.as_ref(), emit),
                None => emit(),
            }
        }
    }

    /// Emits one settle's numbers (feature `metrics`, [`crate::layer_metrics`]); nothing without
    /// the feature.
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    fn observe_settle(&self, report: &SettleReport) {
        #[cfg(feature = "metrics")]
        {
            let emit = || crate::layer_metrics::settle(&self.advertiser, report);
            match &self.recorder {
                Some(recorder) => metrics::with_local_recorder(recorder.as_ref(), emit),
                None => emit(),
            }
        }
    }
}

fn error_response<B: From<String>>(policy: &PolicyName, err: &SourceError) -> Response<B> {
    match err {
        SourceError::InvalidCost { cost, capacity } => problem_response(
            StatusCode::PAYLOAD_TOO_LARGE,
            problem::cost_exceeds_capacity(policy, *cost, *capacity),
        ),
        SourceError::KeyLimitReached { .. } => problem_response(
            StatusCode::SERVICE_UNAVAILABLE,
            problem::temporary_reduced_capacity(&[policy], "The rate limiter is at its key bound."),
        ),
        SourceError::Unavailable(_) | SourceError::Store(_) => problem_response(
            StatusCode::SERVICE_UNAVAILABLE,
            // The store error text may name hosts: it goes to `on_error`, not to clients.
            problem::temporary_reduced_capacity(
                &[policy],
                "The rate limiter's store is unavailable.",
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every id of the process carries the one nonce, never 0 (no id a caller builds from a `u64`),
    /// and a counter that never repeats.
    #[test]
    fn request_ids_are_the_instance_nonce_and_a_counter() {
        let ids: Vec<u128> = (0..3).map(|_| request_id().0).collect();
        let nonce = ids[0] >> 64;
        assert_ne!(nonce, 0);
        assert!(ids.iter().all(|id| id >> 64 == nonce), "{ids:x?}");
        let counts: Vec<u64> = ids.iter().map(|id| *id as u64).collect();
        assert!(counts.windows(2).all(|w| w[0] < w[1]), "{counts:?}");
    }

    /// The nonce is drawn, not fixed: a fresh draw is another number (equal once in 2^64).
    #[test]
    fn instance_nonces_are_drawn_per_process() {
        assert_ne!(instance_nonce(), instance_nonce());
        assert_ne!(fallback_nonce(), 0);
    }
}
