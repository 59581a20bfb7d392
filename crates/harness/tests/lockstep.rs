//! The runner and its oracles on hand-made traces: the core passes, broken subjects are caught by the
//! oracle that should catch them, and the shrinker returns a small trace that fails the same way.

use bucketproof_harness::oracle::OracleKind;
use bucketproof_harness::runner::{RunOptions, Verdict, run_trace};
use bucketproof_harness::shrink::shrink;
use bucketproof_harness::subjects::CoreSubject;
use bucketproof_harness::{ConfigSpec, Observed, Op, Setup, Subject, SubjectError, Trace};

const SECOND: u64 = 1_000_000_000;

fn setup(capacity: u64, rate: &str) -> Setup {
    Setup::new(ConfigSpec::new(capacity, rate))
}

/// A deterministic mixed trace: a few keys, awkward time steps, rollbacks, invalid costs, request ids.
fn mixed_trace(len: usize, seed: u64) -> Vec<Op> {
    let mut state = seed | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut now = 5 * SECOND;
    (0..len)
        .map(|_| {
            let r = next();
            now = match r % 10 {
                0 => now.saturating_sub(r % SECOND), // rollback
                1 => now,                            // frozen
                2 => now + 3 * SECOND,               // exact multiple
                _ => now + r % (SECOND / 2),
            };
            match (r >> 8) % 20 {
                0 => Op::Sweep { at: now },
                1 => Op::Forget { key: (r >> 16) % 4 },
                2 => Op::Reconfigure {
                    key: (r >> 16) % 4,
                    at: now,
                    config: ConfigSpec::new(
                        1 + (r >> 24) % 6,
                        ["1/3s", "2/s", "7/5s"][(r >> 40) as usize % 3],
                    ),
                },
                _ => Op::Acquire {
                    key: (r >> 16) % 4,
                    at: now,
                    cost: (r >> 24) % 7,
                    request_id: ((r >> 32) % 4 == 0).then_some((r >> 36) % 3),
                },
            }
        })
        .collect()
}

#[test]
fn the_core_agrees_with_the_model_on_mixed_traces() {
    for seed in 1..16 {
        let setup = setup(5, "3/2s");
        let mut core = CoreSubject::new(&setup).unwrap();
        let report = run_trace(
            &setup,
            mixed_trace(2_000, seed),
            &mut core,
            &RunOptions::default(),
        )
        .unwrap();
        assert_eq!(report.verdict, Verdict::Pass, "seed {seed}");
        for event in [
            "rollback",
            "denied",
            "invalid_cost",
            "replayed",
            "saturated",
        ] {
            assert!(
                report.events.get(event).copied().unwrap_or(0) > 0,
                "seed {seed}: no {event}: {:?}",
                report.events
            );
        }
    }
}

/// Wraps the core and charges denials: caught by the model and by the invariants.
struct ChargesDenials(CoreSubject);

impl Subject for ChargesDenials {
    fn name(&self) -> String {
        "charges-denials".into()
    }
    fn acquire(
        &mut self,
        key: u64,
        now: u64,
        cost: u64,
        id: Option<u64>,
    ) -> Result<Observed, SubjectError> {
        let mut observed = self.0.acquire(key, now, cost, id)?;
        if !observed.allowed {
            if let bucketproof_harness::Amount::Exact { numer, denom } = &mut observed.remaining {
                *numer = numer.saturating_sub(*denom);
            }
        }
        Ok(observed)
    }
    fn reconfigure(&mut self, key: u64, config: &ConfigSpec, now: u64) -> Result<(), SubjectError> {
        self.0.reconfigure(key, config, now)
    }
    fn forget(&mut self, key: u64) -> Result<(), SubjectError> {
        self.0.forget(key)
    }
    fn sweep(&mut self, now: u64) -> Result<(), SubjectError> {
        self.0.sweep(now)
    }
    fn may_evict(&self) -> bool {
        true
    }
}

#[test]
fn a_broken_subject_fails_and_shrinks_to_a_few_ops() {
    let setup = setup(3, "1/s");
    let ops = mixed_trace(500, 7);
    let run = |trace: &Trace| {
        let mut subject = ChargesDenials(CoreSubject::new(&trace.setup).unwrap());
        match run_trace(
            &trace.setup,
            trace.ops.clone(),
            &mut subject,
            &RunOptions::default(),
        )
        .unwrap()
        .verdict
        {
            Verdict::Fail(failure) => Some(failure.violation),
            _ => None,
        }
    };
    let trace = Trace {
        setup: setup.clone(),
        ops,
    };
    let violation = run(&trace).expect("the broken subject must fail");
    assert_eq!(violation.oracle, OracleKind::Model);
    let (small, small_violation) = shrink(&trace, &violation, run);
    assert!(
        small.ops.len() <= 4,
        "shrunk to {} ops: {:?}",
        small.ops.len(),
        small.ops
    );
    assert_eq!(small_violation.signature(), violation.signature());
}
