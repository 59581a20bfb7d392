//! The service the layer wraps around an inner one ([`RateLimitService`]): per request, extract the
//! key, decide (or reserve), call the inner service or answer for it, settle, write the fields, and
//! emit the numbers (feature `metrics`). `Shared` is what every clone of one service shares: the
//! layer's settings and hooks.
//!
//! Promises (the module docs of [`crate::layer`] in full): a refused key or an error answers before
//! any charge or inner call; a denial never calls the inner service; a settle runs before the
//! response is returned and never changes it; an error's details go to the `on_error` hook, never
//! to the client.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::header::CONTENT_TYPE;
use http::{HeaderValue, Request, Response, StatusCode};
use tower_service::Service;

use super::advertiser::{Advertisement, Advertiser, DEGRADED_HEADER, PartitionBytes};
use super::request_id::request_id;
use super::settling::{SettleReport, Settling};
use crate::field::PolicyName;
use crate::key::KeyExtractor;
use crate::problem;
use crate::set::SetOutcome;
use crate::source::{DecisionSource, SourceError};
use bucketproof_limiter::Settle;

pub(super) type KeyFn<K> = dyn KeyExtractor<K>;
pub(super) type CostFn = dyn Fn(&http::request::Parts) -> u64 + Send + Sync;
pub(super) type ErrorFn = dyn Fn(&SourceError) + Send + Sync;
pub(super) type SettleFn = dyn Fn(&SettleReport) + Send + Sync;
/// Where the layer's numbers go (feature `metrics`): a recorder of the caller's, or `None` for the
/// current one (the global recorder).
#[cfg(feature = "metrics")]
pub(super) type Recorder = Option<Arc<dyn metrics::Recorder + Send + Sync>>;

pub(super) struct Shared<K, S> {
    pub(super) source: Arc<S>,
    pub(super) key: Arc<KeyFn<K>>,
    pub(super) cost: Arc<CostFn>,
    pub(super) on_error: Arc<ErrorFn>,
    pub(super) settling: Option<Settling<K>>,
    pub(super) on_settle: Arc<SettleFn>,
    pub(super) advertiser: Advertiser,
    pub(super) emit_on_success: bool,
    pub(super) emit_on_redirect: bool,
    #[cfg(feature = "metrics")]
    pub(super) recorder: Recorder,
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

impl<K, S, Inner> RateLimitService<K, S, Inner> {
    /// `inner` behind the layer whose settings are `shared`.
    pub(super) fn new(shared: Arc<Shared<K, S>>, inner: Inner) -> Self {
        RateLimitService { shared, inner }
    }
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
            let emit = || {
                let decided = decided.map(|(adv, outcome)| (&adv.policy, outcome));
                crate::layer_metrics::response(&self.advertiser.policy, status, decided)
            };
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
            let emit = || {
                crate::layer_metrics::settle(
                    &self.advertiser.policy,
                    &report.result,
                    report.unpaid(),
                )
            };
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
