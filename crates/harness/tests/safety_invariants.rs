//! The checks every profile makes without the model, each shown failing on a subject that breaks
//! it and holding on one that does not: a reported balance lies in `[0, capacity]`, and a cost
//! above capacity is never admitted. Under the safety profile they are the only judges of these.

use bucketproof_harness::profile::Profile;
use bucketproof_harness::subjects::CoreSubject;
use bucketproof_harness::{
    Acquire, Amount, ConfigSpec, Observed, Op, RunOptions, Setup, Subject, SubjectError, Verdict,
    run_trace,
};

/// The core, declaring the safety profile, with one way of lying planted.
struct Lying {
    core: CoreSubject,
    lie: Lie,
}

#[derive(Clone, Copy)]
enum Lie {
    None,
    /// Reports one token more than a full bucket holds.
    RemainingAboveCapacity,
    /// Reports a float balance just below zero after emptying the bucket.
    RemainingBelowZero,
    /// Admits a cost above capacity without charging it.
    AdmitsAboveCapacity,
}

impl Subject for Lying {
    fn name(&self) -> String {
        "lying".into()
    }

    fn profile(&self) -> Profile {
        Profile::safety()
    }

    fn acquire(&mut self, acquire: Acquire) -> Result<Observed, SubjectError> {
        if matches!(self.lie, Lie::AdmitsAboveCapacity) && acquire.cost > CAPACITY {
            return Ok(Observed {
                allowed: true,
                remaining: Amount::Exact { numer: 0, denom: 1 },
                retry_after: None,
                reset_after: None,
                bandwidths: Vec::new(),
                created: None,
                replayed: false,
            });
        }
        let mut observed = self.core.acquire(acquire)?;
        let tokens = observed.remaining.to_f64_lossy();
        match self.lie {
            Lie::RemainingAboveCapacity => {
                observed.remaining = Amount::Approx(CAPACITY as f64 + 1.0)
            }
            Lie::RemainingBelowZero if tokens == 0.0 => observed.remaining = Amount::Approx(-1e-9),
            _ => {}
        }
        Ok(observed)
    }
}

const CAPACITY: u64 = 3;

fn run(lie: Lie, costs: &[u64]) -> Verdict {
    let setup = Setup::new(ConfigSpec::new(CAPACITY, "1/s"));
    let mut subject = Lying {
        core: CoreSubject::new(&setup).unwrap(),
        lie,
    };
    let ops = costs.iter().enumerate().map(|(i, &cost)| {
        Op::Acquire(Acquire {
            key: 0,
            cost,
            now: i as u64 * 1_000,
            request_id: None,
        })
    });
    run_trace(&setup, ops, &mut subject, &RunOptions::default())
        .unwrap()
        .verdict
}

fn violation(verdict: Verdict) -> String {
    match verdict {
        Verdict::Fail(failure) => failure.violation.what,
        other => panic!("expected a violation, got {other:?}"),
    }
}

#[test]
fn an_honest_subject_passes_under_safety() {
    assert!(run(Lie::None, &[1, 2, 1, 3]).passed());
}

#[test]
fn a_balance_above_capacity_is_caught() {
    let what = violation(run(Lie::RemainingAboveCapacity, &[1]));
    assert_eq!(what, "reported remaining outside [0, capacity]");
}

#[test]
fn a_balance_below_zero_is_caught() {
    let what = violation(run(Lie::RemainingBelowZero, &[3]));
    assert_eq!(what, "reported remaining outside [0, capacity]");
}

#[test]
fn a_cost_above_capacity_admitted_is_caught() {
    let what = violation(run(Lie::AdmitsAboveCapacity, &[1, CAPACITY + 1]));
    assert_eq!(what, "admitted a cost above capacity");
}
