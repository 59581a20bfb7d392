//! The reference state the generator walks: the reference model plus the generator's clock.
//!
//! Owns what the generator knows between two ops. Promises: it is advanced by the model's own rules
//! (never by a subject), so the ops generated next depend only on the ops generated so far.

use bucketproof_model::{Model, Rational};

use bucketproof_trace::pressure::Phase;
use bucketproof_trace::trace::ATTACKER_KEY_BASE;
use bucketproof_trace::trace::{Acquire, Op, Setup};

/// The model after the ops generated so far, and the last time one of them carried.
#[derive(Clone, Debug)]
pub struct Reference {
    /// The reference model, driven with every generated op.
    pub model: Model,
    /// The generator's clock: the time of the last op that had one (the first: the initial clock).
    pub clock: u64,
    /// The eviction-summary pressure phase of the setup, if its policy keeps a summary.
    pub phase: Option<Phase>,
    /// The phase under way: its first key and the index of its next op.
    pub under_way: Option<(u64, u64)>,
    /// The first key the next phase drains: fresh keys, far above the generator's `0..keys`.
    pub next_fresh: u64,
}

impl Reference {
    /// A fresh model for `setup`, with the clock at `clock`. `None` if the model refuses the setup's
    /// config.
    pub fn new(setup: &Setup, clock: u64) -> Option<Reference> {
        let config = setup.config.to_model().ok()?;
        Some(Reference {
            model: Model::new(config, setup.dedupe_window_ns, setup.dedupe_per_key),
            clock,
            phase: Phase::of(setup),
            under_way: None,
            next_fresh: ATTACKER_KEY_BASE,
        })
    }

    /// The next op of the pressure phase under way, at `now`; `None` when none is.
    pub fn phase_op(&self, now: u64) -> Option<Op> {
        let (first, index) = self.under_way?;
        self.phase?.op(first, index, now)
    }

    /// Follows the pressure phase through `op`: its first op starts one, its next op advances it,
    /// its last ends it (the next phase drains fresh keys again). Any other op leaves it as it is,
    /// so a shrunk case that lost some of a phase's ops is still a valid case.
    fn follow_phase(&mut self, op: &Op) {
        let (Some(phase), Some(now)) = (self.phase, op.now()) else {
            return;
        };
        let (first, index) = self.under_way.unwrap_or((self.next_fresh, 0));
        if phase.op(first, index, now).as_ref() != Some(op) {
            return;
        }
        if index + 1 < phase.len() {
            self.under_way = Some((first, index + 1));
        } else {
            self.under_way = None;
            self.next_fresh = first.saturating_add(phase.keys());
        }
    }

    /// The state after `op`. An op the model refuses (a bad cost, a config it cannot hold) changes
    /// nothing, as it changes nothing in a correct subject.
    pub fn apply(mut self, op: &Op) -> Reference {
        self.follow_phase(op);
        match op {
            Op::Acquire(Acquire {
                key,
                cost,
                now,
                request_id,
            }) => {
                let _ = self.model.acquire(*key, *now, *cost, *request_id);
            }
            Op::Reconfigure { key, now, config } => {
                if let Ok(config) = config.to_model() {
                    self.model.reconfigure(*key, config, *now);
                }
            }
            Op::Forget { key } => {
                self.model.forget(*key);
            }
            Op::Sweep { now } => {
                self.model.sweep(*now);
            }
            Op::Settle(settle) => {
                let _ =
                    (self.model).settle(settle.key, settle.now, settle.request_id, settle.actual);
            }
        }
        if let Some(now) = op.now() {
            self.clock = now;
        }
        self
    }

    /// For each bandwidth of `key` in order, the exact time at which it will hold `cost` tokens with
    /// no traffic from `now` on, if it ever will (a refilling config, `1 <= cost <= capacity`, and no
    /// later than `u64::MAX`); none as well for a key without state that already holds `cost`. A key of
    /// one bandwidth has at most one boundary.
    pub fn refill_boundaries(&self, key: u64, now: u64, cost: u64) -> Vec<u64> {
        let set = self.model.bandwidths_of(key);
        let peeks = self.model.peek_set(key, now);
        let cursor = self.model.state(key).map(|(_, last)| last.max(now));
        (set.configs().zip(&peeks))
            .filter_map(|(config, peek)| {
                if cost == 0 || cost > config.capacity() || !config.refills() {
                    return None;
                }
                let deficit = Rational::from(cost) - &peek.remaining;
                if deficit <= Rational::ZERO {
                    // Already there: the boundary is the cursor, of a key that has one (a fresh key is
                    // full now, which the generator's other time steps already cover).
                    return cursor;
                }
                let wait = u64::try_from((deficit / config.rate_per_ns()).ceil()).ok()?;
                cursor.unwrap_or(now).checked_add(wait)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bucketproof_model::ModelWait;
    use bucketproof_trace::trace::ConfigSpec;

    /// The boundary is exact: admitted at it, denied 1 ns before it.
    #[test]
    fn refill_boundaries_are_exact() {
        let setup = Setup::new(ConfigSpec::new(4, "3/2s"));
        let reference = Reference::new(&setup, 10)
            .unwrap()
            .apply(&Op::Acquire(Acquire {
                key: 0,
                cost: 4,
                now: 10,
                request_id: None,
            }));
        let at = reference.refill_boundaries(0, 10, 1)[0];
        let mut early = reference.model.clone();
        assert!(
            !early
                .acquire(0, at - 1, 1, None)
                .unwrap()
                .decision
                .is_allowed()
        );
        let mut model = reference.model;
        assert!(model.acquire(0, at, 1, None).unwrap().decision.is_allowed());
        assert_eq!(
            model
                .acquire(0, at, 1, None)
                .unwrap()
                .decision
                .retry_after(),
            Some(ModelWait::After(666_666_667))
        );
    }

    /// No boundary for a cost the config can never hold, nor for a rate of zero.
    #[test]
    fn unreachable_costs_have_no_boundary() {
        let reference = Reference::new(&Setup::new(ConfigSpec::new(4, "3/2s")), 0).unwrap();
        assert_eq!(reference.refill_boundaries(0, 0, 5), Vec::<u64>::new());
        assert_eq!(reference.refill_boundaries(0, 0, 0), Vec::<u64>::new());
        let frozen = Reference::new(&Setup::new(ConfigSpec::new(4, "0/s")), 0).unwrap();
        assert_eq!(frozen.refill_boundaries(0, 0, 1), Vec::<u64>::new());
    }
}
