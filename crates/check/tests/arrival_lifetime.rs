//! The arrival-curve oracle across a key's whole life, shown on a foreign subject: a keyed limiter
//! written here, on the limiter's exact transition, whose sweep drops full buckets and whose fresh
//! buckets start at `max(now, horizon)`. With the horizon at the time a dropped bucket was judged
//! evictable it is correct and passes every oracle; with the horizon kept at the dropped bucket's
//! stored cursor it over-admits after a sweep and a rollback, and the arrival-curve oracle alone
//! (the model switched off) kills it.

use std::collections::BTreeMap;

use bucketproof_check::oracle::{OracleKind, OracleSet};
use bucketproof_check::runner::{RunOptions, Verdict, failure_of, run_trace};
use bucketproof_check::subjects::core::observe;
use bucketproof_limiter::internal::{Attempt, transition};
use bucketproof_limiter::{AcquireError, BucketState, Config};
use bucketproof_trace::duration::SECOND;
use bucketproof_trace::{
    Acquire, Amount, ConfigSpec, Inspected, Inspection, Observed, Op, Setup, Subject, SubjectError,
    Trace,
};

/// Where a fresh bucket's cursor may start after a sweep dropped buckets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Horizon {
    /// At the sweep's time: a dropped bucket was full then, so no time before it is credited twice.
    SweepTime,
    /// At the dropped bucket's stored cursor: under a rollback below the sweep, the interval between
    /// the two is credited again (the bug).
    StoredCursor,
}

/// One shard of a keyed limiter with a sweep and an eviction horizon, and nothing else.
struct Sweeping {
    config: Config,
    horizon_rule: Horizon,
    horizon: u64,
    buckets: BTreeMap<u64, BucketState>,
}

impl Sweeping {
    fn new(setup: &Setup, horizon_rule: Horizon) -> Sweeping {
        Sweeping {
            config: setup.config.to_config().expect("valid config"),
            horizon_rule,
            horizon: 0,
            buckets: BTreeMap::new(),
        }
    }

    fn state_at(&self, key: u64, now: u64) -> (BucketState, bool) {
        match self.buckets.get(&key) {
            Some(&state) => (state, false),
            None => (BucketState::full(&self.config, now.max(self.horizon)), true),
        }
    }
}

impl Subject for Sweeping {
    fn name(&self) -> String {
        format!("sweeping ({:?})", self.horizon_rule)
    }

    fn acquire(&mut self, acquire: Acquire) -> Result<Observed, SubjectError> {
        let (state, created) = self.state_at(acquire.key, acquire.now);
        let attempt = Attempt {
            cost: acquire.cost,
            now: acquire.now,
        };
        match transition(&self.config, state, attempt) {
            Ok((state, decision)) => {
                self.buckets.insert(acquire.key, state);
                Ok(observe(&decision, created, false))
            }
            Err(AcquireError::InvalidCost { .. }) => Err(SubjectError::InvalidCost),
            Err(other) => Err(SubjectError::Store(other.to_string())),
        }
    }

    fn sweep(&mut self, now: u64) -> Result<(), SubjectError> {
        let config = self.config;
        let full: Vec<(u64, u64)> = self
            .buckets
            .iter()
            .filter(|(_, state)| state.refilled(&config, now).is_full(&config))
            .map(|(&key, state)| (key, state.last_refill()))
            .collect();
        for (key, cursor) in full {
            self.buckets.remove(&key);
            let judged_at = match self.horizon_rule {
                Horizon::SweepTime => now.max(cursor),
                Horizon::StoredCursor => cursor,
            };
            self.horizon = self.horizon.max(judged_at);
        }
        Ok(())
    }

    fn would_allow(&mut self, acquire: Acquire) -> Option<bool> {
        let (state, _) = self.state_at(acquire.key, acquire.now);
        let attempt = Attempt {
            cost: acquire.cost,
            now: acquire.now,
        };
        transition(&self.config, state, attempt)
            .ok()
            .map(|(_, decision)| decision.is_allowed())
    }

    fn inspect(&mut self, key: u64) -> Inspection {
        self.buckets
            .get(&key)
            .map(|state| Inspected {
                tokens: Amount::Exact {
                    numer: state.balance(),
                    denom: self.config.units_per_token(),
                },
                last_refill: state.last_refill(),
                capacity: self.config.capacity(),
            })
            .into()
    }

    fn may_evict(&self) -> bool {
        true
    }
}

fn acquire(key: u64, cost: u64, now: u64) -> Op {
    Op::Acquire(Acquire {
        key,
        cost,
        now,
        request_id: None,
    })
}

/// Capacity 2, rate 1/s: 2 admitted at 10 s, the full bucket swept at 13 s, 2 more at 10 s.
fn recreated_under_rollback() -> Trace {
    Trace {
        setup: Setup::new(ConfigSpec::new(2, "1/s")),
        ops: vec![
            acquire(0, 2, 10 * SECOND),
            Op::Sweep { now: 13 * SECOND },
            acquire(0, 2, 10 * SECOND),
        ],
    }
}

fn alone(kind: OracleKind) -> RunOptions {
    RunOptions {
        oracles: OracleSet::only(kind),
        ..RunOptions::default()
    }
}

#[test]
fn the_arrival_curve_alone_kills_a_bucket_recreated_at_a_rolled_back_now() {
    let trace = recreated_under_rollback();
    let mut buggy = Sweeping::new(&trace.setup, Horizon::StoredCursor);
    let failure = failure_of(&trace, &mut buggy, &alone(OracleKind::ArrivalCurve))
        .expect("the arrival curve sees 4 tokens at one instant against a capacity of 2");
    assert_eq!(failure.step, 2);
    assert_eq!(failure.violation.oracle, OracleKind::ArrivalCurve);
    println!("{}", failure.violation);
}

/// An oracle switched off judges nothing: with none on, the same run passes.
#[test]
fn with_every_oracle_off_the_same_run_passes() {
    let trace = recreated_under_rollback();
    let mut buggy = Sweeping::new(&trace.setup, Horizon::StoredCursor);
    let options = RunOptions {
        oracles: OracleSet::NONE,
        ..RunOptions::default()
    };
    assert_eq!(failure_of(&trace, &mut buggy, &options), None);
}

#[test]
fn a_bucket_recreated_at_its_horizon_passes_every_oracle() {
    let trace = recreated_under_rollback();
    let mut correct = Sweeping::new(&trace.setup, Horizon::SweepTime);
    assert_eq!(
        failure_of(&trace, &mut correct, &RunOptions::default()),
        None
    );
}

/// A small deterministic generator (no dependency on the mutants' families): few keys, sweeps, and
/// a clock that jumps forward and back, so that buckets are dropped and recreated under rollbacks.
fn generated(seed: u64, len: usize) -> Trace {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move |bound: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % bound
    };
    let mut now = 10 * SECOND;
    let ops = (0..len)
        .map(|_| {
            now = match next(4) {
                0 => now.saturating_sub(next(5) * SECOND),
                1 => now + next(4) * SECOND,
                _ => now + next(500_000_000),
            };
            if next(5) == 0 {
                Op::Sweep { now }
            } else {
                acquire(next(3), 1 + next(3), now)
            }
        })
        .collect();
    Trace {
        setup: Setup::new(ConfigSpec::new(3, "1/s")),
        ops,
    }
}

/// No false alarm across evictions and recreations: the correct subject passes every oracle on
/// traces that sweep and roll back; and the generator is not vacuous, since the buggy one fails the
/// arrival curve alone on some of them.
#[test]
fn lossless_evictions_never_break_the_curve_and_the_bug_does_on_generated_traces() {
    let mut killed = 0;
    for seed in 0..200 {
        let trace = generated(seed, 40);
        let mut correct = Sweeping::new(&trace.setup, Horizon::SweepTime);
        let report = run_trace(
            &trace.setup,
            trace.ops.iter().cloned(),
            &mut correct,
            &RunOptions::default(),
        )
        .expect("valid setup");
        assert_eq!(report.verdict, Verdict::Pass, "seed {seed}");
        let mut buggy = Sweeping::new(&trace.setup, Horizon::StoredCursor);
        killed +=
            usize::from(failure_of(&trace, &mut buggy, &alone(OracleKind::ArrivalCurve)).is_some());
    }
    assert!(killed > 0, "no generated trace shows the bug");
    println!("the arrival curve alone kills the bug on {killed}/200 traces");
}
