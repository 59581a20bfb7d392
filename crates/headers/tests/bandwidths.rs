//! The layer on keys of several bandwidths (docs/semantics.md, "Several bandwidths per key"): one
//! `RateLimit-Policy` item and one `RateLimit` item per bandwidth, their names, the combined
//! `Retry-After`, and the one-bandwidth path unchanged.
//!
//! Hand-computed cases through the real tower layer on a manual clock, then properties over
//! generated sets: every item as honest as the one-bandwidth item is, and a key of one unnamed
//! bandwidth advertised byte for byte as before sets existed.

use std::convert::Infallible;

use bucketproof_headers::layer::{Advertiser, RateLimitLayer};
use bucketproof_headers::mapping::AdvertiseOptions;
use bucketproof_headers::pk::PartitionKeyHasher;
use bucketproof_headers::set::{SetOutcome, UNNAMED_PREFIX, item_name};
use bucketproof_headers::source::{Outcome, decide_set_at};
use bucketproof_headers::{PolicyName, Profile, RateLimit};
use bucketproof_limiter::{
    Bandwidth, Bandwidths, Config, Limiter, MAX_NAME_LEN, ManualClock, Rate, Wait,
};
use http::{HeaderMap, Request, Response, StatusCode};
use proptest::prelude::*;
use tower::{Layer, Service, ServiceExt};

const S: u64 = 1_000_000_000;

fn config(capacity: u64, rate: &str) -> Config {
    Config::new(capacity, rate.parse().unwrap()).unwrap()
}

fn named(name: &str, capacity: u64, rate: &str) -> Bandwidth {
    Bandwidth::named(name, config(capacity, rate)).unwrap()
}

/// A burst of 20 refilled 1/s, and at most 5 per second.
fn burst_and_per_second() -> Bandwidths {
    Bandwidths::new([named("burst", 20, "1/s"), named("per-second", 5, "5/s")]).unwrap()
}

/// 100 per minute, and 10,000 per day.
fn minute_and_day() -> Bandwidths {
    Bandwidths::new([
        named("minute", 100, "100/min"),
        named("day", 10_000, "10000/d"),
    ])
    .unwrap()
}

async fn ok(_: Request<()>) -> Result<Response<String>, Infallible> {
    Ok(Response::new("ok".to_owned()))
}

fn user_key(parts: &http::request::Parts) -> String {
    parts.headers["x-user"].to_str().unwrap().to_owned()
}

/// A layer over a limiter of `set` on a manual clock at 1 s, with `cost` per request.
fn service(
    set: Bandwidths,
    cost: u64,
) -> (
    impl Service<Request<()>, Response = Response<String>, Error = Infallible>,
    ManualClock,
) {
    let clock = ManualClock::new(S);
    let limiter: Limiter<String, ManualClock> = Limiter::builder(set).clock(clock.clone()).build();
    let layer = RateLimitLayer::new(limiter, PolicyName::new("api.v1").unwrap(), user_key)
        .cost(move |_| cost);
    (layer.layer(tower::service_fn(ok)), clock)
}

async fn call<S>(svc: &mut S) -> Response<String>
where
    S: Service<Request<()>, Response = Response<String>, Error = Infallible>,
{
    let req = Request::builder().header("x-user", "u").body(()).unwrap();
    svc.ready().await.unwrap().call(req).await.unwrap()
}

fn field<'a>(resp: &'a Response<String>, name: &str) -> &'a str {
    resp.headers()[name].to_str().unwrap()
}

fn violated(resp: &Response<String>) -> serde_json::Value {
    let body: serde_json::Value = serde_json::from_str(resp.body()).unwrap();
    body["violated-policies"].clone()
}

#[tokio::test]
async fn each_bandwidth_is_one_item_with_its_own_q_w_r_t() {
    let (mut svc, _) = service(burst_and_per_second(), 1);
    let resp = call(&mut svc).await;
    assert_eq!(resp.status(), StatusCode::OK);
    // q = capacity; w = capacity / rate: 20 at 1/s refill in 20 s, 5 at 5/s in 1 s.
    assert_eq!(
        field(&resp, "ratelimit-policy"),
        r#""burst";q=20;w=20, "per-second";q=5;w=1"#
    );
    // 19 and 4 left; the next whole token in 1 s and 0.2 s, rounded up.
    assert_eq!(
        field(&resp, "ratelimit"),
        r#""burst";r=19;t=1, "per-second";r=4;t=1"#
    );

    let (mut svc, _) = service(minute_and_day(), 1);
    let resp = call(&mut svc).await;
    // 100/min refills 100 in 60 s; 10,000/day refills 10,000 in 86,400 s.
    assert_eq!(
        field(&resp, "ratelimit-policy"),
        r#""minute";q=100;w=60, "day";q=10000;w=86400"#
    );
    // A token each 0.6 s and each 8.64 s.
    assert_eq!(
        field(&resp, "ratelimit"),
        r#""minute";r=99;t=1, "day";r=9999;t=9"#
    );
}

#[tokio::test]
async fn unnamed_bandwidths_get_generated_keys_that_no_name_can_take() {
    let set = Bandwidths::new([
        Bandwidth::new(config(3, "1/s")),
        named("daily", 50, "50/d"),
        Bandwidth::new(config(9, "3/s")),
    ])
    .unwrap();
    let (mut svc, _) = service(set.clone(), 1);
    let resp = call(&mut svc).await;
    assert_eq!(
        field(&resp, "ratelimit"),
        r#""bucketproof-unnamed-bandwidth-at-0";r=2;t=1, "daily";r=49;t=1728, "bucketproof-unnamed-bandwidth-at-2";r=8;t=1"#
    );
    for position in [0, 2] {
        let name = item_name(&set, position).unwrap();
        // A structured-field key, as every bandwidth name is...
        assert!(sfv::Key::from_string(name.as_str().to_owned()).is_ok());
        // ...but longer than any bandwidth name may be: no set can hold a bandwidth named so.
        assert!(name.as_str().len() > MAX_NAME_LEN);
        assert!(name.as_str().starts_with(UNNAMED_PREFIX));
        assert!(Bandwidth::named(name.as_str(), config(1, "1/s")).is_err());
    }
    // The name follows the identity (`#i`, the position), not the order among unnamed bandwidths.
    assert_eq!(
        item_name(&set, 2).unwrap().as_str(),
        "bucketproof-unnamed-bandwidth-at-2"
    );
    assert_eq!(item_name(&set, 3), None);
}

#[tokio::test]
async fn a_set_of_one_named_bandwidth_is_advertised_under_its_name() {
    let (mut svc, _) = service(Bandwidths::new([named("daily", 5, "5/d")]).unwrap(), 1);
    let resp = call(&mut svc).await;
    assert_eq!(field(&resp, "ratelimit-policy"), r#""daily";q=5;w=86400"#);
    // One token each 17,280 s.
    assert_eq!(field(&resp, "ratelimit"), r#""daily";r=4;t=17280"#);
}

#[tokio::test]
async fn retry_after_is_the_combined_wait_and_names_only_what_did_not_cover() {
    let (mut svc, _) = service(minute_and_day(), 1);
    for _ in 0..100 {
        assert_eq!(call(&mut svc).await.status(), StatusCode::OK);
    }
    let denied = call(&mut svc).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    // The minute bandwidth waits 0.6 s for its next token; the day bandwidth covers the cost.
    assert_eq!(
        field(&denied, "ratelimit"),
        r#""minute";r=0;t=1, "day";r=9900;t=9"#
    );
    // Retry-After from the combined wait: 1 s. The day item's `t` of 9 s does not delay it, as its
    // `r` covers the retry: waiting 9 s would only cost the client 8 s.
    assert_eq!(field(&denied, "retry-after"), "1");
    assert_eq!(violated(&denied), serde_json::json!(["minute"]));
}

#[tokio::test]
async fn retry_after_is_the_largest_wait() {
    let (mut svc, clock) = service(burst_and_per_second(), 1);
    // Five per second for four seconds, then four: the burst is spent, one per-second token left.
    for second in 0..5 {
        for _ in 0..(if second < 4 { 5 } else { 4 }) {
            assert_eq!(call(&mut svc).await.status(), StatusCode::OK);
        }
        if second < 4 {
            clock.advance(S);
        }
    }
    let denied = call(&mut svc).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        field(&denied, "ratelimit"),
        r#""burst";r=0;t=1, "per-second";r=1;t=1"#
    );
    assert_eq!(field(&denied, "retry-after"), "1");
    assert_eq!(violated(&denied), serde_json::json!(["burst"]));

    // Cost 2 on the same state: the burst waits 2 s, the per-second bandwidth 0.2 s.
    let limiter: Limiter<u8> = Limiter::new(burst_and_per_second());
    for second in 0..5 {
        let take = if second < 4 { 5 } else { 4 };
        for _ in 0..take {
            assert!(
                limiter
                    .acquire_set_at(&0, 1, (1 + second) * S)
                    .unwrap()
                    .is_allowed()
            );
        }
    }
    let outcome = decide_set_at(&limiter, &0, 2, 5 * S).unwrap();
    let advertiser = Advertiser::new(PolicyName::new("api.v1").unwrap());
    let adv = advertiser.set_advertisement(b"u", &outcome);
    assert_eq!(outcome.retry_after_secs(), Some(2));
    assert_eq!(adv.retry_after, Some(2));
    let names: Vec<_> = advertiser
        .violated(&outcome)
        .iter()
        .map(|n| n.as_str())
        .collect();
    assert_eq!(names, ["burst", "per-second"]);
}

#[test]
fn t_includes_the_shared_cursor_lead_even_for_a_bandwidth_that_hides_it() {
    // `a` holds one token refilled 1/s; `b` ten refilled 1000/s, full again within 10 ms.
    let set = Bandwidths::new([named("a", 1, "1/s"), named("b", 10, "1000/s")]).unwrap();
    let limiter: Limiter<u8> = Limiter::new(set);
    assert!(limiter.acquire_set_at(&0, 1, 10 * S).unwrap().is_allowed());
    // Half a second later `a` holds half a token: denied, and the cursor moves to 10.5 s.
    assert!(
        !limiter
            .acquire_set_at(&0, 1, 10 * S + S / 2)
            .unwrap()
            .is_allowed()
    );
    // A caller whose clock reads 9.5 s: the cursor leads it by 1 s. `a` waits that second plus half
    // a second of refill; `b` is full and covers the cost, so both its waits are 0 and say nothing
    // of the lead, yet its next token also comes only after it.
    let outcome = decide_set_at(&limiter, &0, 1, 9 * S + S / 2).unwrap();
    assert_eq!(outcome.lag_ns(), Some(S));
    let adv = outcome.advertised(AdvertiseOptions::default());
    assert_eq!((adv[0].remaining, adv[0].reset), (0, Some(2)));
    // One token of `b` takes 1 ms, after the 1 s lead: t = 2, not 1.
    assert_eq!((adv[1].remaining, adv[1].reset), (10, Some(2)));
    assert_eq!(outcome.retry_after_secs(), Some(2));
}

#[tokio::test]
async fn every_item_carries_the_one_partition_key_of_the_limiter_key() {
    let limiter: Limiter<String> = Limiter::new(minute_and_day());
    let hasher = PartitionKeyHasher::new(b"a server secret of decent length").unwrap();
    let layer = RateLimitLayer::new(limiter, PolicyName::new("api.v1").unwrap(), user_key)
        .partition_keys(hasher.clone());
    let mut svc = layer.layer(tower::service_fn(ok));
    let resp = call(&mut svc).await;
    let limit = RateLimit::from_headers(Profile::Draft11, resp.headers()).unwrap();
    // Both bandwidths limit the same requests: one partition, the key under the layer's policy.
    let expected = hasher.partition_key(&PolicyName::new("api.v1").unwrap(), b"u");
    assert_eq!(limit.limits.len(), 2);
    for item in &limit.limits {
        assert_eq!(item.partition_key.as_deref(), Some(&expected[..]));
    }
}

#[test]
fn a_decision_not_made_under_the_set_is_not_labelled_with_its_names() {
    let limiter: Limiter<u8> = Limiter::new(minute_and_day());
    let decisions = limiter.acquire_set_at(&0, 1, S).unwrap();
    assert!(SetOutcome::of_set(&minute_and_day(), &decisions, 1, false).is_some());
    // Another config at one position, or another number of bandwidths: a reconfiguration raced.
    let other = Bandwidths::new([
        named("minute", 100, "100/min"),
        named("day", 9_999, "10000/d"),
    ])
    .unwrap();
    assert!(SetOutcome::of_set(&other, &decisions, 1, false).is_none());
    let fewer = Bandwidths::new([named("minute", 100, "100/min")]).unwrap();
    assert!(SetOutcome::of_set(&fewer, &decisions, 1, false).is_none());
}

/// The headers an advertiser writes for one advertisement.
fn written(advertiser: &Advertiser, adv: &bucketproof_headers::layer::Advertisement) -> HeaderMap {
    let mut headers = HeaderMap::new();
    advertiser.write(&mut headers, adv, false);
    headers
}

fn bandwidth() -> impl Strategy<Value = (u64, u64, u64)> {
    // capacity, rate numer, rate denom
    (1u64..60, 0u64..40, 1u64..7)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]

    #[test]
    fn a_key_of_one_unnamed_bandwidth_is_advertised_as_before(
        (capacity, numer, denom) in bandwidth(),
        ops in proptest::collection::vec((0u64..3_000_000_000, 1u64..10, any::<bool>()), 1..40),
        ratio in proptest::option::of(1u64..20),
    ) {
        let config = Config::new(capacity, Rate::new(numer, denom).unwrap()).unwrap();
        // Two limiters in lockstep: one through the one-bandwidth path as the layer used it before
        // sets existed, one through the set path the layer uses now.
        let before: Limiter<u8> = Limiter::new(config);
        let now_: Limiter<u8> = Limiter::new(config);
        let mut advertiser = Advertiser::new(PolicyName::versioned("api", 1).unwrap());
        advertiser.options.max_ratio = ratio;
        advertiser.pk = Some(PartitionKeyHasher::new(b"a server secret of decent length").unwrap());
        let mut now = S;
        for (dt, cost, back) in ops {
            // Now and then a caller whose clock lags the cursor.
            now = if back { now.saturating_sub(dt / 2) } else { now + dt };
            let cost = cost.min(capacity);
            let decision = before.acquire_at(&0, cost, now).unwrap();
            let old = advertiser.advertisement(b"k", &Outcome::of(decision, cost, false));
            let set = decide_set_at(&now_, &0, cost, now).unwrap();
            let new = advertiser.set_advertisement(b"k", &set);
            prop_assert_eq!(&new, &old);
            prop_assert_eq!(written(&advertiser, &new), written(&advertiser, &old));
            prop_assert_eq!(advertiser.violated(&set).len(), usize::from(!decision.is_allowed()));
        }
    }

    #[test]
    fn every_item_is_honest_and_retrying_after_retry_after_succeeds(
        parts in proptest::collection::vec(bandwidth(), 2..5),
        ops in proptest::collection::vec((0u64..3_000_000_000, 1u64..10), 1..40),
        ratio in proptest::option::of(1u64..20),
    ) {
        let set = Bandwidths::new(parts.iter().enumerate().map(|(i, &(capacity, numer, denom))| {
            let config = Config::new(capacity, Rate::new(numer, denom).unwrap()).unwrap();
            if i % 2 == 0 { Bandwidth::new(config) } else {
                Bandwidth::named(&format!("b{i}"), config).unwrap()
            }
        })).unwrap();
        let limiter: Limiter<u8> = Limiter::new(set.clone());
        let mut advertiser = Advertiser::new(PolicyName::versioned("api", 1).unwrap());
        advertiser.options.max_ratio = ratio;
        let mut now = S;
        for (dt, cost) in ops {
            now += dt;
            let cost = cost.min(set.cost_bound());
            let outcome = decide_set_at(&limiter, &0, cost, now).unwrap();
            let adv = advertiser.set_advertisement(b"k", &outcome);
            prop_assert_eq!(adv.policy.policies.len(), set.len());
            prop_assert_eq!(adv.limit.limits.len(), set.len());
            let later = |secs: u64| limiter.peek_set_at(&0, now + secs * S);
            for (i, (limit, part)) in adv.limit.limits.iter().zip(outcome.parts()).enumerate() {
                prop_assert_eq!(&limit.name, &item_name(&set, i).unwrap());
                let whole = part.decision().remaining().whole();
                prop_assert!(limit.remaining <= whole, "r {} > balance {}", limit.remaining, whole);
                let capacity = set.as_slice()[i].config().capacity();
                match limit.reset {
                    Some(t) => {
                        prop_assert!(t >= 1);
                        let balance = later(t)[i].remaining.whole();
                        prop_assert!(balance > whole.min(capacity - 1),
                            "item {}: after t = {} s no new whole token ({} then {})", i, t, whole, balance);
                    }
                    // No refill, or no part exposes the cursor's lead: only a denial that can never
                    // be admitted (every bandwidth short of the cost has a zero rate).
                    None => prop_assert!(set.as_slice()[i].config().rate().numer() == 0
                        || outcome.retry_after() == Some(Wait::Never), "item {} has no t", i),
                }
            }
            if !outcome.is_allowed() {
                match adv.retry_after {
                    Some(ra) => {
                        prop_assert!(ra >= 1);
                        // Every bandwidth covers the cost then (a read-only peek: no traffic between).
                        for (i, peek) in later(ra).iter().enumerate() {
                            prop_assert!(peek.remaining.whole() >= cost, "bandwidth {} short after {} s", i, ra);
                        }
                        // Never earlier than the window of an item that does not cover the cost.
                        for limit in &adv.limit.limits {
                            if limit.remaining < cost {
                                prop_assert!(ra >= limit.reset.unwrap_or(0));
                            }
                        }
                    }
                    None => prop_assert!(set.as_slice().iter().zip(outcome.parts()).any(|(b, p)|
                        b.config().rate().numer() == 0 && p.violated())),
                }
                prop_assert!(!advertiser.violated(&outcome).is_empty());
            }
        }
    }
}
