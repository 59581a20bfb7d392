//! Conformance with draft-ietf-httpapi-ratelimit-headers-11 (an Internet-Draft, not an RFC).
//!
//! One test per MUST / SHOULD that applies to us, named after the section that states it, so a
//! failure reads as the requirement it breaks. Requirements on values we *send* go through the real
//! tower layer (`tower::ServiceExt::oneshot`); requirements on what a client *reads* go through the
//! field parsers and the `Pacer`.

mod common;
use common::{exact_pacer, headers};
use std::convert::Infallible;
use std::sync::Mutex;

use bucketproof_headers::client::{Pacer, PacerConfig};
use bucketproof_headers::field::{combine_lines, strip_from_trailers};
use bucketproof_headers::layer::{DEGRADED_HEADER, RateLimitLayer};
use bucketproof_headers::merge::{Fields, merge, merge_headers};
use bucketproof_headers::pk::PartitionKeyHasher;
use std::future::Future;

use bucketproof_headers::source::{DecisionSource, Outcome, SourceError};
use bucketproof_headers::{
    FieldError, PolicyName, Profile, QuotaPolicy, QuotaUnit, RateLimit, RateLimitPolicy,
    ServiceLimit,
};
use bucketproof_limiter::{Config, Limiter, ManualClock, Rate};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use tower::{Layer, Service, ServiceExt};

const P: Profile = Profile::Draft11;
const S: u64 = 1_000_000_000;

fn name(s: &str) -> PolicyName {
    PolicyName::new(s).unwrap()
}

/// The inner application: always 200 "ok".
async fn ok(_: Request<()>) -> Result<Response<String>, Infallible> {
    Ok(Response::new("ok".to_owned()))
}

fn manual_limiter(capacity: u64, rate: Rate) -> Limiter<String, ManualClock> {
    Limiter::builder(Config::new(capacity, rate).unwrap())
        .clock(ManualClock::new(S))
        .build()
}

async fn call<S>(svc: &mut S, user: &'static str) -> Response<String>
where
    S: Service<Request<()>, Response = Response<String>, Error = Infallible>,
{
    let req = Request::builder().header("x-user", user).body(()).unwrap();
    svc.ready().await.unwrap().call(req).await.unwrap()
}

fn user_key(parts: &http::request::Parts) -> String {
    parts.headers["x-user"].to_str().unwrap().to_owned()
}

// ---------------------------------------------------------------------------------------------
// Section 3: RateLimit-Policy Field

#[test]
fn s3_policy_field_must_be_a_non_empty_list() {
    assert_eq!(RateLimitPolicy::parse(P, b""), Err(FieldError::Empty));
    let empty = RateLimitPolicy { policies: vec![] };
    assert_eq!(empty.serialize(P), Err(FieldError::Empty));
}

#[test]
fn s3_policy_item_value_must_be_a_string() {
    assert!(matches!(
        RateLimitPolicy::parse(P, b"burst;q=100;w=60"),
        Err(FieldError::NotAString { index: 0 })
    ));
    assert!(matches!(
        RateLimitPolicy::parse(P, b"100;w=60"),
        Err(FieldError::NotAString { index: 0 })
    ));
    assert!(RateLimitPolicy::parse(P, br#""burst";q=100;w=60"#).is_ok());
}

#[test]
fn s3_policy_lists_split_over_multiple_fields_are_combined() {
    let h = headers(&[
        ("ratelimit-policy", r#""burst";q=100;w=60"#),
        ("ratelimit-policy", r#""daily";q=1000;w=86400"#),
    ]);
    let p = RateLimitPolicy::from_headers(P, &h).unwrap();
    assert_eq!(p.policies.len(), 2);
    assert_eq!(p.policies[1].name.as_str(), "daily");
    assert_eq!(p.policies[1].window, Some(86400));
    // Blank lines add nothing rather than breaking the list.
    assert_eq!(combine_lines([&b"a"[..], b"  ", b"b"]), b"a, b".to_vec());
}

#[test]
fn s3_1_other_parameters_are_comments() {
    let p =
        RateLimitPolicy::parse(P, br#""sliding";q=100;w=60;burst=1000;acme-policy="x""#).unwrap();
    assert_eq!(p.policies[0].quota, 100);
    let l = RateLimit::parse(P, br#""sliding";r=50;t=44;acme-burst=?1"#).unwrap();
    assert_eq!(l.limits[0].remaining, 50);
}

#[test]
fn s3_1_policy_must_not_appear_in_a_trailer_section() {
    let mut trailers = headers(&[("ratelimit-policy", r#""a";q=1"#), ("x-checksum", "1")]);
    assert_eq!(strip_from_trailers(P, &mut trailers), 1);
    assert!(RateLimitPolicy::from_headers(P, &trailers).is_none());
}

#[test]
fn s3_1_1_quota_is_required_and_must_be_a_non_negative_integer() {
    for bad in [
        &br#""a";w=1"#[..],
        br#""a";q=-1"#,
        br#""a";q=1.5"#,
        br#""a";q="1""#,
        br#""a";q=?1"#,
    ] {
        assert!(RateLimitPolicy::parse(P, bad).is_err());
    }
    assert_eq!(
        RateLimitPolicy::parse(P, br#""a";q=0"#).unwrap().policies[0].quota,
        0
    );
}

#[test]
fn s3_1_2_quota_unit_must_be_a_string_and_defaults_to_requests() {
    let p = RateLimitPolicy::parse(P, br#""a";q=1"#).unwrap();
    assert_eq!(p.policies[0].unit, QuotaUnit::Requests);
    assert!(RateLimitPolicy::parse(P, br#""a";q=1;qu=content-bytes"#).is_err());
    let p = RateLimitPolicy::parse(
        P,
        br#""a";q=1;qu="content-bytes", "b";q=1;qu="concurrent-requests", "c";q=1;qu="acme-units""#,
    )
    .unwrap();
    assert_eq!(p.policies[0].unit, QuotaUnit::ContentBytes);
    assert_eq!(p.policies[1].unit, QuotaUnit::ConcurrentRequests);
    assert_eq!(p.policies[2].unit, QuotaUnit::Other("acme-units".into()));
}

#[test]
fn s10_3_registry_spelling_request_is_the_default_unit() {
    let p = RateLimitPolicy::parse(P, br#""a";q=1;qu="request""#).unwrap();
    assert_eq!(p.policies[0].unit, QuotaUnit::Requests);
}

#[test]
fn s3_1_3_window_must_be_a_non_zero_integer_of_seconds() {
    assert!(RateLimitPolicy::parse(P, br#""a";q=1;w=0"#).is_err());
    assert!(RateLimitPolicy::parse(P, br#""a";q=1;w=-3"#).is_err());
    assert!(RateLimitPolicy::parse(P, br#""a";q=1;w=1.5"#).is_err());
    let bad = RateLimitPolicy {
        policies: vec![QuotaPolicy {
            name: name("a"),
            quota: 1,
            unit: QuotaUnit::Requests,
            window: Some(0),
            partition_key: None,
        }],
    };
    assert!(bad.serialize(P).is_err(), "we never send w=0");
}

#[test]
fn s3_1_4_partition_key_must_be_a_byte_sequence() {
    assert!(RateLimitPolicy::parse(P, br#""a";q=1;pk="abc""#).is_err());
    let p = RateLimitPolicy::parse(P, br#""peruser";q=100;w=60;pk=:cHsdsRa894==:"#).unwrap();
    assert!(p.policies[0].partition_key.is_some());
}

// ---------------------------------------------------------------------------------------------
// Section 4: RateLimit Field

#[test]
fn s4_limit_lists_split_over_multiple_fields_are_combined() {
    let h = headers(&[("ratelimit", r#""a";r=1;t=2"#), ("ratelimit", r#""b";r=3"#)]);
    let l = RateLimit::from_headers(P, &h).unwrap();
    assert_eq!(l.limits.len(), 2);
    assert_eq!(l.limits[1].reset, None);
}

#[test]
fn s4_1_remaining_is_required_and_must_be_a_non_negative_integer() {
    for bad in [
        &br#""a";t=1"#[..],
        br#""a";r=-1"#,
        br#""a";r=1.5"#,
        br#""a";r="1""#,
    ] {
        assert!(RateLimit::parse(P, bad).is_err());
    }
}

#[test]
fn s4_1_limit_must_not_appear_in_a_trailer_section() {
    let mut trailers = headers(&[("ratelimit", r#""a";r=1000"#)]);
    assert_eq!(strip_from_trailers(P, &mut trailers), 1);
    assert!(RateLimit::from_headers(P, &trailers).is_none());
}

#[test]
fn s4_1_2_effective_window_must_be_a_non_negative_integer() {
    assert!(RateLimit::parse(P, br#""a";r=1;t=-1"#).is_err());
    assert!(RateLimit::parse(P, br#""a";r=1;t=0.5"#).is_err());
    assert_eq!(
        RateLimit::parse(P, br#""a";r=1;t=0"#).unwrap().limits[0].reset,
        Some(0)
    );
}

#[test]
fn s4_1_3_partition_key_must_be_a_byte_sequence() {
    assert!(RateLimit::parse(P, br#""a";r=1;pk=token"#).is_err());
    assert!(RateLimit::parse(P, br#""default";r=999;pk=:dHJpYWwxMjEzMjM=:"#).is_ok());
}

// ---------------------------------------------------------------------------------------------
// Section 5 and 6: what the server sends

#[tokio::test]
async fn s5_1_quota_exceeded_problem_lists_the_violated_policy() {
    let limiter = manual_limiter(1, Rate::per_second(1));
    let layer = RateLimitLayer::new(limiter, name("api.v1"), user_key);
    let mut svc = layer.layer(tower::service_fn(ok));
    assert_eq!(call(&mut svc, "u1").await.status(), StatusCode::OK);
    let denied = call(&mut svc, "u1").await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.headers()["content-type"], "application/problem+json");
    let body: serde_json::Value = serde_json::from_str(denied.body()).unwrap();
    assert_eq!(
        body["type"],
        "https://iana.org/assignments/http-problem-types#quota-exceeded"
    );
    assert_eq!(body["violated-policies"], serde_json::json!(["api.v1"]));
    assert_eq!(body["status"], 429);
}

#[tokio::test]
async fn s6_retry_after_is_not_earlier_than_the_effective_window_and_never_zero() {
    // Cost 3 of 3 at 1 token per 2 s; a denial of cost 3 with ~0 left.
    let limiter = manual_limiter(3, Rate::new(1, 2).unwrap());
    let layer = RateLimitLayer::new(limiter, name("api.v1"), user_key).cost(|_| 3);
    let mut svc = layer.layer(tower::service_fn(ok));
    assert_eq!(call(&mut svc, "u").await.status(), StatusCode::OK);
    let denied = call(&mut svc, "u").await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    let ra: u64 = denied.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let limit = RateLimit::from_headers(P, denied.headers()).unwrap();
    let t = limit.limits[0].reset.unwrap();
    assert_eq!(t, 2, "next whole token in 2 s");
    assert_eq!(ra, 6, "3 tokens at 1 per 2 s");
    assert!(ra >= t && ra > 0);
}

#[tokio::test]
async fn s6_available_quota_to_window_ratio_is_capped() {
    // 10000 per 1000 s (Section 8.5's example): r/t would invite a burst; cap the ratio at 5/s.
    let limiter = manual_limiter(10_000, Rate::per_second(10));
    let layer = RateLimitLayer::new(limiter, name("big.v1"), user_key).max_ratio(5);
    let mut svc = layer.layer(tower::service_fn(ok));
    let resp = call(&mut svc, "u").await;
    let limit = RateLimit::from_headers(P, resp.headers()).unwrap();
    let l = &limit.limits[0];
    assert_eq!(l.reset, Some(1));
    assert!(l.remaining <= 5 * l.reset.unwrap().max(1), "{l:?}");
    let policy = RateLimitPolicy::from_headers(P, resp.headers()).unwrap();
    assert_eq!(policy.policies[0].quota, 10_000);
    assert_eq!(policy.policies[0].window, Some(1000));
}

#[tokio::test]
async fn s6_1_partition_keys_carry_no_sensitive_information() {
    let limiter = manual_limiter(5, Rate::per_second(1));
    let hasher = PartitionKeyHasher::new(b"a server secret of decent length").unwrap();
    let layer = RateLimitLayer::new(limiter, name("api.v1"), user_key).partition_keys(hasher);
    let mut svc = layer.layer(tower::service_fn(ok));
    let resp = call(&mut svc, "carol@example.com").await;
    for (_, v) in resp.headers() {
        let v = String::from_utf8_lossy(v.as_bytes());
        assert!(!v.contains("carol"), "{v}");
    }
    let limit = RateLimit::from_headers(P, resp.headers()).unwrap();
    let pk = limit.limits[0].partition_key.clone().unwrap();
    assert!(!pk.windows(5).any(|w| w == b"carol"));
    assert_eq!(pk.len(), 16);
}

#[tokio::test]
async fn s6_fields_are_sent_on_success_unless_disabled() {
    let layer = RateLimitLayer::new(manual_limiter(5, Rate::per_second(1)), name("a"), user_key)
        .emit_on_success(false);
    let mut svc = layer.layer(tower::service_fn(ok));
    let resp = call(&mut svc, "u").await;
    assert!(resp.headers().get("ratelimit").is_none());
    let layer = RateLimitLayer::new(manual_limiter(5, Rate::per_second(1)), name("a"), user_key);
    let mut svc = layer.layer(tower::service_fn(ok));
    let resp = call(&mut svc, "u").await;
    assert_eq!(resp.headers()["ratelimit"], r#""a";r=4;t=1"#);
    assert_eq!(resp.headers()["ratelimit-policy"], r#""a";q=5;w=5"#);
}

#[tokio::test]
async fn s6_redirections_carry_no_fields_unless_asked() {
    async fn redirect(_: Request<()>) -> Result<Response<String>, Infallible> {
        let mut r = Response::new(String::new());
        *r.status_mut() = StatusCode::MOVED_PERMANENTLY;
        r.headers_mut()
            .insert("location", HeaderValue::from_static("/foo/123"));
        Ok(r)
    }
    let layer = RateLimitLayer::new(manual_limiter(1, Rate::per_second(1)), name("a"), user_key);
    let mut svc = layer.layer(tower::service_fn(redirect));
    let resp = call(&mut svc, "u").await;
    assert_eq!(resp.status(), StatusCode::MOVED_PERMANENTLY);
    assert!(
        resp.headers().get("ratelimit").is_none(),
        "r=0 would stall the redirect"
    );
    let layer = RateLimitLayer::new(manual_limiter(1, Rate::per_second(1)), name("a"), user_key)
        .emit_on_redirect(true);
    let mut svc = layer.layer(tower::service_fn(redirect));
    let resp = call(&mut svc, "u").await;
    assert_eq!(resp.headers()["ratelimit"], r#""a";r=0;t=1"#);
}

/// A store that is down (fail closed) or answering from a fallback budget (degraded).
struct FlakyStore {
    inner: Limiter<String, ManualClock>,
    mode: Mutex<&'static str>,
}

impl DecisionSource<String> for FlakyStore {
    fn decide<'a>(
        &'a self,
        key: &'a String,
        cost: u64,
    ) -> impl Future<Output = Result<Outcome, SourceError>> + Send + 'a {
        let mode = *self.mode.lock().unwrap();
        async move {
            match mode {
                "down" => Err(SourceError::Unavailable("connection refused".into())),
                "fallback" => (self.inner.decide(key, cost).await).map(|o| Outcome {
                    degraded: true,
                    ..o
                }),
                _ => self.inner.decide(key, cost).await,
            }
        }
    }
}

#[tokio::test]
async fn s5_2_store_outage_is_a_503_or_flagged_never_a_disguised_denial() {
    let store = std::sync::Arc::new(FlakyStore {
        inner: manual_limiter(5, Rate::per_second(1)),
        mode: Mutex::new("down"),
    });
    let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let layer = RateLimitLayer::new(store.clone(), name("api.v1"), user_key)
        .on_error(move |e| log.lock().unwrap().push(e.to_string()));
    let mut svc = layer.layer(tower::service_fn(ok));
    let down = call(&mut svc, "u").await;
    assert_eq!(
        *seen.lock().unwrap(),
        vec!["limiter store unavailable: connection refused".to_owned()],
        "the operator sees the cause"
    );
    assert_eq!(down.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: serde_json::Value = serde_json::from_str(down.body()).unwrap();
    assert_eq!(
        body["type"],
        "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
    );
    assert!(
        !down.body().contains("connection refused"),
        "store detail stays in logs"
    );
    assert!(
        down.headers().get("ratelimit").is_none(),
        "no made-up limits"
    );

    *store.mode.lock().unwrap() = "fallback";
    let degraded = call(&mut svc, "u").await;
    assert_eq!(degraded.status(), StatusCode::OK);
    assert_eq!(degraded.headers()[DEGRADED_HEADER], "?1");

    *store.mode.lock().unwrap() = "up";
    let normal = call(&mut svc, "u").await;
    assert!(normal.headers().get(DEGRADED_HEADER).is_none());
}

// ---------------------------------------------------------------------------------------------
// Section 7: what the client does

fn pacer() -> Pacer {
    exact_pacer(9)
}

#[test]
fn s7_malformed_fields_must_be_ignored() {
    let mut p = pacer();
    // r=-1 is malformed: the whole field is ignored, including the well-formed member.
    let obs = p.observe(
        0,
        StatusCode::OK,
        &headers(&[("ratelimit", r#""a";r=0;t=50, "b";r=-1"#)]),
    );
    assert!(obs.binding.is_none());
    assert_eq!(p.ready_for(1, 0), 0, "an ignored field imposes no wait");
    assert!(p.limits().is_empty());
}

#[test]
fn s7_client_should_not_exceed_available_quota_within_the_effective_window() {
    let mut p = pacer();
    p.observe(
        0,
        StatusCode::OK,
        &headers(&[("ratelimit", r#""a";r=2;t=10"#)]),
    );
    assert_eq!(p.ready_for(1, 0), 0);
    p.record_send(1, 0);
    assert_eq!(p.ready_for(1, 0), 0);
    p.record_send(1, 0);
    assert_eq!(
        p.ready_for(1, 0),
        10 * S,
        "budget spent: wait for the window"
    );
}

#[test]
fn s7_retry_after_must_take_precedence_over_the_effective_window() {
    let mut p = pacer();
    p.observe(
        0,
        StatusCode::OK,
        &headers(&[("ratelimit", r#""a";r=0;t=50"#), ("retry-after", "3")]),
    );
    assert_eq!(p.ready_for(1, 0), 3 * S);
    // An HTTP-date Retry-After is measured against the response's Date, not our clock.
    let mut p = pacer();
    p.observe(
        0,
        StatusCode::OK,
        &headers(&[
            ("date", "Mon, 05 Aug 2019 09:27:00 GMT"),
            ("retry-after", "Mon, 05 Aug 2019 09:27:05 GMT"),
            ("ratelimit", r#""default";r=0;t=50"#),
        ]),
    );
    assert_eq!(p.ready_for(1, 0), 5 * S);
}

#[test]
fn s7_with_several_windows_pace_on_the_first_to_run_out_and_keep_all() {
    let mut p = pacer();
    let obs = p.observe(
        0,
        StatusCode::OK,
        &headers(&[
            (
                "ratelimit-policy",
                r#""hour";q=1000;w=3600, "day";q=5000;w=86400"#,
            ),
            ("ratelimit", r#""hour";r=900;t=3600, "day";r=0;t=36000"#),
        ]),
    );
    assert_eq!(obs.binding.unwrap().name.as_str(), "day");
    assert_eq!(p.limits().len(), 2);
    assert_eq!(p.policies().len(), 2);
    assert_eq!(p.ready_for(1, 0), 600 * S, "capped at max_wait (10 min)");
}

#[test]
fn s7_2_intermediary_never_communicates_a_more_permissive_policy() {
    let origin = Fields {
        policy: Some(RateLimitPolicy {
            policies: vec![QuotaPolicy {
                name: name("o"),
                quota: 100,
                unit: QuotaUnit::Requests,
                window: Some(60),
                partition_key: None,
            }],
        }),
        limit: Some(RateLimit {
            limits: vec![ServiceLimit {
                name: name("o"),
                remaining: 40,
                reset: Some(30),
                partition_key: None,
            }],
        }),
    };
    let mut h = HeaderMap::new();
    h.insert(
        "ratelimit-policy",
        origin.policy.as_ref().unwrap().to_header_value(P).unwrap(),
    );
    h.insert(
        "ratelimit",
        origin.limit.as_ref().unwrap().to_header_value(P).unwrap(),
    );
    h.insert("retry-after", HeaderValue::from_static("2"));
    let gateway = Fields {
        policy: None,
        limit: Some(RateLimit {
            limits: vec![
                ServiceLimit {
                    name: name("o"),
                    remaining: 10,
                    reset: Some(5),
                    partition_key: None,
                },
                ServiceLimit {
                    name: name("gw"),
                    remaining: 3,
                    reset: Some(1),
                    partition_key: None,
                },
            ],
        }),
    };
    merge_headers(P, &mut h, &gateway, Some(1));
    let merged = Fields::from_headers(P, &h);
    let limits = merged.limit.unwrap().limits;
    assert_eq!(limits.len(), 2, "nothing removed, gateway limit added");
    assert_eq!((limits[0].remaining, limits[0].reset), (10, Some(30)));
    assert_eq!(merged.policy.unwrap().policies.len(), 1);
    assert_eq!(h["retry-after"], "2", "the later Retry-After wins");
    // Removing fields is more permissive: merging with nothing keeps the origin's.
    assert_eq!(merge(&origin, &Fields::default()), origin);
}

#[test]
fn s7_3_fields_on_cached_responses_are_ignored() {
    let mut p = pacer();
    let obs = p.observe(
        0,
        StatusCode::OK,
        &headers(&[("ratelimit", r#""a";r=0;t=60"#), ("age", "12")]),
    );
    assert!(obs.ignored_stale);
    assert_eq!(p.ready_for(1, 0), 0);
    let obs = p.observe(
        0,
        StatusCode::OK,
        &headers(&[("ratelimit", r#""a";r=0;t=60"#), ("age", "0")]),
    );
    assert!(!obs.ignored_stale);
    assert_eq!(p.ready_for(1, 0), 60 * S);
}

#[test]
fn s8_3_available_quota_is_not_a_guarantee_a_429_after_a_healthy_hint_is_handled() {
    let mut p = pacer();
    p.observe(
        0,
        StatusCode::OK,
        &headers(&[("ratelimit", r#""a";r=50;t=60"#)]),
    );
    assert_eq!(p.ready_for(1, 0), 0);
    // Server throttles anyway, still claiming quota and giving no Retry-After.
    let obs = p.observe(
        S,
        StatusCode::TOO_MANY_REQUESTS,
        &headers(&[("ratelimit", r#""a";r=50;t=60"#)]),
    );
    assert!(obs.throttled);
    assert!(
        p.ready_for(1, S) > S,
        "the client backs off instead of trusting r=50"
    );
    assert_eq!(p.failures(), 1);
}

#[test]
fn s8_5_1_client_caps_unreasonable_waits() {
    let mut p = pacer();
    p.observe(
        0,
        StatusCode::TOO_MANY_REQUESTS,
        &headers(&[("retry-after", "1000000")]),
    );
    let at = p.ready_for(1, 0);
    assert!(at <= 600 * S + PacerConfig::default().backoff.cap, "{at}");
}

#[test]
fn s7_fields_in_trailers_are_never_read() {
    // The pacer only ever reads the header section; a trailer section must be stripped before any
    // merge into headers.
    let mut trailers = headers(&[("ratelimit", r#""a";r=0;t=999"#)]);
    strip_from_trailers(P, &mut trailers);
    let mut p = pacer();
    p.observe(0, StatusCode::OK, &trailers);
    assert_eq!(p.ready_for(1, 0), 0);
}
