//! One step in lockstep: an op through the subject and the reference model, then every oracle.
//!
//! Owns the per-run state (the model, the arrival curves, the counters, the divergence statistics,
//! the plot series) and the order of an acquire's steps: follow the subject's legal nondeterminism
//! (a refusal at the key bound, a bucket it recreated) before asking the model, compare with the
//! model, then the invariants, the arrival curve and retry-after tightness. Promises: the first
//! violation of a step among the oracles switched on ([`crate::oracle::OracleSet`]) wins; the
//! statistics count every one.

use std::collections::BTreeMap;
use std::ops::{Deref, DerefMut};

use bucketproof_limiter::Wait;
use bucketproof_model::{Model, Rational, cmp_whole};

use super::events::{Before, Event, Events};
use super::sample::Sampler;
use super::{Divergence, RunOptions};
use crate::oracle::arrival::{Allowance, ArrivalBreach, ArrivalCurve, CurveConfig, Recreation};
use crate::oracle::differential::{Admission, compare_acquire};
use crate::oracle::eviction::{Creation, Dropped, Refusal};
use crate::oracle::replay::{Replays, Retry};
use crate::oracle::retry_after::Probed;
use crate::oracle::{OracleKind, OracleSet, Violation, invariants, retry_after};
use crate::profile::Rounding;
use crate::subject::{Inspection, Observed, Subject, SubjectError};
use crate::trace::{Acquire, ConfigSpec, Op, PolicySpec, Settle, Setup};

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
/// judges nothing (its distance is only measured), a cost above capacity is never admitted, and a
/// retry-after is only required not to be earlier than the next success.
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
        let over_capacity = self.check_cost_within_capacity(acquire, observed);
        keep_first(&mut found, oracles, over_capacity);
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
            self.follow_lost_records(key, now);
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

    /// A settle the subject answered `UnknownRequest`: legal where the model still holds the record
    /// if the subject may have dropped the key since, with the records its bucket held (settle step 2:
    /// "its key was dropped"): evictable at the latest time seen, or, under a policy that drops
    /// buckets that are not full, any key without an override (a victim making room for another
    /// key), and the subject shows no state for it. The model then forgets the key's records too,
    /// and keeps its bucket: what a later recreation of the key is judged against (under
    /// `EvictKeepingDeficit` it may come back owing, never fuller; `follow_owing`).
    fn follow_lost_records(&mut self, key: u64, at: u64) {
        if self.model.state(key).is_none() || !self.subject.may_evict() {
            return;
        }
        let latest = self.events.latest().unwrap_or(at);
        let droppable = self.model.is_evictable_at(key, latest)
            || (self.policy.drops_non_full() && !self.model.is_pinned(key));
        let shown = self.subject.inspect(key);
        if droppable && shown.held().is_none() {
            self.model.lose_records(key);
        }
    }

    /// The subject refused `key` at its key bound (docs/semantics.md, "Expiry and the key bound").
    /// A key the model still holds may have been dropped by the subject: losslessly by its amortized
    /// sweep (it was evictable), or by a lossy policy making room for another key; refusing it is then
    /// legal, and the model drops it too so that a later admission starts fresh on both sides.
    fn follow_refusal(&mut self, key: u64, at: u64) -> Option<Violation> {
        self.events.add(Event::KeyLimit);
        // Whatever the subject held for the key is gone; the next use starts it fresh.
        self.replays.forget(key);
        let latest = self.events.latest().unwrap_or(at);
        let refusal = Refusal {
            may_evict: self.subject.may_evict(),
            lossy: self.policy.drops_non_full(),
            held: self.model.state(key).is_some(),
            evictable: self.model.is_evictable_at(key, latest),
            pinned: self.model.is_pinned(key),
            holds_any: self.model.holds_any(),
            holds_pinned: self.model.holds_pinned(),
        };
        // A legal refusal dropped a bucket evictable at the latest time seen: losslessly, so the
        // arrival curve keeps the key's segment (see `check_arrival`).
        if refusal.is_legal() && refusal.held {
            self.model.evict(key);
        }
        refusal.check()
    }

    /// The subject says it created `key`'s bucket at `at` (first sight, or after dropping it):
    /// checks that this was legal ([`Creation::check`]: the fresh cursor in `[at, latest]`, and the
    /// model's old state evictable at that cursor, [`Model::may_recreate_at`]) and makes the model
    /// follow, fresh at that cursor.
    fn follow_creation(&mut self, key: u64, at: u64) -> Option<Violation> {
        let latest = self.events.latest().unwrap_or(at);
        let cursor = self.shown_cursor(key).unwrap_or(at);
        let held = self.model.state(key).map(|(_, last_refill)| last_refill);
        if held.is_some() {
            self.events.add(Event::Evicted);
        }
        let creation = Creation {
            may_evict: self.subject.may_evict(),
            at,
            latest,
            cursor,
            dropped: held.map(|held_cursor| Dropped {
                cursor: held_cursor,
                lossy: self.policy.drops_non_full(),
                evictable_at_cursor: self.model.may_recreate_at(key, cursor),
            }),
        };
        if held.is_some() || cursor != at {
            if held.is_none() {
                self.events.add(Event::NewKey);
            }
            self.model.recreate(key, cursor);
        }
        creation.check()
    }

    /// Under `EvictKeepingDeficit`: the first bandwidth's balance the model's held bucket of `key`
    /// would have at the cursor the subject shows (the most a bucket the subject dropped owing may
    /// come back with); `None` when the model holds none or the subject shows no state.
    fn dropped_balance(&mut self, key: u64) -> Option<Rational> {
        if self.policy != PolicySpec::EvictKeepingDeficit {
            return None;
        }
        self.model.state(key)?;
        let cursor = self.shown_cursor(key)?;
        let peeks = self.model.peek_set(key, cursor);
        peeks.first().map(|peek| peek.remaining.clone())
    }

    /// Under `EvictKeepingDeficit` a created bucket may start below full (its slot owed): the subject's
    /// fresh balance, recovered from the state it shows after this acquire, must be no more than the
    /// dropped bucket refilled to the fresh cursor (`dropped`; the capacity for a key the model held
    /// nothing for, where only another key's debt can have lowered it), and the model follows it.
    fn follow_owing(
        &mut self,
        acquire: Acquire,
        observed: &Observed,
        dropped: Option<Rational>,
    ) -> Option<Violation> {
        let shown = self.subject.inspect(acquire.key).held().cloned()?;
        let after = shown.tokens.to_rational()?;
        let charged = if observed.allowed && !observed.replayed {
            acquire.cost
        } else {
            0
        };
        let fresh = after + Rational::from(charged);
        let capacity = Rational::from(self.model.config_of(acquire.key).capacity());
        let most = dropped.unwrap_or_else(|| capacity.clone());
        if fresh > most {
            return Some(Violation::new(
                OracleKind::Model,
                "a bucket dropped owing came back fuller than it would be",
                format!("at most {most} tokens at {}", shown.last_refill),
                format!("{fresh} tokens"),
            ));
        }
        if let Some(violation) = self.off_grid(acquire.key, &fresh) {
            return Some(violation);
        }
        if fresh < capacity {
            self.events.add(Event::CreatedOwing);
            self.model
                .recreate_owing(acquire.key, shown.last_refill, &[fresh]);
        }
        None
    }

    /// Under `EvictKeepingDeficit` a reconfigure that created the key may have found its slot owing:
    /// the subject's bucket after it (the fresh bucket converted to the new config) must be no fuller
    /// than the model's held bucket reconfigured would be (`ceiling`; the model's own result for a key
    /// it held nothing for), and the model, which reconfigured a full bucket, follows the lower one.
    /// Like `follow_owing`, the first bandwidth's balance.
    fn follow_owing_reconfigure(
        &mut self,
        key: u64,
        ceiling: Option<Rational>,
    ) -> Option<Violation> {
        let shown = self.subject.inspect(key).held().cloned()?;
        let after = shown.tokens.to_rational()?;
        let (tokens, _) = self.model.state(key)?;
        let full = tokens.clone();
        let most = ceiling.unwrap_or_else(|| full.clone());
        if after > most {
            return Some(Violation::new(
                OracleKind::Model,
                "a bucket dropped owing came back fuller than it would be",
                format!("at most {most} tokens at {}", shown.last_refill),
                format!("{after} tokens"),
            ));
        }
        if let Some(violation) = self.off_grid(key, &after) {
            return Some(violation);
        }
        if after < full {
            self.events.add(Event::CreatedOwing);
            // On the new config's grid and within its capacity already: the model holds it as is.
            self.model.recreate_owing(key, shown.last_refill, &[after]);
        }
        None
    }

    /// A balance an owing recreation showed that is not a whole number of the key's units (its first
    /// bandwidth's `1/(q * 10^9)` token): no exact bucket holds it, and the model cannot follow it.
    fn off_grid(&self, key: u64, tokens: &Rational) -> Option<Violation> {
        let units = tokens.clone() * Rational::from(self.model.config_of(key).units_per_token());
        (!units.is_int()).then(|| {
            Violation::new(
                OracleKind::Model,
                "a recreated bucket's balance is off the config's unit grid",
                "a whole number of units",
                format!("{tokens} tokens"),
            )
        })
    }

    /// The differential oracle: the model decides the same acquire; the divergence statistics and the
    /// event counters see both answers.
    fn compare_with_model(
        &mut self,
        acquire: Acquire,
        got: &Result<Observed, SubjectError>,
    ) -> Option<Violation> {
        let Acquire { key, cost, now, .. } = acquire;
        let before = self.model.state(key).map(|(tokens, last_refill)| {
            let config = self.model.config_of(key);
            let capacity = config.capacity();
            Before {
                capacity,
                below_cost: cmp_whole(tokens, cost).is_lt(),
                below_capacity: cmp_whole(tokens, capacity).is_lt(),
                last_refill,
                units_per_ns: config.rate_numer(),
            }
        });
        // The model keeps its own argument order (it shares no types with the harness).
        let expected = self.model.acquire(key, now, cost, acquire.request_id);
        let comparison = compare_acquire(&expected, got);
        let divergence = &mut self.divergence;
        if let Some(error) = comparison.token_error
            && error > divergence.max_token_error
        {
            divergence.max_token_error = error;
        }
        match comparison.admission {
            Some(Admission::Over) => divergence.over_admissions += 1,
            Some(Admission::Under) => divergence.under_admissions += 1,
            None => {}
        }
        if comparison.admission.is_some() {
            divergence.decision_mismatches += 1;
        } else if comparison.violation.is_some() {
            divergence.value_mismatches += 1;
        }
        if comparison.violation.is_some() && divergence.first_divergence_at.is_none() {
            divergence.first_divergence_at = Some(now);
        }
        self.events.request_id(key, acquire.request_id);
        self.events.acquire(&expected, before, cost, now);
        // A store error where the spec answers is the subject failing its caller, under every
        // profile (the safety profile does not ask the model, but still asks for an answer).
        if let (Ok(_), Err(SubjectError::Store(message))) = (&expected, got) {
            return Some(Violation::new(
                OracleKind::Subject,
                "the subject failed on a valid request",
                "an answer (allowed or denied)",
                format!("store error: {message}"),
            ));
        }
        comparison.violation
    }

    fn check_invariants(
        &mut self,
        key: u64,
        before: &Inspection,
        got: &Result<Observed, SubjectError>,
        restarted: bool,
    ) -> Option<Violation> {
        if !self.options.oracles.judges(OracleKind::Invariant) {
            return None;
        }
        let after = self.subject.inspect(key);
        // The state shown is the first bandwidth's: its part of the decision, or the whole decision
        // of a key of one bandwidth.
        let reported = got
            .as_ref()
            .ok()
            .and_then(|observed| match observed.bandwidths.first() {
                Some(first) => Some(first.remaining),
                None => (self.model.bandwidths_of(key).len() == 1).then_some(observed.remaining),
            });
        let violation =
            invariants::check_acquire(before.held(), after.held(), got, restarted, reported);
        self.divergence.other_violations += u64::from(violation.is_some());
        violation
    }

    /// The key's cursor as the subject shows it (`None`: it holds none, or cannot show it). After a
    /// creation, the fresh bucket's cursor: what eviction legality, the arrival curve and the replay
    /// oracle each judge a recreated key from.
    fn shown_cursor(&mut self, key: u64) -> Option<u64> {
        self.subject
            .inspect(key)
            .held()
            .map(|state| state.last_refill)
    }

    /// The replay oracle (`oracle::replay`): a creation (first sight; a drop, legal only with every
    /// record dead; or a lossy eviction) starts the key's records over at the fresh cursor the
    /// subject shows (a recreation it cannot show is not judged). Only the subject's own reports are
    /// used.
    fn check_replay(&mut self, acquire: Acquire, observed: &Observed) -> Option<Violation> {
        if self.options.oracles.judges(OracleKind::Replay) && acquire.request_id.is_some() {
            self.divergence.replay_checks += 1;
        }
        if observed.created == Some(true) {
            let shown = self.shown_cursor(acquire.key);
            // A key never seen before starts at `now` where the subject cannot show its cursor.
            let first_sight = (!self.replays.knows(acquire.key)).then_some(acquire.now);
            self.replays.reset(acquire.key, shown.or(first_sight));
        }
        self.replays.observe(Retry {
            key: acquire.key,
            now: acquire.now,
            request_id: acquire.request_id,
            replayed: observed.replayed,
            allowed: observed.allowed,
        })
    }

    /// The arrival curve across the key's whole life (`oracle::arrival`): a first use starts its
    /// segment; a recreation continues it at the fresh bucket's effective time, or is a declared,
    /// counted reset under the lossy `EvictLeastRecent`. Only the subject's own reports (its
    /// `created` flag and its shown cursor), the setup's policy and the key's config are used,
    /// never the model's state.
    ///
    /// Each bandwidth has its own curve, judged with its own capacity and rate: an admission must fit
    /// every one (no overselling holds per bandwidth).
    fn check_arrival(&mut self, acquire: Acquire, observed: &Observed) -> Option<Violation> {
        let key = acquire.key;
        if !self.arrivals[0].knows(key) {
            self.restart_curve(key, acquire.now);
        } else if observed.created == Some(true) {
            let recreation = Recreation {
                at: acquire.now,
                cursor: self.shown_cursor(key),
                latest: self.events.latest().unwrap_or(acquire.now),
                lossy: self.policy.is_lossy(),
            };
            let configs = self.curve_configs(key);
            let resets = self.arrivals[0].lossy_resets();
            for (curve, &config) in self.arrivals.iter_mut().zip(&configs) {
                curve.recreated(key, recreation, config);
            }
            if self.arrivals[0].lossy_resets() > resets {
                self.divergence.lossy_resets += 1;
                self.sampler.restart(key);
            }
        }
        // A replay touches no bucket (not even its cursor), so the curve does not see it.
        if observed.replayed {
            return None;
        }
        self.observe_arrival(key, "", |curve| curve.observe(acquire, observed.allowed))
    }

    /// Feeds every curve that knows `key` through `observe` and reports the first breach (which
    /// bandwidth, for a key of several; `after` ends the message).
    fn observe_arrival(
        &mut self,
        key: u64,
        after: &str,
        mut observe: impl FnMut(&mut ArrivalCurve) -> Result<(), ArrivalBreach>,
    ) -> Option<Violation> {
        let several = self.model.bandwidths_of(key).len() > 1;
        let (position, breach) = (self.arrivals.iter_mut().enumerate())
            .filter(|(_, curve)| curve.knows(key))
            .find_map(|(position, curve)| Some((position, observe(curve).err()?)))?;
        self.divergence.arrival_breaches += 1;
        let bandwidth = if several {
            format!(" (bandwidth {position})")
        } else {
            String::new()
        };
        Some(Violation::new(
            OracleKind::ArrivalCurve,
            format!(
                "admitted more than the arrival curve allows on key {}{bandwidth}{after}",
                breach.key
            ),
            format!(
                "<= {} units over [{}, {}]",
                breach.bound_units, breach.from, breach.to
            ),
            format!("{} units", breach.admitted_units),
        ))
    }

    fn check_retry_after(&mut self, acquire: Acquire, observed: &Observed) -> Option<Violation> {
        if !self.options.oracles.judges(OracleKind::RetryAfter)
            || observed.allowed
            || observed.replayed
        {
            return None;
        }
        let Some(Wait::After(wait)) = observed.retry_after else {
            return None;
        };
        let violation = match self.safety {
            None => retry_after::check(&mut *self.subject, acquire, wait),
            Some(safety) => retry_after::check_not_early(
                &mut *self.subject,
                acquire,
                wait,
                safety.retry_slack_ns,
            ),
        };
        if violation != Probed::NotAsked {
            self.divergence.retry_after_probes += 1;
        }
        let violation = violation.violation();
        self.divergence.other_violations += u64::from(violation.is_some());
        violation
    }

    /// A decision's reported balance lies in `[0, capacity]` (under every profile: a subject that says
    /// it holds more than a full bucket, or less than nothing, is wrong whatever it rounds). A balance
    /// that is no number (NaN or infinite) is one the subject does not report, and is not judged.
    fn check_remaining_within_capacity(
        &mut self,
        key: u64,
        observed: &Observed,
    ) -> Option<Violation> {
        // A replayed answer is the recorded one, with the balance of its time, under the config of
        // its time (a reconfiguration since may have lowered the capacity).
        if observed.replayed {
            return None;
        }
        let set = self.model.bandwidths_of(key);
        // The whole decision's balance is its binding bandwidth's, which may be any of them; each
        // reported part is held to its own bandwidth's capacity.
        let largest = set.configs().map(|config| config.capacity()).max();
        let whole = (observed.remaining, largest.unwrap_or(0));
        let parts = (observed.bandwidths.iter())
            .zip(set.configs())
            .map(|(part, config)| (part.remaining, config.capacity()));
        let (remaining, capacity) =
            std::iter::once(whole)
                .chain(parts)
                .find(|&(amount, capacity)| {
                    // NaN is how a subject says it reports no balance (a script whose reply has none): unjudged.
                    amount.to_rational().is_some_and(|value| {
                        value < Rational::ZERO || value > Rational::from(capacity)
                    })
                })?;
        self.divergence.other_violations += 1;
        Some(Violation::new(
            OracleKind::Invariant,
            "reported remaining outside [0, capacity]",
            format!("a balance in [0, {capacity}]"),
            remaining.to_string(),
        ))
    }

    /// A cost above the key's capacity is never admitted (the exact profile's model says so too;
    /// under the safety profile this is the check, with no tolerance).
    fn check_cost_within_capacity(
        &mut self,
        acquire: Acquire,
        observed: &Observed,
    ) -> Option<Violation> {
        let capacity = self.model.bandwidths_of(acquire.key).smallest_capacity();
        if !observed.allowed || observed.replayed || acquire.cost <= capacity {
            return None;
        }
        self.divergence.other_violations += 1;
        Some(Violation::new(
            OracleKind::Invariant,
            "admitted a cost above capacity",
            format!("an error for cost {} > capacity {capacity}", acquire.cost),
            "allowed",
        ))
    }
}
