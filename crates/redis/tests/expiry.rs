//! Request ids judged in the key's effective time, and key expiry by TTL under an injected clock
//! that lags Redis's (docs/semantics.md, "Expiry and the key bound").
//!
//! Records: stamped with the acquire's effective time `t = max(now, cursor)` (the script stores the
//! expiry `t + window`) and live while the later call's `max(now, cursor)` is before it, as in the
//! in-memory limiter and the model. Expiry: with an injected clock Redis expires a key by its own
//! clock; the script keeps the key for the time until it is full (in injected time) plus the TTL
//! floor, so a drop is lossless while the injected clock falls at most the floor behind Redis's. The
//! last test shows the boundary: beyond the floor a lagging clock sees the key fresh again.

mod common;

use std::time::Duration;

use bucketproof_limiter::{Config, Limiter, NANOS_PER_SECOND, Nanos, Rate, Request, Wait};
use bucketproof_redis::RedisLimiter;
use common::{cleanup, redis_url, unique_prefix};

const SECOND: Nanos = NANOS_PER_SECOND;

async fn limiter(url: &str, prefix: &str, config: Config, window: Duration) -> RedisLimiter {
    RedisLimiter::builder(config)
        .prefix(prefix)
        .dedupe(window, 4)
        .recovery(bucketproof_redis::Recovery::Trusting)
        .connect(url)
        .await
        .expect("connect")
}

/// The same calls on Redis and on the in-memory limiter: same replays, same decisions.
async fn agrees_with_the_core(
    redis: &RedisLimiter,
    config: Config,
    window: Duration,
    calls: &[Request],
) -> Vec<bool> {
    let core: Limiter<String> = Limiter::builder(config)
        .dedupe(window, 4)
        .sweep_per_op(0)
        .build();
    let mut replays = Vec::new();
    for (i, request) in calls.iter().enumerate() {
        let expected = core.acquire_with(&"u".to_string(), *request).unwrap();
        let got = redis.acquire_with("u", *request).await.unwrap().acquired;
        assert_eq!(got, expected, "call {i}: {request:?}");
        replays.push(got.replayed);
    }
    replays
}

/// A record made while the caller's clock lagged the key's (key at 20 s, call at 5 s) is stamped at
/// 20 s and judged at the key's time: the retry at caller time 7 s replays (the key is at 20 s, inside
/// 20 s + 1 s); at 21 s it is dead.
#[tokio::test]
async fn a_request_id_is_stamped_and_judged_at_the_keys_effective_time() {
    let Some(url) = redis_url("a_request_id_is_stamped_and_judged_at_the_keys_effective_time")
    else {
        return;
    };
    let prefix = unique_prefix("stamp");
    let config = Config::new(5, Rate::per_second(1)).unwrap();
    let window = Duration::from_secs(1);
    let redis = limiter(&url, &prefix, config, window).await;
    let calls = [
        Request::cost(1).at(20 * SECOND),
        Request::cost(1).at(5 * SECOND).id(7u64),
        Request::cost(1).at(7 * SECOND).id(7u64),
        Request::cost(1).at(21 * SECOND).id(7u64),
    ];
    let replays = agrees_with_the_core(&redis, config, window, &calls).await;
    assert_eq!(replays, [false, false, true, false]);
    cleanup(&url, &prefix).await;
}

/// A record dead in the key's time is not alive again at a rolled-back caller time: made at 10 s
/// (window 1 s), the key moved on to 20 s, and the retry at caller time 10.5 s is charged.
#[tokio::test]
async fn a_dead_request_id_is_not_alive_again_under_a_rollback() {
    let Some(url) = redis_url("a_dead_request_id_is_not_alive_again_under_a_rollback") else {
        return;
    };
    let prefix = unique_prefix("dead");
    let config = Config::new(5, Rate::per_second(1)).unwrap();
    let window = Duration::from_secs(1);
    let redis = limiter(&url, &prefix, config, window).await;
    let calls = [
        Request::cost(1).at(10 * SECOND).id(7u64),
        Request::cost(1).at(20 * SECOND),
        Request::cost(1).at(10 * SECOND + SECOND / 2).id(7u64),
    ];
    let replays = agrees_with_the_core(&redis, config, window, &calls).await;
    assert_eq!(replays, [false, false, false]);
    cleanup(&url, &prefix).await;
}

/// A dedupe window of 0 turns request ids off: nothing replays (a rollback included) and no record
/// is stored.
#[tokio::test]
async fn a_zero_dedupe_window_stores_no_record_and_never_replays() {
    let Some(url) = redis_url("a_zero_dedupe_window_stores_no_record_and_never_replays") else {
        return;
    };
    let prefix = unique_prefix("zero");
    let config = Config::new(5, Rate::per_second(1)).unwrap();
    let redis = limiter(&url, &prefix, config, Duration::ZERO).await;
    let calls = [10, 10, 5, 0].map(|s| Request::cost(1).at(s * SECOND).id(7u64));
    let replays = agrees_with_the_core(&redis, config, Duration::ZERO, &calls).await;
    assert_eq!(replays, [false; 4]);
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let key = redis.redis_key("u");
    let records: u64 = redis::cmd("EXISTS")
        .arg(redis.records_key(&key))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(records, 0, "no records hash");
    let stored = common::stored_bucket(&mut conn, &key).await.unwrap();
    assert_eq!(stored.records_until, (-1, 0), "no record expiry kept");
    cleanup(&url, &prefix).await;
}

/// Capacity 2 at 2/s, emptied at injected 10 s: full 1 s later in injected time. With a TTL floor of
/// 1 s the key lives 1 s + 1 s in Redis's time, so an injected clock that falls up to 1 s behind
/// Redis's still finds it: 1.5 s later in Redis's time but only 0.5 s later in injected time the key
/// holds 1 token, and 2 are denied. (A TTL of the larger of the two, 1 s, would have dropped it and
/// admitted 2 more from a fresh bucket.)
#[tokio::test]
async fn a_key_outlives_a_lagging_injected_clock_by_the_ttl_floor() {
    let Some(url) = redis_url("a_key_outlives_a_lagging_injected_clock_by_the_ttl_floor") else {
        return;
    };
    let prefix = unique_prefix("lag");
    let config = Config::new(2, Rate::per_second(2)).unwrap();
    let redis = RedisLimiter::builder(config)
        .prefix(&prefix)
        .injected_ttl_floor(Duration::from_secs(1))
        .recovery(bucketproof_redis::Recovery::Trusting)
        .connect(&url)
        .await
        .unwrap();
    assert!(
        redis
            .acquire_at("u", 2, 10 * SECOND)
            .await
            .unwrap()
            .decision()
            .is_allowed()
    );
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let pttl: i64 = redis::cmd("PTTL")
        .arg(redis.redis_key("u"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        (1_900..=2_000).contains(&pttl),
        "1 s until full plus the 1 s floor, got {pttl} ms"
    );
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let later = redis
        .acquire_at("u", 2, 10 * SECOND + SECOND / 2)
        .await
        .unwrap();
    assert!(!later.acquired.created, "the key is still there");
    assert!(!later.decision().is_allowed(), "1 token at 10.5 s");
    assert_eq!(
        later.decision().retry_after(),
        Some(Wait::After(SECOND / 2))
    );
    cleanup(&url, &prefix).await;
}

/// The boundary of the guarantee: an injected clock that falls further behind Redis's than the TTL
/// floor finds the key expired and starts it fresh. Capacity 2 at 100/s is full 20 ms after being
/// emptied; with a 1 ms floor the key lives 21 ms, and an injected clock that has not moved after
/// 200 ms gets 2 more tokens at the same injected instant. No script can tell: the key, the one
/// place this user's state lives, is gone (keeping a tombstone per user forever would be the price).
#[tokio::test]
async fn beyond_the_ttl_floor_a_lagging_injected_clock_finds_the_key_fresh() {
    let Some(url) = redis_url("beyond_the_ttl_floor_a_lagging_injected_clock_finds_the_key_fresh")
    else {
        return;
    };
    let prefix = unique_prefix("beyond");
    let config = Config::new(2, Rate::per_second(100)).unwrap();
    let redis = RedisLimiter::builder(config)
        .prefix(&prefix)
        .injected_ttl_floor(Duration::from_millis(1))
        .recovery(bucketproof_redis::Recovery::Trusting)
        .connect(&url)
        .await
        .unwrap();
    let first = redis.acquire_at("u", 2, 10 * SECOND).await.unwrap();
    assert!(first.decision().is_allowed());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let fresh = redis.acquire_at("u", 2, 10 * SECOND).await.unwrap();
    assert!(
        fresh.acquired.created && fresh.decision().is_allowed(),
        "expired in Redis's time: fresh at the same injected instant"
    );
    cleanup(&url, &prefix).await;
}
