//! The checks every profile makes without the model, each shown failing on a subject that breaks
//! it and holding on one that does not: a reported balance lies in `[0, capacity]`, and an invalid
//! cost (0, or above capacity) is never admitted. Under the safety profile they are the only judges
//! of these. A denial of an invalid cost (where the spec answers an error) admits nothing: the
//! safety profile judges it as every denial, so its balance must still lie in `[0, capacity]`.
//!
//! Each lie is planted in a wrapper around a correct subject; the same traces pass on the core, on
//! the model and on the safety-profile reference adapter (`adapters/python/millitokens.py`).

// The shared helpers live with the check crate's tests, which own the traces they draw.
#[path = "../../check/tests/common/mod.rs"]
mod common;

use std::path::Path;

use bucketproof_check::subjects::{CoreSubject, ModelSubject};
use bucketproof_check::{RunOptions, Verdict, run_trace};
use bucketproof_limiter::Wait;
use bucketproof_protocol::ExecSubjects;
use bucketproof_trace::profile::Profile;
use bucketproof_trace::{
    Acquire, Amount, ConfigSpec, Observed, Op, Setup, Subject, SubjectError, SubjectFactory,
};

/// A correct subject, declaring the safety profile, with one way of lying planted.
struct Lying {
    inner: Box<dyn Subject>,
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
    /// Admits a cost of 0 (charging nothing) where the spec answers an error.
    AdmitsZero,
    /// Denies an invalid cost (0 or above capacity) where the spec answers an error, reporting
    /// this balance and a retry-after of never.
    DeniesInvalid(Amount),
}

impl Subject for Lying {
    fn name(&self) -> String {
        "lying".into()
    }

    fn profile(&self) -> Profile {
        Profile::safety()
    }

    fn acquire(&mut self, acquire: Acquire) -> Result<Observed, SubjectError> {
        let invalid = acquire.cost == 0 || acquire.cost > CAPACITY;
        let decision = |allowed, remaining, retry_after| Observed {
            allowed,
            remaining,
            retry_after,
            reset_after: None,
            bandwidths: Vec::new(),
            created: None,
            replayed: false,
        };
        match self.lie {
            Lie::AdmitsAboveCapacity if acquire.cost > CAPACITY => {
                return Ok(decision(true, Amount::Exact { numer: 0, denom: 1 }, None));
            }
            // Every trace here starts on a fresh key, so a full bucket's balance is the true one.
            Lie::AdmitsZero if acquire.cost == 0 => {
                return Ok(decision(true, whole(CAPACITY), None));
            }
            Lie::DeniesInvalid(remaining) if invalid => {
                return Ok(decision(false, remaining, Some(Wait::Never)));
            }
            _ => {}
        }
        let mut observed = self.inner.acquire(acquire)?;
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

fn whole(tokens: u64) -> Amount {
    Amount::Exact {
        numer: u128::from(tokens),
        denom: 1,
    }
}

fn setup() -> Setup {
    Setup::new(ConfigSpec::new(CAPACITY, "1/s"))
}

/// Acquires of `costs` on key 0, one ms apart (so a millisecond clock sees every step).
fn ops(costs: &[u64]) -> impl Iterator<Item = Op> + '_ {
    costs.iter().enumerate().map(|(i, &cost)| {
        Op::Acquire(Acquire {
            key: 0,
            cost,
            now: i as u64 * 1_000_000,
            request_id: None,
        })
    })
}

fn run_on(subject: &mut dyn Subject, costs: &[u64]) -> Verdict {
    run_trace(&setup(), ops(costs), subject, &RunOptions::default())
        .unwrap()
        .verdict
}

fn run(lie: Lie, costs: &[u64]) -> Verdict {
    let mut subject = Lying {
        inner: Box::new(CoreSubject::new(&setup()).unwrap()),
        lie,
    };
    run_on(&mut subject, costs)
}

fn violation(verdict: Verdict) -> String {
    match verdict {
        Verdict::Fail(failure) => failure.violation.what,
        other => panic!("expected a violation, got {other:?}"),
    }
}

/// Valid and invalid costs mixed, starting on a fresh key.
const EDGES: [u64; 7] = [0, 1, CAPACITY + 1, 2, 0, CAPACITY, u64::MAX];

#[test]
fn an_honest_subject_passes_under_safety() {
    assert!(run(Lie::None, &[1, 2, 1, 3]).passed());
    assert!(run(Lie::None, &EDGES).passed());
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

#[test]
fn a_cost_of_zero_admitted_is_caught() {
    let what = violation(run(Lie::AdmitsZero, &[0]));
    assert_eq!(what, "admitted a cost of 0");
}

#[test]
fn a_denial_of_an_invalid_cost_is_judged_by_its_balance() {
    // Denying where the spec answers an error admits nothing: with the true balance it passes...
    assert!(run(Lie::DeniesInvalid(whole(CAPACITY)), &[CAPACITY + 1]).passed());
    assert!(run(Lie::DeniesInvalid(whole(CAPACITY)), &[0]).passed());
    // ...and with a balance no bucket of this capacity holds it fails, as any decision would.
    for (lie, cost) in [
        (Lie::DeniesInvalid(whole(CAPACITY + 1)), CAPACITY + 1),
        (Lie::DeniesInvalid(Amount::Approx(-0.5)), CAPACITY + 1),
        (Lie::DeniesInvalid(whole(CAPACITY + 1)), 0),
    ] {
        let what = violation(run(lie, &[cost]));
        assert_eq!(
            what, "reported remaining outside [0, capacity]",
            "cost {cost}"
        );
    }
}

#[test]
fn invalid_costs_pass_on_the_model_and_the_millitoken_adapter_under_safety() {
    let mut model = Lying {
        inner: Box::new(ModelSubject::new(&setup()).unwrap()),
        lie: Lie::None,
    };
    assert!(run_on(&mut model, &EDGES).passed());
    if !common::program_available("python3") {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let subjects = ExecSubjects::new(&root)
        .with_subject_files(&root)
        .expect("the project's subject files parse");
    let mut millitokens = subjects
        .build("python-millitokens", &setup())
        .expect("subjects/python-millitokens.toml")
        .unwrap();
    assert!(millitokens.profile().is_safety());
    let verdict = run_on(millitokens.as_mut(), &EDGES);
    assert!(verdict.passed(), "{verdict:?}");
}
