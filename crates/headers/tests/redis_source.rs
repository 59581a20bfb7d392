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
use bucketproof_headers::key::HeaderKey;
use bucketproof_headers::layer::{DEGRADED_HEADER, PartitionBytes, RateLimitLayer};
use bucketproof_headers::source::DecisionSource;
use bucketproof_limiter::{Bandwidth, Bandwidths, Config, Rate};
use bucketproof_redis::{RedisLimiter, Unavailable};
use http::{HeaderName, Request, Response, StatusCode};
use proxy::Proxy;
use tower::{Layer, Service, ServiceExt};

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

async fn instance(url: &str, prefix: &str, policy: Unavailable) -> RedisLimiter {
    RedisLimiter::builder(Config::new(2, Rate::per(1, Duration::from_secs(60)).unwrap()).unwrap())
        .prefix(prefix)
        .on_unavailable(policy)
        .attempts(1)
        .response_timeout(Duration::from_millis(300))
        .recovery(bucketproof_redis::Recovery::Trusting)
        .connect(url)
        .await
        .expect("connects")
}

/// Two instances (two connections, two layers) draw on one quota of 2: the third request is denied
/// whichever instance takes it, with `Retry-After` and the fields of the policy that decided.
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
async fn share_one_quota<K>(
    test: &str,
    layer: impl Fn(RedisLimiter) -> RateLimitLayer<K, RedisLimiter>,
) where
    K: PartitionBytes + Send + Sync + 'static,
    RedisLimiter: DecisionSource<K>,
{
    let Some(url) = common::redis_url(test) else {
        return;
    };
    let prefix = common::unique_prefix("headers-shared");
    let a = instance(&url, &prefix, Unavailable::FailClosed).await;
    let b = instance(&url, &prefix, Unavailable::FailClosed).await;
    let mut svc_a = layer(a).layer(tower::service_fn(ok));
    let mut svc_b = layer(b).layer(tower::service_fn(ok));

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
        .recovery(bucketproof_redis::Recovery::Trusting)
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
        .recovery(bucketproof_redis::Recovery::Trusting)
        .connect(url)
        .await
        .expect("connects")
}

/// `user`'s balance in Redis now, read by a limiter of its own.
async fn balance(limiter: &RedisLimiter, user: &str) -> u64 {
    limiter.peek(user, None).await.unwrap().remaining.whole()
}

/// `settling::two_instances_share_one_balance` on Redis.
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
    settling::two_instances_share_one_balance(a, b, async |user: &str| {
        balance(&direct, user).await
    })
    .await;
    common::cleanup(&url, &prefix).await;
}

/// `settling::a_denied_extra_is_returned_and_reported_unpaid` on Redis.
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
    settling::a_denied_extra_is_returned_and_reported_unpaid(a, b, async |user: &str| {
        balance(&direct, user).await
    })
    .await;
    common::cleanup(&url, &prefix).await;
}

/// `settling::an_outage_during_settle_keeps_the_estimate` on Redis.
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
    settling::an_outage_during_settle_keeps_the_estimate(
        limiter,
        move || proxy.cut(),
        async |user: &str| balance(&direct, user).await,
    )
    .await;
    common::cleanup(&url, &prefix).await;
}
