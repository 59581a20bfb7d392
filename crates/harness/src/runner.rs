//! The runner: streams a trace through a subject and the reference model in lockstep, running every
//! oracle after every step.
//!
//! Memory is flat in the trace length: ops are consumed from an iterator, and only per-key oracle state
//! and a bounded sample of one key's balance are kept. A failure names its step, so the caller can
//! regenerate the prefix (traces are deterministic) and shrink it.
//!
//! Besides verdicts the runner counts *events* ("rollback", "saturated", "denied_at_boundary", ...), the
//! things a scenario declares it must reach, so that no scenario passes vacuously.

use std::collections::BTreeMap;

use bucketproof_limiter::Wait;
use bucketproof_model::{Model, ModelError, cmp_whole};
use serde::Serialize;

use crate::oracle::arrival::{ArrivalCurve, CurveConfig};
use crate::oracle::differential::{Admission, compare_acquire};
use crate::oracle::{OracleKind, Violation, invariants};
use crate::subject::{Inspection, Subject, SubjectError};
use crate::trace::{Op, PolicySpec, Setup};

/// What the event counters need of a key's model state before an acquire: the key's capacity, two
/// comparisons and the cursor, taken instead of a copy of the exact balance (a clone and drop of a big
/// rational per step). An acquire does not change the config, so `capacity` holds after it too.
struct Before {
    capacity: u64,
    below_cost: bool,
    below_capacity: bool,
    last_refill: u64,
}

/// What to check and what to keep.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Stop at the first violation (the gate). Off for comparisons, which count all divergences.
    pub stop_at_first: bool,
    /// Run the retry-after tightness oracle (two side-effect-free probes per denial).
    pub check_retry_after: bool,
    /// Run the invariant oracle (inspects the subject's state around each acquire).
    pub check_invariants: bool,
    /// Keep a downsampled series of this key's balance for plots.
    pub sample_key: Option<u64>,
    /// At most this many samples.
    pub max_samples: usize,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            stop_at_first: true,
            check_retry_after: true,
            check_invariants: true,
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
    /// Other oracle violations (invariants, retry-after).
    pub other_violations: u64,
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
    /// Cost admitted by the subject on this key since its epoch began.
    pub admitted: u64,
    /// The arrival-curve bound for `admitted`: capacity + rate * (at - epoch start), in tokens.
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

/// Event names a scenario may require (see `scenarios/README.md`), in the order of the runner's
/// private `Event` enum, which indexes its counters.
pub const EVENTS: &[&str] = &[
    "allowed",
    "denied",
    "invalid_cost",
    "replayed",
    "rollback",
    "frozen_clock",
    "saturated",
    "denied_at_boundary",
    "allowed_at_boundary",
    "long_idle",
    "near_clock_end",
    "retry_never",
    "evicted",
    "key_limit",
    "reconfigured_up",
    "reconfigured_down",
    "forgotten",
    "swept",
    "new_key",
];

/// What a run counts; `EVENTS[event as usize]` is its name. Counted in a plain array, since a step
/// counts several of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    /// `allowed`.
    Allowed,
    /// `denied`.
    Denied,
    /// `invalid_cost`.
    InvalidCost,
    /// `replayed`.
    Replayed,
    /// `rollback`.
    Rollback,
    /// `frozen_clock`.
    FrozenClock,
    /// `saturated`.
    Saturated,
    /// `denied_at_boundary`.
    DeniedAtBoundary,
    /// `allowed_at_boundary`.
    AllowedAtBoundary,
    /// `long_idle`.
    LongIdle,
    /// `near_clock_end`.
    NearClockEnd,
    /// `retry_never`.
    RetryNever,
    /// `evicted`.
    Evicted,
    /// `key_limit`.
    KeyLimit,
    /// `reconfigured_up`.
    ReconfiguredUp,
    /// `reconfigured_down`.
    ReconfiguredDown,
    /// `forgotten`.
    Forgotten,
    /// `swept`.
    Swept,
    /// `new_key`.
    NewKey,
}

const YEAR_NS: u64 = 365 * 86_400 * 1_000_000_000;

struct Lockstep<'a> {
    subject: &'a mut dyn Subject,
    model: Model,
    setup: &'a Setup,
    options: &'a RunOptions,
    arrival: ArrivalCurve,
    events: [u64; EVENTS.len()],
    divergence: Divergence,
    samples: Vec<Sample>,
    sample_stride: u64,
    sample_seen: u64,
    sample_admitted: BTreeMap<u64, (u64, u64)>,
    latest: Option<u64>,
    previous_at: Option<u64>,
}

/// Runs `ops` through `subject` and a fresh reference model built from `setup`.
pub fn run_trace(
    setup: &Setup,
    ops: impl IntoIterator<Item = Op>,
    subject: &mut dyn Subject,
    options: &RunOptions,
) -> Result<RunReport, SubjectError> {
    let mut stepper = Stepper::new(setup, subject, options)?;
    for op in ops {
        if !stepper.step(op) {
            break;
        }
    }
    Ok(stepper.finish())
}

/// The runner one op at a time, for drivers that generate ops as they go (the state-machine tests).
pub struct Stepper<'a> {
    run: Lockstep<'a>,
    verdict: Verdict,
    steps: u64,
}

impl<'a> Stepper<'a> {
    /// A fresh model and oracle state around `subject`.
    pub fn new(
        setup: &'a Setup,
        subject: &'a mut dyn Subject,
        options: &'a RunOptions,
    ) -> Result<Stepper<'a>, SubjectError> {
        let config = setup
            .config
            .to_model()
            .map_err(|e| SubjectError::Build(e.to_string()))?;
        Ok(Stepper {
            run: Lockstep {
                subject,
                model: Model::new(config, setup.dedupe_window_ns, setup.dedupe_per_key),
                setup,
                options,
                arrival: ArrivalCurve::default(),
                events: [0; EVENTS.len()],
                divergence: Divergence::default(),
                samples: Vec::new(),
                sample_stride: 1,
                sample_seen: 0,
                sample_admitted: BTreeMap::new(),
                latest: None,
                previous_at: None,
            },
            verdict: Verdict::Pass,
            steps: 0,
        })
    }

    /// Runs one op through the subject, the model and the oracles. Returns false when the run is over
    /// (a violation with `stop_at_first`, or an op the subject cannot run).
    pub fn step(&mut self, op: Op) -> bool {
        let step = self.steps;
        self.steps += 1;
        match self.run.step(&op) {
            Ok(None) => true,
            Ok(Some(violation)) => {
                if self.verdict.passed() {
                    self.verdict = Verdict::Fail(Failure {
                        step,
                        op,
                        violation,
                    });
                }
                !self.run.options.stop_at_first
            }
            Err(reason) => {
                if self.verdict.passed() {
                    self.verdict = Verdict::Incompatible { step, reason };
                }
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
            events: (EVENTS.iter().zip(self.run.events))
                .filter(|&(_, count)| count > 0)
                .map(|(name, count)| (name.to_string(), count))
                .collect(),
            divergence: self.run.divergence,
            samples: self.run.samples,
        }
    }
}

impl Lockstep<'_> {
    fn event(&mut self, event: Event) {
        self.events[event as usize] += 1;
    }

    fn curve_config(&self, key: u64) -> CurveConfig {
        let config = self.model.config_of(key);
        CurveConfig {
            capacity: config.capacity(),
            rate_numer: config.rate_numer(),
            rate_denom: config.rate_denom(),
        }
    }

    fn note_time(&mut self, at: u64) {
        if self.latest.is_some_and(|latest| at < latest) {
            self.event(Event::Rollback);
        }
        if self.previous_at == Some(at) {
            self.event(Event::FrozenClock);
        }
        if at > u64::MAX - YEAR_NS {
            self.event(Event::NearClockEnd);
        }
        self.previous_at = Some(at);
        self.latest = Some(self.latest.map_or(at, |latest| latest.max(at)));
    }

    /// `Ok(None)`: all oracles held. `Ok(Some(v))`: a violation. `Err`: the subject cannot run this op.
    fn step(&mut self, op: &Op) -> Result<Option<Violation>, String> {
        let subject_failed = |error: SubjectError| -> Result<Option<Violation>, String> {
            match error {
                SubjectError::Unsupported(what) => Err(format!("unsupported: {what}")),
                other => Ok(Some(Violation::new(
                    OracleKind::Subject,
                    "the subject failed",
                    "an answer",
                    other.to_string(),
                ))),
            }
        };
        match op {
            Op::Acquire {
                key,
                at,
                cost,
                request_id,
            } => self.acquire(*key, *at, *cost, *request_id),
            Op::Reconfigure { key, at, config } => {
                self.note_time(*at);
                let new = config.to_model().map_err(|e| e.to_string())?;
                // Only a subject that evicts and shows its state can have created the key here.
                let before = if self.subject.may_evict() {
                    self.subject.inspect(*key)
                } else {
                    Inspection::Unsupported
                };
                let follows = before.is_supported();
                let held_before = before.held().is_some();
                if let Err(error) = self.subject.reconfigure(*key, config, *at) {
                    return subject_failed(error);
                }
                // A reconfigure of a key the subject did not hold creates it, possibly with its cursor
                // at the subject's eviction horizon: follow that before the model reconfigures.
                if follows
                    && !held_before
                    && let Some(v) = self.follow_creation(*key, *at)
                {
                    return Ok(Some(v));
                }
                let old = self.model.config_of(*key).capacity();
                let raised = new.capacity() >= old;
                self.model.reconfigure(*key, new, *at);
                self.event(if raised {
                    Event::ReconfiguredUp
                } else {
                    Event::ReconfiguredDown
                });
                let curve = self.curve_config(*key);
                self.arrival.restart(*key, *at, curve);
                self.sample_admitted.remove(key);
                Ok(None)
            }
            Op::Forget { key } => {
                if let Err(error) = self.subject.forget(*key) {
                    return subject_failed(error);
                }
                self.model.forget(*key);
                self.arrival.forget(*key);
                self.sample_admitted.remove(key);
                self.event(Event::Forgotten);
                Ok(None)
            }
            Op::Sweep { at } => {
                self.note_time(*at);
                if let Err(error) = self.subject.sweep(*at) {
                    return subject_failed(error);
                }
                if self.subject.may_evict() {
                    // A subject that evicts on its own may keep or drop each evictable bucket (Redis
                    // keeps them until their TTL): the model does not sweep, it follows the subject's
                    // creations (`follow_creation`), which checks each drop was legal.
                    let evictable = self
                        .model
                        .keys()
                        .into_iter()
                        .filter(|&key| self.model.is_evictable_at(key, *at))
                        .count();
                    for _ in 0..evictable {
                        self.event(Event::Swept);
                    }
                } else {
                    for _ in self.model.sweep(*at) {
                        self.event(Event::Swept);
                    }
                }
                Ok(None)
            }
        }
    }

    fn acquire(
        &mut self,
        key: u64,
        at: u64,
        cost: u64,
        request_id: Option<u64>,
    ) -> Result<Option<Violation>, String> {
        self.note_time(at);
        let check_invariants = self.options.check_invariants;
        let inspected_before = if check_invariants {
            self.subject.inspect(key)
        } else {
            Inspection::Unsupported
        };
        let got = self.subject.acquire(key, at, cost, request_id);
        let mut violation = None;

        // Follow the subject's legal nondeterminism before asking the model (docs/semantics.md,
        // "Expiry and the key bound").
        match &got {
            Err(SubjectError::Unsupported(what)) => return Err(format!("unsupported: {what}")),
            Err(SubjectError::KeyLimitReached) => {
                self.event(Event::KeyLimit);
                // A key the model still holds may have been dropped losslessly by the subject's
                // amortized sweep (it was evictable); refusing it at the bound is then legal, and the
                // model forgets it too so that a later admission starts fresh on both sides.
                let latest = self.latest.unwrap_or(at);
                let dropped =
                    self.model.state(key).is_some() && self.model.is_evictable_at(key, latest);
                let legal = self.subject.may_evict()
                    && (self.model.state(key).is_none() || dropped)
                    && self.model.holds_any();
                if legal && dropped {
                    self.model.evict(key);
                    self.arrival.forget(key);
                }
                return Ok((!legal).then(|| {
                    Violation::new(
                        OracleKind::Model,
                        "refused a key at the key bound without cause",
                        "a decision (the key is known, or no key is held)",
                        "key limit reached",
                    )
                }));
            }
            Ok(observed) if observed.created == Some(true) => {
                if let Some(v) = self.follow_creation(key, at) {
                    violation = Some(v);
                }
            }
            _ => {}
        }

        let model_before = self.model.state(key).map(|(tokens, last_refill)| {
            let capacity = self.model.config_of(key).capacity();
            Before {
                capacity,
                below_cost: cmp_whole(tokens, cost).is_lt(),
                below_capacity: cmp_whole(tokens, capacity).is_lt(),
                last_refill,
            }
        });
        let expected = self.model.acquire(key, at, cost, request_id);
        let comparison = compare_acquire(&expected, &got);
        if let Some(error) = comparison.token_error
            && error > self.divergence.max_token_error
        {
            self.divergence.max_token_error = error;
        }
        match comparison.admission {
            Some(Admission::Over) => self.divergence.over_admissions += 1,
            Some(Admission::Under) => self.divergence.under_admissions += 1,
            None => {}
        }
        if comparison.admission.is_some() {
            self.divergence.decision_mismatches += 1;
        } else if comparison.violation.is_some() {
            self.divergence.value_mismatches += 1;
        }
        if comparison.violation.is_some() && self.divergence.first_divergence_at.is_none() {
            self.divergence.first_divergence_at = Some(at);
        }
        violation = violation.or(comparison.violation);

        self.count_events(&expected, model_before, cost, at);

        let Ok(observed) = got else {
            // Both errored the same way (or the comparison above says otherwise): errors change nothing.
            if check_invariants {
                let after = self.subject.inspect(key);
                if let Some(v) =
                    invariants::check_acquire(inspected_before.held(), after.held(), &got, false)
                {
                    self.divergence.other_violations += 1;
                    violation = violation.or(Some(v));
                }
            }
            return Ok(violation);
        };

        let restarted = observed.created.unwrap_or(!self.arrival.knows(key));
        if check_invariants {
            let after = self.subject.inspect(key);
            if let Some(v) = invariants::check_acquire(
                inspected_before.held(),
                after.held(),
                &Ok(observed),
                restarted,
            ) {
                self.divergence.other_violations += 1;
                violation = violation.or(Some(v));
            }
        }

        if restarted || !self.arrival.knows(key) {
            let curve = self.curve_config(key);
            self.arrival.restart(key, at, curve);
            self.sample_admitted.remove(&key);
        }
        // A replay touches no bucket (not even its cursor), so the curve does not see it.
        let admitted = observed.allowed && !observed.replayed;
        let curve_result = if observed.replayed {
            Ok(())
        } else {
            self.arrival.observe(key, at, cost, admitted)
        };
        if let Err(breach) = curve_result {
            self.divergence.arrival_breaches += 1;
            violation = violation.or(Some(Violation::new(
                OracleKind::ArrivalCurve,
                format!(
                    "admitted more than the arrival curve allows on key {}",
                    breach.key
                ),
                format!(
                    "<= {} units over [{}, {}]",
                    breach.bound_units, breach.from, breach.to
                ),
                format!("{} units", breach.admitted_units),
            )));
        }

        if self.options.check_retry_after
            && !observed.allowed
            && !observed.replayed
            && let Some(Wait::After(wait)) = observed.retry_after
            && let Some(v) = self.check_retry_after(key, at, cost, wait)
        {
            self.divergence.other_violations += 1;
            violation = violation.or(Some(v));
        }

        if self.options.sample_key == Some(key) {
            self.sample(key, at, cost, admitted, &observed.remaining);
        }
        Ok(violation)
    }

    /// The subject says it created `key`'s bucket at `at` (first sight, or after dropping it). Checks
    /// that this was legal and makes the model follow: the dropped bucket must have been evictable (or
    /// the policy lossy), and the fresh cursor must lie in `[at, latest time seen]` and not before the
    /// dropped bucket's cursor (no time credited twice).
    fn follow_creation(&mut self, key: u64, at: u64) -> Option<Violation> {
        let latest = self.latest.unwrap_or(at);
        let cursor = self
            .subject
            .inspect(key)
            .held()
            .map_or(at, |state| state.last_refill);
        let held = self.model.state(key).map(|(_, last_refill)| last_refill);
        let mut violation = None;
        if let Some(old_cursor) = held {
            self.event(Event::Evicted);
            let evictable = self.setup.policy == PolicySpec::EvictLeastRecent
                || self.model.is_evictable_at(key, latest);
            if !(self.subject.may_evict() && evictable) {
                violation = Some(Violation::new(
                    OracleKind::Model,
                    "the subject dropped a bucket that was not evictable",
                    "the key's state kept",
                    "a fresh bucket",
                ));
            } else if cursor < old_cursor {
                violation = Some(Violation::new(
                    OracleKind::Model,
                    "a recreated bucket's cursor is before the dropped one's: time credited twice",
                    format!("cursor >= {old_cursor}"),
                    format!("cursor {cursor}"),
                ));
            }
        }
        if cursor < at || cursor > latest.max(at) {
            violation = violation.or(Some(Violation::new(
                OracleKind::Model,
                "a fresh bucket's cursor is outside [now, latest time seen]",
                format!("cursor in [{at}, {}]", latest.max(at)),
                format!("cursor {cursor}"),
            )));
        }
        if held.is_some() || cursor != at {
            if held.is_none() {
                self.event(Event::NewKey);
            }
            self.model.recreate(key, cursor);
        }
        violation
    }

    fn check_retry_after(&mut self, key: u64, at: u64, cost: u64, wait: u64) -> Option<Violation> {
        let Some(retry_at) = at.checked_add(wait) else {
            return Some(Violation::new(
                OracleKind::RetryAfter,
                "retry_after points past the end of the clock",
                "never",
                format!("{wait}ns"),
            ));
        };
        if self.subject.would_allow(key, retry_at, cost) == Some(false) {
            return Some(Violation::new(
                OracleKind::RetryAfter,
                "retrying at now + retry_after is denied",
                format!("allowed at {retry_at}"),
                "denied",
            ));
        }
        if wait > 0 && self.subject.would_allow(key, retry_at - 1, cost) == Some(true) {
            return Some(Violation::new(
                OracleKind::RetryAfter,
                "retry_after is not tight: 1 ns earlier is already allowed",
                format!("denied at {}", retry_at - 1),
                "allowed",
            ));
        }
        None
    }

    fn count_events(
        &mut self,
        expected: &Result<bucketproof_model::Outcome, ModelError>,
        before: Option<Before>,
        cost: u64,
        at: u64,
    ) {
        let outcome = match expected {
            Ok(outcome) => outcome,
            Err(_) => {
                self.event(Event::InvalidCost);
                return;
            }
        };
        if outcome.replayed {
            self.event(Event::Replayed);
            return;
        }
        if outcome.created {
            self.event(Event::NewKey);
        }
        let decision = &outcome.decision;
        self.event(if decision.is_allowed() {
            Event::Allowed
        } else {
            Event::Denied
        });
        if decision.retry_after() == Some(bucketproof_model::ModelWait::Never) {
            self.event(Event::RetryNever);
        }
        if decision.retry_after() == Some(bucketproof_model::ModelWait::After(1)) {
            self.event(Event::DeniedAtBoundary);
        }
        if let Some(before) = before {
            // The refilled balance (step 3 of the acquire) is the decision's remaining plus the cost
            // for an admission, the remaining itself for a denial. Comparing against it this way
            // avoids a second refill in the model (a `peek`), which cost over a third of the run.
            let allowed = decision.is_allowed();
            let remaining = decision.remaining();
            let refilled_is = |target: u64| -> bool {
                let charged = if allowed { cost } else { 0 };
                target >= charged && cmp_whole(remaining, target - charged).is_eq()
            };
            if allowed && before.below_cost && refilled_is(cost) {
                self.event(Event::AllowedAtBoundary);
            }
            if at >= before.last_refill.saturating_add(YEAR_NS) {
                self.event(Event::LongIdle);
            }
            if before.below_capacity && refilled_is(before.capacity) {
                self.event(Event::Saturated);
            }
        }
    }

    fn sample(&mut self, key: u64, at: u64, cost: u64, admitted: bool, remaining: &crate::Amount) {
        let start = *self.sample_admitted.entry(key).or_insert((at, 0));
        let total = start.1 + if admitted { cost } else { 0 };
        self.sample_admitted.insert(key, (start.0, total));
        self.sample_seen += 1;
        if !self.sample_seen.is_multiple_of(self.sample_stride) {
            return;
        }
        let config = self.model.config_of(key);
        let rate = config.rate_per_second().to_f64().value();
        let model_remaining = self
            .model
            .state(key)
            .map(|(tokens, _)| tokens.to_f64().value())
            .unwrap_or(f64::NAN);
        self.samples.push(Sample {
            at,
            subject_remaining: remaining.to_f64_lossy(),
            model_remaining,
            admitted: total,
            bound: config.capacity() as f64 + rate * (at.saturating_sub(start.0)) as f64 / 1e9,
        });
        if self.samples.len() >= self.options.max_samples.max(2) {
            // Keep every other point and halve the rate: deterministic, bounded, still spans the run.
            let kept: Vec<Sample> = self.samples.iter().step_by(2).cloned().collect();
            self.samples = kept;
            self.sample_stride *= 2;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counters are indexed by discriminant and reported under `EVENTS[i]`: each variant must sit at its
    /// own name's position, or a scenario's `reach` would be judged on another event's count.
    #[test]
    fn every_event_is_counted_under_its_own_name() {
        let all = [
            Event::Allowed,
            Event::Denied,
            Event::InvalidCost,
            Event::Replayed,
            Event::Rollback,
            Event::FrozenClock,
            Event::Saturated,
            Event::DeniedAtBoundary,
            Event::AllowedAtBoundary,
            Event::LongIdle,
            Event::NearClockEnd,
            Event::RetryNever,
            Event::Evicted,
            Event::KeyLimit,
            Event::ReconfiguredUp,
            Event::ReconfiguredDown,
            Event::Forgotten,
            Event::Swept,
            Event::NewKey,
        ];
        assert_eq!(all.len(), EVENTS.len());
        for (index, event) in all.into_iter().enumerate() {
            let snake: String = format!("{event:?}")
                .chars()
                .enumerate()
                .flat_map(|(i, c)| {
                    let lower = c.to_ascii_lowercase();
                    (c.is_ascii_uppercase() && i > 0)
                        .then_some('_')
                        .into_iter()
                        .chain([lower])
                })
                .collect();
            assert_eq!(event as usize, index);
            assert_eq!(EVENTS[index], snake);
        }
    }
}
