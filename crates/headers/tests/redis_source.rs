//! The tower layer on a [`RedisLimiter`] (feature `redis`): one quota shared by every instance, a
//! Redis outage answered by the limiter's policy, never disguised as a 429, and reserve-then-settle
//! on the shared balance (an outage during a settle reported failed, the estimate kept).
//!
//! Needs `REDIS_URL` (a loud SKIP without it; `BUCKETPROOF_REQUIRE_REDIS=1` makes that a failure):
//! `REDIS_URL=redis://127.0.0.1:6379/ cargo test -p bucketproof-headers --features redis --test redis_source`

#[path = "../../redis/tests/common/mod.rs"]
mod common;
mod proxy;
mod settling;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bucketproof_headers::PolicyName;
use bucketproof_headers::layer::{DEGRADED_HEADER, RateLimitLayer};
use bucketproof_headers::source::SettleFailure;
use bucketproof_limiter::{Bandwidth, Bandwidths, Config, Rate};
use bucketproof_redis::{RedisLimiter, Unavailable};
use http::{Request, Response, StatusCode};
use proxy::Proxy;
use tower::{Layer, Service, ServiceExt};

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

async fn instance(url: &str, prefix: &str, policy: Unavailable) -> RedisLimiter {
    RedisLimiter::builder(Config::new(2, Rate::per(1, Duration::from_secs(60)).unwrap()).unwrap())
        .prefix(prefix)
        .on_unavailable(policy)
        .attempts(1)
        .response_timeout(Duration::from_millis(300))
        .connect(url)
        .await
        .expect("connects")
}

/// Two instances (two connections, two layers) draw on one quota of 2: the third request is denied
/// whichever instance takes it, with `Retry-After` and the fields of the policy that decided.
#[tokio::test]
async fn two_instances_behind_the_layer_share_one_quota() {
    let Some(url) = common::redis_url("two_instances_behind_the_layer_share_one_quota") else {
        return;
    };
    let prefix = common::unique_prefix("headers-shared");
    let policy = PolicyName::new("api.v1").unwrap();
    let a = instance(&url, &prefix, Unavailable::FailClosed).await;
    let b = instance(&url, &prefix, Unavailable::FailClosed).await;
    let mut svc_a = RateLimitLayer::new(a, policy.clone(), user_key).layer(tower::service_fn(ok));
    let mut svc_b = RateLimitLayer::new(b, policy, user_key).layer(tower::service_fn(ok));

    assert_eq!(call(&mut svc_a, "u1").await.status(), StatusCode::OK);
    let second = call(&mut svc_b, "u1").await;
    assert_eq!(second.status(), StatusCode::OK);
    assert!(second.headers().get(DEGRADED_HEADER).is_none());
    let denied = call(&mut svc_a, "u1").await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    // One token per 60 s, none left: the next one is 60 s away (rounded up to whole seconds).
    assert_eq!(denied.headers()["retry-after"], "60");
    let fields = denied.headers()["ratelimit"].to_str().unwrap();
    assert!(fields.contains("r=0"), "{fields}");
    assert!(
        denied.headers()["ratelimit-policy"]
            .to_str()
            .unwrap()
            .contains("q=2")
    );
    // Another user has its own bucket.
    assert_eq!(call(&mut svc_b, "u2").await.status(), StatusCode::OK);
    common::cleanup(&url, &prefix).await;
}

/// Redis gone: fail-closed answers 503 (no limits made up), a local budget answers flagged
/// `bucketproof-degraded: ?1` and still denies past its budget with a 429 that says so.
#[tokio::test]
async fn an_outage_is_a_503_or_a_flagged_local_decision_never_a_plain_429() {
    let test = "an_outage_is_a_503_or_a_flagged_local_decision_never_a_plain_429";
    let Some(url) = common::redis_url(test) else {
        return;
    };
    let upstream = url
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .to_owned();
    let proxy = Proxy::start(upstream).await;
    let via_proxy = format!("redis://{}/", proxy.addr);
    let prefix = common::unique_prefix("headers-outage");
    let policy = PolicyName::new("api.v1").unwrap();
    let closed = instance(&via_proxy, &prefix, Unavailable::FailClosed).await;
    let budget = Config::new(1, Rate::ZERO).unwrap();
    let local = instance(&via_proxy, &prefix, Unavailable::LocalBudget { budget }).await;
    let errors = Arc::new(Mutex::new(Vec::new()));
    let log = errors.clone();
    let mut closed = RateLimitLayer::new(closed, policy.clone(), user_key)
        .on_error(move |e| log.lock().unwrap().push(e.to_string()))
        .layer(tower::service_fn(ok));
    let mut local = RateLimitLayer::new(local, policy, user_key).layer(tower::service_fn(ok));
    assert_eq!(call(&mut closed, "u").await.status(), StatusCode::OK);

    proxy.cut();
    let down = call(&mut closed, "u").await;
    assert_eq!(down.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        down.headers().get("ratelimit").is_none(),
        "no made-up limits"
    );
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
    common::cleanup(&url, &prefix).await;
}

/// A Redis limiter of two named bandwidths (a burst of 2 per second and 3 per minute) behind the
/// layer: one RateLimit-Policy item and one RateLimit item per bandwidth, and the denial that the
/// minute decides waits for the minute, not for the burst.
#[tokio::test]
async fn a_redis_key_of_two_bandwidths_advertises_one_item_per_bandwidth() {
    let Some(url) =
        common::redis_url("a_redis_key_of_two_bandwidths_advertises_one_item_per_bandwidth")
    else {
        return;
    };
    let burst = Bandwidth::named("burst", Config::new(2, Rate::per_second(2)).unwrap()).unwrap();
    let minute = Config::new(3, Rate::per(3, Duration::from_secs(60)).unwrap()).unwrap();
    let minute = Bandwidth::named("minute", minute).unwrap();
    let limiter = RedisLimiter::builder(Bandwidths::new([burst, minute]).unwrap())
        .prefix(common::unique_prefix("headers-set"))
        .connect(&url)
        .await
        .expect("connects");
    let policy = PolicyName::new("api.v1").unwrap();
    let mut svc = RateLimitLayer::new(limiter, policy, user_key).layer(tower::service_fn(ok));
    let first = call(&mut svc, "u1").await;
    assert_eq!(first.status(), StatusCode::OK);
    let policies = first.headers()["ratelimit-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(policies.contains("\"burst\";q=2;w=1"), "{policies}");
    assert!(policies.contains("\"minute\";q=3;w=60"), "{policies}");
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
}

/// A bucket created while its Redis slot recovers from a detected loss of state is flagged like a
/// fallback decision: a prefix never provisioned looks like a Redis that lost its data, so its first
/// bucket is recovering (trusting policy: allowed from a full bucket, flagged); after `provision`, a
/// new bucket is an ordinary one.
#[tokio::test]
async fn a_bucket_created_while_recovering_from_a_loss_is_flagged() {
    let Some(url) = common::redis_url("a_bucket_created_while_recovering_from_a_loss_is_flagged")
    else {
        return;
    };
    let policy = PolicyName::new("api.v1").unwrap();
    let lost = instance(
        &url,
        &common::unique_prefix("headers-lost"),
        Unavailable::FailClosed,
    )
    .await;
    let mut svc = RateLimitLayer::new(lost, policy.clone(), user_key).layer(tower::service_fn(ok));
    let first = call(&mut svc, "u1").await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(first.headers()[DEGRADED_HEADER], "?1");

    let whole = instance(
        &url,
        &common::unique_prefix("headers-whole"),
        Unavailable::FailClosed,
    )
    .await;
    whole.provision().await.unwrap();
    let mut svc = RateLimitLayer::new(whole, policy, user_key).layer(tower::service_fn(ok));
    let first = call(&mut svc, "u1").await;
    assert_eq!(first.status(), StatusCode::OK);
    assert!(first.headers().get(DEGRADED_HEADER).is_none());
}

/// A limiter of `capacity` tokens, one more per minute (nothing refills during a test), on
/// `prefix`, for reserving and settling.
async fn settling_instance(
    url: &str,
    prefix: &str,
    capacity: u64,
    policy: Unavailable,
) -> RedisLimiter {
    let config = Config::new(capacity, Rate::per(1, Duration::from_secs(60)).unwrap()).unwrap();
    RedisLimiter::builder(config)
        .prefix(prefix)
        .on_unavailable(policy)
        .attempts(1)
        .response_timeout(Duration::from_millis(300))
        .connect(url)
        .await
        .expect("connects")
}

/// `user`'s balance in Redis now, read by a limiter of its own.
async fn balance(limiter: &RedisLimiter, user: &str) -> u64 {
    limiter.peek(user, None).await.unwrap().remaining.whole()
}

/// Two instances reserve and settle on one shared balance: a refund given back by one is spent by
/// the other, an extra charged by one is seen by the other, and neither instance's ids replay the
/// other's records.
#[tokio::test]
async fn two_instances_reserve_and_settle_on_one_shared_balance() {
    let test = "two_instances_reserve_and_settle_on_one_shared_balance";
    let Some(url) = common::redis_url(test) else {
        return;
    };
    let prefix = common::unique_prefix("headers-settle");
    let a = settling_instance(&url, &prefix, 100, Unavailable::FailClosed).await;
    a.provision().await.unwrap();
    let b = settling_instance(&url, &prefix, 100, Unavailable::FailClosed).await;
    let direct = settling_instance(&url, &prefix, 100, Unavailable::FailClosed).await;
    let (layer_a, reports_a) = settling::layer(a, 10);
    let (layer_b, reports_b) = settling::layer(b, 10);
    let mut svc_a = layer_a.layer(tower::service_fn(settling::worked));
    let mut svc_b = layer_b.layer(tower::service_fn(settling::worked));

    // a reserves 10 of 100, the work costs 3: 7 come back.
    let first = settling::call(&mut svc_a, "u", 3).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert!(first.headers().get(DEGRADED_HEADER).is_none());
    assert_eq!(settling::advertised(&first), 90, "the reservation");
    assert_eq!(
        settling::summary(&reports_a, 0),
        (10, 3, 0, Some((true, 97)))
    );
    assert_eq!(balance(&direct, "u").await, 97);
    // b reserves on what a gave back, the work costs 25: 15 more are charged.
    let second = settling::call(&mut svc_b, "u", 25).await;
    assert_eq!(settling::advertised(&second), 87);
    assert_eq!(
        settling::summary(&reports_b, 0),
        (10, 25, 0, Some((true, 72)))
    );
    // a decides on what b's extra left.
    let third = settling::call(&mut svc_a, "u", 10).await;
    assert_eq!(settling::advertised(&third), 62);
    assert_eq!(
        settling::summary(&reports_a, 1),
        (10, 10, 0, Some((true, 62)))
    );
    assert_eq!(balance(&direct, "u").await, 62);
    common::cleanup(&url, &prefix).await;
}

/// An extra the shared balance cannot cover: the response is returned, nothing is charged (the
/// balance stays at 0), the shortfall is reported unpaid, and the next request on either instance is
/// denied.
#[tokio::test]
async fn a_denied_extra_on_the_shared_store_is_returned_and_reported_unpaid() {
    let test = "a_denied_extra_on_the_shared_store_is_returned_and_reported_unpaid";
    let Some(url) = common::redis_url(test) else {
        return;
    };
    let prefix = common::unique_prefix("headers-unpaid");
    let a = settling_instance(&url, &prefix, 20, Unavailable::FailClosed).await;
    a.provision().await.unwrap();
    let b = settling_instance(&url, &prefix, 20, Unavailable::FailClosed).await;
    let direct = settling_instance(&url, &prefix, 20, Unavailable::FailClosed).await;
    let (layer_a, _) = settling::layer(a, 10);
    let (layer_b, reports_b) = settling::layer(b, 10);
    let mut svc_a = layer_a.layer(tower::service_fn(settling::worked));
    let mut svc_b = layer_b.layer(tower::service_fn(settling::worked));

    assert_eq!(
        settling::call(&mut svc_a, "u", 10).await.status(),
        StatusCode::OK
    );
    // b reserves the last 10; the work costs 20, an extra of 10 that nothing covers.
    let resp = settling::call(&mut svc_b, "u", 20).await;
    assert_eq!(resp.status(), StatusCode::OK, "the response is returned");
    assert_eq!(settling::advertised(&resp), 0);
    assert_eq!(
        settling::summary(&reports_b, 0),
        (10, 20, 10, Some((false, 0)))
    );
    assert_eq!(balance(&direct, "u").await, 0, "never below 0");
    assert_eq!(
        settling::call(&mut svc_a, "u", 1).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    common::cleanup(&url, &prefix).await;
}

/// Redis gone between the reservation and the settle (the work itself cuts the proxy): the response
/// is returned, the settle is reported failed as unavailable, and the estimate stays charged in
/// Redis. A reservation a local budget decided while Redis was gone has no record there: its settle
/// fails too, and the estimate stays as the budget charged it.
#[tokio::test]
async fn an_outage_during_settle_is_reported_failed_and_the_estimate_stays_charged() {
    let test = "an_outage_during_settle_is_reported_failed_and_the_estimate_stays_charged";
    let Some(url) = common::redis_url(test) else {
        return;
    };
    let upstream = url
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .to_owned();
    let proxy = Arc::new(Proxy::start(upstream).await);
    let via_proxy = format!("redis://{}/", proxy.addr);
    let prefix = common::unique_prefix("headers-settle-outage");
    let budget = Config::new(20, Rate::ZERO).unwrap();
    let limiter = settling_instance(
        &via_proxy,
        &prefix,
        100,
        Unavailable::LocalBudget { budget },
    )
    .await;
    limiter.provision().await.unwrap();
    let direct = settling_instance(&url, &prefix, 100, Unavailable::FailClosed).await;
    let (layer, reports) = settling::layer(limiter, 10);
    let cut = Arc::clone(&proxy);
    let mut svc = layer.layer(tower::service_fn(move |req| {
        cut.cut();
        settling::worked(req)
    }));

    let resp = settling::call(&mut svc, "u", 3).await;
    assert_eq!(resp.status(), StatusCode::OK, "the response is returned");
    assert!(
        resp.headers().get(DEGRADED_HEADER).is_none(),
        "Redis decided"
    );
    assert_eq!(settling::advertised(&resp), 90);
    assert_eq!(settling::summary(&reports, 0), (10, 3, 0, None));
    let failure = reports.lock().unwrap()[0].result.clone().unwrap_err();
    assert!(
        matches!(failure, SettleFailure::Unavailable(_)),
        "{failure:?}"
    );
    assert_eq!(
        balance(&direct, "u").await,
        90,
        "the estimate stays charged"
    );

    // The local budget decides (flagged); no record in Redis, nothing settled there.
    let fallback = settling::call(&mut svc, "u", 3).await;
    assert_eq!(fallback.status(), StatusCode::OK);
    assert_eq!(fallback.headers()[DEGRADED_HEADER], "?1");
    assert_eq!(settling::advertised(&fallback), 10, "the local budget's");
    let failure = reports.lock().unwrap()[1].result.clone().unwrap_err();
    assert!(
        matches!(failure, SettleFailure::Unavailable(_)),
        "{failure:?}"
    );
    assert_eq!(balance(&direct, "u").await, 90);
    common::cleanup(&url, &prefix).await;
}
