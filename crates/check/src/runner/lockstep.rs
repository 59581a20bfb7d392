//! One step in lockstep: an op through the subject and the reference model, then every oracle.
//!
//! Owns the per-run state (the model, the arrival curves, the counters, the divergence statistics,
//! the plot series) and the order of an acquire's steps: follow the subject's legal nondeterminism
//! (a refusal at the key bound, a bucket it recreated) before asking the model, compare with the
//! model, then the invariants, the arrival curve and retry-after tightness. Promises: the first
//! violation of a step among the oracles switched on ([`crate::oracle::OracleSet`]) wins; the
//! statistics count every one.
//!
//! Roles: this file owns the state and each op's order of steps; `follow` the subject's legal
//! nondeterminism (what the model must follow before it decides); `oracles` the per-step checks.

use std::collections::BTreeMap;
use std::ops::{Deref, DerefMut};

use bucketproof_model::Model;

use super::events::{Event, Events};
use super::sample::Sampler;
use super::{Divergence, RunOptions};
use crate::oracle::arrival::{Allowance, ArrivalCurve, CurveConfig};
use crate::oracle::differential::compare_acquire;
use crate::oracle::replay::Replays;
use crate::oracle::{OracleKind, OracleSet, Violation};
use bucketproof_trace::profile::Rounding;
use bucketproof_trace::subject::{Inspection, Observed, Subject, SubjectError};
use bucketproof_trace::trace::{Acquire, ConfigSpec, Op, PolicySpec, Settle, Setup};

mod follow;
mod oracles;

/// The subject under test, borrowed for one run or owned by a long-lived stepper.
pub(super) enum SubjectSlot<'a> {
    Borrowed(&'a mut dyn Subject),
    Owned(Box<dyn Subject + 'a>),
}

impl<'a> Deref for SubjectSlot<'a> {
    type Target = dyn Subject + 'a;
    fn deref(&self) -> &Self::Target {
        match self {
            SubjectSlot::Borrowed(subject) => &**subject,
            SubjectSlot::Owned(subject) => &**subject,
        }
    }
}

impl DerefMut for SubjectSlot<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        match self {
            SubjectSlot::Borrowed(subject) => &mut **subject,
            SubjectSlot::Owned(subject) => &mut **subject,
        }
    }
}

/// What one step found: `Ok(None)` all oracles held, `Ok(Some(v))` a violation, `Err` the run
/// cannot go on.
pub(super) type StepResult = Result<Option<Violation>, Stop>;

/// Why a run stopped before its end without a verdict on the subject.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Stop {
    /// The subject cannot run this op (or the op is invalid for this run).
    Unsupported(String),
    /// The subject broke (`SubjectError::Broken`): a harness error.
    Broken(String),
}

pub(super) struct Lockstep<'a> {
    pub subject: SubjectSlot<'a>,
    model: Model,
    policy: PolicySpec,
    options: RunOptions,
    /// One arrival curve per bandwidth position: the first judges every key, the `i`-th the `i`-th
    /// bandwidth of the keys that have one.
    arrivals: Vec<ArrivalCurve>,
    replays: Replays,
    /// What the subject last charged each `(key, request id)` in a fresh answer (0 for a denial):
    /// the `charged` of a later settle, for the arrival curve's net admitted cost. From the
    /// subject's own reports, never the model's.
    charged: BTreeMap<(u64, u64), u64>,
    /// The safety profile's retry-after slack (`None`: the exact profile's tightness check).
    safety: Option<Safety>,
    pub events: Events,
    pub divergence: Divergence,
    pub sampler: Sampler,
}

/// How a subject checked under the safety profile is judged where it differs from exact: the model
/// judges nothing (its distance is only measured), so an invalid cost admitted is the capacity
/// check's to catch (`check_cost_admissible`, under every profile), and a retry-after is only
/// required not to be earlier than the next success.
#[derive(Clone, Copy, Debug)]
struct Safety {
    /// The retry is asked at `now + retry_after + retry_slack_ns` (one resolution step unless the
    /// subject rounds its retry-after up).
    retry_slack_ns: u64,
}

/// Keeps the first violation of a step among the oracles switched on.
fn keep_first(found: &mut Option<Violation>, oracles: OracleSet, violation: Option<Violation>) {
    if found.is_none() {
        *found = oracles.keep(violation);
    }
}

/// Why a subject's error ends the run without a verdict, if it does: an op it cannot run or
/// express (the run is skipped, naming it), or a broken subject (a harness error).
fn stop_of(error: &SubjectError) -> Option<Stop> {
    match error {
        SubjectError::Unsupported(what) => Some(Stop::Unsupported(format!("unsupported: {what}"))),
        SubjectError::Inexpressible(what) => {
            Some(Stop::Unsupported(format!("unsupported: {what}")))
        }
        SubjectError::Broken(message) => Some(Stop::Broken(message.clone())),
        _ => None,
    }
}

/// A subject's refusal of an op: an op it cannot run or express ends the run, any other error is
/// a violation.
fn subject_failed(error: SubjectError) -> StepResult {
    if let Some(stop) = stop_of(&error) {
        return Err(stop);
    }
    Ok(Some(Violation::new(
        OracleKind::Subject,
        "the subject failed",
        "an answer",
        error.to_string(),
    )))
}

impl<'a> Lockstep<'a> {
    pub fn new(
        setup: &Setup,
        subject: SubjectSlot<'a>,
        options: &RunOptions,
    ) -> Result<Lockstep<'a>, SubjectError> {
        let config = setup
            .config
            .to_model()
            .map_err(|e| SubjectError::Build(e.to_string()))?;
        let profile = subject.profile();
        let mut options = options.clone();
        let mut allowance = Allowance::default();
        let safety = if profile.is_safety() {
            options.oracles = options.oracles.without(OracleKind::Model);
            allowance = Allowance {
                tokens: profile
                    .tolerance()
                    .map_err(|e| SubjectError::Build(e.to_string()))?,
                time_ns: profile.time_resolution.ns().saturating_sub(1),
            };
            Some(Safety {
                retry_slack_ns: match profile.retry_after_rounding {
                    Rounding::Up => 0,
                    Rounding::Down | Rounding::Nearest => profile.time_resolution.ns(),
                },
            })
        } else {
            None
        };
        let sampler = Sampler::new(options.sample_key, options.max_samples);
        Ok(Lockstep {
            subject,
            model: Model::new(config, setup.dedupe_window_ns, setup.dedupe_per_key),
            policy: setup.policy,
            options,
            arrivals: (0..bucketproof_limiter::MAX_BANDWIDTHS)
                .map(|_| ArrivalCurve::with_allowance(allowance.clone()))
                .collect(),
            replays: Replays::new(setup.dedupe_window_ns, setup.dedupe_per_key),
            charged: BTreeMap::new(),
            safety,
            events: Events::new(),
            divergence: Divergence::default(),
            sampler,
        })
    }

    pub fn stops_at_first(&self) -> bool {
        self.options.stop_at_first
    }

    pub fn step(&mut self, op: &Op) -> StepResult {
        let found = match op {
            Op::Acquire(acquire) => self.acquire(*acquire),
            Op::Reconfigure { key, now, config } => self.reconfigure(*key, *now, config),
            Op::Forget { key } => self.forget(*key),
            Op::Sweep { now } => self.sweep(*now),
            Op::Settle(settle) => self.settle(*settle),
        };
        // The acquire path already filters each check; the others return one violation directly.
        found.map(|violation| self.options.oracles.keep(violation))
    }

    /// The key's bandwidths as the arrival curves need them, in order.
    fn curve_configs(&self, key: u64) -> Vec<CurveConfig> {
        (self.model.bandwidths_of(key).configs())
            .map(|config| CurveConfig {
                capacity: config.capacity(),
                rate_numer: config.rate_numer(),
                rate_denom: config.rate_denom(),
            })
            .collect()
    }

    /// The key's arrival curves (one per bandwidth; the curves past its last bandwidth forget it) and
    /// plot epoch start over at `at`.
    fn restart_curve(&mut self, key: u64, at: u64) {
        let configs = self.curve_configs(key);
        for (position, curve) in self.arrivals.iter_mut().enumerate() {
            match configs.get(position) {
                Some(&config) => curve.restart(key, at, config),
                None => curve.forget(key),
            }
        }
        self.sampler.restart(key);
    }

    fn reconfigure(&mut self, key: u64, at: u64, config: &ConfigSpec) -> StepResult {
        self.events.note_time(at);
        let new = config
            .to_model()
            .map_err(|e| Stop::Unsupported(e.to_string()))?;
        // Only a subject that evicts and shows its state can have created the key here.
        let before = if self.subject.may_evict() {
            self.subject.inspect(key)
        } else {
            Inspection::Unsupported
        };
        match self.subject.reconfigure(key, config, at) {
            // A reconfigure of a key the subject does not hold creates it, so it meets the key bound
            // as an acquire would (docs/semantics.md, reconfigure step 5).
            Err(SubjectError::KeyLimitReached) => return Ok(self.follow_refusal(key, at)),
            Err(error) => return subject_failed(error),
            Ok(()) => {}
        }
        // A reconfigure of a key the subject did not hold creates it, possibly with its cursor at
        // the subject's eviction horizon: follow that before the model reconfigures.
        let created = before == Inspection::Absent;
        let mut ceiling = None;
        if created {
            // Created: whatever records the subject held for the key are gone (a drop).
            let shown = self.shown_cursor(key);
            self.replays.reset(key, shown);
            // What the model's held bucket would be after this reconfigure: the most a bucket the
            // subject dropped owing may come back with (refill and conversion only grow with it).
            if self.policy == PolicySpec::EvictKeepingDeficit && self.model.state(key).is_some() {
                let cursor = shown.unwrap_or(at);
                ceiling = (self.model.reconfigured_set(key, &new, cursor).first()).cloned();
            }
            if let Some(v) = self.follow_creation(key, at) {
                return Ok(Some(v));
            }
        }
        let raised = new.smallest_capacity() >= self.model.bandwidths_of(key).smallest_capacity();
        self.model.reconfigure(key, new, at);
        if created
            && self.policy == PolicySpec::EvictKeepingDeficit
            && let Some(v) = self.follow_owing_reconfigure(key, ceiling)
        {
            return Ok(Some(v));
        }
        self.replays.reconfigured(key, at);
        self.events.add(if raised {
            Event::ReconfiguredUp
        } else {
            Event::ReconfiguredDown
        });
        self.restart_curve(key, at);
        Ok(None)
    }

    fn forget(&mut self, key: u64) -> StepResult {
        if let Err(error) = self.subject.forget(key) {
            return subject_failed(error);
        }
        self.model.forget(key);
        for curve in &mut self.arrivals {
            curve.forget(key);
        }
        self.replays.forget(key);
        self.charged
            .retain(|&(charged_key, _), _| charged_key != key);
        self.sampler.restart(key);
        self.events.add(Event::Forgotten);
        Ok(None)
    }

    fn sweep(&mut self, at: u64) -> StepResult {
        self.events.note_time(at);
        if let Err(error) = self.subject.sweep(at) {
            return subject_failed(error);
        }
        let swept = if self.subject.may_evict() {
            // A subject that evicts on its own may keep or drop each evictable bucket (Redis keeps
            // them until their TTL): the model does not sweep, it follows the subject's creations
            // (`follow_creation`), which checks each drop was legal.
            let keys = self.model.keys();
            keys.into_iter()
                .filter(|&key| self.model.is_evictable_at(key, at))
                .count()
        } else {
            self.model.sweep(at).len()
        };
        for _ in 0..swept {
            self.events.add(Event::Swept);
        }
        Ok(None)
    }

    fn acquire(&mut self, acquire: Acquire) -> StepResult {
        let Acquire { key, now, .. } = acquire;
        self.events.note_time(now);
        let before = self.inspect_for_invariants(key);
        let got = self.subject.acquire(acquire);
        let oracles = self.options.oracles;
        let mut found = None;
        if let Some(stop) = got.as_ref().err().and_then(stop_of) {
            return Err(stop);
        }
        match &got {
            Err(SubjectError::KeyLimitReached) => return Ok(self.follow_refusal(key, now)),
            Ok(observed) if observed.created == Some(true) => {
                let dropped = self.dropped_balance(key);
                found = oracles.keep(self.follow_creation(key, now));
                if self.policy == PolicySpec::EvictKeepingDeficit && found.is_none() {
                    found = oracles.keep(self.follow_owing(acquire, observed, dropped));
                }
            }
            _ => {}
        }
        let compared = self.compare_with_model(acquire, &got);
        keep_first(&mut found, oracles, compared);
        let Ok(observed) = &got else {
            // Both errored the same way (or the comparison above says otherwise): errors change nothing.
            let invariants = self.check_invariants(key, &before, &got, false);
            keep_first(&mut found, oracles, invariants);
            return Ok(found);
        };
        let restarted = observed.created.unwrap_or(!self.arrivals[0].knows(key));
        let invariants = self.check_invariants(key, &before, &got, restarted);
        keep_first(&mut found, oracles, invariants);
        let invalid_cost = self.check_cost_admissible(acquire, observed);
        keep_first(&mut found, oracles, invalid_cost);
        let remaining_range = self.check_remaining_within_capacity(key, observed);
        keep_first(&mut found, oracles, remaining_range);
        let arrival = self.check_arrival(acquire, observed);
        keep_first(&mut found, oracles, arrival);
        let retry_after = self.check_retry_after(acquire, observed);
        keep_first(&mut found, oracles, retry_after);
        let replay = self.check_replay(acquire, observed);
        keep_first(&mut found, oracles, replay);
        let admitted = observed.allowed && !observed.replayed;
        if let (Some(request_id), false) = (acquire.request_id, observed.replayed) {
            let cost = if admitted { acquire.cost } else { 0 };
            self.charged.insert((key, request_id), cost);
        }
        let remaining = &observed.remaining;
        self.sampler
            .acquire(&self.model, acquire, admitted, remaining);
        Ok(found)
    }

    /// A settle (docs/semantics.md, "settle"): the model settles the same request; the answers are
    /// compared like an acquire's, then the invariants (an error or a denied extra consumes
    /// nothing), the reported balance's range, and the arrival curve with the settlement's net cost.
    fn settle(&mut self, settle: Settle) -> StepResult {
        let Settle { key, now, .. } = settle;
        self.events.note_time(now);
        let before = self.inspect_for_invariants(key);
        let got = self.subject.settle(settle);
        if let Some(stop) = got.as_ref().err().and_then(stop_of) {
            return Err(stop);
        }
        if got == Err(SubjectError::UnknownRequest) {
            self.follow_lost_records(key, settle.request_id, now);
        }
        let oracles = self.options.oracles;
        let expected = (self.model).settle(key, now, settle.request_id, settle.actual);
        let comparison = compare_acquire(&expected, &got);
        let charged = (self.charged.get(&(key, settle.request_id))).copied();
        (self.events).settle(&expected, charged.unwrap_or(0), settle.actual);
        if comparison.admission.is_some() {
            self.divergence.decision_mismatches += 1;
        } else if comparison.violation.is_some() {
            self.divergence.value_mismatches += 1;
        }
        if comparison.violation.is_some() && self.divergence.first_divergence_at.is_none() {
            self.divergence.first_divergence_at = Some(now);
        }
        let mut found = oracles.keep(comparison.violation);
        let invariants = self.check_invariants(key, &before, &got, false);
        keep_first(&mut found, oracles, invariants);
        let Ok(observed) = &got else {
            return Ok(found);
        };
        let remaining_range = self.check_remaining_within_capacity(key, observed);
        keep_first(&mut found, oracles, remaining_range);
        let arrival = self.check_settled_arrival(settle, observed);
        keep_first(&mut found, oracles, arrival);
        Ok(found)
    }

    /// The arrival curve of a settle: an allowed, fresh settlement adds `actual - charged` to every
    /// curve of the key, with `charged` what the subject reported charging that request (nothing
    /// known: 0, so the whole actual counts), and the request's cost is `actual` from then on.
    fn check_settled_arrival(&mut self, settle: Settle, observed: &Observed) -> Option<Violation> {
        let Settle {
            key,
            request_id,
            actual,
            now,
        } = settle;
        // Once settled, the request's net cost is its actual: a second fresh settlement of it (a
        // refund twice) nets nothing more here, so the tokens it gave back show as over-admission.
        let net = if observed.allowed && !observed.replayed {
            let charged = (self.charged.insert((key, request_id), actual)).unwrap_or(0);
            i128::from(actual) - i128::from(charged)
        } else {
            0
        };
        self.observe_arrival(key, " after a settle", |curve| {
            curve.observe_net(key, now, net)
        })
    }

    fn inspect_for_invariants(&mut self, key: u64) -> Inspection {
        if self.options.oracles.judges(OracleKind::Invariant) {
            self.subject.inspect(key)
        } else {
            Inspection::Unsupported
        }
    }
}
