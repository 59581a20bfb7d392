//! Counters of what the limiter did.
//!
//! Owns: [`RedisStats`] (the public snapshot), the atomic counters behind it and [`RedisLimiter::stats`].
//!
//! Promises: counting is lock-free (relaxed increments) and never on a path that can fail; fallback
//! decisions are counted apart from Redis ones.

use std::sync::atomic::{AtomicU64, Ordering};

use super::RedisLimiter;

/// Counters of what the limiter did. Fallback decisions are counted apart from Redis ones.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RedisStats {
    /// Decisions from Redis (replays included).
    pub redis_decisions: u64,
    /// Of those, replays of a recorded request id.
    pub replayed: u64,
    /// Calls retried after a lost reply or refused connection.
    pub retries: u64,
    /// Acquires that found Redis unavailable (every policy).
    pub unavailable: u64,
    /// Fail-closed errors returned.
    pub fail_closed: u64,
    /// Local-budget decisions that admitted.
    pub local_allowed: u64,
    /// Local-budget decisions that denied.
    pub local_denied: u64,
    /// Fail-open admissions.
    pub fail_open: u64,
    /// Decisions that created a bucket while its slot recovered from a state loss.
    pub recovering: u64,
    /// State losses this instance detected (an epoch marker found missing and rewritten).
    pub losses_detected: u64,
    /// Calls to Redis that returned (a reply or a server error), and their total round-trip time in
    /// nanoseconds: the store's mean latency is `store_nanos / store_calls`.
    pub store_calls: u64,
    /// See `store_calls`.
    pub store_nanos: u64,
    /// Calls refused by the store for a reason other than unavailability or a cost the script
    /// refused: script errors, stored state of another config, replies that do not decode.
    pub store_errors: u64,
}

#[derive(Default)]
pub(super) struct Counters {
    pub(super) redis_decisions: AtomicU64,
    pub(super) replayed: AtomicU64,
    pub(super) retries: AtomicU64,
    pub(super) unavailable: AtomicU64,
    pub(super) fail_closed: AtomicU64,
    pub(super) local_allowed: AtomicU64,
    pub(super) local_denied: AtomicU64,
    pub(super) fail_open: AtomicU64,
    pub(super) recovering: AtomicU64,
    pub(super) losses_detected: AtomicU64,
    pub(super) store_calls: AtomicU64,
    pub(super) store_nanos: AtomicU64,
    pub(super) store_errors: AtomicU64,
}

pub(super) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl RedisLimiter {
    /// Counters so far.
    pub fn stats(&self) -> RedisStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        RedisStats {
            redis_decisions: get(&c.redis_decisions),
            replayed: get(&c.replayed),
            retries: get(&c.retries),
            unavailable: get(&c.unavailable),
            fail_closed: get(&c.fail_closed),
            local_allowed: get(&c.local_allowed),
            local_denied: get(&c.local_denied),
            fail_open: get(&c.fail_open),
            recovering: get(&c.recovering),
            losses_detected: get(&c.losses_detected),
            store_calls: get(&c.store_calls),
            store_nanos: get(&c.store_nanos),
            store_errors: get(&c.store_errors),
        }
    }
}
