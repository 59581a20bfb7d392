//! Memory per client key through the example server's stack: what a flood of fresh keys costs the
//! process, measured as its resident set (`VmRSS`), against what `bucketproof_state_bytes` says.
//!
//! Its own test binary, so no other test's allocations move the figure; the two tests here take a
//! lock so they never run at the same time either. Each one fails as soon as the growth passes its
//! bound, so a regression stops after a few hundred megabytes at most, never after the whole flood.

#[allow(dead_code)]
#[path = "../examples/server.rs"]
mod server;

use std::sync::Mutex;

use axum::Router;
use axum::body::Body;
use bucketproof_headers::key::MAX_KEY_LEN;
use bucketproof_limiter::{Config, Rate};
use http::{HeaderValue, Request, StatusCode};
use http_body_util::BodyExt;
use tower::ServiceExt;

const SECRET: &[u8] = b"key memory test secret, 32 bytes";

/// Fresh keys per flood.
const REQUESTS: usize = 30_000;

/// The bound on the resident set's growth over one flood.
const MAX_GROWTH: u64 = 20 << 20;

/// How often, in requests, the resident set is read.
const CHECK_EVERY: usize = 500;

/// Keeps the two floods apart: each measures the process alone.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs `test` alone (no other flood of this binary at the same time) on a runtime of its own.
fn alone(test: impl std::future::Future<Output = ()>) {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    runtime.expect("a runtime").block_on(test);
}

/// The process's resident set in bytes (`VmRSS` of /proc/self/status, in kB).
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = (status.lines())
        .find(|l| l.starts_with("VmRSS:"))
        .expect("a VmRSS line");
    let kb: u64 = (line.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .expect("VmRSS in kB");
    kb * 1024
}

/// What one flood did: the resident set's growth and every response's status.
struct Flood {
    growth: u64,
    statuses: Vec<StatusCode>,
}

/// Sends [`REQUESTS`] requests to `app`, each with a fresh `x-api-key` of `len` bytes (visible
/// ASCII: its number in hex, then `k`s), and fails as soon as the resident set has grown by more
/// than [`MAX_GROWTH`].
async fn flood(app: &Router, len: usize) -> Flood {
    let mut key = vec![b'k'; len];
    let before = rss();
    let mut statuses = Vec::with_capacity(REQUESTS);
    for i in 0..REQUESTS {
        let id = format!("{i:08x}");
        key[..id.len()].copy_from_slice(id.as_bytes());
        let value = HeaderValue::from_bytes(&key).expect("a visible ASCII value");
        let request = Request::builder()
            .uri("/")
            .header("x-api-key", value)
            .body(Body::empty())
            .expect("a request");
        let response = app.clone().oneshot(request).await.expect("infallible");
        statuses.push(response.status());
        if (i + 1) % CHECK_EVERY == 0 {
            let growth = rss().saturating_sub(before);
            assert!(
                growth <= MAX_GROWTH,
                "{} fresh {len}-byte keys grew the resident set by {:.1} MB (bound {} MB)",
                i + 1,
                growth as f64 / 1e6,
                MAX_GROWTH >> 20
            );
        }
    }
    Flood {
        growth: rss().saturating_sub(before),
        statuses,
    }
}

/// A sample of the example's `/metrics`: `name{labels}` (labels in the recorder's order).
async fn metric(app: &Router, series: &str) -> f64 {
    let request = Request::builder().uri("/metrics").body(Body::empty());
    let response = (app.clone().oneshot(request.expect("a request")).await).expect("infallible");
    let body = response.into_body().collect().await.expect("a body");
    let text = String::from_utf8(body.to_bytes().to_vec()).expect("UTF-8");
    (text.lines())
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

/// 5 tokens, one more per 1000 s: no bucket is full again during a flood, so none is swept and
/// every key stays live.
fn config() -> Config {
    Config::new(5, Rate::new(1, 1000).expect("a rate")).expect("a config")
}

const TABLE_BYTES: &str = r#"bucketproof_state_bytes{limiter="api",part="table"}"#;

/// 30,000 fresh 90 KB keys (hyper accepts header values that long) are refused before they reach
/// the limiter: each a 431, nothing kept, so the resident set barely moves.
#[test]
fn ninety_kilobyte_keys_are_refused_and_cost_no_memory() {
    alone(ninety_kilobyte_keys());
}

async fn ninety_kilobyte_keys() {
    let app = server::app(config(), SECRET).expect("the example app");
    let flood = flood(&app, 90 * 1024).await;
    let refused = (flood.statuses.iter())
        .filter(|s| **s == StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)
        .count();
    assert_eq!(refused, REQUESTS, "every over-long key is a 431");
    assert_eq!(
        metric(&app, r#"bucketproof_live_keys{limiter="api"}"#).await,
        0.0
    );
    eprintln!("90 KB keys: RSS +{:.1} MB", flood.growth as f64 / 1e6);
}

/// 30,000 fresh keys of the longest accepted length are each admitted into a bucket of their own,
/// and cost the process no more than the key table `bucketproof_state_bytes` reports (plus a
/// little): the limiter keeps a fixed-size digest per key, never the key's text.
#[test]
fn keys_of_the_longest_accepted_length_cost_what_state_bytes_says() {
    alone(keys_of_the_longest_accepted_length());
}

async fn keys_of_the_longest_accepted_length() {
    let app = server::app(config(), SECRET).expect("the example app");
    let table_before = metric(&app, TABLE_BYTES).await;
    let flood = flood(&app, MAX_KEY_LEN).await;
    let refused: Vec<_> = (flood.statuses.iter().enumerate())
        .filter(|(_, s)| **s != StatusCode::OK)
        .collect();
    assert!(
        refused.is_empty(),
        "{} refused, first {:?}",
        refused.len(),
        refused.first()
    );
    assert_eq!(
        metric(&app, r#"bucketproof_live_keys{limiter="api"}"#).await,
        REQUESTS as f64
    );
    let table = metric(&app, TABLE_BYTES).await - table_before;
    // What the process allocates besides the key table: the router's and recorder's caches,
    // allocator slack. Far below what the keys' text would be (REQUESTS * MAX_KEY_LEN bytes).
    let slack = (REQUESTS * MAX_KEY_LEN / 2) as f64;
    eprintln!(
        "{MAX_KEY_LEN}-byte keys: RSS +{:.1} MB, table +{:.1} MB",
        flood.growth as f64 / 1e6,
        table / 1e6
    );
    assert!(
        flood.growth as f64 <= table + slack,
        "RSS grew by {} bytes, the table by {table}",
        flood.growth
    );
}
