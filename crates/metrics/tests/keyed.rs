//! The keyed limiter's metrics, read back from a debugging recorder: a limiter driven through
//! every outcome and eviction kind, and a snapshot whose every field differs, so that a row that
//! reads the wrong field, drops a label or scales a value is caught.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use bucketproof_limiter::{Config, EvictionPolicy, Limiter, Request, Stats};
use bucketproof_metrics::{KeyedNumbers, Publisher, keyed};
use common::{Value, read, recorder};

const SECOND: u64 = bucketproof_limiter::NANOS_PER_SECOND;

fn counter(v: u64) -> Value {
    Value::Counter(v)
}

fn gauge(v: f64) -> Value {
    Value::Gauge(v)
}

/// `name{labels}` with the labels sorted, as [`common::read`] spells a series.
fn id(metric: &str, labels: &[(&str, &str)]) -> String {
    let mut labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    labels.sort();
    format!("{metric}{{{}}}", labels.join(","))
}

/// Every series the keyed table publishes for `numbers` under `limiter = name`.
fn expected(name: &str, n: &KeyedNumbers) -> BTreeMap<String, Value> {
    let s = &n.stats;
    let l = ("limiter", name);
    [
        (
            "bucketproof_decisions_total",
            vec![l, ("outcome", "allowed")],
            counter(s.allowed),
        ),
        (
            "bucketproof_decisions_total",
            vec![l, ("outcome", "denied")],
            counter(s.denied),
        ),
        (
            "bucketproof_decisions_total",
            vec![l, ("outcome", "error")],
            counter(s.errors),
        ),
        (
            "bucketproof_decisions_total",
            vec![l, ("outcome", "replayed")],
            counter(s.replayed),
        ),
        ("bucketproof_live_keys", vec![l], gauge(s.live_keys as f64)),
        (
            "bucketproof_evictions_total",
            vec![l, ("kind", "lossless")],
            counter(s.evicted_lossless),
        ),
        (
            "bucketproof_evictions_total",
            vec![l, ("kind", "lossy")],
            counter(s.evicted_lossy),
        ),
        (
            "bucketproof_evictions_total",
            vec![l, ("kind", "owing")],
            counter(s.evicted_owing),
        ),
        (
            "bucketproof_created_owing_total",
            vec![l],
            counter(s.created_owing),
        ),
        (
            "bucketproof_rejected_keys_total",
            vec![l],
            counter(s.rejected_keys),
        ),
        (
            "bucketproof_state_bytes",
            vec![l, ("part", "table")],
            gauge(n.table_bytes as f64),
        ),
        (
            "bucketproof_state_bytes",
            vec![l, ("part", "deficits")],
            gauge(n.deficit_bytes as f64),
        ),
        (
            "bucketproof_lock_contended_total",
            vec![l],
            counter(s.lock_contended),
        ),
        (
            "bucketproof_lock_wait_seconds_total",
            vec![l],
            gauge(s.lock_wait_nanos as f64 / 1e9),
        ),
    ]
    .into_iter()
    .map(|(metric, labels, value)| (id(metric, &labels), value))
    .collect()
}

/// Capacity 2 refilling 1/s, one key at most, the deficit kept: every outcome, an owing
/// eviction and an owing creation, a replay and a refusal at the bound, each counted once or twice.
#[test]
fn a_driven_limiter_publishes_every_number_it_counted() {
    let limiter: Arc<Limiter<u64>> = Arc::new(
        Limiter::builder(Config::new(2, "1/s".parse().unwrap()).unwrap())
            .max_keys(1, EvictionPolicy::EvictKeepingDeficit)
            .sweep_per_op(0)
            .shards(1)
            .hasher_seed(3)
            .build(),
    );
    let allowed = |key, cost, now| limiter.acquire_at(&key, cost, now).unwrap().is_allowed();
    assert!(allowed(1, 2, 0));
    assert!(!allowed(1, 1, 0));
    assert!(limiter.acquire_at(&1, 3, 0).is_err(), "cost above capacity");
    // Key 2 takes key 1's room: key 1 was empty, so it is dropped owing.
    assert!(allowed(2, 1, SECOND / 2));
    // Key 1 comes back owing (half a token) and takes the room of key 2, which is not full.
    let first = limiter.acquire_with(&1, Request::cost(1).at(SECOND / 2).id(7u64));
    assert!(!first.unwrap().decision.is_allowed());
    let again = limiter.acquire_with(&1, Request::cost(1).at(SECOND / 2).id(7u64));
    assert!(again.unwrap().replayed);
    // Pinned by an override, key 1 cannot be dropped: key 3 is refused at the bound.
    limiter
        .reconfigure_at(&1, Config::new(2, "1/s".parse().unwrap()).unwrap(), SECOND)
        .unwrap();
    assert!(limiter.acquire_at(&3, 1, SECOND).is_err());
    assert!(allowed(1, 1, 3 * SECOND));

    let stats = limiter.stats();
    let want = Stats {
        allowed: 3,
        denied: 2,
        errors: 2,
        replayed: 1,
        live_keys: 1,
        evicted_owing: 2,
        created_owing: 1,
        rejected_keys: 1,
        ..Stats::default()
    };
    assert_eq!(stats, want, "the scenario counts what it says");

    let (rec, snapshotter) = recorder();
    let publisher = Publisher::new().add("api", Arc::clone(&limiter));
    metrics::with_local_recorder(&rec, || publisher.publish());
    let (series, _) = read(&snapshotter);
    let numbers = KeyedNumbers::of(&limiter);
    assert!(numbers.table_bytes >= 24 && numbers.deficit_bytes > 0);
    assert_eq!(series, expected("api", &numbers));
    // The figures above, spelled out where they matter most.
    assert_eq!(
        series["bucketproof_decisions_total{limiter=api,outcome=denied}"],
        counter(2)
    );
    assert_eq!(series["bucketproof_live_keys{limiter=api}"], gauge(1.0));
}

/// Every field distinct, so each row must read its own field, unscaled (the wait in seconds).
#[test]
fn every_row_reads_its_own_field() {
    let numbers = KeyedNumbers {
        stats: Stats {
            allowed: 1,
            denied: 2,
            errors: 3,
            replayed: 4,
            live_keys: 5,
            evicted_lossless: 6,
            evicted_lossy: 7,
            evicted_owing: 8,
            created_owing: 9,
            rejected_keys: 10,
            lock_contended: 11,
            lock_wait_nanos: 1_500_000_000,
        },
        table_bytes: 13,
        deficit_bytes: 14,
    };
    let (rec, snapshotter) = recorder();
    metrics::with_local_recorder(&rec, || keyed::publish(&numbers, &"a".into()));
    let (series, _) = read(&snapshotter);
    assert_eq!(series, expected("a", &numbers));
    assert_eq!(
        series["bucketproof_lock_wait_seconds_total{limiter=a}"],
        gauge(1.5)
    );
    assert_eq!(
        series["bucketproof_state_bytes{limiter=a,part=deficits}"],
        gauge(14.0)
    );
}

/// Two limiters in one process stay apart by their label; publishing again with nothing in
/// between changes nothing; `describe` gives every name a help text.
#[test]
fn limiters_stay_apart_and_publishing_again_changes_nothing() {
    let config = Config::new(2, "1/s".parse().unwrap()).unwrap();
    let a: Arc<Limiter<u64>> = Arc::new(Limiter::new(config));
    let b: Arc<Limiter<u64>> = Arc::new(Limiter::new(config));
    for key in 0..3 {
        a.acquire_at(&key, 1, 0).unwrap();
    }
    for _ in 0..3 {
        b.acquire_at(&0, 2, 0).unwrap();
    }
    let (rec, snapshotter) = recorder();
    let publisher = Publisher::new()
        .add("a", Arc::clone(&a))
        .add("b", Arc::clone(&b));
    metrics::with_local_recorder(&rec, || {
        publisher.describe();
        publisher.publish();
    });
    let (once, help) = read(&snapshotter);
    metrics::with_local_recorder(&rec, || publisher.publish());
    let (twice, _) = read(&snapshotter);
    assert_eq!(once, twice);
    let allowed = |name: &str| {
        once[&format!("bucketproof_decisions_total{{limiter={name},outcome=allowed}}")]
    };
    assert_eq!((allowed("a"), allowed("b")), (counter(3), counter(1)));
    assert_eq!(
        once["bucketproof_decisions_total{limiter=b,outcome=denied}"],
        counter(2)
    );
    assert_eq!(once["bucketproof_live_keys{limiter=a}"], gauge(3.0));
    let names: std::collections::BTreeSet<&str> = keyed::METRICS.iter().map(|m| m.name).collect();
    assert_eq!(names.len(), 8);
    for name in names {
        assert!(
            help.get(name).is_some_and(|h| !h.is_empty()),
            "{name} has no help"
        );
    }
}

/// The token distribution is published only when asked for, one gauge per tenth, refilled to the
/// limiter's clock at the publish.
#[test]
fn the_token_distribution_is_published_per_tenth_when_asked() {
    use bucketproof_limiter::ManualClock;
    use bucketproof_metrics::keyed::WithFillLevels;
    let config = Config::new(10, "1/s".parse().unwrap()).unwrap();
    let limiter: Arc<Limiter<u64, ManualClock>> =
        Arc::new(Limiter::builder(config).clock(ManualClock::new(0)).build());
    for (key, cost) in [(1, 10), (2, 5), (3, 5)] {
        limiter.acquire_at(&key, cost, 0).unwrap();
    }
    let (rec, snapshotter) = recorder();
    let plain = Publisher::new().add("plain", Arc::clone(&limiter));
    metrics::with_local_recorder(&rec, || plain.publish());
    let (series, _) = read(&snapshotter);
    assert!(
        !series
            .keys()
            .any(|k| k.starts_with("bucketproof_keys_by_fill"))
    );

    let scanned = Publisher::new().add("api", Arc::new(WithFillLevels(Arc::clone(&limiter))));
    metrics::with_local_recorder(&rec, || scanned.publish());
    let (series, _) = read(&snapshotter);
    let fill = |tenth: &str| {
        series[&id(
            "bucketproof_keys_by_fill",
            &[("limiter", "api"), ("fill", tenth)],
        )]
    };
    assert_eq!(
        (fill("0.0"), fill("0.5"), fill("1.0")),
        (gauge(1.0), gauge(2.0), gauge(0.0))
    );
    let tenths = [
        "0.0", "0.1", "0.2", "0.3", "0.4", "0.5", "0.6", "0.7", "0.8", "0.9", "1.0",
    ];
    let total: f64 = tenths
        .iter()
        .map(|t| match fill(t) {
            Value::Gauge(v) => v,
            other => panic!("{other:?}"),
        })
        .sum();
    assert_eq!(total, 3.0, "every key in exactly one tenth");
    // The keyed table is still there, unchanged.
    assert_eq!(
        series[&id("bucketproof_live_keys", &[("limiter", "api")])],
        gauge(3.0)
    );
}
