//! The tower layer on a [`PgLimiter`] (feature `postgres`): one quota shared by every instance, a
//! PostgreSQL outage answered by the limiter's policy, no store error disguised as a 429, a key of
//! several bandwidths advertised one item per bandwidth, and reserve-then-settle on the shared row
//! (an outage during a settle reported failed, the estimate kept).
//!
//! Needs `DATABASE_URL` (a loud SKIP without it; `BUCKETPROOF_REQUIRE_POSTGRES` set makes that a
//! failure):
//! `DATABASE_URL=postgres://postgres@127.0.0.1:5432/test cargo test -p bucketproof-headers --features postgres --test postgres_source`
//!
//! Each test works in a namespace of its own (a schema named after the process and the test) and
//! drops it when it passes.

mod proxy;
mod settling;

use std::convert::Infallible;
use std::io::Write;
use std::net::SocketAddr;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bucketproof_headers::PolicyName;
use bucketproof_headers::key::HeaderKey;
use bucketproof_headers::layer::{DEGRADED_HEADER, PartitionBytes, RateLimitLayer};
use bucketproof_headers::source::{DecisionSource, SourceError};
use bucketproof_limiter::{Bandwidth, Bandwidths, Config, Rate};
use bucketproof_postgres::{PgLimiter, Unavailable};
use http::{HeaderName, Request, Response, StatusCode};
use proxy::Proxy;
use tower::{Layer, Service, ServiceExt};

/// `DATABASE_URL`, or `None` after a loud SKIP line; with `BUCKETPROOF_REQUIRE_POSTGRES` set (CI)
/// a missing URL fails the test instead.
fn database_url(test: &str) -> Option<String> {
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var_os("BUCKETPROOF_REQUIRE_POSTGRES").is_some() => {
            panic!("{test}: DATABASE_URL is not set and BUCKETPROOF_REQUIRE_POSTGRES is")
        }
        _ => {
            // Straight to the stderr handle, not eprintln!: the test harness captures the macros and
            // hides a passing test's output, and a skip must be seen.
            let _ = writeln!(
                std::io::stderr(),
                "\n!!!!! SKIP {test}: DATABASE_URL is not set, nothing checked !!!!!\n"
            );
            None
        }
    }
}

/// A namespace no other test (or run) uses; `name` is short, as a namespace is at most 63
/// characters.
fn namespace(name: &str) -> String {
    format!("bp_headers_{}_{name}", std::process::id())
}

/// Drops `namespace` with everything in it, through a limiter of its own (the test's limiters are
/// inside its layers, or behind a cut proxy).
async fn drop_namespace(url: &str, namespace: &str) {
    instance(url, namespace, Unavailable::FailClosed)
        .await
        .drop_namespace()
        .await
        .expect("drop the test's namespace");
}

/// 2 requests of capacity, one more per minute: nothing refills during a test.
fn config() -> Config {
    Config::new(2, Rate::per(1, Duration::from_secs(60)).unwrap()).unwrap()
}

async fn instance(url: &str, namespace: &str, policy: Unavailable) -> PgLimiter {
    PgLimiter::builder(config())
        .namespace(namespace)
        .on_unavailable(policy)
        .connect(url)
        .await
        .expect("connects")
}

/// The secret of the digest keys ([`HeaderKey`]), the same on every instance.
const KEY_SECRET: &[u8] = b"shared store key secret, 32 byte";

async fn ok(_: Request<()>) -> Result<Response<String>, Infallible> {
    Ok(Response::new("ok".to_owned()))
}

fn user_key(parts: &http::request::Parts) -> String {
    parts.headers["x-user"].to_str().unwrap().to_owned()
}

async fn call<S>(svc: &mut S, user: &'static str) -> Response<String>
where
    S: Service<Request<()>, Response = Response<String>, Error = Infallible>,
{
    let req = Request::builder().header("x-user", user).body(()).unwrap();
    svc.ready().await.unwrap().call(req).await.unwrap()
}

/// A log of the errors the layer saw, and the `on_error` hook that fills it.
fn error_log() -> (
    Arc<Mutex<Vec<String>>>,
    impl Fn(&SourceError) + Send + Sync + 'static,
) {
    let errors = Arc::new(Mutex::new(Vec::new()));
    let log = errors.clone();
    (errors, move |e| log.lock().unwrap().push(e.to_string()))
}

/// Where `url` (the URL form, one TCP host) names its host and port: the byte range of
/// `host[:port]`. Anything else fails the test by name rather than testing something else.
fn host_port(url: &str) -> Range<usize> {
    // Not the URL itself in the message: it may hold a password.
    let unsupported = || -> ! {
        panic!("the outage test needs DATABASE_URL as postgres://[user[:password]@]host[:port]/db")
    };
    let start = url.find("://").unwrap_or_else(|| unsupported()) + 3;
    let end = url[start..]
        .find(['/', '?'])
        .map_or(url.len(), |i| start + i);
    let start = url[start..end]
        .rfind('@')
        .map_or(start, |at| start + at + 1);
    if start == end || url[start..end].contains(',') {
        unsupported();
    }
    start..end
}

/// The `host:port` that `url` connects to (PostgreSQL's 5432 when it names no port): where a proxy
/// in between must forward.
fn upstream(url: &str) -> String {
    let host_port = &url[host_port(url)];
    // A port follows the host (after the brackets of an IPv6 literal).
    if host_port
        .rsplit(']')
        .next()
        .unwrap_or_default()
        .contains(':')
    {
        host_port.to_owned()
    } else {
        format!("{host_port}:5432")
    }
}

/// `url` with `to` in place of its host and port.
fn through(url: &str, to: SocketAddr) -> String {
    let mut via = url.to_owned();
    via.replace_range(host_port(url), &to.to_string());
    via
}

/// Two limiters on one namespace (two pools, two layers) draw on one quota of 2: the third request
/// is denied whichever instance takes it, with `Retry-After` and the fields of the policy.
#[tokio::test]
async fn two_instances_behind_the_layer_share_one_quota() {
    let test = "two_instances_behind_the_layer_share_one_quota";
    share_one_quota(test, |limiter| {
        RateLimitLayer::new(limiter, PolicyName::new("api.v1").unwrap(), user_key)
    })
    .await;
}

/// The same with the library's key extractor: both instances find the user's one row by its
/// digest ([`HeaderKey`], the same secret on each).
#[tokio::test]
async fn two_instances_keyed_by_digest_share_one_quota() {
    let test = "two_instances_keyed_by_digest_share_one_quota";
    share_one_quota(test, |limiter| {
        let key = HeaderKey::new(HeaderName::from_static("x-user"), KEY_SECRET).unwrap();
        RateLimitLayer::keyed(limiter, PolicyName::new("api.v1").unwrap(), key)
    })
    .await;
}

/// Two instances, each behind the layer `layer` makes of its limiter, share one quota.
async fn share_one_quota<K>(test: &str, layer: impl Fn(PgLimiter) -> RateLimitLayer<K, PgLimiter>)
where
    K: PartitionBytes + Send + Sync + 'static,
    PgLimiter: DecisionSource<K>,
{
    let Some(url) = database_url(test) else {
        return;
    };
    let namespace = namespace("shared");
    let a = instance(&url, &namespace, Unavailable::FailClosed).await;
    let b = instance(&url, &namespace, Unavailable::FailClosed).await;
    let mut svc_a = layer(a).layer(tower::service_fn(ok));
    let mut svc_b = layer(b).layer(tower::service_fn(ok));

    assert_eq!(call(&mut svc_a, "u1").await.status(), StatusCode::OK);
    let second = call(&mut svc_b, "u1").await;
    assert_eq!(second.status(), StatusCode::OK);
    assert!(second.headers().get(DEGRADED_HEADER).is_none());
    // `a` spent one token of two: only `b`'s spending, in the shared row, leaves it none.
    let denied = call(&mut svc_a, "u1").await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(denied.headers().get(DEGRADED_HEADER).is_none());
    // One token per 60 s, none left: the next one is 60 s away (rounded up to whole seconds).
    assert_eq!(denied.headers()["retry-after"], "60");
    assert_eq!(denied.headers()["ratelimit"], r#""api.v1";r=0;t=60"#);
    // q = 2, w = 2 tokens at one a minute.
    assert_eq!(
        denied.headers()["ratelimit-policy"],
        r#""api.v1";q=2;w=120"#
    );
    assert_eq!(
        call(&mut svc_b, "u1").await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    // Another user has a bucket of its own.
    assert_eq!(call(&mut svc_b, "u2").await.status(), StatusCode::OK);
    drop_namespace(&url, &namespace).await;
}

/// PostgreSQL gone mid-run (a proxy to it cut): fail-closed answers 503 with no limits made up; a
/// local budget answers flagged `bucketproof-degraded: ?1`, and past its budget a 429 that says so.
/// The store meanwhile still holds a token for the user: neither answer was its decision.
#[tokio::test]
async fn an_outage_is_a_503_or_a_flagged_local_decision_never_a_plain_429() {
    let test = "an_outage_is_a_503_or_a_flagged_local_decision_never_a_plain_429";
    let Some(url) = database_url(test) else {
        return;
    };
    let namespace = namespace("outage");
    let proxy = Proxy::start(upstream(&url)).await;
    let via_proxy = through(&url, proxy.addr);
    let policy = PolicyName::new("api.v1").unwrap();
    let closed = instance(&via_proxy, &namespace, Unavailable::FailClosed).await;
    let budget = Config::new(1, Rate::ZERO).unwrap();
    let local = instance(&via_proxy, &namespace, Unavailable::LocalBudget { budget }).await;
    let (errors, on_error) = error_log();
    let mut closed = RateLimitLayer::new(closed, policy.clone(), user_key)
        .on_error(on_error)
        .layer(tower::service_fn(ok));
    let mut local = RateLimitLayer::new(local, policy, user_key).layer(tower::service_fn(ok));
    let before = call(&mut closed, "u").await;
    assert_eq!(before.status(), StatusCode::OK);
    assert!(before.headers().get(DEGRADED_HEADER).is_none());

    proxy.cut();
    let down = call(&mut closed, "u").await;
    assert_eq!(down.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        down.headers().get("ratelimit").is_none(),
        "no made-up limits"
    );
    assert!(down.headers().get("retry-after").is_none());
    assert!(
        errors.lock().unwrap()[0].starts_with("limiter store unavailable"),
        "{:?}",
        errors.lock().unwrap()
    );
    let degraded = call(&mut local, "u").await;
    assert_eq!(degraded.status(), StatusCode::OK);
    assert_eq!(degraded.headers()[DEGRADED_HEADER], "?1");
    let over_budget = call(&mut local, "u").await;
    assert_eq!(over_budget.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(over_budget.headers()[DEGRADED_HEADER], "?1");

    let direct = instance(&url, &namespace, Unavailable::FailClosed).await;
    let stored = direct.acquire("u", 1).await.unwrap();
    assert!(
        stored.decision().is_allowed(),
        "the store spent one token of u's two, before the cut"
    );
    direct.drop_namespace().await.unwrap();
}

/// What is not a decision is not a 429: a cost above the capacity is a 413 (no wait would help),
/// and a row kept under another config (another limiter on the namespace) a 503.
#[tokio::test]
async fn store_errors_and_invalid_costs_are_not_denials() {
    let test = "store_errors_and_invalid_costs_are_not_denials";
    let Some(url) = database_url(test) else {
        return;
    };
    let namespace = namespace("not_denials");
    let policy = PolicyName::new("api.v1").unwrap();
    let limiter = instance(&url, &namespace, Unavailable::FailClosed).await;
    let mut too_dear = RateLimitLayer::new(limiter, policy.clone(), user_key)
        .cost(|_| 3)
        .layer(tower::service_fn(ok));
    assert_eq!(
        call(&mut too_dear, "u").await.status(),
        StatusCode::PAYLOAD_TOO_LARGE
    );

    let other = PgLimiter::builder(Config::new(5, Rate::per_second(1)).unwrap())
        .namespace(&namespace)
        .connect(&url)
        .await
        .expect("connects");
    other.acquire("u", 1).await.unwrap();
    let (errors, on_error) = error_log();
    let limiter = instance(&url, &namespace, Unavailable::FailClosed).await;
    let mut mismatched = RateLimitLayer::new(limiter, policy, user_key)
        .on_error(on_error)
        .layer(tower::service_fn(ok));
    let refused = call(&mut mismatched, "u").await;
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(refused.headers().get("ratelimit").is_none());
    assert!(
        errors.lock().unwrap()[0].starts_with("limiter store failed"),
        "{:?}",
        errors.lock().unwrap()
    );
    other.drop_namespace().await.unwrap();
}

/// A limiter of two named bandwidths (a burst of 2 per second and 3 per minute) behind the layer:
/// one RateLimit-Policy item and one RateLimit item per bandwidth, and the denial that the minute
/// decides waits for the minute, not for the burst.
#[tokio::test]
async fn a_key_of_two_bandwidths_advertises_one_item_per_bandwidth() {
    let test = "a_key_of_two_bandwidths_advertises_one_item_per_bandwidth";
    let Some(url) = database_url(test) else {
        return;
    };
    let namespace = namespace("set");
    let burst = Bandwidth::named("burst", Config::new(2, Rate::per_second(2)).unwrap()).unwrap();
    let minute = Config::new(3, Rate::per(3, Duration::from_secs(60)).unwrap()).unwrap();
    let minute = Bandwidth::named("minute", minute).unwrap();
    let limiter = PgLimiter::builder(Bandwidths::new([burst, minute]).unwrap())
        .namespace(&namespace)
        .connect(&url)
        .await
        .expect("connects");
    let policy = PolicyName::new("api.v1").unwrap();
    let mut svc = RateLimitLayer::new(limiter, policy, user_key).layer(tower::service_fn(ok));
    let first = call(&mut svc, "u1").await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(
        first.headers()["ratelimit-policy"],
        r#""burst";q=2;w=1, "minute";q=3;w=60"#
    );
    // The burst refills within a second; the minute's third token goes at once, the fourth waits for
    // the minute (20 s per token).
    assert_eq!(call(&mut svc, "u1").await.status(), StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert_eq!(call(&mut svc, "u1").await.status(), StatusCode::OK);
    let denied = call(&mut svc, "u1").await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    let fields = denied.headers()["ratelimit"].to_str().unwrap().to_owned();
    assert!(fields.contains("\"burst\";r="), "{fields}");
    assert!(fields.contains("\"minute\";r=0"), "{fields}");
    let retry: u64 = denied.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (18..=20).contains(&retry),
        "the minute's wait, not the burst's: {retry}"
    );
    drop_namespace(&url, &namespace).await;
}

/// A limiter of `capacity` tokens, one more per minute (nothing refills during a test), on
/// `namespace`, for reserving and settling.
async fn settling_instance(
    url: &str,
    namespace: &str,
    capacity: u64,
    policy: Unavailable,
) -> PgLimiter {
    let config = Config::new(capacity, Rate::per(1, Duration::from_secs(60)).unwrap()).unwrap();
    PgLimiter::builder(config)
        .namespace(namespace)
        .on_unavailable(policy)
        .connect(url)
        .await
        .expect("connects")
}

/// `user`'s balance in PostgreSQL now, read by a limiter of its own.
async fn balance(limiter: &PgLimiter, user: &str) -> u64 {
    limiter.peek(user, None).await.unwrap().remaining.whole()
}

/// `settling::two_instances_share_one_balance` on PostgreSQL.
#[tokio::test]
async fn two_instances_reserve_and_settle_on_one_shared_balance() {
    let test = "two_instances_reserve_and_settle_on_one_shared_balance";
    let Some(url) = database_url(test) else {
        return;
    };
    let namespace = namespace("settle");
    let a = settling_instance(&url, &namespace, 100, Unavailable::FailClosed).await;
    let b = settling_instance(&url, &namespace, 100, Unavailable::FailClosed).await;
    let direct = settling_instance(&url, &namespace, 100, Unavailable::FailClosed).await;
    settling::two_instances_share_one_balance(a, b, async |user: &str| {
        balance(&direct, user).await
    })
    .await;
    direct.drop_namespace().await.unwrap();
}

/// `settling::a_denied_extra_is_returned_and_reported_unpaid` on PostgreSQL.
#[tokio::test]
async fn a_denied_extra_on_the_shared_store_is_returned_and_reported_unpaid() {
    let test = "a_denied_extra_on_the_shared_store_is_returned_and_reported_unpaid";
    let Some(url) = database_url(test) else {
        return;
    };
    let namespace = namespace("unpaid");
    let a = settling_instance(&url, &namespace, 20, Unavailable::FailClosed).await;
    let b = settling_instance(&url, &namespace, 20, Unavailable::FailClosed).await;
    let direct = settling_instance(&url, &namespace, 20, Unavailable::FailClosed).await;
    settling::a_denied_extra_is_returned_and_reported_unpaid(a, b, async |user: &str| {
        balance(&direct, user).await
    })
    .await;
    direct.drop_namespace().await.unwrap();
}

/// `settling::an_outage_during_settle_keeps_the_estimate` on PostgreSQL.
#[tokio::test]
async fn an_outage_during_settle_is_reported_failed_and_the_estimate_stays_charged() {
    let test = "an_outage_during_settle_is_reported_failed_and_the_estimate_stays_charged";
    let Some(url) = database_url(test) else {
        return;
    };
    let namespace = namespace("settle_outage");
    let proxy = Arc::new(Proxy::start(upstream(&url)).await);
    let via_proxy = through(&url, proxy.addr);
    let budget = Config::new(20, Rate::ZERO).unwrap();
    let limiter = settling_instance(
        &via_proxy,
        &namespace,
        100,
        Unavailable::LocalBudget { budget },
    )
    .await;
    let direct = settling_instance(&url, &namespace, 100, Unavailable::FailClosed).await;
    settling::an_outage_during_settle_keeps_the_estimate(
        limiter,
        move || proxy.cut(),
        async |user: &str| balance(&direct, user).await,
    )
    .await;
    direct.drop_namespace().await.unwrap();
}
