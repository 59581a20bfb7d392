//! Eviction-summary pressure: a phase of ops that drops more distinct owing victims than an
//! `EvictKeepingDeficit` summary holds, then brings the early ones back before they are full again.
//!
//! Owns the phase (its keys, costs, order and spacing) and its size. Under `EvictKeepingDeficit` a
//! subject keeps, in a fixed array, when each victim dropped while not full would be full again
//! (docs/semantics.md, "Expiry and the key bound"). A summary that keeps every victim (merging two on
//! one slot by the later instant) passes a phase; one that forgets (a collision that overwrites, a
//! bounded list of the latest victims) lets an early victim come back fuller than it was dropped,
//! which the runner's eviction check and the arrival curve catch. Few keys against a bound never
//! show it: they drop fewer distinct victims than the array holds before one returns. Every generator
//! that runs under a key bound with that policy takes its phase from here: the scenario engine's
//! `[pressure]` (`scenarios/README.md`) and the state machine.
//!
//! The phase, for a setup whose summary has `S` slots ([`summary_slots`]):
//! 1. `V = VICTIMS_PER_SLOT * S` fresh keys, each acquired once: the even ones with a cost of the
//!    capacity (emptied: they owe a whole refill), the odd ones with one token (they owe a little).
//!    Each new key at the bound drops an older one, owing. The light victims are the ones whose
//!    later, smaller instants an overwriting summary puts over a heavy victim's.
//! 2. The heavy victims return in the order they were drained, each asking for the capacity.
//!
//! Promises: a phase is a pure function of the setup, its first key and its start (no randomness of
//! its own, so every generator stays deterministic); it is sized from the setup as the boundary
//! values are: its keys from the key bound, the core's shards and the limiter's slots per key, its
//! costs from the capacity, and its spacing ([`Phase::gap`]) so that the whole phase takes at most
//! half the time an emptied bucket takes to be full again, so no victim is full when it returns.

use bucketproof_limiter::DEFICIT_SLOTS_PER_KEY;

use crate::trace::{Acquire, Op, PolicySpec, Setup};

/// The core subject's shard count: fixed (not the machine's CPU count), so that which keys share a
/// shard, and so a shard's key bound and deficit array, are the same on every machine. Its key
/// bound is `max_keys` rounded up to a multiple of it. Defined here, beside the one formula that
/// sizes a phase from it; the core subject builds its limiter with it.
pub const SHARDS: usize = 4;

/// Drained victims per slot of the summary: twice as many as it holds, so that every shard's part
/// of the core's summary overflows even when the phase's keys spread unevenly over the shards.
pub const VICTIMS_PER_SLOT: u64 = 2;

/// A light victim's cost: one token, so that it owes less than a heavy victim drained before it.
const LIGHT_COST: u64 = 1;

/// The summary slots the project's subjects may hold for `setup`: the core's, `SHARDS *
/// ceil(max_keys / SHARDS) * DEFICIT_SLOTS_PER_KEY` (one array per shard, sized for the shard's key
/// bound), the largest of them (a reference adapter's one array holds `DEFICIT_SLOTS_PER_KEY *
/// max_keys`). Saturates.
pub fn summary_slots(setup: &Setup) -> u64 {
    let per_shard = setup.max_keys.max(1).div_ceil(SHARDS);
    let slots = (SHARDS.saturating_mul(per_shard)).saturating_mul(DEFICIT_SLOTS_PER_KEY);
    u64::try_from(slots).unwrap_or(u64::MAX)
}

/// One pressure phase's shape for a setup (where it starts is the caller's: [`Phase::op`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Phase {
    victims: u64,
    capacity: u64,
    gap: u64,
}

impl Phase {
    /// The phase of `setup`: `None` unless its policy is `EvictKeepingDeficit` (no other policy
    /// keeps a summary) and its config is valid.
    pub fn of(setup: &Setup) -> Option<Phase> {
        if setup.policy != PolicySpec::EvictKeepingDeficit {
            return None;
        }
        let set = setup.config.to_bandwidths().ok()?;
        let victims = VICTIMS_PER_SLOT.saturating_mul(summary_slots(setup));
        let len = victims.saturating_add(victims.div_ceil(2));
        // The soonest any bandwidth of an emptied bucket is full again (ceil(C / p) ns); a set that
        // never refills owes forever, and any spacing will do.
        let full = (set.as_slice().iter())
            .map(|bandwidth| bandwidth.config())
            .filter(|config| config.units_per_nanosecond() > 0)
            .map(|config| {
                let per_ns = u128::from(config.units_per_nanosecond());
                u64::try_from(config.capacity_units().div_ceil(per_ns)).unwrap_or(u64::MAX)
            })
            .min();
        let gap = full.map_or(0, |full| full / len.saturating_mul(2).max(1));
        Some(Phase {
            victims,
            capacity: setup.config.smallest_capacity(),
            gap,
        })
    }

    /// Ops in the phase: the drains, then the returns.
    pub fn len(&self) -> u64 {
        self.victims.saturating_add(self.returns())
    }

    /// Never: a phase drains at least one key. (For clippy's `len` without `is_empty`.)
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Fresh keys the phase uses, `first_key..first_key + keys()`.
    pub fn keys(&self) -> u64 {
        self.victims
    }

    /// The heavy victims (every other key, from the first), which return.
    fn returns(&self) -> u64 {
        self.victims.div_ceil(2)
    }

    /// Nanoseconds between two ops of the phase: the time an emptied bucket takes to be full again,
    /// divided by twice the phase's length (0 for a config that never refills).
    pub fn gap(&self) -> u64 {
        self.gap
    }

    /// The phase's op `index` (`None` past its end), at `now`, for the phase whose keys start at
    /// `first_key`.
    pub fn op(&self, first_key: u64, index: u64, now: u64) -> Option<Op> {
        let (offset, cost) = if index < self.victims {
            let heavy = index.is_multiple_of(2);
            (index, if heavy { self.capacity } else { LIGHT_COST })
        } else if index < self.len() {
            (2 * (index - self.victims), self.capacity)
        } else {
            return None;
        };
        Some(Op::Acquire(Acquire {
            key: first_key.saturating_add(offset),
            cost,
            now,
            request_id: None,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::ConfigSpec;

    fn setup(max_keys: usize) -> Setup {
        Setup {
            max_keys,
            policy: PolicySpec::EvictKeepingDeficit,
            ..Setup::new(ConfigSpec::new(3, "3/s"))
        }
    }

    /// Twice the slots drained, heavy and light in turn, then the heavy ones back in their order,
    /// within half the time an emptied bucket takes to refill.
    #[test]
    fn a_phase_drains_twice_the_summary_then_returns_the_heavy_victims_in_time() {
        let setup = setup(8);
        let phase = Phase::of(&setup).unwrap();
        assert_eq!(phase.keys(), 2 * summary_slots(&setup));
        let ops: Vec<Op> = (0..phase.len())
            .map(|i| phase.op(100, i, i * phase.gap()).unwrap())
            .collect();
        assert_eq!(phase.op(100, phase.len(), 0), None);
        let acquire = |op: &Op| match op {
            Op::Acquire(acquire) => (acquire.key, acquire.cost),
            other => panic!("{other:?}"),
        };
        let victims = phase.keys() as usize;
        assert_eq!(acquire(&ops[0]), (100, 3));
        assert_eq!(acquire(&ops[1]), (101, 1));
        assert_eq!(acquire(&ops[victims]), (100, 3));
        assert_eq!(acquire(&ops[victims + 1]), (102, 3));
        assert_eq!(ops.len(), victims + victims / 2);
        // Capacity 3 at 3/s: full again 1 s after it is emptied.
        let last = ops.last().and_then(Op::now).unwrap();
        assert!(last <= 500_000_000, "{last}");
        assert!(Phase::of(&Setup::new(ConfigSpec::new(3, "3/s"))).is_none());
    }
}
