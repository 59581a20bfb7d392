//! Mutant 6: the read-modify-write split across two critical sections, and the real-thread check
//! that kills it.
//!
//! The mutant is the limiter's own `Limiter::acquire_racy_at` (feature `racy-variant`): the same
//! transition, but the state is read under the shard lock, the lock is released, and the new state is
//! written under a second lock, so two callers can both spend the same tokens. Run one call at a time
//! it is indistinguishable from the real limiter ([`RacySubject`] passes every sequential trace), so
//! the trace runner cannot kill it; a concurrent run can.
//!
//! [`hunt_race`] is that run. Two real threads, released together by a barrier, each make one
//! acquire of cost 1 on a fresh key of capacity 1 (rate 1 token/s), thread `i` at time `T0 + i` ns;
//! the main thread then feeds both answers to the arrival-curve oracle
//! ([`bucketproof_harness::oracle::arrival::ArrivalCurve`]): over `[T0, T0 + 1]` at most
//! `1 + 1e-9` tokens may be admitted, whatever order the two calls took the lock in, so two
//! admissions are a breach that no linearizable limiter can produce. Rounds repeat (the key is
//! forgotten between rounds) until a breach or the budget runs out. Every round is already the
//! minimal counterexample: two concurrent acquires.
//!
//! Why real threads and not shuttle here: the limiter's `shuttle` feature swaps its mutexes for
//! shuttle's in every crate of the build, which would break every non-shuttle test of this crate and
//! the library function the CLI calls. Systematic exploration (loom, shuttle) of the same racy
//! variant lives with the limiter's own tests (`crates/limiter/tests`). The cost of real threads:
//! whether and when the race shows is up to the OS scheduler, so the time to kill is not
//! reproducible (the report says so); the verdict of a round is.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use bucketproof_harness::oracle::arrival::{ArrivalCurve, CurveConfig};
use bucketproof_harness::oracle::{OracleKind, Violation};
use bucketproof_harness::subjects::CoreSubject;
use bucketproof_harness::subjects::core::{observe, subject_error};
use bucketproof_harness::{ConfigSpec, Inspected, Observed, Setup, Subject, SubjectError};
use bucketproof_limiter::{AcquireError, Config, Decision, Limiter, Nanos, Rate};

/// The racy variant behind the [`Subject`] trait: every acquire goes through
/// `Limiter::acquire_racy_at`; everything else is the core subject's.
pub struct RacySubject {
    core: CoreSubject,
}

impl RacySubject {
    /// Built like the core subject.
    pub fn new(setup: &Setup) -> Result<RacySubject, SubjectError> {
        Ok(RacySubject {
            core: CoreSubject::new(setup)?,
        })
    }
}

impl Subject for RacySubject {
    fn name(&self) -> String {
        "mutant:racy-rmw".into()
    }

    fn acquire(
        &mut self,
        key: u64,
        now: u64,
        cost: u64,
        request_id: Option<u64>,
    ) -> Result<Observed, SubjectError> {
        if request_id.is_some() {
            // The racy path has no request-id records.
            return Err(SubjectError::Unsupported("request ids on the racy path"));
        }
        let limiter = self.core.limiter();
        let created = limiter.inspect(&key).is_none();
        let decision = limiter
            .acquire_racy_at(&key, cost, now)
            .map_err(subject_error)?;
        Ok(observe(&decision, created, false))
    }

    fn reconfigure(&mut self, key: u64, config: &ConfigSpec, now: u64) -> Result<(), SubjectError> {
        self.core.reconfigure(key, config, now)
    }

    fn forget(&mut self, key: u64) -> Result<(), SubjectError> {
        self.core.forget(key)
    }

    fn sweep(&mut self, now: u64) -> Result<(), SubjectError> {
        self.core.sweep(now)
    }

    fn would_allow(&mut self, key: u64, now: u64, cost: u64) -> Option<bool> {
        self.core.would_allow(key, now, cost)
    }

    fn inspect(&mut self, key: u64) -> Option<Inspected> {
        self.core.inspect(key)
    }

    fn may_evict(&self) -> bool {
        true
    }
}

/// One acquire as the race check calls it: the racy variant, or the real limiter as a control.
pub type AcquireFn = fn(&Limiter<u64>, &u64, u64, Nanos) -> Result<Decision, AcquireError>;

/// The racy variant as an [`AcquireFn`].
pub fn racy_acquire(
    limiter: &Limiter<u64>,
    key: &u64,
    cost: u64,
    now: Nanos,
) -> Result<Decision, AcquireError> {
    limiter.acquire_racy_at(key, cost, now)
}

/// The real limiter's acquire as an [`AcquireFn`] (the control: it must never breach).
pub fn exact_acquire(
    limiter: &Limiter<u64>,
    key: &u64,
    cost: u64,
    now: Nanos,
) -> Result<Decision, AcquireError> {
    limiter.acquire_at(key, cost, now)
}

/// What a race hunt found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaceOutcome {
    /// The arrival-curve breach of the first bad round, if any.
    pub violation: Option<Violation>,
    /// Rounds run (a round is two concurrent acquires).
    pub rounds: u64,
    /// Acquires in the counterexample (2 when found).
    pub ops: usize,
}

const T0: Nanos = 1_000_000_000;
const THREADS: usize = 2;

/// Runs rounds of two concurrent acquires (see the module docs) until the arrival curve breaks or
/// `budget` / `max_rounds` run out.
pub fn hunt_race(acquire: AcquireFn, budget: Duration, max_rounds: u64) -> RaceOutcome {
    let Ok(config) = Config::new(1, Rate::per_second(1)) else {
        return RaceOutcome {
            violation: None,
            rounds: 0,
            ops: 0,
        };
    };
    let limiter: Limiter<u64> = Limiter::builder(config).shards(1).build();
    let curve_config = CurveConfig {
        capacity: 1,
        rate_numer: config.rate().numer(),
        rate_denom: config.rate().denom(),
    };
    // Main and workers meet twice per round: once to start it, once when both answers are in.
    let barrier = Barrier::new(THREADS + 1);
    let stop = AtomicBool::new(false);
    let round_key = AtomicU64::new(0);
    let answers: Vec<Mutex<Option<bool>>> = (0..THREADS).map(|_| Mutex::new(None)).collect();
    let started = Instant::now();
    let mut rounds = 0;
    let mut violation = None;
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let (limiter, barrier, stop, round_key, answers) =
                (&limiter, &barrier, &stop, &round_key, &answers);
            scope.spawn(move || {
                loop {
                    barrier.wait();
                    if stop.load(Ordering::Acquire) {
                        break;
                    }
                    let key = round_key.load(Ordering::Acquire);
                    let now = T0 + thread as Nanos;
                    let allowed = acquire(limiter, &key, 1, now).map(|d| d.is_allowed());
                    if let Ok(mut slot) = answers[thread].lock() {
                        *slot = allowed.ok();
                    }
                    barrier.wait();
                }
            });
        }
        while rounds < max_rounds && started.elapsed() < budget {
            let key = rounds;
            round_key.store(key, Ordering::Release);
            barrier.wait();
            barrier.wait();
            rounds += 1;
            let mut curve = ArrivalCurve::default();
            curve.restart(key, T0, curve_config);
            let mut breach = None;
            for (thread, answer) in answers.iter().enumerate() {
                let allowed = answer.lock().map(|slot| *slot).unwrap_or(None);
                let now = T0 + thread as Nanos;
                if let Err(found) = curve.observe(key, now, 1, allowed == Some(true)) {
                    breach = Some(found);
                }
            }
            limiter.forget(&key);
            if let Some(breach) = breach {
                violation = Some(Violation::new(
                    OracleKind::ArrivalCurve,
                    "admitted more than the arrival curve allows on one key (2 threads)",
                    format!(
                        "<= {} units over [{}, {}]",
                        breach.bound_units, breach.from, breach.to
                    ),
                    format!("{} units", breach.admitted_units),
                ));
                break;
            }
        }
        stop.store(true, Ordering::Release);
        barrier.wait();
    });
    RaceOutcome {
        ops: if violation.is_some() { THREADS } else { 0 },
        violation,
        rounds,
    }
}
