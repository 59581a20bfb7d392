//! Shared test plumbing: where the Redis server is, loud skips, unique key prefixes, seeded sampling.
//!
//! Tests that need Redis read `REDIS_URL`. Without it they print a loud SKIP line and pass, unless
//! `BUCKETPROOF_REQUIRE_REDIS=1`, which turns the skip into a failure (CI sets it).

#![allow(dead_code)]

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use rand::RngCore;
use rand_chacha::ChaCha8Rng;

/// The Redis URL to test against, or `None` after a loud SKIP (panics instead when Redis is required).
pub fn redis_url(test: &str) -> Option<String> {
    match std::env::var("REDIS_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            if std::env::var("BUCKETPROOF_REQUIRE_REDIS").as_deref() == Ok("1") {
                panic!("{test}: REDIS_URL is not set but BUCKETPROOF_REQUIRE_REDIS=1");
            }
            // Straight to the stderr handle, not eprintln!: the test harness captures the macros and
            // hides a passing test's output, and a skip must be seen.
            let _ = writeln!(
                std::io::stderr(),
                "\n!!!!! SKIP {test}: REDIS_URL is not set, this Redis test did NOT run \
                 (set REDIS_URL=redis://127.0.0.1:6379/; BUCKETPROOF_REQUIRE_REDIS=1 makes this fail) !!!!!\n"
            );
            None
        }
    }
}

/// A key prefix no other test (or earlier run) uses, so nothing needs FLUSHALL. A fresh prefix is
/// a new, unprovisioned Redis to the epoch markers: the tests that are not about state loss state
/// `Recovery::Trusting`, under which its first buckets start full, as the in-memory core's do
/// (the default, `Conservative`, is judged in `recovery.rs` and `faults.rs`).
pub fn unique_prefix(test: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("bptest:{test}:{}:{nanos}:{n}:", std::process::id())
}

/// Heavier runs (more traces, more ops) when `BUCKETPROOF_REDIS_HEAVY=1`.
pub fn heavy() -> bool {
    std::env::var("BUCKETPROOF_REDIS_HEAVY").as_deref() == Ok("1")
}

/// Uniform in `0..n` (n > 0). Our own sampling, so a seed replays whatever `rand` version is used.
pub fn below(rng: &mut ChaCha8Rng, n: u64) -> u64 {
    rng.next_u64() % n
}

/// True with probability `num / den`.
pub fn chance(rng: &mut ChaCha8Rng, num: u64, den: u64) -> bool {
    below(rng, den) < num
}

/// The one-bandwidth bucket stored at `key` (`bucket.lua`'s packed string), if any.
#[allow(dead_code)]
pub async fn stored_bucket(
    conn: &mut redis::aio::MultiplexedConnection,
    key: &str,
) -> Option<bucketproof_redis::script::Packed> {
    let bytes: Option<Vec<u8>> = redis::cmd("GET").arg(key).query_async(conn).await.unwrap();
    bytes.map(|b| bucketproof_redis::script::Packed::decode(&b).expect("a packed bucket"))
}

/// Deletes every key under `prefix` (SCAN + DEL; only this test's keys).
pub async fn cleanup(url: &str, prefix: &str) {
    let Ok(client) = redis::Client::open(url) else {
        return;
    };
    let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
        return;
    };
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut conn)
        .await
        .unwrap_or_default();
    if !keys.is_empty() {
        let _: Result<u64, _> = redis::cmd("DEL").arg(keys).query_async(&mut conn).await;
    }
}
