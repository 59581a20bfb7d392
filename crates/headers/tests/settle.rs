//! Reserve, then settle through the tower layer (`RateLimitLayer::settle`): an estimate reserved at
//! admission, settled with the actual cost read from the response (its `Content-Length` in KiB),
//! on the in-memory limiter at a manual clock, so every balance is exact.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bucketproof_headers::layer::{RateLimitLayer, SettleReport};
use bucketproof_headers::source::SettleFailure;
use bucketproof_headers::{PolicyName, Profile, RateLimit};
use bucketproof_limiter::{
    Bandwidth, Bandwidths, Clock, Config, Limiter, ManualClock, Rate, SettleError, Wait,
};
use http::header::CONTENT_LENGTH;
use http::{HeaderValue, Request, Response, StatusCode};
use tower::{Layer, Service, ServiceExt};

const S: u64 = 1_000_000_000;
const KIB: usize = 1024;

type Shared = Arc<Limiter<String, ManualClock>>;

/// Answers with a body of `x-bytes` bytes and its `Content-Length`; without `x-bytes`, a body of
/// unknown length (no `Content-Length`).
async fn sized(req: Request<()>) -> Result<Response<String>, Infallible> {
    let Some(bytes) = req.headers().get("x-bytes") else {
        return Ok(Response::new("streamed".to_owned()));
    };
    let bytes: usize = bytes.to_str().unwrap().parse().unwrap();
    let mut resp = Response::new("x".repeat(bytes));
    resp.headers_mut()
        .insert(CONTENT_LENGTH, HeaderValue::from(bytes));
    Ok(resp)
}

/// The actual cost: the response's `Content-Length` in KiB, rounded up.
fn kib(head: &http::response::Parts) -> Option<u64> {
    let bytes: u64 = head
        .headers
        .get(CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()?;
    Some(bytes.div_ceil(KIB as u64))
}

type Reports = Arc<Mutex<Vec<SettleReport>>>;

/// A layer reserving `estimate` KiB per request on `limiter` and settling on the response's size,
/// and the reports of its settles.
fn layer(limiter: &Shared, estimate: u64) -> (RateLimitLayer<String, Shared>, Reports) {
    let reports = Reports::default();
    let seen = Arc::clone(&reports);
    let layer = RateLimitLayer::new(
        Arc::clone(limiter),
        PolicyName::new("api.v1").unwrap(),
        |_| "u".to_owned(),
    )
    .cost(move |_| estimate)
    .settle(kib)
    .on_settle(move |report| seen.lock().unwrap().push(report.clone()));
    (layer, reports)
}

fn limiter(capacity: u64) -> Shared {
    Arc::new(
        Limiter::builder(Config::new(capacity, Rate::per_second(1)).unwrap())
            .clock(ManualClock::new(S))
            .build(),
    )
}

async fn call<Svc>(svc: &mut Svc, bytes: Option<usize>) -> Response<String>
where
    Svc: Service<Request<()>, Response = Response<String>, Error = Infallible>,
{
    let mut req = Request::builder();
    if let Some(bytes) = bytes {
        req = req.header("x-bytes", bytes);
    }
    svc.ready()
        .await
        .unwrap()
        .call(req.body(()).unwrap())
        .await
        .unwrap()
}

fn balance(limiter: &Shared) -> u64 {
    limiter
        .peek_at(&"u".to_owned(), limiter.clock().now())
        .remaining
        .whole()
}

/// The `r` the response advertised.
fn advertised(resp: &Response<String>) -> u64 {
    let field = resp.headers()["ratelimit"].as_bytes();
    RateLimit::parse(Profile::Draft11, field).unwrap().limits[0].remaining
}

#[tokio::test]
async fn a_small_response_gives_back_the_rest_of_the_estimate() {
    let limiter = limiter(100);
    let (layer, reports) = layer(&limiter, 10);
    let mut svc = layer.layer(tower::service_fn(sized));
    // 10 KiB reserved, 2 KiB (1.5 rounded up) sent: 8 come back.
    let resp = call(&mut svc, Some(KIB + KIB / 2)).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        resp.body().len(),
        KIB + KIB / 2,
        "the response is the inner one"
    );
    assert_eq!(advertised(&resp), 90, "the fields describe the reservation");
    assert_eq!(balance(&limiter), 98);
    let reports = reports.lock().unwrap();
    let [report] = &reports[..] else {
        panic!("one settle: {reports:?}")
    };
    assert_eq!(
        (report.reserved, report.actual, report.unpaid()),
        (10, 2, 0)
    );
    let settled = report.result.as_ref().unwrap();
    assert!(settled.decision.is_allowed() && !settled.replayed);
    assert_eq!(settled.decision.binding().remaining().whole(), 98);
}

#[tokio::test]
async fn a_large_response_is_charged_the_extra() {
    let limiter = limiter(100);
    let (layer, reports) = layer(&limiter, 10);
    let mut svc = layer.layer(tower::service_fn(sized));
    let resp = call(&mut svc, Some(25 * KIB)).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        advertised(&resp),
        90,
        "computed at admission, before the extra"
    );
    assert_eq!(balance(&limiter), 75);
    // The next request is decided on what is left after the extra.
    let resp = call(&mut svc, Some(10 * KIB)).await;
    assert_eq!(advertised(&resp), 65);
    assert_eq!(balance(&limiter), 65);
    let reports = reports.lock().unwrap();
    assert_eq!(reports.len(), 2);
    assert!(
        reports
            .iter()
            .all(|r| r.result.as_ref().unwrap().decision.is_allowed())
    );
}

#[tokio::test]
async fn a_denied_extra_returns_the_response_charges_nothing_and_is_reported_unpaid() {
    let limiter = limiter(20);
    #[cfg(feature = "metrics")]
    let recorder = Arc::new(metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder());
    let (layer, reports) = layer(&limiter, 10);
    #[cfg(feature = "metrics")]
    let layer = layer.metrics_recorder(recorder.clone());
    let mut svc = layer.layer(tower::service_fn(sized));
    // 10 reserved and used: 10 left. 10 more reserved: 0 left; the work used 15, an extra of 5.
    assert_eq!(
        call(&mut svc, Some(10 * KIB)).await.status(),
        StatusCode::OK
    );
    let resp = call(&mut svc, Some(15 * KIB)).await;
    assert_eq!(resp.status(), StatusCode::OK, "the response is returned");
    assert_eq!(resp.body().len(), 15 * KIB);
    assert_eq!(advertised(&resp), 0);
    assert_eq!(
        balance(&limiter),
        0,
        "never below 0: the extra is not charged"
    );
    {
        let reports = reports.lock().unwrap();
        let report = &reports[1];
        assert_eq!(
            (report.reserved, report.actual, report.unpaid()),
            (10, 15, 5)
        );
        let settled = report.result.as_ref().unwrap();
        assert!(!settled.decision.is_allowed());
        assert_eq!(settled.decision.retry_after(), Some(Wait::After(5 * S)));
    }
    // The next request is denied on the reservations alone; no settle for a denial.
    assert_eq!(
        call(&mut svc, Some(KIB)).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(reports.lock().unwrap().len(), 2);
    #[cfg(feature = "metrics")]
    {
        let text = recorder.handle().render();
        let has = |line: &str| text.lines().any(|l| l == line);
        assert!(
            has(r#"bucketproof_http_settles_total{policy="api.v1",result="settled"} 1"#),
            "{text}"
        );
        assert!(
            has(r#"bucketproof_http_settles_total{policy="api.v1",result="extra_denied"} 1"#),
            "{text}"
        );
        assert!(
            has(r#"bucketproof_http_unpaid_total{policy="api.v1"} 5"#),
            "{text}"
        );
    }
}

#[tokio::test]
async fn a_failed_settle_or_no_actual_leaves_the_estimate_charged() {
    let limiter = limiter(20);
    #[cfg(feature = "metrics")]
    let recorder = Arc::new(metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder());
    let (layer, reports) = layer(&limiter, 4);
    #[cfg(feature = "metrics")]
    let layer = layer.metrics_recorder(recorder.clone());
    let mut svc = layer.layer(tower::service_fn(sized));
    // No Content-Length: nothing to settle, nothing reported, the estimate stays.
    assert_eq!(call(&mut svc, None).await.status(), StatusCode::OK);
    assert_eq!(balance(&limiter), 16);
    assert!(reports.lock().unwrap().is_empty());
    // 21 KiB is above the capacity: no acquire could have charged it. Reported, nothing changes.
    assert_eq!(
        call(&mut svc, Some(21 * KIB)).await.status(),
        StatusCode::OK
    );
    assert_eq!(balance(&limiter), 12);
    let reports = reports.lock().unwrap();
    assert_eq!(
        reports[0].result,
        Err(SettleFailure::Refused(SettleError::InvalidActual {
            actual: 21,
            capacity: 20
        }))
    );
    assert_eq!(reports[0].unpaid(), 0);
    #[cfg(feature = "metrics")]
    {
        let text = recorder.handle().render();
        let has = |line: &str| text.lines().any(|l| l == line);
        assert!(
            has(r#"bucketproof_http_settles_total{policy="api.v1",result="failed"} 1"#),
            "{text}"
        );
        assert!(
            has(r#"bucketproof_http_settle_failures_total{policy="api.v1",reason="refused"} 1"#),
            "{text}"
        );
    }
}

#[tokio::test]
async fn a_key_of_several_bandwidths_settles_every_bandwidth() {
    let set = Bandwidths::new([
        Bandwidth::named("burst", Config::new(20, "20/s".parse().unwrap()).unwrap()).unwrap(),
        Bandwidth::named(
            "daily",
            Config::new(1000, "1000/d".parse().unwrap()).unwrap(),
        )
        .unwrap(),
    ])
    .unwrap();
    let limiter: Shared = Arc::new(Limiter::builder(set).clock(ManualClock::new(S)).build());
    let (layer, reports) = layer(&limiter, 10);
    let mut svc = layer.layer(tower::service_fn(sized));
    assert_eq!(call(&mut svc, Some(3 * KIB)).await.status(), StatusCode::OK);
    let reports = reports.lock().unwrap();
    let settled = reports[0].result.as_ref().unwrap();
    let parts: Vec<u64> = (settled.decision.bandwidths().iter())
        .map(|part| part.remaining().whole())
        .collect();
    assert_eq!(parts, [17, 997]);
}
