//! What a key keeps in its shard's side map (an override, request-id records, a balance too wide
//! for the packed slot), seen through the public API: each part stays exactly as long as it means
//! something, and none pins the bucket for longer. A full bucket is dropped by a sweep unless an
//! override or a live request-id record pins it; a wide balance or a dead record does not.

use std::time::Duration;

use bucketproof_limiter::{Config, Limiter, NANOS_PER_SECOND, Rate, Request};

const SECOND: u64 = NANOS_PER_SECOND;

/// 5e9 tokens x 10^9 units per token = 5e18 units, above the packed slot's 2^62: a full bucket of
/// this config keeps its balance in the side map.
fn wide() -> Config {
    Config::new(5_000_000_000, Rate::per_second(1)).expect("a valid config")
}

/// Kills `keyed/eviction.rs` `replace && with || in Shard<K>::is_evictable` (every key with a
/// side-map entry would count as pinned).
#[test]
fn a_full_bucket_with_a_wide_balance_is_swept_like_any_full_bucket() {
    let limiter: Limiter<u64> = Limiter::builder(wide()).shards(1).sweep_per_op(0).build();
    limiter.acquire_at(&1, 1, 0).expect("a valid cost");
    assert_eq!(limiter.sweep_at(0), 0, "one token short of full");
    assert_eq!(limiter.sweep_at(SECOND), 1, "full again after a second");
    assert!(limiter.inspect(&1).is_none());
}

/// Kills `keyed/records.rs` `replace Records::any_live -> bool with true` (a record would pin its
/// bucket after its window).
#[test]
fn a_request_id_record_pins_its_full_bucket_only_inside_the_window() {
    let limiter: Limiter<u64> = Limiter::builder(Config::new(2, Rate::per_second(1)).unwrap())
        .shards(1)
        .sweep_per_op(0)
        .dedupe(Duration::from_secs(5), 4)
        .build();
    let first = limiter
        .acquire_with(&1, Request::cost(1).at(0).id(7u64))
        .expect("a valid cost");
    assert!(first.decision.is_allowed() && !first.replayed);
    assert_eq!(
        limiter.sweep_at(2 * SECOND),
        0,
        "full, but the record is live"
    );
    assert_eq!(
        limiter.sweep_at(5 * SECOND),
        1,
        "full, and the record is dead"
    );
    assert!(limiter.inspect(&1).is_none());
}

/// Kills `keyed/records.rs` `replace Records::is_empty -> bool with true`: when a wide balance
/// moves back into the packed slot, the side-map entry goes only if nothing else is in it, so the
/// key's request-id records survive and a retry is still answered from them.
#[test]
fn request_id_records_survive_a_wide_balance_moving_back_into_its_slot() {
    let limiter: Limiter<u64> = Limiter::builder(wide())
        .shards(1)
        .dedupe(Duration::from_secs(60), 4)
        .build();
    let first = limiter
        .acquire_with(&1, Request::cost(1).at(0).id(7u64))
        .expect("a valid cost");
    // A billion tokens more: 3.99e18 units, narrow again.
    let narrowing = limiter
        .acquire_at(&1, 1_000_000_000, 0)
        .expect("a valid cost");
    assert!(narrowing.is_allowed());
    let retry = limiter
        .acquire_with(&1, Request::cost(1).at(0).id(7u64))
        .expect("a valid cost");
    assert!(retry.replayed, "the record was lost with the wide balance");
    assert_eq!(retry.decision, first.decision);
    assert_eq!(limiter.peek_at(&1, 0).remaining, narrowing.remaining());
}

/// The packed slot holds balances below `2^62` units; exactly `2^62` is wide. Kills `keyed/shard.rs`
/// `replace < with <= / ==` in `Shard<K>::store` and `replace < with <=` in `Shard<K>::store_slow`:
/// a balance of exactly `2^62` stored in the slot would set the `WIDE` flag bit and lose the key.
#[test]
fn a_balance_of_exactly_two_to_the_62_units_is_kept_wide() {
    const LINE: u128 = 1 << 62;
    const UNITS_PER_TOKEN: u128 = 1_000_000_000;
    // 1 token/s is one unit per ns, so a refill can land on any unit.
    let config = Config::new(4_611_686_020, Rate::per_second(1)).expect("a valid config");
    let sub_token = (LINE % UNITS_PER_TOKEN) as u64;
    let deny = |limiter: &Limiter<u64>, now: u64| {
        let denied = limiter
            .acquire_at(&1, config.capacity(), now)
            .expect("a valid cost");
        assert!(!denied.is_allowed());
    };
    let balance = |limiter: &Limiter<u64>| limiter.inspect(&1).map(|(state, _)| state.balance());

    // From wide down to exactly the line: `store_slow` must keep it wide.
    let limiter: Limiter<u64> = Limiter::builder(config).shards(1).build();
    limiter.acquire_at(&1, 2, 0).expect("a valid cost");
    deny(&limiter, SECOND + sub_token); // refilled to 2^62 + 1 token: wide
    limiter
        .acquire_at(&1, 1, SECOND + sub_token)
        .expect("a valid cost");
    assert_eq!(balance(&limiter), Some(LINE), "from above");

    // From the slot (narrow) up to exactly the line: `store` must take the wide path.

    let limiter: Limiter<u64> = Limiter::builder(config).shards(1).build();
    limiter.acquire_at(&1, 2, 0).expect("a valid cost");
    assert_eq!(balance(&limiter), Some(LINE - u128::from(sub_token)));
    deny(&limiter, sub_token); // refilled from narrow to exactly 2^62
    assert_eq!(balance(&limiter), Some(LINE), "from below");
    assert_eq!(limiter.len(), 1);
}

/// Kills `keyed/shard.rs` `replace > with >= in Shard<K>::acquire`: with no room for records
/// (`per_key` 0) a request id records nothing, so a retry is charged again (and recording into no
/// room would never end).
#[test]
fn with_no_room_for_records_a_retry_is_charged_again() {
    let limiter: Limiter<u64> = Limiter::builder(Config::new(2, Rate::per_second(1)).unwrap())
        .shards(1)
        .dedupe(Duration::from_secs(60), 0)
        .build();
    let request = || Request::cost(1).at(0).id(7u64);
    let first = limiter.acquire_with(&1, request()).expect("a valid cost");
    let retry = limiter.acquire_with(&1, request()).expect("a valid cost");
    assert!(!first.replayed && !retry.replayed);
    assert_eq!(retry.decision.remaining().whole(), 0);
}
