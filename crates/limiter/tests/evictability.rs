//! Which buckets the sweeps may drop, seen through the public API: a bucket is evictable when it is
//! full at the sweep's time and nothing else of the key (an override, a live request-id record)
//! pins it. Keeping a side-map entry for another reason (a balance too wide for the packed slot)
//! does not pin it.

use bucketproof_limiter::{Config, Limiter, NANOS_PER_SECOND, Rate};

const SECOND: u64 = NANOS_PER_SECOND;

/// 5e9 tokens x 10^9 units per token = 5e18 units, above the packed slot's 2^62: a full bucket of
/// this config keeps its balance in the side map.
fn wide() -> Config {
    Config::new(5_000_000_000, Rate::per_second(1)).expect("a valid config")
}

/// Kills `keyed/eviction.rs` `replace && with || in Shard<K>::is_evictable` (every key with a
/// side-map entry would count as pinned).
#[test]
fn a_full_bucket_with_a_wide_balance_is_swept_like_any_full_bucket() {
    let limiter: Limiter<u64> = Limiter::builder(wide()).shards(1).sweep_per_op(0).build();
    limiter.acquire_at(&1, 1, 0).expect("a valid cost");
    assert_eq!(limiter.sweep_at(0), 0, "one token short of full");
    assert_eq!(limiter.sweep_at(SECOND), 1, "full again after a second");
    assert!(limiter.inspect(&1).is_none());
}
