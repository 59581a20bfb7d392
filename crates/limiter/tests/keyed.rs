//! Behaviour of the keyed limiter that a single bucket cannot show: request ids, expiry, the key bound,
//! reconfiguration, contention. The model-based and property tests live in the harness crate.

use std::sync::Arc;
use std::time::Duration;

use bucketproof_limiter::{
    AcquireError, Config, EvictionPolicy, Limiter, ManualClock, Rate, Request, Wait,
};

const SECOND: u64 = bucketproof_limiter::NANOS_PER_SECOND;

fn config(capacity: u64, rate: &str) -> Config {
    Config::new(capacity, rate.parse().unwrap()).unwrap()
}

#[test]
fn each_key_starts_full_and_keys_do_not_share_tokens() {
    let limiter: Limiter<u64> = Limiter::new(config(2, "1/s"));
    assert!(limiter.acquire_at(&1, 2, 0).unwrap().is_allowed());
    assert!(!limiter.acquire_at(&1, 1, 0).unwrap().is_allowed());
    assert!(limiter.acquire_at(&2, 2, 0).unwrap().is_allowed());
}

/// `would_allow_at` answers what `acquire_at` would, and changes nothing: not the balance, not
/// whether the key exists.
#[test]
fn would_allow_answers_as_an_acquire_would_and_changes_nothing() {
    let limiter: Limiter<u64> = Limiter::new(config(3, "1/s"));
    assert!(limiter.would_allow_at(&1, 3, 0));
    assert!(!limiter.would_allow_at(&1, 4, 0), "above the capacity");
    assert!(limiter.is_empty(), "a question creates no key");
    limiter.acquire_at(&1, 3, 0).unwrap();
    for (cost, now) in [
        (1, 0),
        (1, SECOND - 1),
        (1, SECOND),
        (2, SECOND),
        (2, 2 * SECOND),
    ] {
        let before = limiter.inspect(&1);
        let asked = limiter.would_allow_at(&1, cost, now);
        assert_eq!(
            limiter.inspect(&1),
            before,
            "a question charges and refills nothing"
        );
        // The acquire it predicts, on a twin in the same state (an acquire here would charge).
        let twin: Limiter<u64> = Limiter::new(config(3, "1/s"));
        twin.acquire_at(&1, 3, 0).unwrap();
        assert_eq!(
            asked,
            twin.acquire_at(&1, cost, now).unwrap().is_allowed(),
            "cost {cost} at {now}"
        );
    }
}

#[test]
fn a_duplicate_request_id_charges_once_and_returns_the_first_decision() {
    let limiter: Limiter<&str> = Limiter::builder(config(3, "1/s"))
        .dedupe(Duration::from_secs(10), 4)
        .build();
    let first = limiter
        .acquire_with(&"k", Request::cost(2).at(0).id(7u64))
        .unwrap();
    assert!(!first.replayed);
    let retry = limiter
        .acquire_with(&"k", Request::cost(2).at(SECOND / 2).id(7u64))
        .unwrap();
    assert!(retry.replayed);
    assert_eq!(retry.decision, first.decision);
    assert_eq!(
        limiter.peek_at(&"k", 0).remaining.whole(),
        1,
        "charged once"
    );
    // After the window the id is forgotten and charges again.
    let late = limiter
        .acquire_with(&"k", Request::cost(1).at(10 * SECOND).id(7u64))
        .unwrap();
    assert!(!late.replayed);
    assert_eq!(limiter.stats().replayed, 1);
}

#[test]
fn request_id_records_are_bounded_per_key() {
    let limiter: Limiter<u8> = Limiter::builder(config(100, "1/s"))
        .dedupe(Duration::from_secs(60), 2)
        .build();
    for id in 0..3u64 {
        limiter
            .acquire_with(&0, Request::cost(1).at(0).id(id))
            .unwrap();
    }
    // Only ids 1 and 2 are remembered: id 0 is charged again.
    let again = limiter
        .acquire_with(&0, Request::cost(1).at(0).id(0u64))
        .unwrap();
    assert!(!again.replayed);
    assert!(
        limiter
            .acquire_with(&0, Request::cost(1).at(0).id(2u64))
            .unwrap()
            .replayed
    );
}

#[test]
fn invalid_costs_are_errors_and_change_nothing() {
    // No amortized sweep: it would legitimately drop the (full by then) bucket at t=5s.
    let limiter: Limiter<u8> = Limiter::builder(config(3, "1/s")).sweep_per_op(0).build();
    limiter.acquire_at(&0, 1, 0).unwrap();
    for cost in [0, 4] {
        assert_eq!(
            limiter.acquire_at(&0, cost, 5 * SECOND),
            Err(AcquireError::InvalidCost { cost, capacity: 3 })
        );
    }
    // The erroring calls at t=5s did not refill/advance anything observable.
    assert_eq!(limiter.peek_at(&0, 0).remaining.whole(), 2);
    // An error on an unknown key creates nothing.
    assert_eq!(
        limiter.acquire_at(&9, 0, 0).unwrap_err(),
        AcquireError::InvalidCost {
            cost: 0,
            capacity: 3
        }
    );
    assert!(!limiter.peek_at(&9, 0).present);
    assert_eq!(limiter.stats().errors, 3);
}

/// Lossless expiry: two limiters see the same trace, one sweeps aggressively, one never; every
/// decision is the same.
#[test]
fn lossless_eviction_changes_no_decision() {
    let sweeping: Limiter<u64> = Limiter::builder(config(3, "2/s"))
        .sweep_per_op(8)
        .max_keys(4, EvictionPolicy::EvictFull)
        .shards(1)
        .build();
    let keeping: Limiter<u64> = Limiter::builder(config(3, "2/s"))
        .sweep_per_op(0)
        .max_keys(1 << 20, EvictionPolicy::RejectNewKeys)
        .shards(1)
        .build();
    let mut now = 0u64;
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut rejected = 0;
    for _ in 0..20_000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        now += state % (SECOND / 3);
        let key = state % 6;
        let cost = 1 + (state >> 20) % 3;
        // A key refused at the bound is an error that changes nothing, so the other limiter skips
        // the operation too and both keep seeing the same trace.
        match sweeping.acquire_at(&key, cost, now) {
            Err(AcquireError::KeyLimitReached { .. }) => rejected += 1,
            a => assert_eq!(a, keeping.acquire_at(&key, cost, now), "key {key} at {now}"),
        }
    }
    assert!(
        sweeping.stats().evicted_lossless > 1_000,
        "{:?}",
        sweeping.stats()
    );
    assert_eq!(sweeping.stats().evicted_lossy, 0);
    assert!(
        rejected > 0,
        "the bound was never reached: the test would prove less than it says"
    );
}

/// The enforced bound rounds `max_keys` up to a multiple of the shard count; at the top of `usize`
/// that rounding saturates instead of overflowing (a panic in debug builds, a bound of 0 in release).
#[test]
fn an_unbounded_max_keys_saturates_the_key_bound() {
    for shards in [1, 3, 4, 64] {
        let limiter: Limiter<u64> = Limiter::builder(config(5, "1/s"))
            .shards(shards)
            .max_keys(usize::MAX, EvictionPolicy::RejectNewKeys)
            .build();
        assert_eq!(limiter.key_bound(), usize::MAX, "{shards} shards");
        assert!(limiter.acquire_at(&1, 1, 0).unwrap().is_allowed());
    }
    let limiter: Limiter<u64> = Limiter::builder(config(5, "1/s"))
        .shards(4)
        .max_keys(usize::MAX - 5, EvictionPolicy::EvictFull)
        .build();
    // Rounded up to a multiple of 4 that still fits.
    assert_eq!(limiter.key_bound(), usize::MAX - 3);
}

#[test]
fn the_key_bound_holds_under_an_attack_of_fresh_ids() {
    for policy in [
        EvictionPolicy::RejectNewKeys,
        EvictionPolicy::EvictFull,
        EvictionPolicy::EvictLeastRecent,
    ] {
        let limiter: Limiter<u64> = Limiter::builder(config(5, "1/h"))
            .max_keys(64, policy)
            .shards(4)
            .build();
        // Every attacker id spends a token, so no bucket is full: nothing is evictable.
        for id in 0..10_000u64 {
            let _ = limiter.acquire_at(&id, 1, id);
        }
        assert!(limiter.len() <= limiter.key_bound(), "{policy:?}");
        let stats = limiter.stats();
        match policy {
            EvictionPolicy::EvictLeastRecent => {
                assert!(stats.evicted_lossy > 9_000, "{stats:?}");
            }
            _ => assert!(stats.rejected_keys > 9_000, "{policy:?} {stats:?}"),
        }
    }
}

#[test]
fn evict_full_makes_room_with_full_buckets_only() {
    let limiter: Limiter<u64> = Limiter::builder(config(1, "1/s"))
        .max_keys(2, EvictionPolicy::EvictFull)
        .sweep_per_op(0)
        .shards(1)
        .build();
    limiter.acquire_at(&1, 1, 0).unwrap();
    limiter.acquire_at(&2, 1, 0).unwrap();
    assert!(matches!(
        limiter.acquire_at(&3, 1, 0),
        Err(AcquireError::KeyLimitReached { .. })
    ));
    // One second later both are full again: room is made without changing a decision.
    assert!(limiter.acquire_at(&3, 1, SECOND).unwrap().is_allowed());
    assert_eq!(limiter.stats().evicted_lossless, 1);
}

#[test]
fn reconfigure_keeps_the_balance_on_the_new_grid_and_counts_versions() {
    let limiter: Limiter<u8> = Limiter::new(config(10, "1/s"));
    limiter.acquire_at(&0, 7, 0).unwrap();
    assert_eq!(limiter.reconfigure_at(&0, config(2, "1/3s"), SECOND), Ok(1));
    let peek = limiter.peek_at(&0, SECOND);
    assert_eq!(
        peek.remaining.whole(),
        2,
        "4 tokens clamped to the new capacity 2"
    );
    assert_eq!(peek.config, config(2, "1/3s"));
    assert_eq!(limiter.reconfigure_at(&0, config(20, "1/s"), SECOND), Ok(2));
    assert_eq!(
        limiter.peek_at(&0, SECOND).remaining.whole(),
        2,
        "raising capacity creates nothing"
    );
    // The override survives sweeps even when full, and forget drops it.
    assert_eq!(limiter.sweep_at(100 * SECOND), 0);
    assert!(limiter.forget(&0));
    assert_eq!(limiter.config_for(&0), config(10, "1/s"));
}

#[test]
fn a_resolver_gives_tiers_and_the_default_serves_the_rest() {
    let limiter: Limiter<String> = Limiter::builder(config(1, "1/s"))
        .resolver(|key: &String| {
            if key.starts_with("pro:") {
                Config::new(100, Rate::per_second(50)).unwrap()
            } else {
                Config::new(1, Rate::per_second(1)).unwrap()
            }
        })
        .build();
    assert!(
        limiter
            .acquire_at(&"pro:ada".to_owned(), 100, 0)
            .unwrap()
            .is_allowed()
    );
    assert!(
        !limiter
            .acquire_at(&"free:bob".to_owned(), 2, 0)
            .is_ok_and(|d| d.is_allowed())
    );
}

#[test]
fn the_clock_form_reads_the_injected_clock() {
    let clock = ManualClock::new(0);
    let limiter: Limiter<u8, ManualClock> = Limiter::builder(config(1, "1/s"))
        .clock(clock.clone())
        .build();
    assert!(limiter.acquire(&0, 1).unwrap().is_allowed());
    let denied = limiter.acquire(&0, 1).unwrap();
    assert_eq!(denied.retry_after(), Some(Wait::After(SECOND)));
    clock.advance(SECOND - 1);
    assert!(!limiter.acquire(&0, 1).unwrap().is_allowed());
    clock.advance(1);
    assert!(limiter.acquire(&0, 1).unwrap().is_allowed());
}

/// Two threads race on one key with interleaved injected times; the total admitted never exceeds the
/// initial burst plus the refill over the whole time span (no overselling under contention).
#[test]
fn two_threads_on_one_key_never_oversell() {
    let capacity = 10;
    let limiter: Arc<Limiter<u8>> = Arc::new(Limiter::new(config(capacity, "1000/s")));
    let ops_per_thread = 50_000u64;
    let step = 10_000; // 10 µs per op: 0.01 token of refill per op per thread
    let handles: Vec<_> = (0..2)
        .map(|thread| {
            let limiter = Arc::clone(&limiter);
            std::thread::spawn(move || {
                (0..ops_per_thread)
                    .filter(|i| {
                        let now = i * step + thread;
                        limiter.acquire_at(&0, 1, now).unwrap().is_allowed()
                    })
                    .count() as u64
            })
        })
        .collect();
    let admitted: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    let span_ns = ops_per_thread * step;
    let bound = capacity + span_ns * 1000 / SECOND;
    assert!(admitted <= bound, "admitted {admitted} > bound {bound}");
    // And the limiter was really the bottleneck (the test would pass vacuously otherwise).
    assert!(
        admitted >= bound - capacity - 2,
        "admitted {admitted}, bound {bound}"
    );
}

/// A bucket expires, the client's clock runs backwards, and a recreated bucket would refill over time
/// it already had. Here the recreated cursor starts at the eviction horizon, the time the sweep judged
/// the bucket full (20 s), so the total admitted stays within capacity + rate * (latest - first time).
#[test]
fn a_rollback_after_expiry_does_not_credit_time_twice() {
    let limiter: Limiter<u8> = Limiter::builder(config(4, "1/s"))
        .sweep_per_op(0)
        .shards(1)
        .build();
    limiter.acquire_at(&0, 1, 10 * SECOND).unwrap();
    assert_eq!(
        limiter.sweep_at(20 * SECOND),
        1,
        "full again by 11 s: evicted"
    );
    // The clock runs back to 5 s: the key starts full (the spec's fresh bucket) ...
    assert!(limiter.acquire_at(&0, 4, 5 * SECOND).unwrap().is_allowed());
    // ... but its cursor is at the horizon (20 s), not at 5 s: nothing refills before 21 s.
    let denied = limiter.acquire_at(&0, 1, 10 * SECOND + SECOND / 2).unwrap();
    assert!(!denied.is_allowed());
    assert_eq!(
        denied.retry_after(),
        Some(Wait::After(10 * SECOND + SECOND / 2))
    );
    assert_eq!(limiter.inspect(&0).unwrap().0.last_refill(), 20 * SECOND);
}

/// Found by the linearizability checker under lagging concurrent clocks: a reused id whose old record
/// is dead must replace it, or the dead record holds a slot and pushes out another id's live record,
/// which is then charged twice.
#[test]
fn a_reused_request_id_replaces_its_dead_record() {
    let limiter: Limiter<u8> = Limiter::builder(config(100, "1/s"))
        .dedupe(Duration::from_nanos(5), 3)
        .build();
    let at = |now: u64, id: u64| {
        limiter
            .acquire_with(&0, Request::cost(1).at(now).id(id))
            .unwrap()
    };
    at(20, 100);
    at(1, 200);
    at(7, 200); // 200@1 is dead at 7: charged again, and its record replaces the dead one
    at(8, 300);
    assert!(
        at(8, 100).replayed,
        "100's record must still be there: charged once"
    );
}

/// `sweep_at` drops every evictable bucket and keeps every other one, whatever the table's layout:
/// removing an entry moves later entries of its probe run back, possibly into the slot the sweep just
/// cleared, and the sweep must still see them. 20,000 keys in one shard make long runs likely; every
/// third key is kept by an override, the rest are full again by the sweep's time.
#[test]
fn a_full_sweep_drops_every_evictable_bucket_and_keeps_the_rest() {
    let limiter: Limiter<u64> = Limiter::builder(config(2, "1/s"))
        .sweep_per_op(0)
        .shards(1)
        .hasher_seed(7)
        .build();
    for key in 0..20_000u64 {
        limiter.acquire_at(&key, 1, SECOND).unwrap();
        if key % 3 == 0 {
            limiter
                .reconfigure_at(&key, config(2, "1/s"), SECOND)
                .unwrap();
        }
    }
    let kept = (0..20_000u64).filter(|key| key % 3 == 0).count();
    assert_eq!(limiter.sweep_at(10 * SECOND), 20_000 - kept);
    assert_eq!(limiter.len(), kept);
    for key in 0..20_000u64 {
        assert_eq!(limiter.inspect(&key).is_some(), key % 3 == 0, "key {key}");
    }
}

/// `shard_of` and `shard_key_bound` are what the harness uses to refuse a scenario whose pinned keys
/// cannot fit: they must name the shard that actually refuses a key, and the bound it refuses at.
#[test]
fn shard_of_and_shard_key_bound_predict_where_the_key_bound_refuses() {
    let limiter: Limiter<u64> = Limiter::builder(config(2, "1/s"))
        .max_keys(8, EvictionPolicy::RejectNewKeys)
        .shards(4)
        .sweep_per_op(0)
        .hasher_seed(7)
        .build();
    assert_eq!(limiter.shard_key_bound(), 2);
    let shards: std::collections::BTreeSet<usize> =
        (0..64u64).map(|key| limiter.shard_of(&key)).collect();
    assert_eq!(shards, (0..4).collect(), "keys spread over every shard");
    for shard in 0..4 {
        let mut keys = (0..).filter(|key| limiter.shard_of(key) == shard);
        // Pin the shard's bound of keys (an override config is never evicted) ...
        for key in keys.by_ref().take(limiter.shard_key_bound()) {
            assert_eq!(limiter.reconfigure_at(&key, config(2, "1/s"), 0), Ok(1));
        }
        // ... and the next key of that shard is refused, while the next shard still has room.
        let next = keys.next().unwrap();
        assert!(
            matches!(
                limiter.acquire_at(&next, 1, 0),
                Err(AcquireError::KeyLimitReached { .. })
            ),
            "shard {shard} holds {} keys",
            limiter.shard_key_bound()
        );
    }
}
