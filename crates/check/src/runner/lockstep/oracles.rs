//! The per-step oracles in lockstep: the differential comparison with the model, the invariants,
//! request-id replays, the arrival curve, retry-after tightness and the capacity checks. Each judges
//! from the subject's own reports and returns its first violation; the statistics count them all.

use std::cmp::Ordering;

use bucketproof_limiter::Wait;
use bucketproof_model::cmp_whole;

use super::Lockstep;
use crate::oracle::arrival::{ArrivalBreach, ArrivalCurve, Recreation};
use crate::oracle::differential::{Admission, compare_acquire};
use crate::oracle::replay::Retry;
use crate::oracle::retry_after::Probed;
use crate::oracle::{OracleKind, Violation, invariants, retry_after};
use crate::runner::events::Before;
use bucketproof_trace::subject::{Inspection, Observed, SubjectError};
use bucketproof_trace::trace::Acquire;

impl Lockstep<'_> {
    /// The differential oracle: the model decides the same acquire; the divergence statistics and the
    /// event counters see both answers.
    pub(super) fn compare_with_model(
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

    pub(super) fn check_invariants(
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

    /// The replay oracle (`oracle::replay`): a creation (first sight; a drop, legal only with every
    /// record dead; or a lossy eviction) starts the key's records over at the fresh cursor the
    /// subject shows (a recreation it cannot show is not judged). Only the subject's own reports are
    /// used.
    pub(super) fn check_replay(
        &mut self,
        acquire: Acquire,
        observed: &Observed,
    ) -> Option<Violation> {
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
    pub(super) fn check_arrival(
        &mut self,
        acquire: Acquire,
        observed: &Observed,
    ) -> Option<Violation> {
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
    pub(super) fn observe_arrival(
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

    pub(super) fn check_retry_after(
        &mut self,
        acquire: Acquire,
        observed: &Observed,
    ) -> Option<Violation> {
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
    /// the subject does not report ([`bucketproof_trace::subject::Amount::UNREPORTED`]) is not judged, nor is an
    /// infinite one, which has no exact value to compare.
    pub(super) fn check_remaining_within_capacity(
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
                    // An unreported balance (`Amount::UNREPORTED`, NaN) compares as nothing:
                    // unjudged. Compared with whole numbers, without building a rational per step.
                    amount.compare_whole(0) == Some(Ordering::Less)
                        || amount.compare_whole(capacity) == Some(Ordering::Greater)
                })?;
        self.divergence.other_violations += 1;
        Some(Violation::new(
            OracleKind::Invariant,
            "reported remaining outside [0, capacity]",
            format!("a balance in [0, {capacity}]"),
            remaining.to_string(),
        ))
    }

    /// An invalid cost is never admitted: a cost of 0 or above the key's (smallest) capacity is an
    /// error by the spec (docs/semantics.md, acquire step 1), never a decision to go ahead. The exact
    /// profile's model says so too; under the safety profile this is the check, with no tolerance: a
    /// limiter may round, but must not turn a refused request into an admission (a cost of 0 admitted
    /// charges nothing, so the arrival curve cannot see it). A denial of an invalid cost admits
    /// nothing, and is judged as every denial is.
    pub(super) fn check_cost_admissible(
        &mut self,
        acquire: Acquire,
        observed: &Observed,
    ) -> Option<Violation> {
        let capacity = self.model.bandwidths_of(acquire.key).smallest_capacity();
        if !observed.allowed || observed.replayed || (1..=capacity).contains(&acquire.cost) {
            return None;
        }
        self.divergence.other_violations += 1;
        let what = match acquire.cost {
            0 => "admitted a cost of 0",
            _ => "admitted a cost above capacity",
        };
        Some(Violation::new(
            OracleKind::Invariant,
            what,
            format!(
                "an error for cost {} outside [1, capacity {capacity}]",
                acquire.cost
            ),
            "allowed",
        ))
    }
}
