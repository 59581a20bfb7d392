//! The Redis subject (the atomic Lua script, injected time) against the reference model with every
//! oracle: the same traces the core passes, including rollbacks, reconfigurations, request ids and
//! invalid costs. Needs `REDIS_URL`; without it the test prints a loud SKIP line and passes, unless
//! `BUCKETPROOF_REQUIRE_REDIS=1` (CI), which makes the skip a failure.

// The shared helpers live with the check crate's tests, which own the traces they draw.
#[path = "../../check/tests/common/mod.rs"]
mod common;

use bucketproof_check::runner::{RunOptions, Verdict, run_trace};
use bucketproof_subjects::redis::RedisSubject;
use bucketproof_trace::duration::YEAR;
use bucketproof_trace::{Acquire, ConfigSpec, Op, Setup, SubjectError};
use common::{SECOND, redis_available};

#[test]
fn the_redis_script_agrees_with_the_model_on_mixed_traces() {
    if !redis_available("the_redis_script_agrees_with_the_model_on_mixed_traces") {
        return;
    }
    common::assert_agrees_on_mixed_traces(1..4, 600, |setup| {
        Box::new(RedisSubject::new(setup).unwrap())
    });
}

/// Keys of three bandwidths on the set script: every bandwidth's part against the model's.
#[test]
fn the_redis_set_script_agrees_with_the_model_on_mixed_traces() {
    if !redis_available("the_redis_set_script_agrees_with_the_model_on_mixed_traces") {
        return;
    }
    common::assert_agrees_on_set_traces(1..4, 600, |setup| {
        Box::new(RedisSubject::new(setup).unwrap())
    });
}

/// A 100-year idle gap and times near the end of the clock, at the edge of the script's exact range.
#[test]
fn the_redis_script_survives_century_gaps_at_the_edge_of_its_range() {
    if !redis_available("the_redis_script_survives_century_gaps_at_the_edge_of_its_range") {
        return;
    }
    let capacity = edge_capacity();
    let setup = Setup::new(ConfigSpec::new(capacity, "1/s"));
    let century = 100 * YEAR;
    let ops = vec![
        bucketproof_trace::Op::Acquire(Acquire {
            key: 1,
            cost: capacity,
            now: SECOND,
            request_id: None,
        }),
        bucketproof_trace::Op::Acquire(Acquire {
            key: 1,
            cost: capacity,
            now: SECOND + century,
            request_id: None,
        }),
        bucketproof_trace::Op::Acquire(Acquire {
            key: 1,
            cost: 1,
            now: SECOND + century,
            request_id: None,
        }),
        bucketproof_trace::Op::Acquire(Acquire {
            key: 1,
            cost: 2,
            now: u64::MAX - 5,
            request_id: None,
        }),
        bucketproof_trace::Op::Acquire(Acquire {
            key: 1,
            cost: capacity,
            now: u64::MAX - 5,
            request_id: None,
        }),
    ];
    let mut redis = RedisSubject::new(&setup).unwrap();
    let report = run_trace(&setup, ops, &mut redis, &RunOptions::default()).unwrap();
    assert_eq!(report.verdict, Verdict::Pass);
    assert!(report.events.get("long_idle").copied().unwrap_or(0) >= 1);
}

/// A config outside the script's exact range is one Redis cannot express: as the setup's config it
/// refuses to build as [`SubjectError::Inexpressible`], and as a reconfigure's it ends the run as
/// incompatible (the engine's skip), never a failure of a correct subject with a counterexample.
#[test]
fn a_config_outside_the_exact_range_is_inexpressible_not_a_failure() {
    if !redis_available("a_config_outside_the_exact_range_is_inexpressible_not_a_failure") {
        return;
    }
    let capacity = edge_capacity();
    let outside = ConfigSpec::new(capacity + 1, "1/s");
    assert!(matches!(
        RedisSubject::new(&Setup::new(outside.clone())),
        Err(SubjectError::Inexpressible(message)) if message.contains("outside the exact Redis range")
    ));
    let setup = Setup::new(ConfigSpec::new(capacity, "1/s"));
    let ops = vec![
        Op::Acquire(Acquire {
            key: 1,
            cost: 1,
            now: SECOND,
            request_id: None,
        }),
        Op::Reconfigure {
            key: 1,
            now: 2 * SECOND,
            config: outside,
        },
    ];
    let mut subject = RedisSubject::new(&setup).unwrap();
    let report = run_trace(&setup, ops, &mut subject, &RunOptions::default()).unwrap();
    assert!(
        matches!(&report.verdict, Verdict::Incompatible { step: 1, reason } if reason.contains("outside the exact Redis range")),
        "{:?}",
        report.verdict
    );
}

/// The largest capacity the Redis script holds exactly at 1 token/s: the edge of its range.
fn edge_capacity() -> u64 {
    bucketproof_redis::max_capacity(bucketproof_limiter::Rate::per_second(1))
        .expect("rate 1/s has an exact range")
}
