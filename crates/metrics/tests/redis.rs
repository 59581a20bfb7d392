//! The Redis limiter's metrics (feature `redis`), read back from a debugging recorder: a snapshot
//! whose every field differs, so a row that reads the wrong field or drops a label is caught.

mod common;

use bucketproof_metrics::redis;
use bucketproof_redis::RedisStats;
use common::{Value, read, recorder};

#[test]
fn every_redis_row_reads_its_own_field() {
    let stats = RedisStats {
        redis_decisions: 1,
        replayed: 2,
        retries: 3,
        unavailable: 4,
        fail_closed: 5,
        local_allowed: 6,
        local_denied: 7,
        fail_open: 8,
        recovering: 9,
        losses_detected: 10,
        store_calls: 11,
        store_nanos: 12,
        store_errors: 13,
    };
    let (rec, snapshotter) = recorder();
    metrics::with_local_recorder(&rec, || redis::publish(&stats, &"shared".into()));
    let (series, _) = read(&snapshotter);
    let fallback = |policy: &str, outcome: &str| {
        format!(
            "bucketproof_fallback_decisions_total{{limiter=shared,outcome={outcome},policy={policy}}}"
        )
    };
    let want: std::collections::BTreeMap<String, Value> = [
        (
            "bucketproof_redis_decisions_total{limiter=shared}".to_string(),
            1,
        ),
        (
            "bucketproof_redis_replayed_total{limiter=shared}".to_string(),
            2,
        ),
        (
            "bucketproof_redis_retries_total{limiter=shared}".to_string(),
            3,
        ),
        (
            "bucketproof_redis_unavailable_total{limiter=shared}".to_string(),
            4,
        ),
        (fallback("fail_closed", "error"), 5),
        (fallback("local_budget", "allowed"), 6),
        (fallback("local_budget", "denied"), 7),
        (fallback("fail_open", "allowed"), 8),
        (
            "bucketproof_redis_recovering_total{limiter=shared}".to_string(),
            9,
        ),
        (
            "bucketproof_redis_losses_detected_total{limiter=shared}".to_string(),
            10,
        ),
        (
            "bucketproof_redis_store_calls_total{limiter=shared}".to_string(),
            11,
        ),
        (
            "bucketproof_redis_store_nanoseconds_total{limiter=shared}".to_string(),
            12,
        ),
        (
            "bucketproof_redis_store_errors_total{limiter=shared}".to_string(),
            13,
        ),
    ]
    .into_iter()
    .map(|(id, v)| (id, Value::Counter(v)))
    .collect();
    assert_eq!(series, want);
}
