//! The keyed limiter's defaults, as the builder documents them: 4 shards per CPU (rounded up to a
//! power of two) and the bounds in `defaults`.

use bucketproof_limiter::{Config, Limiter, Rate, defaults};

/// Kills `keyed/builder.rs` `replace * with / in Limiter<K, MonotonicClock>::builder` (one shard on
/// a machine with fewer than 4 CPUs) and, on a machine whose CPU count is not 2, `replace * with +`
/// (`2 + 4` and `2 * 4` round to the same power of two; see `mutants-equivalent.md`).
#[test]
fn the_default_is_four_shards_per_cpu() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let shards = (cpus * 4).next_power_of_two();
    let limiter: Limiter<u64> = Limiter::new(Config::new(1, Rate::per_second(1)).expect("valid"));
    assert_eq!(
        limiter.shard_key_bound(),
        defaults::MAX_KEYS.div_ceil(shards)
    );
    assert_eq!(limiter.key_bound() / limiter.shard_key_bound(), shards);
}
