//! The recovery policy on the calls without a script of their own (docs/semantics.md, "State loss in
//! a shared store"): a peek of a key with no bucket shows the bucket an acquire would create, and a
//! reconfigure of one starts it there and detects a missing marker as the acquire would.
//!
//! A fresh prefix has no epoch markers, which is exactly what a Redis that lost its data looks like,
//! so these tests need no restart (crates/redis/tests/faults.rs restarts a server for real).

mod common;

use bucketproof_limiter::{Config, NANOS_PER_SECOND, Nanos};
use bucketproof_redis::epoch::slot_of;
use bucketproof_redis::{Recovery, RedisLimiter};
use common::{cleanup, redis_url, unique_prefix};

const SECOND: Nanos = NANOS_PER_SECOND;
/// An injected instant well after 0, so that a loss can lie before it.
const T: Nanos = 1_000 * SECOND;

fn config(capacity: u64, rate: &str) -> Config {
    Config::new(capacity, rate.parse().unwrap()).unwrap()
}

async fn limiter(url: &str, prefix: &str, recovery: Recovery) -> RedisLimiter {
    RedisLimiter::builder(config(10, "1/s"))
        .prefix(prefix)
        .recovery(recovery)
        .connect(url)
        .await
        .expect("connect")
}

async fn marker(url: &str, limiter: &RedisLimiter, user: &str) -> Option<String> {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let key = limiter.marker_key(&limiter.redis_key(user));
    redis::cmd("GET")
        .arg(key)
        .query_async(&mut conn)
        .await
        .unwrap()
}

/// The `nth` user other than `user` whose bucket lives in the same Cluster slot (so it shares its
/// marker).
fn same_slot(limiter: &RedisLimiter, user: &str, nth: usize) -> String {
    let slot = slot_of(limiter.redis_key(user).as_bytes());
    (0..)
        .map(|i| format!("other-{i}"))
        .filter(|other| slot_of(limiter.redis_key(other).as_bytes()) == slot)
        .nth(nth)
        .unwrap()
}

/// Conservative: before the loss is detected the peek shows the empty bucket the acquire will
/// create (and writes no marker); after it, a second key of the slot shows the refill since the
/// loss, and its acquire agrees with that peek.
#[tokio::test]
async fn a_peek_shows_the_bucket_the_recovery_policy_would_create() {
    let Some(url) = redis_url("a_peek_shows_the_bucket_the_recovery_policy_would_create") else {
        return;
    };
    let prefix = unique_prefix("peek_recovery");
    let limiter = limiter(&url, &prefix, Recovery::Conservative).await;
    let peek = limiter.peek("u", Some(T)).await.unwrap();
    assert_eq!((peek.present, peek.remaining.whole()), (false, 0));
    assert_eq!(
        marker(&url, &limiter, "u").await,
        None,
        "a peek writes nothing"
    );
    let denied = limiter.acquire_at("u", 1, T).await.unwrap();
    assert!(!denied.decision().is_allowed() && denied.recovering);
    let since = marker(&url, &limiter, "u").await;
    assert_eq!(since.as_deref(), Some("1000:0"));

    let other = same_slot(&limiter, "u", 0);
    let later = T + 3 * SECOND;
    let peek = limiter.peek(&other, Some(later)).await.unwrap();
    assert_eq!((peek.present, peek.remaining.whole()), (false, 3));
    assert!(
        !limiter
            .acquire_at(&other, 4, later)
            .await
            .unwrap()
            .decision()
            .is_allowed()
    );
    assert!(
        limiter
            .acquire_at(&other, 3, later)
            .await
            .unwrap()
            .decision()
            .is_allowed()
    );
    // One refill period after the loss a new key of the slot is an ordinary full bucket.
    let third = same_slot(&limiter, "u", 1);
    let peek = limiter.peek(&third, Some(T + 10 * SECOND)).await.unwrap();
    assert_eq!(peek.remaining.whole(), 10);
    cleanup(&url, &prefix).await;
}

/// Trusting: the peek of a key with no bucket shows it full, as the acquire creates it.
#[tokio::test]
async fn a_peek_under_the_trusting_policy_shows_a_full_bucket() {
    let Some(url) = redis_url("a_peek_under_the_trusting_policy_shows_a_full_bucket") else {
        return;
    };
    let prefix = unique_prefix("peek_trusting");
    let limiter = limiter(&url, &prefix, Recovery::Trusting).await;
    let peek = limiter.peek("u", Some(T)).await.unwrap();
    assert_eq!(peek.remaining.whole(), 10);
    let allowed = limiter.acquire_at("u", 10, T).await.unwrap();
    assert!(allowed.decision().is_allowed() && allowed.recovering);
    cleanup(&url, &prefix).await;
}

/// Conservative: a reconfigure of a key with no bucket, in a slot whose marker is missing, starts
/// the key empty (converted to the new config), writes the marker and counts the detected loss.
#[tokio::test]
async fn a_reconfigure_of_a_new_key_starts_it_as_the_recovery_policy_says() {
    let Some(url) = redis_url("a_reconfigure_of_a_new_key_starts_it_as_the_recovery_policy_says")
    else {
        return;
    };
    let prefix = unique_prefix("reconfigure_recovery");
    let limiter = limiter(&url, &prefix, Recovery::Conservative).await;
    limiter
        .reconfigure("u", config(20, "2/s"), Some(T))
        .await
        .unwrap();
    assert_eq!(marker(&url, &limiter, "u").await.as_deref(), Some("1000:0"));
    let peek = limiter.peek("u", Some(T + SECOND)).await.unwrap();
    assert_eq!((peek.present, peek.remaining.whole()), (true, 2));
    let stats = limiter.stats();
    assert_eq!((stats.recovering, stats.losses_detected), (1, 1));
    // A reconfigure in a slot already marked detects nothing new.
    let other = same_slot(&limiter, "u", 0);
    limiter
        .reconfigure(&other, config(20, "2/s"), Some(T + SECOND))
        .await
        .unwrap();
    let stats = limiter.stats();
    assert_eq!((stats.recovering, stats.losses_detected), (2, 1));
    cleanup(&url, &prefix).await;
}

/// The builder's default is the safe policy: on a Redis that was never provisioned (as after a
/// loss) a new key starts below full, flagged; provisioned once, its first buckets start full.
#[tokio::test]
async fn the_default_policy_is_conservative_and_provisioning_a_new_redis_starts_keys_full() {
    let Some(url) = redis_url("the_default_policy_is_conservative") else {
        return;
    };
    for provisioned in [false, true] {
        let prefix = unique_prefix(&format!("default_recovery_{provisioned}"));
        let limiter = RedisLimiter::builder(config(10, "1/s"))
            .prefix(&prefix)
            .connect(&url)
            .await
            .expect("connect");
        if provisioned {
            limiter.provision().await.unwrap();
        }
        let first = limiter.acquire_at("u", 10, T).await.unwrap();
        assert_eq!(
            (first.decision().is_allowed(), first.recovering),
            (provisioned, !provisioned),
            "provisioned: {provisioned}"
        );
        cleanup(&url, &prefix).await;
    }
}
