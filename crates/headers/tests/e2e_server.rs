//! End to end: the example server on 127.0.0.1 (ephemeral port), a real HTTP client (reqwest), and the
//! fields checked as bytes on the wire.

#[allow(dead_code)]
#[path = "../examples/server.rs"]
mod server;

use std::time::{Duration, Instant};

use bucketproof_headers::client::{Pacer, PacerConfig, RequestInfo, RetryPolicy, send_paced};
use bucketproof_headers::key::MAX_KEY_LEN;
use bucketproof_headers::{Profile, RateLimit, RateLimitPolicy};
use bucketproof_limiter::{Bandwidth, Bandwidths, Config, Rate};
use http::{HeaderMap, Method, StatusCode};

const SECRET: &[u8] = b"e2e test secret, 32 bytes long!!";
const USER: &str = "alice@example.com";

async fn spawn(config: impl Into<Bandwidths>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = server::app(config, SECRET).unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    format!("http://{addr}")
}

fn assert_no_raw_id(headers: &reqwest::header::HeaderMap) {
    for (name, value) in headers {
        let v = String::from_utf8_lossy(value.as_bytes());
        assert!(
            !v.contains(USER) && !v.contains("alice"),
            "header {name} leaks the user id: {v}"
        );
    }
}

#[tokio::test]
async fn fields_on_the_wire_from_allow_to_429() {
    // 3 tokens, refill 1 per 1000 s: nothing refills during the test, so the sequence is exact.
    let base = spawn(Config::new(3, Rate::new(1, 1000).unwrap()).unwrap()).await;
    let client = reqwest::Client::new();
    let mut pk = None;
    for expected_r in [2u64, 1, 0] {
        let resp = client
            .get(format!("{base}/"))
            .header("x-api-key", USER)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let h = resp.headers();
        assert_no_raw_id(h);
        let policy = h["ratelimit-policy"].to_str().unwrap();
        let limit = h["ratelimit"].to_str().unwrap();
        // q = capacity, w = 3 tokens / (1/1000 per s) = 3000 s.
        assert!(
            policy.starts_with(r#""api.v1";q=3;w=3000;pk=:"#),
            "{policy}"
        );
        assert!(
            limit.starts_with(&format!(r#""api.v1";r={expected_r};t="#)),
            "{limit}"
        );
        let parsed = RateLimit::parse(Profile::Draft11, limit.as_bytes()).unwrap();
        assert_eq!(parsed.limits[0].remaining, expected_r);
        // A whole charge leaves only the refill since the start (1/1000 token per s): the next
        // token is just under 1000 s away, rounded up. A slow machine may shave off a few seconds.
        let t = parsed.limits[0].reset.unwrap();
        assert!((990..=1000).contains(&t), "t = {t}");
        let parsed_policy = RateLimitPolicy::parse(Profile::Draft11, policy.as_bytes()).unwrap();
        let this_pk = parsed_policy.policies[0].partition_key.clone().unwrap();
        assert_eq!(parsed.limits[0].partition_key.as_ref(), Some(&this_pk));
        if let Some(prev) = &pk {
            assert_eq!(prev, &this_pk, "pk is stable for one user");
        }
        pk = Some(this_pk);
    }
    let resp = client
        .get(format!("{base}/"))
        .header("x-api-key", USER)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    let h = resp.headers().clone();
    assert_no_raw_id(&h);
    assert_eq!(h["content-type"], "application/problem+json");
    let retry_after: u64 = h["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(
        (990..=1000).contains(&retry_after),
        "Retry-After {retry_after}"
    );
    let limit = RateLimit::parse(Profile::Draft11, h["ratelimit"].as_bytes()).unwrap();
    assert!(retry_after >= limit.limits[0].reset.unwrap());
    let body: serde_json::Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
    assert_eq!(
        body["type"],
        "https://iana.org/assignments/http-problem-types#quota-exceeded"
    );
    assert_eq!(body["violated-policies"], serde_json::json!(["api.v1"]));

    // Another user has their own bucket and a different pk.
    let resp = client
        .get(format!("{base}/"))
        .header("x-api-key", "bob@example.com")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let other = RateLimit::parse(Profile::Draft11, resp.headers()["ratelimit"].as_bytes()).unwrap();
    assert_ne!(other.limits[0].partition_key, pk);

    // A request costing more than the capacity can never pass: 413, not 429.
    let small = spawn(Config::new(2, Rate::per_second(1)).unwrap()).await;
    let resp = client
        .get(format!("{small}/report"))
        .header("x-api-key", USER)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert!(resp.headers().get("retry-after").is_none());
}

#[tokio::test]
async fn a_pacing_client_gets_no_429_over_the_wire() {
    // 2 tokens, 4 per second: the third request must wait for a token (t = 1 s after rounding up).
    let base = spawn(Config::new(2, Rate::per_second(4)).unwrap()).await;
    let client = reqwest::Client::new();
    let origin = Instant::now();
    let now = move || origin.elapsed().as_nanos() as u64;
    let config = PacerConfig {
        window_jitter: 0,
        ..PacerConfig::default()
    };
    let mut pacer = Pacer::new(config, 42);
    let no_headers = HeaderMap::new();
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let (status, _, ()) = send_paced(
            &mut pacer,
            RetryPolicy {
                max_attempts: 1, // any 429 would surface as an error
                deadline: 10_000_000_000,
            },
            RequestInfo {
                method: &Method::GET,
                headers: &no_headers,
                cost: 1,
            },
            now,
            |ns| tokio::time::sleep(Duration::from_nanos(ns)),
            || {
                let req = client
                    .get(format!("{base}/"))
                    .header("x-api-key", USER)
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
        .await
        .expect("the pacer never triggers a 429");
        statuses.push(status);
    }
    assert_eq!(statuses, vec![StatusCode::OK; 4]);
    // It did have to wait: two requests fit the burst, the rest waited for whole seconds of t.
    assert!(origin.elapsed() >= Duration::from_secs(1));
}

#[tokio::test]
async fn a_key_of_two_bandwidths_on_the_wire() {
    // A burst of 3 refilled 1 per 1000 s (nothing refills during the test) and 100 a day.
    let set = Bandwidths::new([
        Bandwidth::named(
            "burst",
            Config::new(3, Rate::new(1, 1000).unwrap()).unwrap(),
        )
        .unwrap(),
        Bandwidth::named("daily", Config::new(100, "100/d".parse().unwrap()).unwrap()).unwrap(),
    ])
    .unwrap();
    let base = spawn(set).await;
    let client = reqwest::Client::new();
    let get = || {
        client
            .get(format!("{base}/"))
            .header("x-api-key", USER)
            .send()
    };
    for expected in [(2u64, 99u64), (1, 98), (0, 97)] {
        let resp = get().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let h = resp.headers();
        assert_no_raw_id(h);
        let policy =
            RateLimitPolicy::parse(Profile::Draft11, h["ratelimit-policy"].as_bytes()).unwrap();
        let limit = RateLimit::parse(Profile::Draft11, h["ratelimit"].as_bytes()).unwrap();
        let wire: Vec<_> = policy
            .policies
            .iter()
            .map(|p| (p.name.as_str(), p.quota, p.window))
            .collect();
        assert_eq!(
            wire,
            [("burst", 3, Some(3000)), ("daily", 100, Some(86_400))]
        );
        let r: Vec<_> = limit.limits.iter().map(|l| l.remaining).collect();
        assert_eq!(r, [expected.0, expected.1]);
        // One token of the daily bandwidth each 864 s; of the burst each 1000 s.
        let t: Vec<_> = limit.limits.iter().map(|l| l.reset.unwrap()).collect();
        assert!(
            (990..=1000).contains(&t[0]) && (850..=864).contains(&t[1]),
            "t = {t:?}"
        );
        // One partition: the same pk on every item of both fields.
        let pk = &policy.policies[0].partition_key;
        assert!(pk.is_some());
        assert!(policy.policies.iter().all(|p| &p.partition_key == pk));
        assert!(limit.limits.iter().all(|l| &l.partition_key == pk));
    }
    let resp = get().await.unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry_after: u64 = resp.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    // The burst's wait; the daily bandwidth still covers the request and does not add to it.
    assert!(
        (990..=1000).contains(&retry_after),
        "Retry-After {retry_after}"
    );
    let body: serde_json::Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
    assert_eq!(body["violated-policies"], serde_json::json!(["burst"]));
}

/// The value of the sample `name` whose labels are exactly `labels`, in Prometheus text.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut want: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    want.sort();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (metric, rest) = series.split_once('{').unwrap_or((series, "}"));
            let mut got: Vec<String> = (rest.strip_suffix('}')?.split(','))
                .filter(|l| !l.is_empty())
                .map(str::to_owned)
                .collect();
            got.sort();
            (metric == name && got == want).then(|| value.parse().ok())?
        })
}

#[tokio::test]
async fn metrics_count_what_the_server_did() {
    // 3 tokens, refill 1 per 1000 s: three allowed, then a 429; another user allowed once.
    let base = spawn(Config::new(3, Rate::new(1, 1000).unwrap()).unwrap()).await;
    let client = reqwest::Client::new();
    let get = |user: &'static str| {
        client
            .get(format!("{base}/"))
            .header("x-api-key", user)
            .send()
    };
    for _ in 0..3 {
        assert_eq!(get(USER).await.unwrap().status(), StatusCode::OK);
    }
    assert_eq!(
        get(USER).await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        get("bob@example.com").await.unwrap().status(),
        StatusCode::OK
    );
    let scrape = || async {
        let resp = client.get(format!("{base}/metrics")).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        resp.text().await.unwrap()
    };
    // Scraping is not limited and not counted: the second scrape reads the same numbers.
    let first = scrape().await;
    let text = scrape().await;
    let limiter = |outcome| [("limiter", "api"), ("outcome", outcome)];
    let decisions = |outcome| sample(&text, "bucketproof_decisions_total", &limiter(outcome));
    assert_eq!(decisions("allowed"), Some(4.0), "{text}");
    assert_eq!(decisions("denied"), Some(1.0), "{text}");
    assert_eq!(decisions("error"), Some(0.0), "{text}");
    let keys = sample(&text, "bucketproof_live_keys", &[("limiter", "api")]);
    assert_eq!(keys, Some(2.0), "{text}");
    let table = sample(
        &text,
        "bucketproof_state_bytes",
        &[("limiter", "api"), ("part", "table")],
    );
    assert!(table.is_some_and(|bytes| bytes > 0.0), "{text}");
    // The token distribution: each live key in exactly one tenth (which one depends on the wall
    // clock between the requests and the scrape).
    let by_fill: f64 = [
        "0.0", "0.1", "0.2", "0.3", "0.4", "0.5", "0.6", "0.7", "0.8", "0.9", "1.0",
    ]
    .iter()
    .map(|fill| {
        let labels = [("limiter", "api"), ("fill", *fill)];
        sample(&text, "bucketproof_keys_by_fill", &labels).unwrap_or_else(|| panic!("{text}"))
    })
    .sum();
    assert_eq!(by_fill, 2.0, "{text}");
    assert_eq!(
        sample(&first, "bucketproof_decisions_total", &limiter("allowed")),
        Some(4.0)
    );
    #[cfg(feature = "metrics")]
    {
        let responses = |status| {
            let labels = [("policy", "api.v1"), ("status", status)];
            sample(&text, "bucketproof_http_responses_total", &labels)
        };
        assert_eq!(responses("429"), Some(1.0), "{text}");
        assert_eq!(responses("200"), Some(4.0), "{text}");
        let policy = [("policy", "api.v1")];
        // q=3 and w=3000 on the wire, and the bandwidth that decided: 3 tokens, 3000 s from empty.
        let gauge = |name| sample(&text, name, &policy);
        assert_eq!(gauge("bucketproof_http_advertised_quota"), Some(3.0));
        assert_eq!(gauge("bucketproof_http_enforced_capacity"), Some(3.0));
        assert_eq!(
            gauge("bucketproof_http_advertised_window_seconds"),
            Some(3000.0)
        );
        assert_eq!(
            gauge("bucketproof_http_enforced_window_seconds"),
            Some(3000.0)
        );
        let degraded = [("policy", "api.v1"), ("status", "200")];
        assert_eq!(
            sample(
                &text,
                "bucketproof_http_degraded_responses_total",
                &degraded
            ),
            None,
            "no fallback decided"
        );
    }
}

/// `RateLimit`'s `r` of a response, or `None` without the field.
fn remaining(resp: &reqwest::Response) -> Option<u64> {
    let field = resp.headers().get("ratelimit")?;
    let parsed = RateLimit::parse(Profile::Draft11, field.as_bytes()).ok()?;
    Some(parsed.limits[0].remaining)
}

/// Every malformed key (UTF-8 beyond ASCII, bytes that are no text, a blank value, one byte over
/// the maximum, the header twice) is refused on the wire with its 4xx problem, more often than a
/// bucket holds, and none of them spends a bucket: afterwards the anonymous bucket (no header) and
/// a well-formed key's are still full.
#[tokio::test]
async fn malformed_keys_are_refused_and_spend_no_bucket() {
    const CAPACITY: u64 = 3;
    let base = spawn(Config::new(CAPACITY, Rate::new(1, 1000).unwrap()).unwrap()).await;
    let client = reqwest::Client::new();
    let too_long = vec![b'k'; MAX_KEY_LEN + 1];
    let one = |v: &[u8]| vec![reqwest::header::HeaderValue::from_bytes(v).unwrap()];
    let cases = [
        ("café", one("café".as_bytes()), StatusCode::BAD_REQUEST),
        ("\\xff\\xfe", one(b"\xff\xfe"), StatusCode::BAD_REQUEST),
        ("blank", one(b""), StatusCode::BAD_REQUEST),
        (
            "over-long",
            one(&too_long),
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        ),
        (
            "twice",
            [one(b"alice"), one(b"bob")].concat(),
            StatusCode::BAD_REQUEST,
        ),
    ];
    for (case, values, status) in cases {
        // One more than a bucket holds: had they shared one, the last would be a 429.
        for _ in 0..=CAPACITY {
            let mut req = client.get(format!("{base}/"));
            for v in &values {
                req = req.header("x-api-key", v.clone());
            }
            let resp = req.send().await.unwrap();
            assert_eq!(resp.status(), status, "{case}");
            assert_eq!(resp.headers()["content-type"], "application/problem+json");
            assert_eq!(remaining(&resp), None, "{case}: no decision, no field");
            let body: serde_json::Value =
                serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
            assert_eq!(body["status"], status.as_u16(), "{case}");
        }
    }
    let anonymous = client.get(format!("{base}/")).send().await.unwrap();
    assert_eq!(
        remaining(&anonymous),
        Some(CAPACITY - 1),
        "the anonymous bucket"
    );
    let resp = client.get(format!("{base}/")).header("x-api-key", USER);
    let resp = resp.send().await.unwrap();
    assert_eq!(
        remaining(&resp),
        Some(CAPACITY - 1),
        "a well-formed key's bucket"
    );
}
