//! The script against the exact core, decision by decision, in injected-time mode.
//!
//! Oracles: `bucketproof_limiter::transition` (the core's single-bucket transition) for the balance,
//! decision, remaining, retry_after and reset_after; the in-memory `Limiter` for request-id replays.
//! Traces are seeded (ChaCha8) and include 100-year idle gaps, clock rollbacks, instants next to
//! `u64::MAX`, retries exactly at and 1 ns before `retry_after`, costs equal to the capacity, invalid
//! costs, and configs at both edges of the accepted range.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use bucketproof_limiter::internal::{Attempt, snapshot, transition};
use bucketproof_limiter::{
    AcquireError, BucketState, Config, Limiter, ManualClock, NANOS_PER_SECOND, Nanos, Rate,
    Request, Wait,
};
use bucketproof_redis::{
    BuildError, RangeError, RedisAcquireError, RedisLimiter, Source, max_capacity,
};
use common::{below, chance, cleanup, heavy, redis_url, unique_prefix};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

const SECOND: Nanos = NANOS_PER_SECOND;
const HUNDRED_YEARS: Nanos = 100 * 365 * 86_400 * SECOND;

/// Configs across the accepted range, its edges included.
fn configs() -> Vec<Config> {
    let rate = |p, q| Rate::new(p, q).unwrap();
    let at_edge = |r: Rate| Config::new(max_capacity(r).unwrap(), r).unwrap();
    vec![
        Config::new(5, Rate::per_second(1)).unwrap(),
        Config::new(3, rate(7, 3)).unwrap(),
        Config::new(1, rate(1, 3600)).unwrap(),
        Config::new(10, Rate::ZERO).unwrap(),
        Config::new(100, rate(1000, 7)).unwrap(),
        // Edges: the largest capacity for each rate.
        at_edge(Rate::per_second(1)),
        at_edge(rate(1, 86_400)),
        at_edge(rate(1, 1 << 20)),
        at_edge(rate(7_000_003, 9_007_196)),
        at_edge(Rate::ZERO),
        // The largest p: one token of capacity, p = 2^53 - 10^9 units per ns.
        Config::new(1, Rate::per_second((1 << 53) - 1_000_000_000)).unwrap(),
        // p exactly at the time headroom.
        at_edge(Rate::per_second(3_000_000_000)),
    ]
}

/// The next `now` given the previous one and the last denial's retry_after: a mix of the interesting
/// steps.
fn next_now(rng: &mut ChaCha8Rng, now: Nanos, retry: Option<Nanos>) -> Nanos {
    match below(rng, 14) {
        0 => now,
        1 => now.saturating_add(1),
        2 => now.saturating_add(below(rng, 1_000_000)),
        3 => now.saturating_add(below(rng, 10 * SECOND)),
        4 => now.saturating_add(HUNDRED_YEARS),
        5 => now.saturating_sub(below(rng, 5 * SECOND)), // rollback
        6 => u64::MAX - below(rng, 3 * SECOND),          // the end of the clock
        7 | 8 => match retry {
            Some(r) => now.saturating_add(r), // exactly at the boundary
            None => now.saturating_add(below(rng, SECOND)),
        },
        9 | 10 => match retry {
            Some(r) => now.saturating_add(r.saturating_sub(1)), // 1 ns before
            None => now.saturating_add(below(rng, 1000)),
        },
        11 => below(rng, 1 << 62), // anywhere
        12 => now.saturating_add(below(rng, 100 * 86_400 * SECOND)),
        _ => now.saturating_add(below(rng, 1000)),
    }
}

fn next_cost(rng: &mut ChaCha8Rng, capacity: u64) -> u64 {
    match below(rng, 12) {
        0 => 0,                          // invalid
        1 => capacity.saturating_add(1), // invalid
        2 | 3 => capacity,
        4..=7 => 1,
        _ => 1 + below(rng, capacity),
    }
}

#[tokio::test]
async fn decisions_equal_the_exact_core_on_random_traces() {
    let Some(url) = redis_url("decisions_equal_the_exact_core_on_random_traces") else {
        return;
    };
    let ops_per_trace = if heavy() { 4000 } else { 400 };
    let mut checked = 0u64;
    let mut exact_fits = 0u64;
    let mut peeks = 0u64;
    let mut saturated = 0u64;
    for (index, config) in configs().into_iter().enumerate() {
        let prefix = unique_prefix("oracle");
        let limiter = RedisLimiter::builder(config)
            .prefix(&prefix)
            .recovery(bucketproof_redis::Recovery::Trusting)
            .connect(&url)
            .await
            .expect("connect");
        let mut rng = ChaCha8Rng::seed_from_u64(0x00B0_C4E7 + index as u64);
        let keys = ["alice", "bob", "carol"];
        let mut model: HashMap<&str, BucketState> = HashMap::new();
        let mut now: Nanos = below(&mut rng, 1 << 40);
        let mut retry = None;
        for op in 0..ops_per_trace {
            now = next_now(&mut rng, now, retry);
            let key = keys[below(&mut rng, 3) as usize];
            let cost = next_cost(&mut rng, config.capacity());
            let state = model
                .get(key)
                .copied()
                .unwrap_or_else(|| BucketState::full(&config, now));
            if op % 5 == 0 {
                // Read-only peek at the same instant: the core's snapshot of the model state.
                let peek = limiter.peek(key, Some(now)).await.expect("peek");
                let view = snapshot(&config, state, now);
                assert_eq!(peek.remaining, view.remaining, "peek at op {op}");
                assert_eq!(peek.reset_after, view.reset_after, "peek at op {op}");
                assert_eq!(peek.present, model.contains_key(key));
                peeks += 1;
            }
            let expected = transition(&config, state, Attempt { cost, now });
            let got = limiter.acquire_at(key, cost, now).await;
            let ctx =
                || format!("config #{index} {config:?} op {op} key {key} now {now} cost {cost}");
            match (expected, got) {
                (Err(e), Err(RedisAcquireError::Invalid(g))) => assert_eq!(e, g, "{}", ctx()),
                (Ok((next, decision)), Ok(outcome)) => {
                    assert_eq!(outcome.source, Source::Store);
                    assert!(!outcome.acquired.replayed, "{}", ctx());
                    assert_eq!(
                        outcome.acquired.created,
                        !model.contains_key(key),
                        "{}",
                        ctx()
                    );
                    assert_eq!(outcome.decision(), decision, "{}", ctx());
                    assert_eq!(outcome.decision().retry_after(), decision.retry_after());
                    assert_eq!(outcome.decision().reset_after(), decision.reset_after());
                    if state.refilled(&config, now).balance() == config.capacity_units()
                        && state.balance() < config.capacity_units()
                    {
                        saturated += 1;
                    }
                    retry = match decision.retry_after() {
                        Some(Wait::After(r)) => Some(r),
                        _ => None,
                    };
                    if decision.is_allowed()
                        && state.refilled(&config, now).balance()
                            == cost as u128 * config.units_per_token()
                    {
                        exact_fits += 1; // admitted with exactly nothing to spare
                    }
                    model.insert(key, next);
                    checked += 1;
                }
                (e, g) => panic!("{}: expected {e:?}, got {g:?}", ctx()),
            }
        }
        // The stored state is the model's, unit for unit.
        let client = redis::Client::open(url.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        for (key, state) in &model {
            let stored = common::stored_bucket(&mut conn, &limiter.redis_key(key))
                .await
                .expect("a stored bucket");
            assert_eq!(stored.balance, state.balance(), "stored balance of {key}");
            assert_eq!(stored.last_refill, state.last_refill());
        }
        cleanup(&url, &prefix).await;
    }
    // The traces must reach what they are for, or the comparison proves little.
    assert!(
        checked >= 12 * ops_per_trace as u64 * 3 / 4,
        "too few valid ops: {checked}"
    );
    assert!(
        saturated > 10,
        "no trace refilled a bucket to capacity: {saturated}"
    );
    assert!(peeks > 100, "peeks checked: {peeks}");
    assert!(
        exact_fits > 10,
        "no admission at the exact boundary: {exact_fits}"
    );
}

#[tokio::test]
async fn retry_after_is_tight_through_redis() {
    let Some(url) = redis_url("retry_after_is_tight_through_redis") else {
        return;
    };
    for config in configs().into_iter().filter(|c| !c.rate().is_zero()) {
        let prefix = unique_prefix("tight");
        let limiter = RedisLimiter::builder(config)
            .prefix(&prefix)
            .recovery(bucketproof_redis::Recovery::Trusting)
            .connect(&url)
            .await
            .unwrap();
        let cap = config.capacity();
        let t0 = 1_000 * SECOND;
        assert!(
            limiter
                .acquire_at("k", cap, t0)
                .await
                .unwrap()
                .decision()
                .is_allowed()
        );
        let denied = limiter.acquire_at("k", 1, t0 + 1).await.unwrap().decision();
        if denied.is_allowed() {
            continue; // a rate so fast that 1 ns refills a token
        }
        let Some(Wait::After(wait)) = denied.retry_after() else {
            panic!("finite rate gives a finite wait");
        };
        let early = limiter.acquire_at("k", 1, t0 + 1 + wait - 1).await.unwrap();
        assert!(
            !early.decision().is_allowed(),
            "{config:?}: 1 ns early must fail"
        );
        let on_time = limiter.acquire_at("k", 1, t0 + 1 + wait).await.unwrap();
        assert!(
            on_time.decision().is_allowed(),
            "{config:?}: at retry_after must pass"
        );
        cleanup(&url, &prefix).await;
    }
}

/// Request ids: the Redis limiter and the in-memory limiter (same dedupe settings) agree on every
/// decision and every replay, including stale ids re-used after the window and FIFO eviction.
#[tokio::test]
async fn request_id_replays_equal_the_in_memory_limiter() {
    let Some(url) = redis_url("request_id_replays_equal_the_in_memory_limiter") else {
        return;
    };
    let window = Duration::from_secs(5);
    let per_key = 3;
    for seed in 0..4u64 {
        let config = configs()[seed as usize % 3];
        let prefix = unique_prefix("rid");
        let redis = RedisLimiter::builder(config)
            .prefix(&prefix)
            .dedupe(window, per_key)
            .recovery(bucketproof_redis::Recovery::Trusting)
            .connect(&url)
            .await
            .unwrap();
        let core: Limiter<String, ManualClock> = Limiter::builder(config)
            .clock(ManualClock::new(0))
            .dedupe(window, per_key)
            .sweep_per_op(0)
            .build();
        let mut rng = ChaCha8Rng::seed_from_u64(0x001D_5EED + seed);
        let mut now: Nanos = SECOND;
        let mut replays = 0;
        let mut stale_reuse = 0;
        for op in 0..400 {
            now = match below(&mut rng, 6) {
                0 => now.saturating_sub(below(&mut rng, 2 * SECOND)),
                1 => now + 6 * SECOND, // past the window
                _ => now + below(&mut rng, SECOND),
            };
            let key = ["a", "b"][below(&mut rng, 2) as usize].to_string();
            let cost = next_cost(&mut rng, config.capacity());
            let mut request = Request::cost(cost).at(now);
            if chance(&mut rng, 4, 5) {
                request = request.id(below(&mut rng, 6));
            }
            let expected = core.acquire_with(&key, request);
            let got = redis.acquire_with(&key, request).await;
            match (expected, got) {
                (Err(e), Err(RedisAcquireError::Invalid(g))) => assert_eq!(e, g),
                (Ok(e), Ok(g)) => {
                    assert_eq!(
                        g.acquired.decision, e.decision,
                        "seed {seed} op {op} {request:?}"
                    );
                    assert_eq!(
                        g.acquired.replayed, e.replayed,
                        "seed {seed} op {op} {request:?}"
                    );
                    if e.replayed {
                        replays += 1;
                    } else if request.request_id.is_some() {
                        stale_reuse += 1;
                    }
                }
                (e, g) => panic!("seed {seed} op {op}: expected {e:?}, got {g:?}"),
            }
        }
        assert!(replays > 20, "seed {seed}: only {replays} replays");
        assert!(
            stale_reuse > 20,
            "seed {seed}: only {stale_reuse} fresh uses of ids"
        );
        cleanup(&url, &prefix).await;
    }
}

/// TTL = ceil(time until full) in ms, never 0; a bucket that can never refill never expires.
#[tokio::test]
async fn ttl_is_the_time_until_full_rounded_up_and_never_zero() {
    let Some(url) = redis_url("ttl_is_the_time_until_full_rounded_up_and_never_zero") else {
        return;
    };
    let prefix = unique_prefix("ttl");
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    // 1 token per 7.5 s, capacity 4: taking 3 leaves 22.5 s to full.
    let config = Config::new(4, Rate::new(2, 15).unwrap()).unwrap();
    let limiter = RedisLimiter::builder(config)
        .prefix(&prefix)
        .dedupe(Duration::from_millis(1), 1)
        .recovery(bucketproof_redis::Recovery::Trusting)
        .connect(&url)
        .await
        .unwrap();
    let outcome = limiter.acquire("t", 3).await.unwrap();
    let Wait::After(reset) = outcome.decision().reset_after() else {
        panic!("finite")
    };
    assert_eq!(reset, 22_500_000_000);
    let pttl: i64 = redis::cmd("PTTL")
        .arg(limiter.redis_key("t"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(pttl <= 22_500 && pttl > 22_000, "PTTL {pttl}");
    // A full bucket after a 1-token acquire on a fast rate: TTL is tiny but at least 1 ms.
    let fast = Config::new(1, Rate::per_second(1_000_000_000)).unwrap();
    let limiter = RedisLimiter::builder(fast)
        .prefix(&prefix)
        .recovery(bucketproof_redis::Recovery::Trusting)
        .connect(&url)
        .await
        .unwrap();
    limiter.acquire("f", 1).await.unwrap();
    let pttl: i64 = redis::cmd("PTTL")
        .arg(limiter.redis_key("f"))
        .query_async(&mut conn)
        .await
        .unwrap();
    // 1 ms set; by the time PTTL runs it may read 1, 0 (about to expire) or -2 (gone), never -1.
    assert!(
        matches!(pttl, 0 | 1 | -2),
        "1 ns to full rounds up to 1 ms, got {pttl}"
    );
    // No refill: never expires.
    let never = Config::new(2, Rate::ZERO).unwrap();
    let limiter = RedisLimiter::builder(never)
        .prefix(&prefix)
        .recovery(bucketproof_redis::Recovery::Trusting)
        .connect(&url)
        .await
        .unwrap();
    limiter.acquire("n", 1).await.unwrap();
    let pttl: i64 = redis::cmd("PTTL")
        .arg(limiter.redis_key("n"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(pttl, -1, "a bucket that cannot refill must not expire");
    cleanup(&url, &prefix).await;
}

/// NOSCRIPT: after SCRIPT FLUSH the next call reloads the script and decides as before.
#[tokio::test]
async fn noscript_reloads() {
    let Some(url) = redis_url("noscript_reloads") else {
        return;
    };
    let prefix = unique_prefix("noscript");
    let config = Config::new(2, Rate::per_second(1)).unwrap();
    let limiter = RedisLimiter::builder(config)
        .prefix(&prefix)
        .recovery(bucketproof_redis::Recovery::Trusting)
        .connect(&url)
        .await
        .unwrap();
    assert!(
        limiter
            .acquire_at("k", 1, 0)
            .await
            .unwrap()
            .decision()
            .is_allowed()
    );
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap();
    let second = limiter.acquire_at("k", 1, 0).await.unwrap();
    assert!(second.decision().is_allowed());
    assert_eq!(second.decision().remaining().whole(), 0);
    cleanup(&url, &prefix).await;
}

/// Another config on the same stored bucket is a typed error and changes nothing.
#[tokio::test]
async fn a_bucket_stored_under_another_config_is_refused() {
    let Some(url) = redis_url("a_bucket_stored_under_another_config_is_refused") else {
        return;
    };
    let prefix = unique_prefix("mismatch");
    let a = Config::new(2, Rate::per_second(1)).unwrap();
    let b = Config::new(2, Rate::new(1, 3).unwrap()).unwrap();
    let la = RedisLimiter::builder(a)
        .prefix(&prefix)
        .recovery(bucketproof_redis::Recovery::Trusting)
        .connect(&url)
        .await
        .unwrap();
    let lb = RedisLimiter::builder(b)
        .prefix(&prefix)
        .recovery(bucketproof_redis::Recovery::Trusting)
        .connect(&url)
        .await
        .unwrap();
    la.acquire_at("k", 1, 0).await.unwrap();
    let err = lb.acquire_at("k", 1, 0).await.unwrap_err();
    assert!(
        matches!(err, RedisAcquireError::ConfigMismatch(_)),
        "{err:?}"
    );
    let again = la.acquire_at("k", 1, 0).await.unwrap();
    assert_eq!(
        again.decision().remaining().whole(),
        0,
        "the refused call charged nothing"
    );
    // Counted as the store's errors, and every call that returned as a timed store call.
    let (sa, sb) = (la.stats(), lb.stats());
    assert_eq!((sa.store_calls, sa.store_errors), (2, 0), "{sa:?}");
    assert_eq!((sb.store_calls, sb.store_errors), (1, 1), "{sb:?}");
    assert!(sa.store_nanos > 0, "{sa:?}");
    cleanup(&url, &prefix).await;
}

/// Configs outside the exact range are refused before any connection, with the limit named.
#[tokio::test]
async fn configs_outside_the_exact_range_are_refused_by_name() {
    for rate in [Rate::per_second(1), Rate::new(1, 86_400).unwrap()] {
        let cap = max_capacity(rate).unwrap();
        let config = Config::new(cap + 1, rate).unwrap();
        // An unroutable URL: the range check must come first.
        let err = RedisLimiter::builder(config)
            .recovery(bucketproof_redis::Recovery::Trusting)
            .connect("redis://127.0.0.1:1/")
            .await
            .unwrap_err();
        match err {
            BuildError::Range(RangeError::OutOfExactRange { limit, .. }) => {
                assert_eq!(limit, 1 << 53);
                assert!(err_text(cap + 1, rate).contains("2^53"));
            }
            other => panic!("expected a range error, got {other:?}"),
        }
    }
    let invalid = Config::new(1, Rate::per_second(1)).unwrap();
    let err = RedisLimiter::builder(invalid)
        .prefix("bad{")
        .recovery(bucketproof_redis::Recovery::Trusting)
        .connect("redis://127.0.0.1:1/")
        .await
        .unwrap_err();
    assert!(matches!(err, BuildError::Prefix(_)));
    let _ = AcquireError::InvalidCost {
        cost: 0,
        capacity: 1,
    };
}

fn err_text(capacity: u64, rate: Rate) -> String {
    bucketproof_redis::check_exact(&Config::new(capacity, rate).unwrap())
        .unwrap_err()
        .to_string()
}

/// Reconfigure (per-key overrides, grid conversion rounding down, clamping) and every later acquire,
/// replay and peek under the override: equal to the in-memory limiter, version numbers included.
#[tokio::test]
async fn reconfigure_equals_the_in_memory_limiter() {
    let Some(url) = redis_url("reconfigure_equals_the_in_memory_limiter") else {
        return;
    };
    let rate = |p, q| Rate::new(p, q).unwrap();
    let choices = [
        Config::new(5, Rate::per_second(1)).unwrap(),
        Config::new(3, rate(7, 3)).unwrap(),
        Config::new(40, rate(1000, 7)).unwrap(),
        Config::new(2, rate(1, 3600)).unwrap(),
        Config::new(9, Rate::ZERO).unwrap(),
    ];
    for seed in 0..3u64 {
        let default = choices[0];
        let prefix = unique_prefix("reconf");
        let redis = RedisLimiter::builder(default)
            .prefix(&prefix)
            .dedupe(Duration::from_secs(5), 4)
            .recovery(bucketproof_redis::Recovery::Trusting)
            .connect(&url)
            .await
            .unwrap();
        let core: Limiter<String, ManualClock> = Limiter::builder(default)
            .clock(ManualClock::new(0))
            .dedupe(Duration::from_secs(5), 4)
            .sweep_per_op(0)
            .build();
        let mut rng = ChaCha8Rng::seed_from_u64(0x00C0_FF1E_u64.wrapping_add(seed));
        let mut now: Nanos = SECOND;
        let (mut reconfigured, mut acquired, mut invalid) = (0, 0, 0);
        for op in 0..300 {
            now = match below(&mut rng, 8) {
                0 => now.saturating_sub(below(&mut rng, SECOND)),
                1 => now + HUNDRED_YEARS / 1000,
                _ => now + below(&mut rng, SECOND),
            };
            let key = ["a", "b"][below(&mut rng, 2) as usize].to_string();
            let ctx = format!("seed {seed} op {op} key {key} now {now}");
            match below(&mut rng, 10) {
                0 | 1 => {
                    let config = choices[below(&mut rng, choices.len() as u64) as usize];
                    let expected = core.reconfigure_at(&key, config, now).unwrap();
                    let got = redis.reconfigure(&key, config, Some(now)).await.unwrap();
                    assert_eq!(got, expected, "version, {ctx}");
                    reconfigured += 1;
                }
                2 => {
                    let e = core.peek_at(&key, now);
                    let g = redis.peek(&key, Some(now)).await.unwrap();
                    assert_eq!(
                        (g.remaining, g.reset_after, g.config),
                        (e.remaining, e.reset_after, e.config),
                        "{ctx}"
                    );
                }
                _ => {
                    let cost = 1 + below(&mut rng, 12); // sometimes above the key's capacity
                    let mut request = Request::cost(cost).at(now);
                    if chance(&mut rng, 1, 2) {
                        request = request.id(below(&mut rng, 5));
                    }
                    match (
                        core.acquire_with(&key, request),
                        redis.acquire_with(&key, request).await,
                    ) {
                        (Err(e), Err(RedisAcquireError::Invalid(g))) => {
                            assert_eq!(e, g, "{ctx}");
                            invalid += 1;
                        }
                        (Ok(e), Ok(g)) => {
                            assert_eq!(g.acquired.decision, e.decision, "{ctx} {request:?}");
                            assert_eq!(g.acquired.replayed, e.replayed, "{ctx} {request:?}");
                            acquired += 1;
                        }
                        (e, g) => panic!("{ctx}: expected {e:?}, got {g:?}"),
                    }
                }
            }
        }
        assert!(
            reconfigured > 20 && acquired > 100 && invalid > 5,
            "{reconfigured}/{acquired}/{invalid}"
        );
        // forget drops the override too: the key is fresh under the default config again.
        assert!(redis.forget("a").await.unwrap());
        let fresh = redis.acquire_at("a", 5, now).await.unwrap();
        assert!(fresh.acquired.created && fresh.decision().is_allowed());
        cleanup(&url, &prefix).await;
    }
}
