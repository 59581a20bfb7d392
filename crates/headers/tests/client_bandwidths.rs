//! The pacing client with several service limits in a response: every item is kept, every item is a
//! constraint, and a request waits for the one that allows it last (the client module's docs,
//! "Several service limits").
//!
//! Hand-written responses first, then the deterministic simulation: one pacing client against the
//! exact limiter with two bandwidths (a burst of 20 and 5 per second; 100 per minute and 10,000 per
//! day) never sees a 429, and over generated sets neither.

mod common;
use bucketproof_headers::client::{Pacer, RetryPolicy};
use bucketproof_headers::sim::{self, Population, Scenario};
use bucketproof_limiter::{Bandwidth, Bandwidths, Config, Rate};
use common::{exact_pacer, headers};
use http::StatusCode;
use proptest::prelude::*;

const S: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;

fn pacer() -> Pacer {
    exact_pacer(3)
}

#[test]
fn a_request_waits_for_the_item_that_frees_last() {
    let mut p = pacer();
    // Both exhausted: the first frees in 2 s, the second in 5 s. At 2 s the second still has
    // nothing, so a request then would be denied; the pacer waits the 5 s.
    let obs = p.observe(
        0,
        StatusCode::OK,
        &headers(&[("ratelimit", r#""burst";r=0;t=2, "daily";r=0;t=5"#)]),
    );
    assert_eq!(p.ready_for(1, 0), 5 * S);
    assert_eq!(obs.next_at, 5 * S);
    assert_eq!(obs.binding.unwrap().name.as_str(), "daily");
    assert_eq!(p.binding_for(1, 0).unwrap().name.as_str(), "daily");
}

#[test]
fn an_item_that_covers_the_cost_does_not_hold_the_request_back() {
    let mut p = pacer();
    p.observe(
        0,
        StatusCode::TOO_MANY_REQUESTS,
        &headers(&[("ratelimit", r#""minute";r=0;t=1, "day";r=9900;t=9"#)]),
    );
    // The day item still allows 9,900: only the minute item binds, for 1 s.
    assert_eq!(p.ready_for(1, 0), S);
    assert_eq!(p.binding_for(1, 0).unwrap().name.as_str(), "minute");
    // Both are kept, in wire order, for the caller.
    let names: Vec<_> = p.limits().iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["minute", "day"]);
    assert_eq!(p.constraints().len(), 2);
}

#[test]
fn a_cost_beyond_r_plus_one_waits_at_each_items_own_policy_rate() {
    let mut p = pacer();
    p.observe(
        0,
        StatusCode::OK,
        &headers(&[
            (
                "ratelimit-policy",
                r#""burst";q=20;w=20, "per-second";q=5;w=1"#,
            ),
            ("ratelimit", r#""burst";r=1;t=1, "per-second";r=3;t=1"#),
        ]),
    );
    // Cost 4: per-second covers 3 and gets one more within its t of 1 s. The burst gets a second
    // unit within its t of 1 s, then two more at its q / w of 1 per second: 3 s.
    assert_eq!(p.ready_for(4, 0), 3 * S);
    assert_eq!(p.binding_for(4, 0).unwrap().name.as_str(), "burst");
    // Cost 2 fits both windows: 1 s.
    assert_eq!(p.ready_for(2, 0), S);
    assert_eq!(p.ready_for(1, 0), 0);
}

#[test]
fn a_send_spends_from_every_item_and_a_passed_window_leaves_alone() {
    let mut p = pacer();
    p.observe(
        0,
        StatusCode::OK,
        &headers(&[("ratelimit", r#""a";r=2;t=10, "b";r=1;t=3"#)]),
    );
    assert_eq!(p.ready_for(1, 0), 0);
    p.record_send(1, 0);
    // `b` is spent now (its window ends at 3 s), `a` has one left.
    assert_eq!(p.ready_for(1, 0), 3 * S);
    assert_eq!(p.binding_for(1, 0).unwrap().name.as_str(), "b");
    // At 3 s `b`'s window has passed: it leaves, `a` keeps counting.
    p.record_send(1, 3 * S);
    assert_eq!(p.constraints().len(), 1);
    assert_eq!(p.constraints()[0].limit.name.as_str(), "a");
    assert_eq!(p.constraints()[0].budget, 0);
    assert_eq!(p.ready_for(1, 3 * S), 10 * S);
}

#[test]
fn items_that_differ_in_partition_key_or_window_are_never_collapsed() {
    let mut p = pacer();
    p.observe(
        0,
        StatusCode::OK,
        &headers(&[(
            "ratelimit",
            r#""api";r=5;t=1;pk=:AAAA:, "api";r=0;t=10;pk=:BBBB:, "api";r=0;t=30;pk=:BBBB:"#,
        )]),
    );
    // Three constraints, though two share a name and two share a name and a partition key.
    assert_eq!(p.constraints().len(), 3);
    assert_eq!(p.ready_for(1, 0), 30 * S);
    let binding = p.binding_for(1, 0).unwrap();
    assert_eq!(
        (binding.reset, binding.partition_key.as_deref()),
        (Some(30), Some(&b"\x04\x10\x41"[..]))
    );
}

#[test]
fn retry_after_still_takes_precedence_over_every_item() {
    let mut p = pacer();
    p.observe(
        0,
        StatusCode::OK,
        &headers(&[
            ("ratelimit", r#""a";r=0;t=50, "b";r=0;t=60"#),
            ("retry-after", "2"),
        ]),
    );
    // Section 7: Retry-After MUST take precedence, the effective windows MAY be ignored.
    assert_eq!(p.ready_for(1, 0), 2 * S);
    assert!(p.constraints().is_empty());
    assert_eq!(p.limits().len(), 2, "still kept for the caller");
}

/// One client, its own bucket, effectively no retry budget limit: any 429 is the pacer's fault.
fn lone_client(requests: u32, cost: u64, rtt: u64, think: u64, seed: u64) -> Scenario {
    Scenario {
        name: "lone".into(),
        clients: 1,
        requests_per_client: requests,
        cost,
        // Unused by `run_bandwidths`: the set replaces the bucket.
        capacity: 1,
        rate: (1, 1),
        rtt,
        think_mean: think,
        retry: RetryPolicy {
            max_attempts: 1000,
            deadline: u64::MAX / 4,
        },
        shared_bucket: true,
        seed,
    }
}

fn named(name: &str, capacity: u64, rate: &str) -> Bandwidth {
    Bandwidth::named(name, Config::new(capacity, rate.parse().unwrap()).unwrap()).unwrap()
}

#[test]
fn a_lone_pacing_client_never_sees_a_429_from_a_burst_of_20_and_5_per_second() {
    let set = Bandwidths::new([named("burst", 20, "1/s"), named("per-second", 5, "5/s")]).unwrap();
    // Wants ~10 per second: the per-second bandwidth binds first, then the burst runs dry and
    // binds at 1 per second.
    let m = sim::run_bandwidths(
        &lone_client(200, 1, 20 * MS, 100 * MS, 7),
        &set,
        Population::Pacing,
    )
    .unwrap();
    assert_eq!((m.throttled, m.succeeded, m.attempts), (0, 200, 200));
    // The burst holds 20 at most, and refills 1 per second: 200 requests need 180 s and more.
    let naive = sim::run_bandwidths(
        &lone_client(200, 1, 20 * MS, 100 * MS, 7),
        &set,
        Population::Naive,
    )
    .unwrap();
    assert!(naive.throttled > 0, "the set does limit this client");
}

#[test]
fn a_lone_pacing_client_never_sees_a_429_from_100_per_minute_and_10000_per_day() {
    let set = Bandwidths::new([
        named("minute", 100, "100/min"),
        named("day", 10_000, "10000/d"),
    ])
    .unwrap();
    // 11,000 requests as fast as allowed: the minute bandwidth binds for the first ~10,600, then the
    // day bandwidth is spent and binds at one request per 8.64 s.
    let m = sim::run_bandwidths(
        &lone_client(11_000, 1, 10 * MS, MS, 11),
        &set,
        Population::Pacing,
    )
    .unwrap();
    assert_eq!((m.throttled, m.succeeded, m.attempts), (0, 11_000, 11_000));
    // Waits of ~0.6 s (rounded up to 1 s) while the minute binds, ~9 s once the day does.
    assert!(
        m.delay_percentile(50) <= 2 * S,
        "{}",
        m.delay_percentile(50)
    );
    assert!(
        *m.delays.last().unwrap() >= 8 * S,
        "the day bandwidth bound at the end"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn a_lone_pacing_client_never_sees_a_429_from_any_set(
        parts in proptest::collection::vec((1u64..20, 1u64..20, 1u64..5), 2..4),
        cost in 1u64..5,
        rtt_ms in 0u64..200,
        think_ms in 0u64..500,
        seed in any::<u64>(),
    ) {
        let set = Bandwidths::new(parts.iter().enumerate().map(|(i, &(capacity, numer, denom))| {
            let config = Config::new(capacity, Rate::new(numer, denom).unwrap()).unwrap();
            if i == 0 { Bandwidth::new(config) } else {
                Bandwidth::named(&format!("b{i}"), config).unwrap()
            }
        })).unwrap();
        let cost = cost.min(set.cost_bound());
        let scenario = lone_client(30, cost, rtt_ms * MS, think_ms * MS, seed);
        let m = sim::run_bandwidths(&scenario, &set, Population::Pacing).unwrap();
        prop_assert_eq!(m.throttled, 0);
        prop_assert_eq!(m.succeeded, 30);
        prop_assert_eq!(m.attempts, 30);
    }
}
