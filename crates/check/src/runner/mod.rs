//! The runner: streams a trace through a subject and the reference model in lockstep, running every
//! oracle after every step.
//!
//! Owns the run's lifecycle and what it reports ([`run_trace`], [`Stepper`], [`RunReport`]); one
//! step's order of checks lives in `lockstep`, the event counters in `events`, the plot series in
//! `sample`, and the checks themselves in [`crate::oracle`].
//!
//! Promises: memory is flat in the trace length (ops are consumed from an iterator, and only per-key
//! oracle state and a bounded sample of one key's balance are kept); a failure names its step, so the
//! caller can regenerate the prefix (traces are deterministic) and shrink it; a report contains no
//! timings, so the same trace gives the same report bytes. Besides verdicts a run counts *events*
//! (see [`bucketproof_trace::events::EVENTS`]), the things a scenario declares it must reach, so that no scenario passes
//! vacuously.

mod events;
mod lockstep;
mod sample;

use std::collections::BTreeMap;

use serde::Serialize;

use self::lockstep::{Lockstep, Stop, SubjectSlot};
use crate::oracle::{OracleSet, Violation};
use bucketproof_trace::subject::{Subject, SubjectError};
use bucketproof_trace::trace::{Op, Setup, Trace};

/// What to check and what to keep.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Stop at the first violation (the gate). Off for comparisons, which count all divergences.
    pub stop_at_first: bool,
    /// The oracles that judge the run (all by default). The invariant oracle inspects the subject's
    /// state around each acquire and the retry-after oracle probes it twice per denial, so switching
    /// them off also saves that work.
    pub oracles: OracleSet,
    /// Keep a downsampled series of this key's balance for plots.
    pub sample_key: Option<u64>,
    /// At most this many samples.
    pub max_samples: usize,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            stop_at_first: true,
            oracles: OracleSet::ALL,
            sample_key: None,
            max_samples: 512,
        }
    }
}

/// A step where an oracle fired.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Failure {
    /// 0-based index of the op in the trace.
    pub step: u64,
    /// The op.
    pub op: Op,
    /// What broke.
    pub violation: Violation,
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// Every oracle held at every step.
    Pass,
    /// The first violation.
    Fail(Failure),
    /// The subject cannot run this trace (an unsupported op); nothing was judged after `step`.
    Incompatible {
        /// Where it stopped.
        step: u64,
        /// Why.
        reason: String,
    },
    /// The subject broke at `step` (a child process that died, hung or answered nonsense): a harness
    /// error, never a verdict on its decisions.
    Broken {
        /// Where it broke.
        step: u64,
        /// What happened.
        message: String,
    },
}

impl Verdict {
    /// True for [`Verdict::Pass`].
    pub fn passed(&self) -> bool {
        matches!(self, Verdict::Pass)
    }
}

/// Divergence statistics (meaningful when `stop_at_first` is off).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Divergence {
    /// Acquires whose admit/deny differs from the model's.
    pub decision_mismatches: u64,
    /// Subject admitted, model denied.
    pub over_admissions: u64,
    /// Subject denied, model admitted.
    pub under_admissions: u64,
    /// Same admit/deny, but a different balance, wait or replay.
    pub value_mismatches: u64,
    /// Time of the first op whose answer differs in any way.
    pub first_divergence_at: Option<u64>,
    /// Largest `|subject remaining - model remaining|`, in tokens.
    pub max_token_error: f64,
    /// Arrival-curve breaches.
    pub arrival_breaches: u64,
    /// Recreations the arrival curve took as declared resets under a lossy eviction policy.
    pub lossy_resets: u64,
    /// Other oracle violations (invariants, retry-after).
    pub other_violations: u64,
    /// Denials whose retry-after the subject could be asked about (`would_allow` answered): zero
    /// means the retry-after oracle judged nothing. Not in reports (they predate it).
    #[serde(skip)]
    pub retry_after_probes: u64,
    /// Acquires with a request id the replay oracle judged: zero means it judged nothing. Not in
    /// reports.
    #[serde(skip)]
    pub replay_checks: u64,
}

/// One point of the sampled key's series.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Sample {
    /// Time of the acquire.
    pub at: u64,
    /// The subject's reported balance (approximate, for plotting).
    pub subject_remaining: f64,
    /// The model's balance.
    pub model_remaining: f64,
    /// Cost admitted by the subject on this key since its arrival-curve segment began.
    pub admitted: u64,
    /// The arrival-curve bound for `admitted`: capacity + rate * (at - segment start), in tokens.
    pub bound: f64,
}

/// Everything a run produced. Contains no timings, so it is reproducible byte for byte.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunReport {
    /// The subject's name.
    pub subject: String,
    /// Ops processed.
    pub steps: u64,
    /// Outcome.
    pub verdict: Verdict,
    /// Event counts (reach targets), by stable name.
    pub events: BTreeMap<String, u64>,
    /// Divergence from the model.
    pub divergence: Divergence,
    /// The sampled key's series.
    pub samples: Vec<Sample>,
}

/// Runs `ops` through `subject` and a fresh reference model built from `setup`.
pub fn run_trace(
    setup: &Setup,
    ops: impl IntoIterator<Item = Op>,
    subject: &mut dyn Subject,
    options: &RunOptions,
) -> Result<RunReport, SubjectError> {
    // Ops are announced in chunks before they are stepped, so a subject across a pipe can batch
    // them (`Subject::upcoming`); memory stays flat in the trace length.
    const CHUNK: usize = 1024;
    let mut stepper = Stepper::new(setup, subject, options)?;
    let mut ops = ops.into_iter();
    let mut chunk = Vec::with_capacity(CHUNK);
    loop {
        chunk.clear();
        chunk.extend(ops.by_ref().take(CHUNK));
        if chunk.is_empty() {
            break;
        }
        stepper.run.subject.upcoming(&chunk);
        for op in chunk.drain(..) {
            if !stepper.step(op) {
                return Ok(stepper.finish());
            }
        }
    }
    Ok(stepper.finish())
}

/// Runs `trace` through `subject` and returns its first failure, if it fails (a subject that cannot
/// run the trace to the end returns whatever it violated before that point: nothing).
pub fn failure_of(
    trace: &Trace,
    subject: &mut dyn Subject,
    options: &RunOptions,
) -> Option<Failure> {
    let report = run_trace(&trace.setup, trace.ops.iter().cloned(), subject, options).ok()?;
    match report.verdict {
        Verdict::Fail(failure) => Some(failure),
        Verdict::Pass | Verdict::Incompatible { .. } | Verdict::Broken { .. } => None,
    }
}

/// The runner one op at a time, for drivers that generate ops as they go (the state-machine tests).
pub struct Stepper<'a> {
    run: Lockstep<'a>,
    verdict: Verdict,
    steps: u64,
}

impl<'a> Stepper<'a> {
    /// A fresh model and oracle state around `subject`, borrowed for the run.
    pub fn new(
        setup: &Setup,
        subject: &'a mut dyn Subject,
        options: &RunOptions,
    ) -> Result<Stepper<'a>, SubjectError> {
        Stepper::around(setup, SubjectSlot::Borrowed(subject), options)
    }

    /// A fresh model and oracle state around `subject`, which the stepper owns and drops with itself
    /// (with its connections, runtimes and memory), for drivers that keep one stepper per case.
    pub fn owning(
        setup: &Setup,
        subject: Box<dyn Subject + 'a>,
        options: &RunOptions,
    ) -> Result<Stepper<'a>, SubjectError> {
        Stepper::around(setup, SubjectSlot::Owned(subject), options)
    }

    fn around(
        setup: &Setup,
        subject: SubjectSlot<'a>,
        options: &RunOptions,
    ) -> Result<Stepper<'a>, SubjectError> {
        Ok(Stepper {
            run: Lockstep::new(setup, subject, options)?,
            verdict: Verdict::Pass,
            steps: 0,
        })
    }

    /// Runs one op through the subject, the model and the oracles. Returns false when the run is over
    /// (a violation with `stop_at_first`, or an op the subject cannot run).
    pub fn step(&mut self, op: Op) -> bool {
        let step = self.steps;
        self.steps += 1;
        let mut found = self.run.step(&op);
        if let Err(SubjectError::Broken(message)) = self.run.subject.health() {
            found = Err(Stop::Broken(message));
        }
        match found {
            Ok(None) => true,
            Ok(Some(violation)) => {
                if self.verdict.passed() {
                    self.verdict = Verdict::Fail(Failure {
                        step,
                        op,
                        violation,
                    });
                }
                !self.run.stops_at_first()
            }
            Err(Stop::Unsupported(reason)) => {
                if self.verdict.passed() {
                    self.verdict = Verdict::Incompatible { step, reason };
                }
                false
            }
            Err(Stop::Broken(message)) => {
                // A subject that broke says nothing about its decisions, not even an earlier
                // violation: the run is an error.
                self.verdict = Verdict::Broken { step, message };
                false
            }
        }
    }

    /// The verdict so far.
    pub fn verdict(&self) -> &Verdict {
        &self.verdict
    }

    /// Ends the run.
    pub fn finish(self) -> RunReport {
        RunReport {
            subject: self.run.subject.name(),
            steps: self.steps,
            verdict: self.verdict,
            events: self.run.events.into_map(),
            divergence: self.run.divergence,
            samples: self.run.sampler.into_samples(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::subjects::CoreSubject;
    use crate::subjects::broken::{BrokenSubjects, CHARGES_DENIALS};
    use bucketproof_trace::{Acquire, ConfigSpec, SubjectFactory};

    /// A subject that may evict on its own and cannot show its state (Redis, whose keys live by
    /// their TTL): its "unknown request" for an id nobody ever recorded is no evidence that it
    /// dropped the key, so the key's other records stay live in the model too. Found by the state
    /// machine on the Redis script: a settle of a never-recorded id at a time the key was evictable
    /// made the runner forget the key's records, and the next, legal settle of a recorded id
    /// (under a rolled-back clock) was judged "unknown request".
    #[test]
    fn an_unknown_id_is_no_evidence_of_a_drop() {
        use crate::subjects::model::ModelSubject;
        use bucketproof_trace::duration::SECOND;
        use bucketproof_trace::subject::Observed;
        use bucketproof_trace::trace::Settle;

        /// The model, claiming it may evict and showing nothing.
        struct Opaque(ModelSubject);
        impl Subject for Opaque {
            fn name(&self) -> String {
                "opaque model".into()
            }
            fn acquire(&mut self, acquire: Acquire) -> Result<Observed, SubjectError> {
                self.0.acquire(acquire)
            }
            fn settle(&mut self, settle: Settle) -> Result<Observed, SubjectError> {
                self.0.settle(settle)
            }
            fn may_evict(&self) -> bool {
                true
            }
        }

        let mut setup = Setup::new(ConfigSpec::new(4, "3/2s"));
        setup.dedupe_window_ns = 5 * SECOND;
        let t = 100 * SECOND;
        let settle = |request_id, now| {
            Op::Settle(Settle {
                key: 0,
                request_id,
                actual: 0,
                now,
            })
        };
        let ops = vec![
            Op::Acquire(Acquire {
                key: 0,
                cost: 1,
                now: t,
                request_id: Some(1),
            }),
            // Full and without a live record an hour later: evictable, but the id is unknown anyway.
            settle(0, t + 3600 * SECOND),
            // Back in the record's window: it is live, and the settle refunds the token.
            settle(1, t + 3 * SECOND),
        ];
        let acquire = |request_id, now| {
            Op::Acquire(Acquire {
                key: 0,
                cost: 1,
                now,
                request_id: Some(request_id),
            })
        };
        // A record past its window is unknown on both sides too: the key's other, live record stays.
        let dead_record = vec![
            acquire(1, 0),
            acquire(2, t),
            settle(1, t + 3600 * SECOND),
            // Under a rolled-back clock the key's effective time is still `t`: record 2 replays.
            acquire(2, SECOND),
        ];
        for ops in [ops, dead_record] {
            let trace = Trace {
                setup: setup.clone(),
                ops,
            };
            let mut subject = Opaque(ModelSubject::new(&trace.setup).unwrap());
            let failure = failure_of(&trace, &mut subject, &RunOptions::default());
            assert_eq!(failure, None);
        }
    }

    /// A reconfigure under a rolled-back clock creates a key the subject does not hold, with its
    /// cursor at the subject's eviction horizon rather than at `now`. The runner must follow that for
    /// every subject that shows its state, wrappers of the core included: the fixture's bug shows
    /// only on denials, and this trace has none, so it passes exactly when it is followed like the core.
    #[test]
    fn a_wrapper_that_shows_its_state_is_followed_when_a_reconfigure_creates_a_key() {
        use bucketproof_trace::duration::SECOND;
        let setup = Setup::new(ConfigSpec::new(3, "1/s"));
        // The eviction horizon is per shard: the recreated key must share key 0's.
        let placement = CoreSubject::new(&setup).unwrap();
        let limiter = placement.limiter();
        let key = (1..)
            .find(|k| limiter.shard_of(k) == limiter.shard_of(&0))
            .unwrap();
        let ops = vec![
            Op::Acquire(Acquire {
                key: 0,
                cost: 1,
                now: 10 * SECOND,
                request_id: None,
            }),
            // Key 0 is full again by 20 s: the sweep drops it and the horizon moves to 20 s.
            Op::Sweep { now: 20 * SECOND },
            Op::Reconfigure {
                key,
                now: SECOND,
                config: ConfigSpec::new(5, "1/s"),
            },
            Op::Acquire(Acquire {
                key,
                cost: 1,
                now: 2 * SECOND,
                request_id: None,
            }),
        ];
        let trace = Trace { setup, ops };
        let mut core = CoreSubject::new(&trace.setup).unwrap();
        let mut wrapper = BrokenSubjects
            .build(CHARGES_DENIALS, &trace.setup)
            .unwrap()
            .unwrap();
        for subject in [&mut core as &mut dyn Subject, wrapper.as_mut()] {
            let failure = failure_of(&trace, subject, &RunOptions::default());
            assert_eq!(failure, None, "{}", subject.name());
        }
    }

    /// The core followed through an expiry under a rolled-back clock: a bucket emptied at 10 s and
    /// dropped full at 13 s (by an explicit sweep, or by the sweep another key's insertion on its
    /// shard runs) comes back at 13 s, which the eviction oracle accepts because the model's state is
    /// evictable there; a request id dead at the sweep stays dead. A core whose horizon kept the
    /// stored cursor (10 s) recreated the key where the model's state was empty: an illegal
    /// recreation.
    #[test]
    fn the_core_passes_expiry_under_a_rolled_back_clock() {
        use bucketproof_trace::duration::SECOND;
        let at = |key, cost, now, request_id| {
            Op::Acquire(Acquire {
                key,
                cost,
                now,
                request_id,
            })
        };
        let setup = Setup::new(ConfigSpec::new(2, "1/s"));
        let placement = CoreSubject::new(&setup).unwrap();
        let limiter = placement.limiter();
        let neighbour = (1..)
            .find(|k| limiter.shard_of(k) == limiter.shard_of(&0))
            .unwrap();
        let swept = vec![
            at(0, 2, 10 * SECOND, None),
            Op::Sweep { now: 13 * SECOND },
            at(0, 2, 10 * SECOND, None),
            at(0, 2, 12 * SECOND, None),
        ];
        let amortized = vec![
            at(0, 2, 10 * SECOND, None),
            at(neighbour, 1, 13 * SECOND, None),
            at(0, 2, 10 * SECOND, None),
            at(0, 2, 12 * SECOND, None),
        ];
        let mut with_ids = Setup::new(ConfigSpec::new(5, "1/s"));
        with_ids.dedupe_window_ns = SECOND;
        with_ids.dedupe_per_key = 4;
        let record = vec![
            at(0, 1, 10 * SECOND, Some(7)),
            Op::Sweep { now: 12 * SECOND },
            at(0, 1, 10 * SECOND + SECOND / 2, Some(7)),
            at(0, 1, 9 * SECOND, Some(7)),
        ];
        for (name, setup, ops) in [
            ("explicit sweep", setup.clone(), swept),
            ("amortized sweep", setup, amortized),
            ("request id", with_ids, record),
        ] {
            let trace = Trace { setup, ops };
            let mut core = CoreSubject::new(&trace.setup).unwrap();
            let run = run_trace(
                &trace.setup,
                trace.ops.iter().cloned(),
                &mut core,
                &RunOptions::default(),
            )
            .unwrap();
            assert_eq!(run.verdict, Verdict::Pass, "{name}");
            assert_eq!(
                run.events.get("evicted"),
                Some(&1),
                "{name}: {:?}",
                run.events
            );
        }
    }
}
