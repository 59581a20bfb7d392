//! Reserve, then settle, through the keyed limiter's public API (docs/semantics.md, "settle"):
//! each rule and each classic refund mistake (twice, above capacity, another key's request) has a
//! test that fails when the rule is broken.

use std::time::Duration;

use bucketproof_limiter::{
    Bandwidth, Bandwidths, Config, Limiter, Rate, Request, Settle, SettleError, Wait,
};

const S: u64 = 1_000_000_000;

fn limiter(capacity: u64) -> Limiter<&'static str> {
    Limiter::builder(Config::new(capacity, Rate::per_second(1)).unwrap())
        .dedupe(Duration::from_secs(60), 8)
        .build()
}

fn reserve(limiter: &Limiter<&'static str>, key: &'static str, id: u64, cost: u64, now: u64) {
    let reserved = limiter
        .acquire_with(&key, Request::cost(cost).at(now).id(id))
        .unwrap();
    assert!(reserved.decision.is_allowed(), "the reserve is admitted");
}

fn remaining(limiter: &Limiter<&'static str>, key: &'static str, now: u64) -> u64 {
    limiter.peek_at(&key, now).remaining.whole()
}

#[test]
fn a_lower_actual_gives_back_the_difference_once() {
    let limiter = limiter(10);
    reserve(&limiter, "a", 1, 6, 0);
    let settled = limiter.settle(&"a", Settle::new(1u64, 2).at(0)).unwrap();
    assert!(settled.decision.is_allowed() && !settled.replayed);
    assert_eq!(settled.decision.remaining().whole(), 8);
    // Retried: replayed, nothing more given back.
    let again = limiter.settle(&"a", Settle::new(1u64, 2).at(0)).unwrap();
    assert!(again.replayed);
    assert_eq!(again.decision, settled.decision);
    assert_eq!(remaining(&limiter, "a", 0), 8);
    // Another actual for a settled request is an error and changes nothing.
    assert_eq!(
        limiter.settle(&"a", Settle::new(1u64, 0).at(0)),
        Err(SettleError::AlreadySettled { actual: 2 })
    );
    assert_eq!(remaining(&limiter, "a", 0), 8);
}

#[test]
fn a_refund_never_lifts_the_bucket_above_capacity() {
    let limiter = limiter(10);
    reserve(&limiter, "a", 1, 6, 0);
    // Refilled to full by 6 s: the refund of 6 has nowhere to go.
    let settled = limiter
        .settle(&"a", Settle::new(1u64, 0).at(6 * S))
        .unwrap();
    assert_eq!(settled.decision.remaining().whole(), 10);
    assert_eq!(
        settled.decision.remaining().units(),
        Config::new(10, Rate::per_second(1))
            .unwrap()
            .capacity_units()
    );
    // Half-way: 4 + 3 refilled + 6 refunded is capped at 10.
    reserve(&limiter, "b", 2, 6, 0);
    let settled = limiter
        .settle(&"b", Settle::new(2u64, 0).at(3 * S))
        .unwrap();
    assert_eq!(settled.decision.remaining().whole(), 10);
}

#[test]
fn a_settle_finds_only_its_own_keys_request() {
    let limiter = limiter(10);
    reserve(&limiter, "a", 1, 6, 0);
    reserve(&limiter, "b", 9, 6, 0);
    assert_eq!(
        limiter.settle(&"b", Settle::new(1u64, 0).at(0)),
        Err(SettleError::UnknownRequest)
    );
    assert_eq!(
        limiter.settle(&"c", Settle::new(1u64, 0).at(0)),
        Err(SettleError::UnknownRequest),
        "a settle never creates a key"
    );
    assert_eq!(remaining(&limiter, "b", 0), 4);
    assert!(!limiter.peek_at(&"c", 0).present);
}

#[test]
fn a_denied_request_has_nothing_to_settle_and_a_bad_actual_is_an_error() {
    let limiter = limiter(4);
    reserve(&limiter, "a", 1, 4, 0);
    let denied = limiter
        .acquire_with(&"a", Request::cost(1).at(0).id(2u64))
        .unwrap();
    assert!(!denied.decision.is_allowed());
    assert_eq!(
        limiter.settle(&"a", Settle::new(2u64, 0).at(0)),
        Err(SettleError::NotAdmitted)
    );
    assert_eq!(
        limiter.settle(&"a", Settle::new(1u64, 5).at(0)),
        Err(SettleError::InvalidActual {
            actual: 5,
            capacity: 4
        })
    );
    assert_eq!(remaining(&limiter, "a", 0), 0);
}

#[test]
fn an_extra_is_charged_by_the_normal_rule_and_a_denied_extra_leaves_the_request_open() {
    let limiter = limiter(10);
    reserve(&limiter, "a", 1, 2, 0);
    reserve(&limiter, "a", 2, 6, 0);
    // 2 left; the first request really cost 5: an extra of 3 is not covered.
    let denied = limiter.settle(&"a", Settle::new(1u64, 5).at(0)).unwrap();
    assert!(!denied.decision.is_allowed());
    assert_eq!(denied.decision.retry_after(), Some(Wait::After(S)));
    assert_eq!(
        remaining(&limiter, "a", 0),
        2,
        "a denied extra charges nothing"
    );
    // Retried at the retry-after (1 ns earlier is still short): allowed, charged once.
    assert!(
        !limiter
            .settle(&"a", Settle::new(1u64, 5).at(S - 1))
            .unwrap()
            .decision
            .is_allowed()
    );
    let paid = limiter.settle(&"a", Settle::new(1u64, 5).at(S)).unwrap();
    assert!(paid.decision.is_allowed());
    assert_eq!(paid.decision.remaining().whole(), 0);
    assert!(
        limiter
            .settle(&"a", Settle::new(1u64, 5).at(S))
            .unwrap()
            .replayed
    );
}

#[test]
fn a_record_out_of_the_window_cannot_be_settled() {
    let limiter = limiter(10);
    reserve(&limiter, "a", 1, 6, 0);
    assert_eq!(
        limiter.settle(&"a", Settle::new(1u64, 0).at(60 * S)),
        Err(SettleError::UnknownRequest)
    );
    let off: Limiter<&str> = Limiter::builder(Config::new(10, Rate::per_second(1)).unwrap())
        .dedupe(Duration::ZERO, 8)
        .build();
    reserve(&off, "a", 1, 6, 0);
    assert_eq!(
        off.settle(&"a", Settle::new(1u64, 0).at(0)),
        Err(SettleError::UnknownRequest),
        "a window of 0 keeps no records"
    );
}

#[test]
fn a_set_refunds_each_bandwidth_up_to_its_capacity_and_charges_an_extra_to_all_or_none() {
    let set = Bandwidths::new([
        Bandwidth::named("burst", Config::new(5, Rate::per_second(5)).unwrap()).unwrap(),
        Bandwidth::named("daily", Config::new(20, "20/d".parse().unwrap()).unwrap()).unwrap(),
    ])
    .unwrap();
    let limiter: Limiter<&str> = Limiter::builder(set)
        .dedupe(Duration::from_secs(60), 8)
        .build();
    let reserved = limiter
        .acquire_set_with(&"a", Request::cost(4).at(0).id(1u64))
        .unwrap();
    assert!(reserved.decision.is_allowed());
    // At 1 s the burst is full again: it keeps 5; daily gets its 3 back.
    let settled = limiter
        .settle_set(&"a", Settle::new(1u64, 1).at(S))
        .unwrap();
    let parts: Vec<u64> = (settled.decision.bandwidths().iter())
        .map(|part| part.remaining().whole())
        .collect();
    assert_eq!(parts, [5, 19]);
    // burst 4 then 1, daily 18 then 15; an extra of 4 is short in the burst alone: none is charged.
    for (id, cost) in [(2u64, 1), (3, 3)] {
        let reserved = limiter
            .acquire_set_with(&"a", Request::cost(cost).at(S).id(id))
            .unwrap();
        assert!(reserved.decision.is_allowed());
    }
    let denied = limiter
        .settle_set(&"a", Settle::new(2u64, 5).at(S))
        .unwrap();
    assert!(!denied.decision.is_allowed());
    let parts: Vec<u64> = (denied.decision.bandwidths().iter())
        .map(|part| part.remaining().whole())
        .collect();
    assert_eq!(parts, [1, 15]);
    // An extra of 1 is covered by both: both are charged.
    let paid = limiter
        .settle_set(&"a", Settle::new(2u64, 2).at(S))
        .unwrap();
    let parts: Vec<u64> = (paid.decision.bandwidths().iter())
        .map(|part| part.remaining().whole())
        .collect();
    assert_eq!(parts, [0, 14]);
}
