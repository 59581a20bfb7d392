//! A pacing client: sends N requests to a server that speaks draft-11 RateLimit fields, waiting as the
//! fields and `Retry-After` say, and prints what it saw.
//!
//! ```text
//! cargo run -p bucketproof-headers --example server &
//! cargo run -p bucketproof-headers --example client -- http://127.0.0.1:3000/report 6
//! ```
//!
//! Against `DAILY_QUOTA=<n>` (two bandwidths) each response carries two items; the pacer waits until
//! both allow the next request, and each line names the binding item (the one the next request
//! waits for, or with nothing to wait for, the one that runs out first).

use std::time::{Duration, Instant};

use bucketproof_headers::client::{Pacer, PacerConfig, RequestInfo, RetryPolicy, send_paced};
use http::{HeaderMap, Method};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "http://127.0.0.1:3000/".to_owned());
    let count: u32 = args.next().and_then(|n| n.parse().ok()).unwrap_or(8);
    let cost = if url.ends_with("/report") { 3 } else { 1 };
    let client = reqwest::Client::new();
    let origin = Instant::now();
    let now = move || origin.elapsed().as_nanos() as u64;
    let mut pacer = Pacer::new(PacerConfig::default(), 2026);
    let no_headers = HeaderMap::new();
    for i in 1..=count {
        let result = send_paced(
            &mut pacer,
            RetryPolicy::default(),
            RequestInfo {
                method: &Method::GET,
                headers: &no_headers,
                cost,
            },
            now,
            |ns| tokio::time::sleep(Duration::from_nanos(ns)),
            || {
                let req = client
                    .get(&url)
                    .header("x-api-key", "example-client")
                    .send();
                async move {
                    let resp = req.await?;
                    let mut headers = HeaderMap::new();
                    for (k, v) in resp.headers() {
                        headers.append(k.clone(), v.clone());
                    }
                    Ok::<_, reqwest::Error>((resp.status(), headers, ()))
                }
            },
        )
        .await;
        let at = origin.elapsed().as_secs_f64();
        match result {
            Ok((status, headers, ())) => {
                let limit = headers
                    .get("ratelimit")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("-");
                let binding = pacer
                    .binding_for(cost, now())
                    .map_or("-".to_owned(), |l| l.name.to_string());
                println!("#{i} at {at:6.2} s: {status}  RateLimit: {limit}  binding: {binding}");
            }
            Err(e) => println!("#{i} at {at:6.2} s: {e}"),
        }
    }
    Ok(())
}
