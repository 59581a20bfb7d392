//! The limiter's default settings, in one place.
//!
//! [`crate::Limiter::builder`] starts from these; the Redis limiter and the harness's trace format
//! default to the same numbers by naming them, so the defaults cannot drift apart.

use crate::{NANOS_PER_SECOND, Nanos};

/// Bound on live keys: 2^20 (1,048,576).
pub const MAX_KEYS: usize = 1 << 20;

/// Entries the amortized sweep keeps each time a shard inserts a new key (those it drops are free).
pub const SWEEP_PER_OP: usize = 2;

/// How long a request-id record is live: 60 s.
pub const DEDUPE_WINDOW: Nanos = 60 * NANOS_PER_SECOND;

/// Request-id records kept per key.
pub const DEDUPE_PER_KEY: usize = 8;

/// Shards per CPU of the default shard count: enough that two threads rarely share a lock.
pub const SHARDS_PER_CPU: usize = 4;

/// The default shard count on a machine with `cpus` CPUs: [`SHARDS_PER_CPU`] per CPU, rounded up to
/// a power of two (the shard of a key is a mask of its hash).
pub fn shards_for(cpus: usize) -> usize {
    cpus.saturating_mul(SHARDS_PER_CPU)
        .checked_next_power_of_two()
        .unwrap_or(1 << (usize::BITS - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_shard_count_is_four_per_cpu_rounded_up_to_a_power_of_two() {
        let shards: Vec<usize> = [1, 2, 3, 5, 8].into_iter().map(shards_for).collect();
        assert_eq!(shards, [4, 8, 16, 32, 32]);
        assert_eq!(shards_for(usize::MAX), 1 << (usize::BITS - 1));
    }
}
