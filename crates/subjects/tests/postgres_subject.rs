//! The PostgreSQL subject (the one-statement transition, injected time) against the reference model
//! with every oracle, on the traces it supports: rollbacks, frozen and exact-multiple steps, invalid
//! costs, request ids, sweeps (its cleanup), forgets and reconfigurations, on keys of one and of
//! several bandwidths (no reconfigure of a key of several); a key bound under RejectNewKeys and
//! EvictFull only; and a trace that
//! needs what it lacks is skipped, never judged. Needs `DATABASE_URL`; without it the test prints a loud SKIP line
//! and passes, unless `BUCKETPROOF_REQUIRE_POSTGRES=1` (CI), which makes the skip a failure.

// The shared helpers live with the check crate's tests, which own the traces they draw.
#[path = "../../check/tests/common/mod.rs"]
mod common;

use bucketproof_check::runner::{RunOptions, Verdict, run_trace};
use bucketproof_subjects::postgres::PostgresSubject;
use bucketproof_trace::{BandwidthSpec, ConfigSpec, Op, PolicySpec, Setup, Subject};
use common::{SECOND, postgres_available};

#[test]
fn the_postgres_limiter_agrees_with_the_model_on_mixed_traces() {
    if !postgres_available("the_postgres_limiter_agrees_with_the_model_on_mixed_traces") {
        return;
    }
    common::assert_agrees_on_mixed_traces(1..4, 400, |setup| {
        Box::new(PostgresSubject::new(setup).unwrap())
    });
}

#[test]
fn the_postgres_limiter_agrees_with_the_model_on_keys_of_several_bandwidths() {
    if !postgres_available("the_postgres_limiter_agrees_with_the_model_on_keys_of_several") {
        return;
    }
    common::assert_agrees_on_set_traces(1..4, 400, |setup| {
        Box::new(PostgresSubject::new(setup).unwrap())
    });
}

#[test]
fn what_the_postgres_subject_lacks_is_unsupported_not_judged() {
    if !postgres_available("what_the_postgres_subject_lacks_is_unsupported_not_judged") {
        return;
    }
    let setup = Setup::new(ConfigSpec::set([
        BandwidthSpec::new(5, "1/s"),
        BandwidthSpec::new(9, "1/min").named("slow"),
    ]));
    let ops = vec![Op::Reconfigure {
        key: 1,
        now: SECOND,
        config: ConfigSpec::new(3, "1/s"),
    }];
    let mut subject = PostgresSubject::new(&setup).unwrap();
    let report = run_trace(&setup, ops, &mut subject, &RunOptions::default()).unwrap();
    assert!(
        matches!(report.verdict, Verdict::Incompatible { .. }),
        "{:?}",
        report.verdict
    );
    // A key bound under the lossless policies the crate has; under the others none, declared, so
    // the engine skips such a bounded setup (one rule for every subject).
    for (policy, has) in [
        (PolicySpec::RejectNewKeys, true),
        (PolicySpec::EvictFull, true),
        (PolicySpec::EvictLeastRecent, false),
        (PolicySpec::EvictKeepingDeficit, false),
    ] {
        let bounded = Setup {
            max_keys: 3,
            policy,
            ..setup.clone()
        };
        let subject = PostgresSubject::new(&bounded).unwrap();
        assert_eq!(subject.has_key_bound(), has, "{policy:?}");
    }
}
