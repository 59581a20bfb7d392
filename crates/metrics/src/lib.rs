//! # bucketproof-metrics: the front ends' numbers through the `metrics` facade
//!
//! **What it owns:** the names, labels, help texts and values of the metrics every bucketproof
//! front end publishes, and the [`Publisher`] that sets them. It owns no counting: the front ends
//! already count in plain fields under their own locks ([`Limiter::stats`]) or in relaxed atomics
//! (`RedisLimiter::stats`, feature `redis`), and this crate only reads those snapshots.
//!
//! **What it promises:**
//! - the decision hot path pays nothing for it: nothing here runs on a decision. A snapshot is read
//!   when [`Publisher::publish`] is called (by an exporter before each scrape, or on an interval), and
//!   each number is handed to the installed recorder as it is: counters with
//!   [`metrics::Counter::absolute`], gauges with [`metrics::Gauge::set`]. Calling `publish` twice
//!   with nothing in between publishes the same values;
//! - every metric carries the label `limiter`, the name given to [`Publisher::add`], so several
//!   limiters in one process stay apart;
//! - one table per front end ([`keyed`], and `redis` with the feature) lists every metric it
//!   publishes, one row each, and one function ([`Metric`]'s `emit`) publishes any table: a new field
//!   of a front end's counters is one new row;
//! - no input panics: values are copied, never computed with arithmetic that can overflow.
//!
//! Names (all prefixed `bucketproof_`; `_total` are counters, the rest gauges, except
//! `bucketproof_lock_wait_seconds_total`, a gauge because the facade's counters hold whole numbers
//! and the wait is in fractions of a second; it only grows, so `rate()` reads it as a counter):
//!
//! | metric | labels | from |
//! |---|---|---|
//! | `bucketproof_decisions_total` | `outcome` = `allowed`, `denied`, `error`, `replayed` | [`Stats`] |
//! | `bucketproof_live_keys` | | [`Stats::live_keys`] |
//! | `bucketproof_evictions_total` | `kind` = `lossless`, `lossy`, `owing` | [`Stats`] |
//! | `bucketproof_created_owing_total` | | [`Stats::created_owing`] |
//! | `bucketproof_rejected_keys_total` | | [`Stats::rejected_keys`] |
//! | `bucketproof_state_bytes` | `part` = `table`, `deficits` | [`Limiter::table_bytes`], [`Limiter::deficit_bytes`] |
//! | `bucketproof_lock_contended_total` | | [`Stats::lock_contended`] |
//! | `bucketproof_lock_wait_seconds_total` | | [`Stats::lock_wait_nanos`] |
//! | `bucketproof_keys_by_fill` | `fill` = `0.0`, `0.1`, .., `0.9`, `1.0` | [`Limiter::fill_levels`], only for a limiter added as [`keyed::WithFillLevels`] (a scan per publish) |
//! | `bucketproof_redis_decisions_total` | | `RedisStats::redis_decisions` (feature `redis`) |
//! | `bucketproof_redis_replayed_total` | | `RedisStats::replayed` |
//! | `bucketproof_redis_retries_total` | | `RedisStats::retries` |
//! | `bucketproof_redis_unavailable_total` | | `RedisStats::unavailable` |
//! | `bucketproof_redis_recovering_total`, `bucketproof_redis_losses_detected_total`, `bucketproof_redis_store_calls_total`, `bucketproof_redis_store_nanoseconds_total`, `bucketproof_redis_store_errors_total` | | `RedisStats` |
//! | `bucketproof_fallback_decisions_total` | `policy` = `local_budget`, `fail_open`, `fail_closed`; `outcome` = `allowed`, `denied`, `error` | `RedisStats` |
//!
//! The [`bucketproof_limiter::DirectLimiter`] publishes nothing: it keeps no counters (its one
//! critical section is a few dozen instructions, and a count there would be paid on every
//! decision), so there is nothing to read.
//!
//! ```
//! use std::sync::Arc;
//! use bucketproof_limiter::{Config, Limiter, Rate};
//! use bucketproof_metrics::Publisher;
//!
//! let limiter: Arc<Limiter<String>> = Arc::new(Limiter::new(Config::new(10, Rate::per_second(5))?));
//! let publisher = Publisher::new().add("api", Arc::clone(&limiter));
//! limiter.acquire_at(&"alice".to_string(), 1, 0)?;
//! // Before each scrape (with whatever recorder the process installed):
//! publisher.publish();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

// On docs.rs (`--cfg docsrs`, nightly), items behind a feature say which one.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

pub mod keyed;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;

use std::sync::Arc;

use bucketproof_limiter::Limiter;
#[cfg(doc)]
use bucketproof_limiter::Stats;
use metrics::{Label, SharedString, Unit};

pub use keyed::KeyedNumbers;

/// The label that tells limiters apart.
pub const LIMITER_LABEL: &str = "limiter";

/// A front end whose numbers a [`Publisher`] reads and publishes.
pub trait Source: Send + Sync {
    /// Reads this front end's counters once and sets every metric of its table, labelled
    /// `limiter = name`, on the current recorder.
    fn publish(&self, name: &SharedString);

    /// Describes (help text and unit) every metric of its table to the current recorder.
    fn describe(&self);
}

impl<S: Source + ?Sized> Source for Arc<S> {
    fn publish(&self, name: &SharedString) {
        (**self).publish(name)
    }

    fn describe(&self) {
        (**self).describe()
    }
}

/// The named front ends of a process, published together.
#[derive(Clone, Default)]
pub struct Publisher {
    sources: Vec<(SharedString, Arc<dyn Source>)>,
}

impl Publisher {
    /// A publisher of no front end yet.
    pub fn new() -> Publisher {
        Publisher::default()
    }

    /// Adds `source` under `name`, the value of its metrics' `limiter` label. A keyed
    /// [`Limiter`] shared with the code that decides (an `Arc`), or a `RedisLimiter` (feature
    /// `redis`).
    pub fn add<S: Source + 'static>(
        mut self,
        name: impl Into<SharedString>,
        source: Arc<S>,
    ) -> Publisher {
        self.sources.push((name.into(), source));
        self
    }

    /// Reads every front end's counters once and sets its metrics on the current recorder (the
    /// global one, or a local one inside [`metrics::with_local_recorder`]).
    pub fn publish(&self) {
        for (name, source) in &self.sources {
            source.publish(name);
        }
    }

    /// Describes every metric the front ends publish (help text and unit), once per name. Call it
    /// once after installing the recorder.
    pub fn describe(&self) {
        for (_, source) in &self.sources {
            source.describe();
        }
    }
}

#[cfg(feature = "redis")]
impl Source for bucketproof_redis::RedisLimiter {
    fn publish(&self, name: &SharedString) {
        redis::publish(&self.stats(), name);
    }

    fn describe(&self) {
        Metric::describe_all(redis::METRICS);
    }
}

impl<K, C> Source for Limiter<K, C>
where
    K: std::hash::Hash + Eq + Clone + Send + Sync,
    C: bucketproof_limiter::Clock + Send + Sync,
{
    fn publish(&self, name: &SharedString) {
        keyed::publish(&KeyedNumbers::of(self), name);
    }

    fn describe(&self) {
        Metric::describe_all(keyed::METRICS);
    }
}

/// How a row of a table reads its value from a snapshot `S`.
pub enum Reading<S> {
    /// A count since start: set with [`metrics::Counter::absolute`].
    Counter(fn(&S) -> u64),
    /// A level, or a total in fractions: set with [`metrics::Gauge::set`].
    Gauge(fn(&S) -> f64),
}

/// One row of a front end's table: one metric series (a name and fixed labels) and where its
/// value comes from.
pub struct Metric<S> {
    /// The metric's name.
    pub name: &'static str,
    /// Labels fixed by the row (the `limiter` label is added to every row).
    pub labels: &'static [(&'static str, &'static str)],
    /// The help text.
    pub help: &'static str,
    /// The unit.
    pub unit: Unit,
    /// Where the value comes from.
    pub reading: Reading<S>,
}

impl<S> Metric<S> {
    /// A counter row of the unit [`Unit::Count`].
    pub const fn counter(
        name: &'static str,
        labels: &'static [(&'static str, &'static str)],
        help: &'static str,
        read: fn(&S) -> u64,
    ) -> Metric<S> {
        Metric {
            name,
            labels,
            help,
            unit: Unit::Count,
            reading: Reading::Counter(read),
        }
    }

    /// Sets every row of `table` from `snapshot`, labelled `limiter = name`: the one publishing
    /// loop every front end's table goes through.
    pub fn emit(table: &[Metric<S>], snapshot: &S, name: &SharedString) {
        for row in table {
            let mut labels = Vec::with_capacity(row.labels.len() + 1);
            labels.push(Label::new(LIMITER_LABEL, name.clone()));
            labels.extend(row.labels.iter().map(|&(k, v)| Label::new(k, v)));
            match row.reading {
                Reading::Counter(read) => {
                    metrics::counter!(row.name, labels).absolute(read(snapshot))
                }
                Reading::Gauge(read) => metrics::gauge!(row.name, labels).set(read(snapshot)),
            }
        }
    }

    /// Describes every distinct name of `table` once (rows of one name share their help text).
    pub fn describe_all(table: &[Metric<S>]) {
        let mut previous = None;
        for row in table {
            if previous == Some(row.name) {
                continue;
            }
            previous = Some(row.name);
            match row.reading {
                Reading::Counter(_) => metrics::describe_counter!(row.name, row.unit, row.help),
                Reading::Gauge(_) => metrics::describe_gauge!(row.name, row.unit, row.help),
            }
        }
    }
}

/// The README's example runs as a doctest, so the crate's front page cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
