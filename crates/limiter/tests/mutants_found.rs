//! Tests for what cargo-mutants found untested in this crate (one run, recorded in
//! `reports/mutants.md`): each test names the mutants it kills. Missed mutants that no test can
//! tell apart from the original (equivalent mutants) are listed, with why, in
//! `mutants-equivalent.md`, which `tests/mutants_equivalent.rs` keeps current.

use std::sync::Arc;
use std::time::Duration;

use bucketproof_limiter::internal::{Attempt, transition};
use bucketproof_limiter::{
    BucketState, Clock, Config, EvictionPolicy, Limiter, ManualClock, MonotonicClock, Rate,
    Request, Wait,
};

const SECOND: u64 = bucketproof_limiter::NANOS_PER_SECOND;

/// A bucket of `u64::MAX` tokens at 1 token/s: its balance is ~1.8e28 units, far above `2^64`, so
/// every place that splits a `u128` balance into two `u64` halves must put the high half back.
fn huge() -> Config {
    Config::new(u64::MAX, Rate::per_second(1)).expect("a valid config")
}

/// Kills `bucket.rs` `replace >> with << in transition` (the high half of the remaining units
/// dropped when the decision is built) and `replace << with >> in Decision::remaining_units` (the
/// high half dropped when it is read back).
#[test]
fn a_decision_keeps_a_balance_above_two_to_the_64_units() {
    let config = huge();
    let state = BucketState::full(&config, 0);
    let (next, decision) =
        transition(&config, state, Attempt { cost: 1, now: 0 }).expect("a valid cost");
    assert!(
        next.balance() > u64::MAX as u128,
        "the test needs a wide balance"
    );
    assert_eq!(decision.remaining().units(), next.balance());
    assert_eq!(decision.remaining().whole(), u64::MAX - 1);
    // One token short of full at 1 token/s: full again in exactly one second.
    assert_eq!(decision.reset_after(), Wait::After(SECOND));
    let (_, denied) = transition(
        &config,
        next,
        Attempt {
            cost: u64::MAX,
            now: 0,
        },
    )
    .expect("a valid cost");
    assert!(!denied.is_allowed());
    assert_eq!(denied.remaining().units(), next.balance());
    assert_eq!(denied.retry_after(), Some(Wait::After(SECOND)));
}

/// Kills `keyed/shard.rs` `replace >> with << in PackedBucket::pack` and `replace << with >> in
/// PackedBucket::unpack`: the keyed limiter stores a balance above `2^64` units and reads it back.
#[test]
fn the_keyed_limiter_stores_a_balance_above_two_to_the_64_units() {
    let limiter: Limiter<u64> = Limiter::builder(huge()).shards(1).build();
    let first = limiter.acquire_at(&7, 1, 0).expect("a valid cost");
    let (state, _) = limiter.inspect(&7).expect("the key is held");
    assert_eq!(state.balance(), first.remaining().units());
    let second = limiter.acquire_at(&7, 1, 0).expect("a valid cost");
    assert!(second.is_allowed());
    assert_eq!(second.remaining().whole(), u64::MAX - 2);
    assert_eq!(limiter.peek_at(&7, 0).remaining.whole(), u64::MAX - 2);
}

/// Kills `clock.rs` `replace <impl Clock for MonotonicClock>::now -> Nanos with Default::default()`.
#[test]
fn the_monotonic_clock_advances() {
    let clock = MonotonicClock::new();
    let before = clock.now();
    std::thread::sleep(Duration::from_millis(2));
    let after = clock.now();
    assert!(after >= before + 2_000_000, "{before} -> {after}");
}

/// Kills `clock.rs` `replace ManualClock::set with ()` and `replace <impl Clock for Arc<C>>::now
/// -> Nanos with Default::default()`: a shared manual clock moves both ways and every handle sees it.
#[test]
fn a_manual_clock_is_set_both_ways_and_shared_through_an_arc() {
    let clock = Arc::new(ManualClock::new(10 * SECOND));
    let handle = Arc::clone(&clock);
    assert_eq!(handle.now(), 10 * SECOND);
    clock.set(3 * SECOND);
    assert_eq!(handle.now(), 3 * SECOND, "set moves the clock back too");
    clock.set(42 * SECOND);
    assert_eq!(Clock::now(&handle), 42 * SECOND);
    let limiter: Limiter<u64, Arc<ManualClock>> =
        Limiter::builder(Config::new(1, Rate::per_second(1)).expect("a valid config"))
            .clock(Arc::clone(&clock))
            .build();
    assert!(limiter.acquire(&1, 1).expect("a valid cost").is_allowed());
    assert!(!limiter.acquire(&1, 1).expect("a valid cost").is_allowed());
    clock.advance(SECOND);
    assert!(
        limiter.acquire(&1, 1).expect("a valid cost").is_allowed(),
        "the limiter reads the shared clock"
    );
}

/// Kills `rate.rs` `replace == with != in Rate::per` and `replace * with + in Rate::per`.
#[test]
fn rate_per_period_is_reduced_and_a_zero_period_is_refused() {
    let rate = Rate::per(5, Duration::from_secs(60)).expect("a valid period");
    assert_eq!((rate.numer(), rate.denom()), (1, 12));
    let rate = Rate::per(3, Duration::from_millis(500)).expect("a valid period");
    assert_eq!((rate.numer(), rate.denom()), (6, 1));
    assert!(Rate::per(1, Duration::ZERO).is_err());
}

/// Kills the three `Rate::is_zero` mutants.
#[test]
fn only_the_zero_rate_is_zero() {
    assert!(Rate::ZERO.is_zero());
    assert!(!Rate::per_second(1).is_zero());
    assert!(!"1/h".parse::<Rate>().expect("parses").is_zero());
}

/// Kills `rate.rs` `delete match arm "ns"`, `delete match arm "us" | "µs"`, `delete match arm "d"`
/// and `replace * with + / with /` in the day's length.
#[test]
fn every_documented_rate_unit_parses_to_its_exact_value() {
    let parse = |text: &str| {
        let rate: Rate = text.parse().expect(text);
        (rate.numer(), rate.denom())
    };
    assert_eq!(parse("1/ns"), (1_000_000_000, 1));
    assert_eq!(parse("1/us"), (1_000_000, 1));
    assert_eq!(parse("1/µs"), (1_000_000, 1));
    assert_eq!(parse("1/ms"), (1_000, 1));
    assert_eq!(parse("1/d"), (1, 86_400));
    assert_eq!(parse("2/3d"), (1, 129_600));
}

/// Kills the `Tokens::units`, `Tokens::units_per_token` and `Tokens::to_f64_lossy` mutants.
#[test]
fn tokens_report_their_units_grid_and_approximate_value() {
    let tokens = bucketproof_limiter::Tokens::from_units(3, 2);
    assert_eq!(tokens.units(), 3);
    assert_eq!(tokens.units_per_token(), 2);
    assert_eq!(tokens.to_f64_lossy(), 1.5);
    assert_eq!(tokens.whole(), 1);
}

/// Kills the three `Limiter::is_empty` mutants.
#[test]
fn a_limiter_is_empty_until_a_key_holds_state_and_again_after_forget() {
    let limiter: Limiter<u64> = Limiter::new(Config::new(2, Rate::per_second(1)).expect("valid"));
    assert!(limiter.is_empty());
    limiter.acquire_at(&1, 1, 0).expect("a valid cost");
    assert!(!limiter.is_empty());
    limiter.forget(&1);
    assert!(limiter.is_empty());
}

/// A one-shard limiter of capacity 2 at 1 token/s with room for `max_keys` keys and no amortized
/// sweeping, so only the key bound's policy decides what goes.
fn bounded(max_keys: usize, policy: EvictionPolicy) -> Limiter<u64> {
    Limiter::builder(Config::new(2, Rate::per_second(1)).expect("valid"))
        .shards(1)
        .max_keys(max_keys, policy)
        .sweep_per_op(0)
        .build()
}

/// Kills `keyed/eviction.rs` `replace || with && in Shard<K>::make_room` (RejectNewKeys would evict) and
/// `replace == with != in Shard<K>::make_room` (EvictFull would reject).
#[test]
fn reject_new_keys_rejects_at_the_bound_and_evict_full_makes_room() {
    for policy in [EvictionPolicy::RejectNewKeys, EvictionPolicy::EvictFull] {
        let limiter = bounded(2, policy);
        limiter.acquire_at(&1, 1, 0).expect("room");
        limiter.acquire_at(&2, 1, 0).expect("room");
        // Ten seconds later both buckets are full again: evictable without loss.
        let third = limiter.acquire_at(&3, 1, 10 * SECOND);
        match policy {
            EvictionPolicy::RejectNewKeys => {
                assert!(third.is_err(), "RejectNewKeys never evicts");
                assert_eq!(limiter.stats().rejected_keys, 1);
            }
            _ => {
                assert!(third.is_ok(), "EvictFull drops a full bucket");
                assert_eq!(limiter.stats().evicted_lossless, 1);
            }
        }
    }
}

/// Kills `keyed/eviction.rs` `replace % with / in Shard<K>::make_room` and `replace + with * in
/// Shard<K>::make_room` (the room scan stuck at one position): the full bucket is found wherever it
/// sits, and the non-full one is kept.
#[test]
fn evict_full_finds_the_full_bucket_in_any_position() {
    for full_key in [1u64, 2] {
        let limiter = bounded(2, EvictionPolicy::EvictFull);
        for key in [1u64, 2] {
            // The full key takes 1 token (full again after 1 s); the other 2 (still short at 1 s).
            let cost = if key == full_key { 1 } else { 2 };
            limiter.acquire_at(&key, cost, 0).expect("room");
        }
        assert!(
            limiter.acquire_at(&3, 1, SECOND).is_ok(),
            "full key {full_key}"
        );
        let other = 3 - full_key;
        assert!(limiter.inspect(&full_key).is_none(), "full key {full_key}");
        assert!(limiter.inspect(&other).is_some(), "full key {full_key}");
    }
}

/// Kills `keyed/eviction.rs` `replace % with / in Shard<K>::make_room` on the scan cursor: with more keys than
/// one scan covers, successive new keys scan on, so a full bucket anywhere is found within
/// `ceil(keys / 32)` attempts.
#[test]
fn the_room_scan_rotates_through_a_table_larger_than_one_scan() {
    let keys = 40u64;
    let limiter = bounded(keys as usize, EvictionPolicy::EvictFull);
    for key in 0..keys {
        // Only the last key is full again at 1 s.
        let cost = if key == keys - 1 { 1 } else { 2 };
        limiter.acquire_at(&key, cost, 0).expect("room");
    }
    let admitted = (0..2).any(|i| limiter.acquire_at(&(100 + i), 1, SECOND).is_ok());
    assert!(admitted, "the full bucket was never reached");
    assert!(limiter.inspect(&(keys - 1)).is_none());
}

/// Kills `keyed/eviction.rs` `replace < with > / ==` and `replace && with ||` in `Shard<K>::make_room`:
/// EvictLeastRecent drops the bucket with the oldest refill cursor, never a pinned (reconfigured) one.
#[test]
fn evict_least_recent_drops_the_oldest_unpinned_bucket() {
    // Scan order 1, 2; key 1's cursor is at 1 s, key 2's at 0.5 s: key 2 is the least recent.
    let limiter = bounded(2, EvictionPolicy::EvictLeastRecent);
    limiter.acquire_at(&1, 2, 0).expect("room");
    limiter.acquire_at(&2, 2, SECOND / 2).expect("room");
    limiter.acquire_at(&1, 1, SECOND).expect("known key");
    assert!(limiter.acquire_at(&3, 1, SECOND).is_ok());
    assert!(limiter.inspect(&2).is_none(), "the least recent goes");
    assert!(limiter.inspect(&1).is_some());
    assert_eq!(limiter.stats().evicted_lossy, 1);

    // Key 2 is older but pinned by its override: key 1 goes instead.
    let limiter = bounded(2, EvictionPolicy::EvictLeastRecent);
    limiter.acquire_at(&1, 2, 0).expect("room");
    let pinned = Config::new(2, Rate::per_second(1)).expect("valid");
    limiter.reconfigure_at(&2, pinned, 0).expect("room");
    limiter.acquire_at(&1, 1, SECOND).expect("known key");
    assert!(limiter.acquire_at(&3, 1, SECOND).is_ok());
    assert!(
        limiter.inspect(&2).is_some(),
        "a pinned bucket is never evicted"
    );
    assert!(limiter.inspect(&1).is_none());
}

/// Kills `keyed/eviction.rs` `replace += with *= in Shard<K>::sweep_some` (both: the lossless-eviction
/// counter, and the sweep cursor stuck on one entry): as new keys arrive, the amortized sweep visits
/// the whole table and drops every bucket that is full again, and counts each.
#[test]
fn the_amortized_sweep_reaches_every_full_bucket_and_counts_it() {
    let config = Config::new(2, Rate::per_second(1)).expect("valid");
    let limiter: Limiter<u64> = Limiter::builder(config).shards(1).sweep_per_op(2).build();
    for key in 0..5 {
        limiter.acquire_at(&key, 1, 0).expect("room");
    }
    // Ten seconds on, keys 0..5 are full again; each new key arrives empty, so it stays.
    for key in 100..120 {
        limiter.acquire_at(&key, 2, 10 * SECOND).expect("room");
    }
    for key in 0..5 {
        assert!(
            limiter.inspect(&key).is_none(),
            "full key {key} never swept"
        );
    }
    assert_eq!(limiter.len(), 20);
    assert_eq!(limiter.stats().evicted_lossless, 5);
}

/// Kills `keyed/eviction.rs` `replace && with || in Shard<K>::make_room` (every bucket with extras treated
/// as pinned): only an override pins a bucket; a live request-id record does not protect the least
/// recent bucket from a lossy eviction.
#[test]
fn a_request_id_record_does_not_pin_a_bucket_against_evict_least_recent() {
    let limiter = bounded(2, EvictionPolicy::EvictLeastRecent);
    limiter
        .acquire_with(&1, Request::cost(2).at(0).id(7u64))
        .expect("room");
    limiter.acquire_at(&2, 2, SECOND / 2).expect("room");
    assert!(limiter.acquire_at(&3, 1, SECOND).is_ok());
    assert!(limiter.inspect(&1).is_none(), "the least recent goes");
    assert!(limiter.inspect(&2).is_some());
}
