//! What the shared-store tests (`redis_source`, `postgres_source`) use to reserve, then settle
//! through the layer: a response that says what its work cost, a layer reserving a fixed estimate
//! and settling on that, and the reports of its settles.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bucketproof_headers::PolicyName;
use bucketproof_headers::layer::{RateLimitLayer, SettleReport};
use bucketproof_headers::source::SettleSource;
use http::{HeaderValue, Request, Response};
use tower::{Service, ServiceExt};

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
