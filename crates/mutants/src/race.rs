//! Mutant 6: the read-modify-write split across two critical sections, and the real-thread check
//! that kills it.
//!
//! The mutant is [`RacyKeyed`], a small keyed wrapper of this crate around the limiter's one
//! transition: the state is read under the map's lock, the lock is released, the transition runs, and
//! the new state is written under a second lock, so two callers can both spend the same tokens. It
//! lives here, not in the limiter, so that no crate of the shipped binary turns on the limiter's
//! `racy-variant` feature (which only its own loom and shuttle tests use). Run one call at a time
//! the split is indistinguishable from one critical section (a test below checks it against the
//! real limiter, decision for decision), so the trace runner cannot kill it; a concurrent run can.
//! [`RacySubject`] is that sequential view under the mutant's name: one call at a time the split
//! has nothing to race with, so it answers as the core subject, and it passes every sequential
//! trace and scenario.
//!
//! [`hunt_race`] is that run. Two real threads, started together by a barrier, each make 256
//! acquires of cost 1 on a fresh key of capacity 256 with no refill (rate 0), at interleaved per-op
//! times; the main thread then feeds every admitted acquire to the arrival-curve oracle
//! ([`bucketproof_check::oracle::arrival::ArrivalCurve`]): with no refill at most 256 tokens may be
//! admitted, in whatever order the calls took the lock, so more is a breach no linearizable limiter
//! can produce. Rounds repeat (the key is forgotten between rounds) until a breach or the budget runs
//! out. The witness is two admitted acquires reporting the same remaining balance: they read the
//! same state and spent the same token, the minimal counterexample (2 ops).
//!
//! Why 256 acquires per thread rather than one: on two shared cores a sleeping barrier releases one
//! thread microseconds before the other, enough to finish a single call alone; a longer round gives
//! the two threads time to overlap.
//!
//! Why real threads and not shuttle here: the limiter's `shuttle` feature swaps its mutexes for
//! shuttle's in every crate of the build, which would break every non-shuttle test of this crate and
//! the library function the CLI calls. Systematic exploration (loom, shuttle) of the same split,
//! the limiter's own `racy-variant`, lives with the limiter's tests (`crates/limiter/tests`). The cost of real threads:
//! whether and when the race shows is up to the OS scheduler, so the time to kill is not
//! reproducible (the report says so); the verdict of a round is.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use bucketproof_check::oracle::arrival::{ArrivalCurve, CurveConfig};
use bucketproof_check::oracle::{OracleKind, Violation};
use bucketproof_check::subjects::CoreSubject;
use bucketproof_trace::{Acquire, ConfigSpec, Inspection, Observed, Setup, Subject, SubjectError};
use std::collections::HashMap;
use std::sync::{MutexGuard, PoisonError};

use bucketproof_limiter::internal::{Attempt, transition};
use bucketproof_limiter::{AcquireError, BucketState, Config, Decision, Limiter, Nanos, Rate};

/// The racy keyed wrapper: one bucket per `u64` key under one lock, every key with the same config,
/// and an acquire that reads and writes in two critical sections (see the module docs).
pub struct RacyKeyed {
    config: Config,
    buckets: Mutex<HashMap<u64, BucketState>>,
}

impl RacyKeyed {
    /// An empty map whose keys all use `config`.
    pub fn new(config: Config) -> RacyKeyed {
        RacyKeyed {
            config,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    fn buckets(&self) -> MutexGuard<'_, HashMap<u64, BucketState>> {
        // A panic elsewhere cannot leave a half-written state: every write is one insert.
        self.buckets.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The mistake: read `key`'s state (full at `now` if new) in one critical section, decide
    /// outside any, and write the result in a second, so a concurrent call between the two reads
    /// the same state and spends the same tokens.
    pub fn acquire_split(&self, key: u64, cost: u64, now: Nanos) -> Result<Decision, AcquireError> {
        let read = self.buckets().get(&key).copied();
        let state = read.unwrap_or_else(|| BucketState::full(&self.config, now));
        let (next, decision) = transition(&self.config, state, Attempt { cost, now })?;
        self.buckets().insert(key, next);
        Ok(decision)
    }

    /// Drops `key`'s bucket. True if it had one.
    pub fn forget(&self, key: u64) -> bool {
        self.buckets().remove(&key).is_some()
    }
}

/// The racy variant behind the [`Subject`] trait, for sequential traces: one call at a time the
/// split read-modify-write has nothing to race with, so every call is the core subject's.
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

    fn acquire(&mut self, acquire: Acquire) -> Result<Observed, SubjectError> {
        if acquire.request_id.is_some() {
            // The racy path has no request-id records.
            return Err(SubjectError::Unsupported("request ids on the racy path"));
        }
        self.core.acquire(acquire)
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

    fn would_allow(&mut self, acquire: Acquire) -> Option<bool> {
        self.core.would_allow(acquire)
    }

    fn inspect(&mut self, key: u64) -> Inspection {
        self.core.inspect(key)
    }

    fn check_pinned(&self, tiers: &[[u64; 2]]) -> Result<(), SubjectError> {
        self.core.check_pinned(tiers)
    }

    fn may_evict(&self) -> bool {
        true
    }
}

/// What a race hunt's threads share: the real limiter (the control) and the racy wrapper, both
/// fresh for the hunt, with the same config.
pub struct RaceTarget {
    limiter: Limiter<u64>,
    racy: RacyKeyed,
}

impl RaceTarget {
    fn new(config: Config) -> RaceTarget {
        RaceTarget {
            limiter: Limiter::builder(config).shards(1).build(),
            racy: RacyKeyed::new(config),
        }
    }

    /// Drops `key` from both, between rounds.
    fn forget(&self, key: u64) {
        self.limiter.forget(&key);
        self.racy.forget(key);
    }
}

/// One acquire as the race check calls it: the racy variant, or the real limiter as a control.
pub type AcquireFn = fn(&RaceTarget, u64, u64, Nanos) -> Result<Decision, AcquireError>;

/// The racy variant as an [`AcquireFn`].
pub fn racy_acquire(
    target: &RaceTarget,
    key: u64,
    cost: u64,
    now: Nanos,
) -> Result<Decision, AcquireError> {
    target.racy.acquire_split(key, cost, now)
}

/// The real limiter's acquire as an [`AcquireFn`] (the control: it must never breach).
pub fn exact_acquire(
    target: &RaceTarget,
    key: u64,
    cost: u64,
    now: Nanos,
) -> Result<Decision, AcquireError> {
    target.limiter.acquire_at(&key, cost, now)
}

/// What a race hunt found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaceOutcome {
    /// The arrival-curve breach of the first bad round, if any.
    pub violation: Option<Violation>,
    /// Rounds run (a round is two concurrent acquires).
    pub rounds: u64,
    /// Acquires in the counterexample: 2 (two admitted acquires that spent the same token) when
    /// found.
    pub ops: usize,
}

const T0: Nanos = bucketproof_limiter::NANOS_PER_SECOND;
const THREADS: usize = 2;

/// Tokens per round, and acquires per thread per round.
const CAPACITY: u64 = 256;

/// Runs rounds (see the module docs) until the arrival curve breaks or `budget` / `max_rounds` run
/// out.
pub fn hunt_race(acquire: AcquireFn, budget: Duration, max_rounds: u64) -> RaceOutcome {
    let Ok(config) = Config::new(CAPACITY, Rate::ZERO) else {
        return RaceOutcome {
            violation: None,
            rounds: 0,
            ops: 0,
        };
    };
    let target = RaceTarget::new(config);
    let curve_config = CurveConfig {
        capacity: CAPACITY,
        rate_numer: 0,
        rate_denom: 1,
    };
    // Main and workers meet twice per round: once to start it, once when both threads are done.
    let barrier = Barrier::new(THREADS + 1);
    let stop = AtomicBool::new(false);
    let round_key = AtomicU64::new(0);
    // Per thread: (time, remaining units) of every admitted acquire of the round.
    let answers: Vec<Mutex<Vec<(Nanos, u128)>>> =
        (0..THREADS).map(|_| Mutex::new(Vec::new())).collect();
    let clock = Instant::now();
    let mut rounds = 0;
    let mut violation = None;
    let mut witness_ops = 0;
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let (target, barrier, stop, round_key, answers) =
                (&target, &barrier, &stop, &round_key, &answers);
            scope.spawn(move || {
                let mut admitted = Vec::with_capacity(CAPACITY as usize);
                loop {
                    barrier.wait();
                    if stop.load(Ordering::Acquire) {
                        break;
                    }
                    let key = round_key.load(Ordering::Acquire);
                    admitted.clear();
                    for op in 0..CAPACITY {
                        // Per-op times, interleaved between the threads; no refill, so any order of
                        // the two threads' calls admits exactly `CAPACITY` in total.
                        let now = T0 + 2 * op + thread as Nanos;
                        if let Ok(decision) = acquire(target, key, 1, now)
                            && decision.is_allowed()
                        {
                            admitted.push((now, decision.remaining().units()));
                        }
                    }
                    if let Ok(mut slot) = answers[thread].lock() {
                        slot.clone_from(&admitted);
                    }
                    barrier.wait();
                }
            });
        }
        while rounds < max_rounds && clock.elapsed() < budget {
            let key = rounds;
            round_key.store(key, Ordering::Release);
            barrier.wait();
            barrier.wait();
            rounds += 1;
            let mut all: Vec<(Nanos, u128)> = Vec::new();
            for answer in &answers {
                if let Ok(slot) = answer.lock() {
                    all.extend_from_slice(&slot);
                }
            }
            target.forget(key);
            all.sort_unstable();
            let mut curve = ArrivalCurve::default();
            curve.restart(key, T0, curve_config);
            let breach = all.iter().find_map(|&(now, _)| {
                let acquire = Acquire {
                    key,
                    cost: 1,
                    now,
                    request_id: None,
                };
                curve.observe(acquire, true).err()
            });
            if let Some(breach) = breach {
                // The witness: two admitted acquires that report the same remaining balance both
                // spent the same token (read the same state); a linearizable run never repeats one.
                let mut balances: Vec<u128> = all.iter().map(|&(_, units)| units).collect();
                balances.sort_unstable();
                let repeated = balances.windows(2).any(|pair| pair[0] == pair[1]);
                witness_ops = if repeated { THREADS } else { all.len() };
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
        ops: if violation.is_some() { witness_ops } else { 0 },
        violation,
        rounds,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One call at a time the split read-modify-write is one critical section: over rollbacks,
    /// refills, denials and invalid costs on a few keys, every answer equals the real limiter's (with
    /// no sweep, so no eviction horizon moves a fresh cursor).
    #[test]
    fn one_call_at_a_time_the_racy_wrapper_decides_as_the_real_limiter() {
        let config = Config::new(3, "7/3s".parse::<Rate>().unwrap()).unwrap();
        let racy = RacyKeyed::new(config);
        let limiter: Limiter<u64> = Limiter::builder(config).sweep_per_op(0).build();
        let mut now: Nanos = T0;
        for step in 0..2_000u64 {
            let key = step % 3;
            let cost = step % 5; // 0 and 4 are invalid
            now = if step % 7 == 0 {
                now.saturating_sub(T0 / 3) // a rollback
            } else {
                now + (step * 104_729) % (T0 / 2)
            };
            assert_eq!(
                racy.acquire_split(key, cost, now),
                limiter.acquire_at(&key, cost, now),
                "step {step}"
            );
        }
    }
}
