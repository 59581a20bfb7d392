//! The `RedisLimiter`'s metrics (feature `redis`): its [`RedisStats`].
//!
//! Owns the table of the Redis front end ([`METRICS`]). Promises: one row per metric series, so a
//! new field of [`RedisStats`] (recovery modes, store latency) is one new row; fallback decisions
//! are published apart from Redis ones, labelled by the outage policy that made them.

use bucketproof_redis::RedisStats;
use metrics::SharedString;

use crate::Metric;

/// Sets every metric of [`METRICS`] from `stats`, labelled `limiter = name`: the Redis front end's
/// one publish function.
pub fn publish(stats: &RedisStats, name: &SharedString) {
    Metric::emit(METRICS, stats, name);
}

const FALLBACK: &str = "bucketproof_fallback_decisions_total";
const FALLBACK_HELP: &str = "Acquires decided while Redis was unavailable, by outage policy and outcome (fail_closed: an error returned, never a denial).";

/// Every metric the Redis limiter publishes, one row per series.
pub const METRICS: &[Metric<RedisStats>] = &[
    Metric::counter(
        "bucketproof_redis_decisions_total",
        &[],
        "Decisions made by Redis (replays included).",
        |s| s.redis_decisions,
    ),
    Metric::counter(
        "bucketproof_redis_replayed_total",
        &[],
        "Decisions made by Redis that replayed a recorded request id.",
        |s| s.replayed,
    ),
    Metric::counter(
        "bucketproof_redis_retries_total",
        &[],
        "Calls to Redis retried after a lost reply or a refused connection.",
        |s| s.retries,
    ),
    Metric::counter(
        "bucketproof_redis_unavailable_total",
        &[],
        "Acquires that found Redis unavailable (every policy).",
        |s| s.unavailable,
    ),
    Metric::counter(
        "bucketproof_redis_recovering_total",
        &[],
        "Decisions that created a bucket while its slot recovered from a detected state loss.",
        |s| s.recovering,
    ),
    Metric::counter(
        "bucketproof_redis_losses_detected_total",
        &[],
        "State losses detected (a slot's epoch marker found missing).",
        |s| s.losses_detected,
    ),
    Metric::counter(
        "bucketproof_redis_store_calls_total",
        &[],
        "Calls to Redis that returned (a reply or a server error).",
        |s| s.store_calls,
    ),
    Metric::counter(
        "bucketproof_redis_store_nanoseconds_total",
        &[],
        "Total round-trip time of those calls, in nanoseconds (mean latency: divide by the calls).",
        |s| s.store_nanos,
    ),
    Metric::counter(
        "bucketproof_redis_store_errors_total",
        &[],
        "Calls refused by the store: script errors, stored state of another config, undecodable replies.",
        |s| s.store_errors,
    ),
    Metric::counter(
        FALLBACK,
        &[("policy", "local_budget"), ("outcome", "allowed")],
        FALLBACK_HELP,
        |s| s.local_allowed,
    ),
    Metric::counter(
        FALLBACK,
        &[("policy", "local_budget"), ("outcome", "denied")],
        FALLBACK_HELP,
        |s| s.local_denied,
    ),
    Metric::counter(
        FALLBACK,
        &[("policy", "fail_open"), ("outcome", "allowed")],
        FALLBACK_HELP,
        |s| s.fail_open,
    ),
    Metric::counter(
        FALLBACK,
        &[("policy", "fail_closed"), ("outcome", "error")],
        FALLBACK_HELP,
        |s| s.fail_closed,
    ),
];
