//! The keyed limiter's defaults, as the builder documents them: 4 shards per CPU (rounded up to a
//! power of two) and the bounds in `defaults`.

use bucketproof_limiter::{Config, Limiter, Rate, defaults};

/// The builder uses `defaults::shards_for` on this machine's CPU count (whose own unit test pins the
/// formula on every CPU count).
#[test]
fn the_default_is_four_shards_per_cpu() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let shards = defaults::shards_for(cpus);
    let limiter: Limiter<u64> = Limiter::new(Config::new(1, Rate::per_second(1)).expect("valid"));
    assert_eq!(
        limiter.shard_key_bound(),
        defaults::MAX_KEYS.div_ceil(shards)
    );
    assert_eq!(limiter.key_bound() / limiter.shard_key_bound(), shards);
}
