//! The keyed [`Limiter`]'s metrics: its [`Stats`], its state's bytes and, when asked, its token
//! distribution.
//!
//! Owns the tables of the keyed front end ([`METRICS`], [`FILL_METRICS`]), the snapshot the first
//! reads ([`KeyedNumbers`]) and the source that adds the second ([`WithFillLevels`]). Promises: one row per metric series; reading a snapshot locks each shard
//! briefly, three times (stats, table bytes, deficit bytes), and never during a decision of the
//! caller's thread.

use std::sync::Arc;

use bucketproof_limiter::{Clock, FillLevels, Limiter, MonotonicClock, Stats};
use metrics::{SharedString, Unit};

use crate::{Metric, Reading, Source};

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
const STATE_BYTES_HELP: &str = "Bytes of the limiter's state: table (allocated slots times slot size: every byte of a fixed-size key such as the HTTP layer's digest; a key's heap data, e.g. a String's text, and the side map left out), deficits (EvictKeepingDeficit's fixed arrays).";

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

/// A keyed limiter published with its token distribution ([`FILL_METRICS`]) besides [`METRICS`].
///
/// The distribution is [`Limiter::fill_levels`]: a scan of every slot, one shard lock at a time, on
/// each publish. That is a scrape's cost (proportional to the live keys), never a decision's, and
/// why it is asked for by wrapping the limiter rather than published by default.
///
/// ```
/// use std::sync::Arc;
/// use bucketproof_limiter::{Config, Limiter, Rate};
/// use bucketproof_metrics::{Publisher, keyed::WithFillLevels};
///
/// let limiter: Arc<Limiter<String>> = Arc::new(Limiter::new(Config::new(10, Rate::per_second(5))?));
/// let publisher = Publisher::new().add("api", Arc::new(WithFillLevels(Arc::clone(&limiter))));
/// publisher.publish();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct WithFillLevels<K, C = MonotonicClock>(pub Arc<Limiter<K, C>>);

impl<K, C> Source for WithFillLevels<K, C>
where
    K: std::hash::Hash + Eq + Clone + Send + Sync,
    C: Clock + Send + Sync,
{
    fn publish(&self, name: &SharedString) {
        self.0.publish(name);
        Metric::emit(FILL_METRICS, &self.0.fill_levels(), name);
    }

    fn describe(&self) {
        self.0.describe();
        Metric::describe_all(FILL_METRICS);
    }
}

const FILL: &str = "bucketproof_keys_by_fill";
const FILL_HELP: &str = "Live keys by how full their bucket is now (a key of several bandwidths by its emptiest): fill = the lower bound of its tenth of capacity, 1.0 = full.";

/// One gauge row of the token distribution: the keys in tenth `$i`, labelled `fill = $label`.
macro_rules! tenth {
    ($i:literal, $label:literal) => {
        Metric {
            name: FILL,
            labels: &[("fill", $label)],
            help: FILL_HELP,
            unit: Unit::Count,
            reading: Reading::Gauge(|f: &FillLevels| f.tenths[$i] as f64),
        }
    };
}

/// The token distribution, one row per tenth of capacity ([`FillLevels::tenths`]).
pub const FILL_METRICS: &[Metric<FillLevels>] = &[
    tenth!(0, "0.0"),
    tenth!(1, "0.1"),
    tenth!(2, "0.2"),
    tenth!(3, "0.3"),
    tenth!(4, "0.4"),
    tenth!(5, "0.5"),
    tenth!(6, "0.6"),
    tenth!(7, "0.7"),
    tenth!(8, "0.8"),
    tenth!(9, "0.9"),
    tenth!(10, "1.0"),
];
