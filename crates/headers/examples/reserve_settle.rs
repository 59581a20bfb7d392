//! Reserve, then settle, through the tower layer, offline: each request reserves an estimate of
//! 8 KiB of a 64 KiB content-bytes quota (refilled 8 KiB per second); once the inner service has
//! answered, the layer settles on the response's `Content-Length`, giving back what a small
//! response did not use and charging what a large one used beyond the estimate. The service is
//! driven in-process on a manual clock, a quarter second apart, so the output is the same on every
//! run.
//!
//! ```text
//! cargo run -p bucketproof-headers --example reserve_settle
//! ```
//!
//! The `r` printed is what the response advertised: computed at admission, right after the
//! estimate was reserved. The balance is the key's after the settle. One large response's extra is
//! not covered: the response is still returned, nothing is charged (a balance never goes below 0),
//! and the shortfall is reported as unpaid.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bucketproof_headers::layer::{RateLimitLayer, SettleReport};
use bucketproof_headers::{PolicyName, Profile, QuotaUnit, RateLimit};
use bucketproof_limiter::{Clock, Config, Limiter, ManualClock, Rate, Wait};
use http::header::CONTENT_LENGTH;
use http::{HeaderValue, Request, Response};
use tower::{Layer, Service, ServiceExt};

const ESTIMATE: u64 = 8 * 1024;
const STEP_NS: u64 = 250_000_000;

/// A body of `x-bytes` bytes with its `Content-Length`; without `x-bytes`, one of unknown length.
async fn sized(req: Request<()>) -> Result<Response<String>, Infallible> {
    let Some(bytes) = req.headers().get("x-bytes") else {
        return Ok(Response::new("streamed, no Content-Length".to_owned()));
    };
    let bytes: usize = bytes.to_str().unwrap_or("0").parse().unwrap_or(0);
    let mut resp = Response::new("x".repeat(bytes));
    resp.headers_mut()
        .insert(CONTENT_LENGTH, HeaderValue::from(bytes));
    Ok(resp)
}

/// The actual cost: the response's `Content-Length`; unknown without one.
fn content_length(head: &http::response::Parts) -> Option<u64> {
    head.headers
        .get(CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// One settle as a table cell.
fn describe(report: &SettleReport) -> String {
    match &report.result {
        Ok(_) if report.actual == report.reserved => "exact: nothing to give back".to_owned(),
        Ok(settled) if settled.decision.is_allowed() && report.actual < report.reserved => {
            format!("refund {}", report.reserved - report.actual)
        }
        Ok(settled) if settled.decision.is_allowed() => {
            format!("extra {} charged", report.actual - report.reserved)
        }
        Ok(settled) => {
            let wait = match settled.decision.retry_after() {
                Some(Wait::After(ns)) => format!("{:.3} s", ns as f64 / 1e9),
                _ => "never".to_owned(),
            };
            format!(
                "extra DENIED: {} unpaid (covered in {wait})",
                report.unpaid()
            )
        }
        Err(error) => format!("failed: {error}"),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let clock = ManualClock::new(0);
    let limiter: Arc<Limiter<String, ManualClock>> = Arc::new(
        Limiter::builder(Config::new(64 * 1024, Rate::per_second(8 * 1024))?)
            .clock(clock.clone())
            .build(),
    );
    // The layer hands each settle's report to `on_settle`; keep the last one to print it.
    let last: Arc<Mutex<Option<SettleReport>>> = Arc::default();
    let seen = Arc::clone(&last);
    let layer = RateLimitLayer::new(
        Arc::clone(&limiter),
        PolicyName::versioned("downloads", 1)?,
        |_| "tenant".to_owned(),
    )
    .unit(QuotaUnit::ContentBytes)
    .cost(|_| ESTIMATE)
    .settle(content_length)
    .on_settle(move |report| {
        *seen.lock().unwrap_or_else(|e| e.into_inner()) = Some(report.clone());
    });
    let mut service = layer.layer(tower::service_fn(sized));

    println!("estimate {ESTIMATE} bytes per request; quota 65536 bytes, +8192 per second\n");
    println!(
        "{:>5}  {:>6}  {:>6}  {:>6}  {:<50}{:>8}",
        "t (s)", "body", "status", "r", "settle", "balance"
    );
    let mut unpaid = 0;
    for body in [
        Some(1000),
        Some(8192),
        Some(30_000),
        Some(40_000),
        Some(2000),
        None,
        Some(500),
    ] {
        let now = clock.now();
        let mut req = Request::builder();
        if let Some(bytes) = body {
            req = req.header("x-bytes", bytes);
        }
        let resp = service.ready().await?.call(req.body(())?).await?;
        let r = resp
            .headers()
            .get(Profile::Draft11.limit_field())
            .and_then(|v| RateLimit::parse(Profile::Draft11, v.as_bytes()).ok())
            .map_or(0, |field| field.limits[0].remaining);
        let report = last.lock().unwrap_or_else(|e| e.into_inner()).take();
        let settle = match &report {
            Some(report) => {
                unpaid += report.unpaid();
                describe(report)
            }
            None => "none (no Content-Length): the estimate stays".to_owned(),
        };
        let balance = limiter.peek_at(&"tenant".to_owned(), now).remaining.whole();
        println!(
            "{:>5.2}  {:>6}  {:>6}  {r:>6}  {settle:<50}{balance:>8}",
            now as f64 / 1e9,
            body.map_or("?".to_owned(), |b| b.to_string()),
            resp.status().as_u16(),
        );
        clock.advance(STEP_NS);
    }
    println!("\nunpaid (used beyond what was charged): {unpaid} bytes");
    Ok(())
}
