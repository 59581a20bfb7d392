//! An axum server limited by bucketproof, speaking draft-11 RateLimit fields. Run it and curl it:
//!
//! ```text
//! cargo run -p bucketproof-headers --example server          # listens on 127.0.0.1:3000 (PORT=...)
//! curl -i -H 'x-api-key: alice' http://127.0.0.1:3000/       # cost 1
//! curl -i -H 'x-api-key: alice' http://127.0.0.1:3000/report # cost 3
//! ```
//!
//! Each API key gets 5 requests of burst refilled at 1 per second (policy `"api.v1"`). Responses carry
//! `RateLimit-Policy` and `RateLimit` with `pk`, the keyed hash of the API key (the key itself never
//! appears in a response); a denial is a 429 with `Retry-After` and a problem+json body.
//!
//! The key is read by the library's [`HeaderKey`]: 1 to 256 visible ASCII bytes
//! ([`bucketproof_headers::key::MAX_KEY_LEN`]), kept in the limiter as a 16-byte keyed digest, so a
//! flood of fresh keys costs the same memory whatever their length. A longer key is a 431, a key
//! that is empty, not visible ASCII (`café`) or sent twice is a 400, each with a problem+json body
//! and without touching any bucket. Requests with no `x-api-key` at all share one anonymous bucket
//! (a choice of this example: the library refuses them unless asked).
//!
//! ```text
//! curl -i http://127.0.0.1:3000/                             # the anonymous bucket
//! curl -i -H 'x-api-key: café' http://127.0.0.1:3000/        # 400, no bucket spent
//! ```
//!
//! With `DAILY_QUOTA=<n>` each key also gets `n` requests a day: two bandwidths, `"burst"` and
//! `"daily"`, both of which must cover a request. Responses then carry one item per bandwidth in each
//! field, and a denial's `Retry-After` waits for both:
//!
//! ```text
//! DAILY_QUOTA=20 cargo run -p bucketproof-headers --example server
//! RateLimit-Policy: "burst";q=5;w=5;pk=:...:, "daily";q=20;w=86400;pk=:...:
//! RateLimit: "burst";r=4;t=1;pk=:...:, "daily";r=19;t=4320;pk=:...:
//! ```
//!
//! With `DATABASE_URL=<postgres URL>` and the feature `postgres` of this crate, the buckets live in
//! PostgreSQL (namespace `bucketproof_example`, created on first start), so every server started on
//! the same database shares each key's quota (with `DAILY_QUOTA`, both bandwidths; every server
//! must be started with the same limits, or a key's row is refused as on another config: 503).
//! While PostgreSQL is unreachable the server fails closed: 503, never a made-up 429. Built without
//! the feature, the server says that it ignores `DATABASE_URL` and limits in memory.
//!
//! ```text
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/app PORT=3000 cargo run -p bucketproof-headers --features postgres --example server
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/app PORT=3001 cargo run -p bucketproof-headers --features postgres --example server
//! curl -i -H 'x-api-key: alice' http://127.0.0.1:3000/       # both ports draw on alice's one bucket
//! ```
//!
//! `GET /metrics` (not rate-limited) serves Prometheus text: the limiter's counters
//! (`bucketproof_decisions_total{outcome}`, `bucketproof_live_keys`, evictions, state bytes, lock
//! contention; `bucketproof-metrics`, read from the limiter's own snapshot just before rendering,
//! labelled `limiter="api"`; none on PostgreSQL, whose limiter publishes no counters) and, with the
//! feature `metrics` of this crate, the layer's own (`bucketproof_http_responses_total{status}`, the
//! advertised next to the enforced limits):
//!
//! ```text
//! cargo run -p bucketproof-headers --features metrics --example server
//! curl -s http://127.0.0.1:3000/metrics | grep '^bucketproof_'
//! ```
//!
//! The partition-key secret comes from `BUCKETPROOF_PK_SECRET` (at least 16 bytes). Without it the
//! example uses a fixed demo secret and says so: never do that in production.
//!
//! The end-to-end test includes this file and calls [`app`] on an ephemeral loopback port.

use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use bucketproof_headers::PolicyName;
use bucketproof_headers::key::{HeaderKey, KeyDigest};
use bucketproof_headers::layer::RateLimitLayer;
use bucketproof_headers::pk::{PartitionKeyHasher, WeakSecret};
use bucketproof_headers::source::DecisionSource;
use bucketproof_limiter::{Bandwidth, Bandwidths, Config, Limiter, Rate};
use bucketproof_metrics::{Publisher, keyed::WithFillLevels};
use http::HeaderName;
use metrics_exporter_prometheus::PrometheusBuilder;

/// Used only when `BUCKETPROOF_PK_SECRET` is unset; printed as a warning.
const DEMO_SECRET: &[u8] = b"bucketproof demo secret: replace me";

/// The PostgreSQL schema of the example's buckets (with `DATABASE_URL` and the feature `postgres`).
#[cfg(feature = "postgres")]
const NAMESPACE: &str = "bucketproof_example";

/// The API key a request is limited under: the digest of `x-api-key`, or, without the header, one
/// shared anonymous bucket; any other key is refused with its 4xx.
fn api_key(secret: &[u8]) -> Result<HeaderKey, WeakSecret> {
    Ok(HeaderKey::new(HeaderName::from_static("x-api-key"), secret)?.anonymous())
}

/// `/report` is three times as expensive as anything else.
fn cost(parts: &http::request::Parts) -> u64 {
    if parts.uri.path() == "/report" { 3 } else { 1 }
}

/// The application on the in-memory limiter: two routes behind the rate-limit layer, each key
/// limited by `limit` (a [`Config`], or a [`Bandwidths`] set), and `/metrics` outside it, with the
/// limiter's counters.
pub fn app(
    limit: impl Into<Bandwidths>,
    secret: &[u8],
) -> Result<Router, Box<dyn std::error::Error>> {
    let limiter: Arc<Limiter<KeyDigest>> = Arc::new(Limiter::new(limit));
    // With the token distribution: a scan of the keys per scrape, never per decision.
    let publisher = Publisher::new().add("api", Arc::new(WithFillLevels(Arc::clone(&limiter))));
    routes(limiter, publisher, secret)
}

/// The routes behind the layer on `source`, and `/metrics` outside it, serving what `publisher`
/// reads and the layer records.
///
/// Each app has its own Prometheus recorder (not the process's global one), so two apps in one
/// process (the end-to-end tests) count apart.
fn routes(
    source: impl DecisionSource<KeyDigest> + 'static,
    publisher: Publisher,
    secret: &[u8],
) -> Result<Router, Box<dyn std::error::Error>> {
    let recorder = Arc::new(PrometheusBuilder::new().build_recorder());
    let handle = recorder.handle();
    metrics::with_local_recorder(recorder.as_ref(), || publisher.describe());
    let layer = RateLimitLayer::keyed(source, PolicyName::versioned("api", 1)?, api_key(secret)?)
        .cost(cost)
        .partition_keys(PartitionKeyHasher::new(secret)?);
    #[cfg(feature = "metrics")]
    let layer = layer.metrics_recorder(recorder.clone());
    // Read the limiter's counters into the recorder, then render everything it holds.
    let scrape = move || async move {
        metrics::with_local_recorder(recorder.as_ref(), || publisher.publish());
        handle.render()
    };
    Ok(Router::new()
        .route("/", get(|| async { "hello\n" }))
        .route("/report", get(|| async { "an expensive report\n" }))
        // Routes added after `layer` are not limited: a scrape spends no one's quota.
        .layer(layer)
        .route("/metrics", get(scrape)))
}

/// The application on a `PgLimiter` at `url` (`DATABASE_URL`): the routes of [`app`], each key
/// limited by `limit` in the one row every server on the namespace shares. `/metrics` has the
/// layer's numbers only (feature `metrics`): the limiter publishes none.
#[cfg(feature = "postgres")]
async fn on_postgres(
    url: &str,
    limit: Bandwidths,
    secret: &[u8],
) -> Result<Router, Box<dyn std::error::Error>> {
    let limiter = bucketproof_postgres::PgLimiter::builder(limit)
        .namespace(NAMESPACE)
        .connect(url)
        .await?;
    // Not the URL: it may hold a password.
    println!(
        "limits in PostgreSQL, namespace {NAMESPACE}: shared by every server on this database"
    );
    routes(limiter, Publisher::new(), secret)
}

/// Without the feature `postgres` there is no PostgreSQL source: say so, and limit in memory
/// rather than refuse to start.
#[cfg(not(feature = "postgres"))]
async fn on_postgres(
    _url: &str,
    limit: Bandwidths,
    secret: &[u8],
) -> Result<Router, Box<dyn std::error::Error>> {
    eprintln!(
        "warning: DATABASE_URL is set but ignored: built without the feature postgres \
         (cargo run -p bucketproof-headers --features postgres --example server); limits in memory"
    );
    app(limit, secret)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let secret = match std::env::var("BUCKETPROOF_PK_SECRET") {
        Ok(s) => s.into_bytes(),
        Err(_) => {
            eprintln!("warning: BUCKETPROOF_PK_SECRET unset, using the public demo secret");
            DEMO_SECRET.to_vec()
        }
    };
    let port: u16 = std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(3000);
    let burst = Config::new(5, Rate::per_second(1))?;
    let limit = match std::env::var("DAILY_QUOTA") {
        Ok(daily) => {
            let daily: u64 = daily.parse()?;
            Bandwidths::new([
                Bandwidth::named("burst", burst)?,
                Bandwidth::named("daily", Config::new(daily, Rate::new(daily, 86_400)?)?)?,
            ])?
        }
        Err(_) => burst.into(),
    };
    let router = match std::env::var("DATABASE_URL") {
        Ok(url) => on_postgres(&url, limit, &secret).await?,
        Err(_) => app(limit, &secret)?,
    };
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, router).await?;
    Ok(())
}
