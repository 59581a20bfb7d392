//! What the shared-store tests (`redis_source`, `postgres_source`) use to reserve, then settle
//! through the layer: a response that says what its work cost, a layer reserving a fixed estimate
//! and settling on that, the reports of its settles, and the cases both stores run (each store's
//! file builds the instances; `balance` reads a user's balance in the store by a limiter of its own).

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bucketproof_headers::PolicyName;
use bucketproof_headers::layer::{DEGRADED_HEADER, RateLimitLayer, SettleReport};
use bucketproof_headers::source::{SettleFailure, SettleSource};
use http::{HeaderValue, Request, Response, StatusCode};
use tower::{Layer, Service, ServiceExt};

/// The response header that carries the work's actual cost.
pub const ACTUAL: &str = "x-actual";

/// Answers "ok" with the request's `x-actual` copied to the response: what the work cost.
pub async fn worked(req: Request<()>) -> Result<Response<String>, Infallible> {
    let mut resp = Response::new("ok".to_owned());
    if let Some(actual) = req.headers().get(ACTUAL) {
        resp.headers_mut().insert(ACTUAL, actual.clone());
    }
    Ok(resp)
}

/// The actual cost the response reports.
pub fn actual(head: &http::response::Parts) -> Option<u64> {
    head.headers.get(ACTUAL)?.to_str().ok()?.parse().ok()
}

pub type Reports = Arc<Mutex<Vec<SettleReport>>>;

/// A layer keyed by `x-user` on `source`, reserving `estimate` per request and settling on the
/// response's `x-actual`, and the reports of its settles.
pub fn layer<S>(source: S, estimate: u64) -> (RateLimitLayer<String, S>, Reports)
where
    S: SettleSource<String> + 'static,
{
    let reports = Reports::default();
    let seen = Arc::clone(&reports);
    let layer = RateLimitLayer::new(source, PolicyName::new("api.v1").unwrap(), |parts| {
        parts.headers["x-user"].to_str().unwrap().to_owned()
    })
    .cost(move |_| estimate)
    .settle(actual)
    .on_settle(move |report| seen.lock().unwrap().push(report.clone()));
    (layer, reports)
}

/// One request of `user` whose work costs `actual`.
pub async fn call<S>(svc: &mut S, user: &str, actual: u64) -> Response<String>
where
    S: Service<Request<()>, Response = Response<String>, Error = Infallible>,
{
    let req = Request::builder()
        .header("x-user", user)
        .header(ACTUAL, HeaderValue::from(actual))
        .body(())
        .unwrap();
    svc.ready().await.unwrap().call(req).await.unwrap()
}

/// The `r` of the response's one `RateLimit` item.
pub fn advertised(resp: &Response<String>) -> u64 {
    let field = resp.headers()["ratelimit"].as_bytes();
    bucketproof_headers::RateLimit::parse(bucketproof_headers::Profile::Draft11, field)
        .unwrap()
        .limits[0]
        .remaining
}

/// The one report in `reports` after the `n`th settle (0-based): reserved, actual, unpaid, and
/// the settlement's binding balance (`None` for a failed settle).
pub fn summary(reports: &Reports, n: usize) -> (u64, u64, u64, Option<(bool, u64)>) {
    let reports = reports.lock().unwrap();
    let report = &reports[n];
    let settled = report.result.as_ref().ok().map(|settled| {
        let binding = settled.decision.binding();
        (binding.is_allowed(), binding.remaining().whole())
    });
    (report.reserved, report.actual, report.unpaid(), settled)
}

/// Two instances reserve and settle on one shared balance: a refund given back by one is spent by
/// the other, an extra charged by one is seen by the other, and neither instance's ids replay the
/// other's records. Each has a capacity of 100.
pub async fn two_instances_share_one_balance<S>(a: S, b: S, balance: impl AsyncFn(&str) -> u64)
where
    S: SettleSource<String> + 'static,
{
    let (layer_a, reports_a) = layer(a, 10);
    let (layer_b, reports_b) = layer(b, 10);
    let mut svc_a = layer_a.layer(tower::service_fn(worked));
    let mut svc_b = layer_b.layer(tower::service_fn(worked));

    // a reserves 10 of 100, the work costs 3: 7 come back.
    let first = call(&mut svc_a, "u", 3).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert!(first.headers().get(DEGRADED_HEADER).is_none());
    assert_eq!(advertised(&first), 90, "the reservation");
    assert_eq!(summary(&reports_a, 0), (10, 3, 0, Some((true, 97))));
    assert_eq!(balance("u").await, 97);
    // b reserves on what a gave back, the work costs 25: 15 more are charged.
    let second = call(&mut svc_b, "u", 25).await;
    assert_eq!(advertised(&second), 87);
    assert_eq!(summary(&reports_b, 0), (10, 25, 0, Some((true, 72))));
    // a decides on what b's extra left.
    let third = call(&mut svc_a, "u", 10).await;
    assert_eq!(advertised(&third), 62);
    assert_eq!(summary(&reports_a, 1), (10, 10, 0, Some((true, 62))));
    assert_eq!(balance("u").await, 62);
}

/// An extra the shared balance cannot cover: the response is returned, nothing is charged (the
/// balance stays at 0), the shortfall is reported unpaid, and the next request on either instance is
/// denied. Each has a capacity of 20.
pub async fn a_denied_extra_is_returned_and_reported_unpaid<S>(
    a: S,
    b: S,
    balance: impl AsyncFn(&str) -> u64,
) where
    S: SettleSource<String> + 'static,
{
    let (layer_a, _) = layer(a, 10);
    let (layer_b, reports_b) = layer(b, 10);
    let mut svc_a = layer_a.layer(tower::service_fn(worked));
    let mut svc_b = layer_b.layer(tower::service_fn(worked));

    assert_eq!(call(&mut svc_a, "u", 10).await.status(), StatusCode::OK);
    // b reserves the last 10; the work costs 20, an extra of 10 that nothing covers.
    let resp = call(&mut svc_b, "u", 20).await;
    assert_eq!(resp.status(), StatusCode::OK, "the response is returned");
    assert_eq!(advertised(&resp), 0);
    assert_eq!(summary(&reports_b, 0), (10, 20, 10, Some((false, 0))));
    assert_eq!(balance("u").await, 0, "never below 0");
    assert_eq!(
        call(&mut svc_a, "u", 1).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
}

/// The store gone between the reservation and the settle (the work itself calls `cut`): the response
/// is returned, the settle is reported failed as unavailable, and the estimate stays charged in the
/// store. A reservation the local budget (20, no refill) decided while the store was gone has no
/// record there: its settle fails too, and the estimate stays as the budget charged it. `limiter`
/// has a capacity of 100.
pub async fn an_outage_during_settle_keeps_the_estimate<S>(
    limiter: S,
    cut: impl Fn() + Clone + Send + 'static,
    balance: impl AsyncFn(&str) -> u64,
) where
    S: SettleSource<String> + 'static,
{
    let (layer, reports) = layer(limiter, 10);
    let mut svc = layer.layer(tower::service_fn(move |req| {
        cut();
        worked(req)
    }));

    let resp = call(&mut svc, "u", 3).await;
    assert_eq!(resp.status(), StatusCode::OK, "the response is returned");
    assert!(
        resp.headers().get(DEGRADED_HEADER).is_none(),
        "the store decided"
    );
    assert_eq!(advertised(&resp), 90);
    assert_eq!(summary(&reports, 0), (10, 3, 0, None));
    let failure = reports.lock().unwrap()[0].result.clone().unwrap_err();
    assert!(
        matches!(failure, SettleFailure::Unavailable(_)),
        "{failure:?}"
    );
    assert_eq!(balance("u").await, 90, "the estimate stays charged");

    // The local budget decides (flagged); no record in the store, nothing settled there.
    let fallback = call(&mut svc, "u", 3).await;
    assert_eq!(fallback.status(), StatusCode::OK);
    assert_eq!(fallback.headers()[DEGRADED_HEADER], "?1");
    assert_eq!(advertised(&fallback), 10, "the local budget's");
    let failure = reports.lock().unwrap()[1].result.clone().unwrap_err();
    assert!(
        matches!(failure, SettleFailure::Unavailable(_)),
        "{failure:?}"
    );
    assert_eq!(balance("u").await, 90);
}
