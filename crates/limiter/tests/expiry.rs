//! Expiry under a clock that runs backwards, and request ids judged in the key's own time
//! (docs/semantics.md, "Expiry and the key bound" and acquire steps 2 and 6).
//!
//! Everything about a key is judged at its effective time `max(now, last_refill)`, which never moves
//! back. A sweep at `s` judges a bucket at `j = max(s, last_refill)` and, dropping it, raises the
//! shard's horizon to `j`; a fresh bucket starts at `max(now, horizon)`. So a key dropped and used
//! again under a rolled-back clock continues from `j`: nothing before `j` is credited twice, and a
//! request id that was dead at `j` stays dead.

use std::time::Duration;

use bucketproof_limiter::{Config, Limiter, Request, Wait};

const SECOND: u64 = bucketproof_limiter::NANOS_PER_SECOND;

fn config(capacity: u64, rate: &str) -> Config {
    Config::new(capacity, rate.parse().unwrap()).unwrap()
}

/// Capacity 2 at 1/s with a fixed hasher seed, so every run places keys on the same shards.
fn two_per_second(sweep_per_op: usize) -> Limiter<u64> {
    Limiter::builder(config(2, "1/s"))
        .shards(8)
        .sweep_per_op(sweep_per_op)
        .hasher_seed(3)
        .build()
}

/// What the key does after it was emptied at 10 s and dropped while full at 13 s: a rolled-back
/// acquire at 10 s starts from the drop's judgment time (13 s), so it gets the two tokens the key
/// refilled by then, and nothing more before 14 s.
fn continues_from_the_drop(limiter: &Limiter<u64>, key: u64) {
    let again = limiter
        .acquire_with(&key, Request::cost(2).at(10 * SECOND))
        .unwrap();
    assert!(again.created, "the bucket was dropped");
    assert!(again.decision.is_allowed(), "full at 13 s");
    assert_eq!(
        limiter.inspect(&key).unwrap().0.last_refill(),
        13 * SECOND,
        "the fresh cursor is the time the bucket was judged full, not its stored cursor (10 s)"
    );
    // Full again only 2 s after 13 s, measured from this call's 10 s.
    assert_eq!(again.decision.reset_after(), Wait::After(5 * SECOND));
    // 2 tokens at 10 s, 2 at 13 s: with a cursor left at 10 s this would be 2 more.
    let later = limiter.acquire_at(&key, 2, 12 * SECOND).unwrap();
    assert!(!later.is_allowed(), "nothing refills before 14 s");
    assert_eq!(later.retry_after(), Some(Wait::After(3 * SECOND)));
}

#[test]
fn a_bucket_swept_while_full_comes_back_at_its_judgment_time_not_its_stored_cursor() {
    let limiter = two_per_second(0);
    assert!(limiter.acquire_at(&0, 2, 10 * SECOND).unwrap().is_allowed());
    assert_eq!(limiter.sweep_at(13 * SECOND), 1, "full by 12 s");
    continues_from_the_drop(&limiter, 0);
}

/// The same drop made by the amortized sweep that another key's insertion on the same shard runs.
#[test]
fn a_bucket_dropped_by_the_amortized_sweep_comes_back_at_its_judgment_time() {
    let limiter = two_per_second(2);
    let neighbour = (1..)
        .find(|key| limiter.shard_of(key) == limiter.shard_of(&0))
        .unwrap();
    assert!(limiter.acquire_at(&0, 2, 10 * SECOND).unwrap().is_allowed());
    let inserted = limiter
        .acquire_with(&neighbour, Request::cost(1).at(13 * SECOND))
        .unwrap();
    assert!(inserted.created);
    assert!(
        limiter.inspect(&0).is_none(),
        "the insertion's sweep dropped key 0"
    );
    continues_from_the_drop(&limiter, 0);
}

/// A record dead when its bucket was swept stays dead: the key continues from the sweep's judgment
/// time, where the retry is outside the window, so it is charged, at that time. Without the sweep
/// the key is still at 10 s, where the retry is inside the window, and replays.
#[test]
fn a_request_id_dead_at_a_sweep_is_not_alive_again_at_a_rolled_back_time() {
    let build = || -> Limiter<u64> {
        Limiter::builder(config(5, "1/s"))
            .shards(1)
            .sweep_per_op(0)
            .dedupe(Duration::from_secs(1), 4)
            .hasher_seed(3)
            .build()
    };
    let retry = Request::cost(1).at(10 * SECOND + SECOND / 2).id(7u64);

    let kept = build();
    kept.acquire_with(&0, Request::cost(1).at(10 * SECOND).id(7u64))
        .unwrap();
    assert!(kept.acquire_with(&0, retry).unwrap().replayed);

    let swept = build();
    swept
        .acquire_with(&0, Request::cost(1).at(10 * SECOND).id(7u64))
        .unwrap();
    assert_eq!(
        swept.sweep_at(12 * SECOND),
        1,
        "full by 11 s, record dead at 11 s"
    );
    let charged = swept.acquire_with(&0, retry).unwrap();
    assert!(!charged.replayed && charged.created && charged.decision.is_allowed());
    assert_eq!(swept.inspect(&0).unwrap().0.last_refill(), 12 * SECOND);
    // The charge was made at 12 s: full again 1 s later, 2.5 s after this call's 10.5 s.
    assert_eq!(
        charged.decision.reset_after(),
        Wait::After(2 * SECOND + SECOND / 2)
    );
    // Its record is stamped 12 s: live until 13 s, in the key's time, whatever the caller's clock says.
    let back = Request::cost(1).at(9 * SECOND).id(7u64);
    assert!(swept.acquire_with(&0, back).unwrap().replayed);
    let after = Request::cost(1).at(13 * SECOND).id(7u64);
    assert!(!swept.acquire_with(&0, after).unwrap().replayed);
}

/// A record stamped while the caller's clock lagged the key's is stamped at the key's time, and
/// judged there: a later call whose caller time is past the caller's stamp but not the key's still
/// replays.
#[test]
fn a_request_id_is_stamped_and_judged_at_the_keys_effective_time() {
    let limiter: Limiter<u64> = Limiter::builder(config(5, "1/s"))
        .dedupe(Duration::from_secs(1), 4)
        .hasher_seed(3)
        .build();
    limiter.acquire_at(&0, 1, 20 * SECOND).unwrap();
    let first = limiter
        .acquire_with(&0, Request::cost(1).at(5 * SECOND).id(7u64))
        .unwrap();
    assert!(!first.replayed);
    // Caller time 7 s is 2 s past the caller's 5 s, but the key is at 20 s: inside the window.
    let retry = limiter
        .acquire_with(&0, Request::cost(1).at(7 * SECOND).id(7u64))
        .unwrap();
    assert!(retry.replayed);
    assert_eq!(retry.decision, first.decision);
    // At 21 s the key's time reaches the record's 20 s + 1 s: dead.
    let late = limiter
        .acquire_with(&0, Request::cost(1).at(21 * SECOND).id(7u64))
        .unwrap();
    assert!(!late.replayed);
}

/// A dedupe window of 0 turns request ids off: nothing replays, not after a rollback either.
#[test]
fn a_zero_dedupe_window_never_replays_even_under_a_rollback() {
    let limiter: Limiter<u64> = Limiter::builder(config(5, "1/s"))
        .dedupe(Duration::ZERO, 4)
        .hasher_seed(3)
        .build();
    for now in [10 * SECOND, 10 * SECOND, 5 * SECOND, 0] {
        let got = limiter
            .acquire_with(&0, Request::cost(1).at(now).id(7u64))
            .unwrap();
        assert!(!got.replayed, "at {now}");
    }
    assert_eq!(limiter.peek_at(&0, 10 * SECOND).remaining.whole(), 1);
    assert_eq!(limiter.sweep_at(20 * SECOND), 1, "no record pins the key");
}
