//! The keyed [`Limiter`]'s metrics: its [`Stats`] and its state's bytes.
//!
//! Owns the table of the keyed front end ([`METRICS`]) and the snapshot it reads
//! ([`KeyedNumbers`]). Promises: one row per metric series; reading a snapshot locks each shard
//! briefly, three times (stats, table bytes, deficit bytes), and never during a decision of the
//! caller's thread.

use bucketproof_limiter::{Clock, Limiter, Stats};
use metrics::{SharedString, Unit};

use crate::{Metric, Reading};

/// What the publisher reads of a keyed limiter in one call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyedNumbers {
    /// [`Limiter::stats`].
    pub stats: Stats,
    /// [`Limiter::table_bytes`].
    pub table_bytes: usize,
    /// [`Limiter::deficit_bytes`].
    pub deficit_bytes: usize,
}

impl KeyedNumbers {
    /// Reads `limiter`'s counters and sizes now.
    pub fn of<K, C>(limiter: &Limiter<K, C>) -> KeyedNumbers
    where
        K: std::hash::Hash + Eq + Clone,
        C: Clock,
    {
        KeyedNumbers {
            stats: limiter.stats(),
            table_bytes: limiter.table_bytes(),
            deficit_bytes: limiter.deficit_bytes(),
        }
    }
}

/// Sets every metric of [`METRICS`] from `numbers`, labelled `limiter = name`: the keyed front
/// end's one publish function.
pub fn publish(numbers: &KeyedNumbers, name: &SharedString) {
    Metric::emit(METRICS, numbers, name);
}

const DECISIONS: &str = "bucketproof_decisions_total";
const DECISIONS_HELP: &str = "Acquires by outcome: allowed, denied, error (invalid cost or refused at the key bound), replayed (answered from a request-id record).";
const EVICTIONS: &str = "bucketproof_evictions_total";
const EVICTIONS_HELP: &str = "Buckets dropped: lossless (evictable, no decision can tell), lossy (EvictLeastRecent), owing (EvictKeepingDeficit, deficit kept).";
const STATE_BYTES: &str = "bucketproof_state_bytes";
const STATE_BYTES_HELP: &str = "Bytes of the limiter's state: table (allocated slots times slot size; keys' heap data and the side map left out), deficits (EvictKeepingDeficit's fixed arrays).";

/// Every metric the keyed limiter publishes, one row per series.
pub const METRICS: &[Metric<KeyedNumbers>] = &[
    Metric::counter(DECISIONS, &[("outcome", "allowed")], DECISIONS_HELP, |n| {
        n.stats.allowed
    }),
    Metric::counter(DECISIONS, &[("outcome", "denied")], DECISIONS_HELP, |n| {
        n.stats.denied
    }),
    Metric::counter(DECISIONS, &[("outcome", "error")], DECISIONS_HELP, |n| {
        n.stats.errors
    }),
    Metric::counter(DECISIONS, &[("outcome", "replayed")], DECISIONS_HELP, |n| {
        n.stats.replayed
    }),
    Metric {
        name: "bucketproof_live_keys",
        labels: &[],
        help: "Keys holding state now.",
        unit: Unit::Count,
        reading: Reading::Gauge(|n| n.stats.live_keys as f64),
    },
    Metric::counter(EVICTIONS, &[("kind", "lossless")], EVICTIONS_HELP, |n| {
        n.stats.evicted_lossless
    }),
    Metric::counter(EVICTIONS, &[("kind", "lossy")], EVICTIONS_HELP, |n| {
        n.stats.evicted_lossy
    }),
    Metric::counter(EVICTIONS, &[("kind", "owing")], EVICTIONS_HELP, |n| {
        n.stats.evicted_owing
    }),
    Metric::counter(
        "bucketproof_created_owing_total",
        &[],
        "New buckets that started below full because a bucket of their hash was dropped owing (the deficit summary's hits).",
        |n| n.stats.created_owing,
    ),
    Metric::counter(
        "bucketproof_rejected_keys_total",
        &[],
        "New keys refused at the key bound.",
        |n| n.stats.rejected_keys,
    ),
    Metric {
        name: STATE_BYTES,
        labels: &[("part", "table")],
        help: STATE_BYTES_HELP,
        unit: Unit::Bytes,
        reading: Reading::Gauge(|n| n.table_bytes as f64),
    },
    Metric {
        name: STATE_BYTES,
        labels: &[("part", "deficits")],
        help: STATE_BYTES_HELP,
        unit: Unit::Bytes,
        reading: Reading::Gauge(|n| n.deficit_bytes as f64),
    },
    Metric::counter(
        "bucketproof_lock_contended_total",
        &[],
        "Shard-lock acquisitions that found the lock held and waited.",
        |n| n.stats.lock_contended,
    ),
    Metric {
        name: "bucketproof_lock_wait_seconds_total",
        labels: &[],
        help: "Total time contended shard-lock acquisitions waited (a gauge that only grows: the facade's counters are whole numbers).",
        unit: Unit::Seconds,
        reading: Reading::Gauge(|n| n.stats.lock_wait_nanos as f64 / 1e9),
    },
];
