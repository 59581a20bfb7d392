//! The linearizability checker has teeth and no false alarms, on hand-made histories.
//!
//! The checker (tests/common/linearizability.rs) is what loom and shuttle run after every explored
//! execution, so it must accept every history a correct limiter can produce and reject the ones it cannot.
//! Here the histories are written by hand (with decisions computed by the real `transition`), so each
//! test pins one case: sequential histories of the real limiter pass; an overlap that only the
//! later-invoked op going first explains passes; the racy variant's double spend fails, as does an order
//! that contradicts real time; a re-created bucket passes only if it was evictable.
#![cfg(not(any(loom, feature = "shuttle")))] // the std build: its locks are real locks

mod common;

use bucketproof_limiter::internal::{Attempt, transition};
use bucketproof_limiter::{Acquired, BucketState, Config, Decision, EvictionPolicy, Limiter, Rate};
use common::history::{Call, Op, Recorder, Ret, Setup, check_execution};
use common::linearizability::check;

const SECOND: u64 = bucketproof_limiter::NANOS_PER_SECOND;

fn config(capacity: u64, per_second: u64) -> Config {
    Config::new(capacity, Rate::per_second(per_second)).unwrap()
}

/// The decisions of `steps` applied in order to a fresh bucket created at the first `now`.
fn decisions(config: &Config, steps: &[Attempt]) -> Vec<Decision> {
    let mut state = BucketState::full(config, steps[0].now);
    steps
        .iter()
        .map(|&attempt| {
            let (next, decision) = transition(config, state, attempt).unwrap();
            state = next;
            decision
        })
        .collect()
}

fn acquired(
    thread: usize,
    (invoked, returned): (u64, u64),
    now: u64,
    cost: u64,
    decision: Decision,
    created: bool,
) -> Op {
    Op {
        thread,
        invoked,
        returned,
        key: 7,
        now,
        call: Call::Acquire {
            cost,
            request_id: None,
        },
        ret: Ret::Acquired(Ok(Acquired {
            decision,
            created,
            replayed: false,
        })),
    }
}

fn racy(thread: usize, (invoked, returned): (u64, u64), now: u64, decision: Decision) -> Op {
    Op {
        thread,
        invoked,
        returned,
        key: 7,
        now,
        call: Call::AcquireRacy { cost: 1 },
        ret: Ret::AcquiredRacy(Ok(decision)),
    }
}

#[test]
fn a_sequential_history_of_the_real_limiter_is_accepted() {
    let default = config(3, 2);
    let limiter: Limiter<u64> = Limiter::builder(default)
        .shards(1)
        .max_keys(2, EvictionPolicy::EvictFull)
        .hasher_seed(1)
        .build();
    let rec = Recorder::new();
    let mut ops = Vec::new();
    for step in 0..40u64 {
        let key = step % 3;
        let now = step * SECOND / 4;
        ops.push(rec.acquire(&limiter, 0, key, now, 1 + step % 3, None));
        if step % 5 == 0 {
            ops.push(rec.acquire(&limiter, 0, key, now, 1, Some(step / 10)));
            ops.push(rec.peek(&limiter, 0, key, now + 1));
        }
        if step == 20 {
            ops.push(rec.reconfigure(&limiter, 0, 1, now, config(5, 1)));
            ops.push(rec.acquire(&limiter, 0, 1, now, 0, None)); // invalid cost
        }
        if step % 7 == 0 {
            ops.push(rec.sweep(&limiter, 0, now));
        }
    }
    let setup = Setup::new(default);
    check_execution(&setup, &limiter, &ops).unwrap();
    assert!(
        ops.iter().any(|op| matches!(op.ret, Ret::Acquired(Err(_)))),
        "the history includes errors (invalid cost, key bound)"
    );
}

#[test]
fn an_overlap_explained_only_by_the_later_invoked_op_going_first_is_accepted() {
    let config = config(3, 1);
    // Thread 1 invokes second but takes effect first: cost 1 then cost 2 leaves 0.
    let d = decisions(
        &config,
        &[Attempt { cost: 1, now: 0 }, Attempt { cost: 2, now: 0 }],
    );
    let ops = vec![
        acquired(0, (0, 3), 0, 2, d[1], false),
        acquired(1, (1, 2), 0, 1, d[0], true),
    ];
    check(&Setup::new(config), &ops).unwrap();
}

#[test]
fn the_racy_double_spend_is_rejected() {
    // What `acquire_racy_at` does when both threads read before either writes: both take the only
    // token of a fresh bucket and both report 0 left.
    let config = config(1, 1);
    let d = decisions(&config, &[Attempt { cost: 1, now: 0 }]);
    let overlapping = vec![racy(0, (0, 2), 0, d[0]), racy(1, (1, 3), 0, d[0])];
    let why = check(&Setup::new(config), &overlapping).unwrap_err();
    assert!(why.contains("key 7"), "{why}");
    assert!(why.contains("longest explained prefix (1 ops)"), "{why}");
    // The same two ops as keyed acquires (one creating the bucket, one finding it) fail too.
    let keyed = vec![
        acquired(0, (0, 2), 0, 1, d[0], true),
        acquired(1, (1, 3), 0, 1, d[0], false),
    ];
    assert!(check(&Setup::new(config), &keyed).is_err());
}

#[test]
fn an_order_that_contradicts_real_time_is_rejected() {
    let config = config(3, 1);
    let d = decisions(
        &config,
        &[Attempt { cost: 1, now: 0 }, Attempt { cost: 2, now: 0 }],
    );
    // Same decisions as the accepted overlap, but thread 0's op returned before thread 1's was invoked.
    let ops = vec![
        acquired(0, (0, 1), 0, 2, d[1], false),
        acquired(1, (2, 3), 0, 1, d[0], true),
    ];
    assert!(check(&Setup::new(config), &ops).is_err());
}

#[test]
fn a_recreated_bucket_is_accepted_only_if_it_was_evictable() {
    let config = config(2, 1);
    let first = decisions(&config, &[Attempt { cost: 1, now: 0 }])[0];
    // A fresh bucket's decision at `now` (what the limiter returns after dropping the key).
    let fresh_at = |now: u64| decisions(&config, &[Attempt { cost: 1, now }])[0];
    let history = |now: u64| {
        vec![
            acquired(0, (0, 1), 0, 1, first, true),
            acquired(0, (2, 3), now, 1, fresh_at(now), true),
        ]
    };
    // Half a second after taking one of two tokens the bucket is not full: dropping it was a bug.
    let why = check(&Setup::new(config), &history(SECOND / 2)).unwrap_err();
    assert!(why.contains("not evictable"), "{why}");
    // A full second later it is full again: dropping it was lossless.
    check(&Setup::new(config), &history(SECOND)).unwrap();
    // Under `EvictLeastRecent` a non-full bucket may be dropped (lossy by contract).
    let lossy = Setup {
        lossy_eviction: true,
        ..Setup::new(config)
    };
    check(&lossy, &history(SECOND / 2)).unwrap();
}
