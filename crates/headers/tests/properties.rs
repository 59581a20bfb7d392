//! Properties of the HTTP contract, checked with proptest over generated inputs.
//!
//! - what we serialize parses back to the same value;
//! - no parser or the pacer panics on arbitrary bytes;
//! - the advertised `r` never exceeds the limiter's true whole balance, and `t` is honest: with no
//!   traffic, `t` seconds later at least `r_true + 1` whole tokens exist;
//! - `Retry-After` is never 0 for a denial and retrying after it succeeds;
//! - one pacing client against the exact limiter never sees a 429 (the deterministic simulation);
//! - a merge is never more permissive than either input;
//! - the raw user id never appears in any header.

use bucketproof_headers::client::{Pacer, PacerConfig};
use bucketproof_headers::layer::Advertiser;
use bucketproof_headers::legacy::{self, ResetFormat};
use bucketproof_headers::mapping::AdvertiseOptions;
use bucketproof_headers::merge::{Fields, merge};
use bucketproof_headers::pk::PartitionKeyHasher;
use bucketproof_headers::sim::{self, Population, Scenario};
use bucketproof_headers::source::Outcome;
use bucketproof_headers::{
    PolicyName, Profile, QuotaPolicy, QuotaUnit, RateLimit, RateLimitPolicy, ServiceLimit,
};
use bucketproof_limiter::{Config, Limiter, Rate};
use http::{HeaderMap, HeaderValue, StatusCode};
use proptest::prelude::*;

const P: Profile = Profile::Draft11;
const SF_MAX: u64 = 999_999_999_999_999;
const S: u64 = 1_000_000_000;

fn policy_name() -> impl Strategy<Value = PolicyName> {
    "[ -~]{0,12}".prop_map(|s| PolicyName::new(s).unwrap())
}

fn unit() -> impl Strategy<Value = QuotaUnit> {
    prop_oneof![
        Just(QuotaUnit::Requests),
        Just(QuotaUnit::ContentBytes),
        Just(QuotaUnit::ConcurrentRequests),
        // "request" and "requests" are the default unit, not `Other`.
        "[a-z][a-z0-9-]{0,10}"
            .prop_filter("not the default", |s| s != "request"
                && s != "requests"
                && s != "content-bytes"
                && s != "concurrent-requests")
            .prop_map(QuotaUnit::Other),
    ]
}

fn quota_policy() -> impl Strategy<Value = QuotaPolicy> {
    (
        policy_name(),
        0..=SF_MAX,
        unit(),
        proptest::option::of(1..=SF_MAX),
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..24)),
    )
        .prop_map(|(name, quota, unit, window, partition_key)| QuotaPolicy {
            name,
            quota,
            unit,
            window,
            partition_key,
        })
}

fn service_limit() -> impl Strategy<Value = ServiceLimit> {
    (
        policy_name(),
        0..=SF_MAX,
        proptest::option::of(0..=SF_MAX),
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..24)),
    )
        .prop_map(|(name, remaining, reset, partition_key)| ServiceLimit {
            name,
            remaining,
            reset,
            partition_key,
        })
}

fn rate_limit_policy() -> impl Strategy<Value = RateLimitPolicy> {
    proptest::collection::vec(quota_policy(), 1..5)
        .prop_map(|policies| RateLimitPolicy { policies })
}

fn rate_limit() -> impl Strategy<Value = RateLimit> {
    proptest::collection::vec(service_limit(), 1..5).prop_map(|limits| RateLimit { limits })
}

/// Header-ish bytes: mostly SF punctuation and digits so the parser gets deep, plus anything.
fn field_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..64),
        proptest::collection::vec(
            proptest::sample::select(b"\"abqrtwpk=;:,-.?*()0123456789 \t\\".to_vec()),
            0..64
        ),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn serialized_policy_parses_back_to_the_same_value(p in rate_limit_policy()) {
        let wire = p.serialize(P).unwrap();
        prop_assert_eq!(RateLimitPolicy::parse(P, wire.as_bytes()).unwrap(), p.clone());
        // And through a header value, split over two field lines when possible.
        let mut h = HeaderMap::new();
        let (a, b) = p.policies.split_at(p.policies.len() / 2);
        for part in [a, b] {
            if !part.is_empty() {
                let v = RateLimitPolicy { policies: part.to_vec() }.to_header_value(P).unwrap();
                h.append("ratelimit-policy", v);
            }
        }
        prop_assert_eq!(RateLimitPolicy::from_headers(P, &h), Some(p));
    }

    #[test]
    fn serialized_limit_parses_back_to_the_same_value(l in rate_limit()) {
        let wire = l.serialize(P).unwrap();
        prop_assert_eq!(RateLimit::parse(P, wire.as_bytes()).unwrap(), l.clone());
        let mut h = HeaderMap::new();
        h.insert("ratelimit", l.to_header_value(P).unwrap());
        prop_assert_eq!(RateLimit::from_headers(P, &h), Some(l));
    }

    #[test]
    fn out_of_range_values_are_refused_not_altered(v in (SF_MAX + 1)..=u64::MAX) {
        let l = RateLimit { limits: vec![ServiceLimit {
            name: PolicyName::new("a").unwrap(), remaining: v, reset: None, partition_key: None }] };
        prop_assert!(l.serialize(P).is_err());
    }

    #[test]
    fn parsers_never_panic_on_arbitrary_bytes(a in field_bytes(), b in field_bytes()) {
        let _ = RateLimitPolicy::parse(P, &a);
        let _ = RateLimit::parse(P, &a);
        let _ = RateLimit::parse_lines(P, [&a[..], &b[..]]);
        let mut h = HeaderMap::new();
        for (name, bytes) in [("ratelimit", &a), ("ratelimit-policy", &b), ("retry-after", &a),
                              ("age", &b), ("date", &a), ("x-ratelimit-reset", &b),
                              ("x-ratelimit-limit", &a)] {
            if let Ok(v) = HeaderValue::from_bytes(bytes) {
                h.append(name, v);
            }
        }
        let _ = RateLimit::from_headers(P, &h);
        let _ = legacy::read_any(&h, ResetFormat::Heuristic { now_unix: Some(1_700_000_000) });
        let mut pacer = Pacer::new(PacerConfig::default(), 1);
        for status in [StatusCode::OK, StatusCode::TOO_MANY_REQUESTS] {
            let obs = pacer.observe(5, status, &h);
            prop_assert!(obs.next_at >= 5);
        }
        let _ = Fields::from_headers(P, &h);
    }

    #[test]
    fn advertised_r_never_exceeds_the_true_balance_and_t_is_honest(
        capacity in 1u64..200,
        numer in 0u64..50,
        denom in 1u64..7,
        ops in proptest::collection::vec((0u64..3_000_000_000, 1u64..10), 1..40),
        ratio in proptest::option::of(1u64..20),
    ) {
        let config = Config::new(capacity, Rate::new(numer, denom).unwrap()).unwrap();
        let limiter: Limiter<u8> = Limiter::new(config);
        let mut now = S;
        for (dt, cost) in ops {
            now += dt;
            let cost = cost.min(capacity);
            let decision = limiter.acquire_at(&0, cost, now).unwrap();
            let outcome = Outcome { decision, config, cost, degraded: false };
            let adv = outcome.advertised(AdvertiseOptions { max_ratio: ratio });
            let whole = decision.remaining().whole();
            prop_assert!(adv.remaining <= whole, "r {} > balance {}", adv.remaining, whole);
            if let Some(t) = adv.reset {
                prop_assert!(t >= 1, "t is positive whenever the bucket refills");
                let later = limiter.peek_at(&0, now + t * S);
                prop_assert!(later.remaining.whole() > whole.min(capacity - 1),
                    "after t = {} s no new whole token: {:?} vs {}", t, later, whole);
            } else {
                prop_assert_eq!(numer, 0);
            }
            if !decision.is_allowed() {
                let ra = outcome.retry_after_secs();
                if numer > 0 {
                    let ra = ra.unwrap();
                    prop_assert!(ra >= 1);
                    // Retrying after Retry-After succeeds (a read-only peek: no traffic in between).
                    let at = limiter.peek_at(&0, now + ra * S);
                    prop_assert!(at.remaining.whole() >= cost);
                } else {
                    prop_assert_eq!(ra, None);
                }
            }
        }
    }

    #[test]
    fn a_single_pacing_client_never_sees_a_429(
        capacity in 1u64..20,
        numer in 1u64..20,
        denom in 1u64..5,
        cost in 1u64..5,
        rtt_ms in 0u64..200,
        think_ms in 0u64..500,
        seed in any::<u64>(),
    ) {
        let scenario = Scenario {
            name: "prop".into(),
            clients: 1,
            requests_per_client: 30,
            cost: cost.min(capacity),
            capacity,
            rate: (numer, denom),
            rtt: rtt_ms * 1_000_000,
            think_mean: think_ms * 1_000_000,
            retry: bucketproof_headers::client::RetryPolicy { max_attempts: 1000, deadline: u64::MAX / 4 },
            shared_bucket: true,
            seed,
        };
        let m = sim::run(&scenario, Population::Pacing).unwrap();
        prop_assert_eq!(m.throttled, 0);
        prop_assert_eq!(m.succeeded, 30);
        prop_assert_eq!(m.attempts, 30);
    }

    #[test]
    fn merge_is_never_more_permissive_than_either_side(
        o_l in proptest::option::of(rate_limit()), g_l in proptest::option::of(rate_limit()),
        o_p in proptest::option::of(rate_limit_policy()), g_p in proptest::option::of(rate_limit_policy()),
    ) {
        let origin = Fields { policy: o_p, limit: o_l };
        let gateway = Fields { policy: g_p, limit: g_l };
        let merged = merge(&origin, &gateway);
        let m_limits = merged.limit.map(|l| l.limits).unwrap_or_default();
        let m_policies = merged.policy.map(|p| p.policies).unwrap_or_default();
        for side in [&origin, &gateway] {
            for l in side.limit.iter().flat_map(|f| &f.limits) {
                let m = m_limits.iter().find(|m| m.name == l.name && m.partition_key == l.partition_key);
                let m = m.expect("no limit is removed");
                prop_assert!(m.remaining <= l.remaining);
                let t_ok = match (m.reset, l.reset) {
                    (None, _) => true,
                    (Some(mt), Some(lt)) => mt >= lt,
                    (Some(_), None) => false,
                };
                prop_assert!(t_ok, "t {:?} shorter than {:?}", m.reset, l.reset);
            }
            for p in side.policy.iter().flat_map(|f| &f.policies) {
                let m = m_policies.iter().find(|m| m.name == p.name
                    && m.partition_key == p.partition_key && m.unit == p.unit);
                let m = m.expect("no policy is removed");
                prop_assert!(m.quota <= p.quota);
                let w_ok = match (m.window, p.window) {
                    (None, _) => true,
                    (Some(mw), Some(pw)) => mw >= pw,
                    (Some(_), None) => false,
                };
                prop_assert!(w_ok, "w {:?} shorter than {:?}", m.window, p.window);
            }
        }
    }

    #[test]
    fn the_raw_user_id_never_appears_in_any_header(
        user in "[a-z]{6,12}@[a-z]{4,8}\\.(com|org)",
        secret in proptest::collection::vec(any::<u8>(), 16..48),
        cost in 1u64..4,
    ) {
        let config = Config::new(3, Rate::per_second(1)).unwrap();
        let limiter: Limiter<String> = Limiter::new(config);
        let mut advertiser = Advertiser::new(PolicyName::versioned("api", 1).unwrap());
        advertiser.pk = Some(PartitionKeyHasher::new(&secret).unwrap());
        for _ in 0..3 {
            let decision = limiter.acquire_at(&user, cost, S).unwrap();
            let outcome = Outcome { decision, config, cost, degraded: false };
            let adv = advertiser.advertisement(user.as_bytes(), &outcome);
            let mut h = HeaderMap::new();
            advertiser.write(&mut h, &adv, false);
            let local = user.split('@').next().unwrap();
            for (_, v) in &h {
                let v = String::from_utf8_lossy(v.as_bytes());
                prop_assert!(!v.contains(&user) && !v.contains(local), "{}", v);
            }
            let pk = adv.limit.limits[0].partition_key.clone().unwrap();
            prop_assert!(!pk.windows(local.len()).any(|w| w == local.as_bytes()));
        }
    }
}
