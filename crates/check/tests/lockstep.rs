//! The runner and its oracles on hand-made traces: the core passes, broken subjects are caught by the
//! oracle that should catch them, and the shrinker returns a small trace that fails the same way.

use bucketproof_check::oracle::OracleKind;
use bucketproof_check::runner::{RunOptions, Verdict, run_trace};
use bucketproof_check::shrink::{ShrinkBudget, shrink};
use bucketproof_check::subjects::CoreSubject;
use bucketproof_check::subjects::broken::{BrokenSubjects, CHARGES_DENIALS};
use bucketproof_trace::{ConfigSpec, Setup, SubjectFactory, Trace};

mod common;
use common::mixed_trace;

fn setup(capacity: u64, rate: &str) -> Setup {
    Setup::new(ConfigSpec::new(capacity, rate))
}

#[test]
fn the_core_agrees_with_the_model_on_mixed_traces() {
    common::assert_agrees_on_mixed_traces(1..16, 2_000, |setup| {
        Box::new(CoreSubject::new(setup).unwrap())
    });
}

#[test]
fn the_core_agrees_with_the_model_on_mixed_traces_of_several_bandwidths() {
    common::assert_agrees_on_set_traces(1..16, 2_000, |setup| {
        Box::new(CoreSubject::new(setup).unwrap())
    });
}

#[test]
fn a_broken_subject_fails_and_shrinks_to_a_few_ops() {
    let setup = setup(3, "1/s");
    let ops = mixed_trace(500, 7);
    let run = |trace: &Trace| {
        // The fixture reports a denial's balance one token short, as if the denial had been charged.
        let mut subject = BrokenSubjects
            .build(CHARGES_DENIALS, &trace.setup)
            .unwrap()
            .unwrap();
        match run_trace(
            &trace.setup,
            trace.ops.clone(),
            subject.as_mut(),
            &RunOptions::default(),
        )
        .unwrap()
        .verdict
        {
            Verdict::Fail(failure) => Some(failure),
            _ => None,
        }
    };
    let trace = Trace {
        setup: setup.clone(),
        ops,
    };
    let violation = run(&trace).expect("the broken subject must fail").violation;
    assert_eq!(violation.oracle, OracleKind::Model);
    let shrunk = shrink(trace, &violation, &ShrinkBudget::default(), run);
    assert!(!shrunk.budget_exhausted);
    let (small, small_violation) = (shrunk.trace, shrunk.violation);
    assert!(
        small.ops.len() <= 4,
        "shrunk to {} ops: {:?}",
        small.ops.len(),
        small.ops
    );
    assert_eq!(small_violation.signature(), violation.signature());
}
