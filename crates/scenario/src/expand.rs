//! Expansion: a scenario and a seed become a lazy, deterministic stream of [`Op`]s.
//!
//! Promises:
//! - the same scenario and seed give the same ops on every machine and with every future dependency
//!   version: the randomness is a `ChaCha8Rng` stream and the sampling is this crate's own integer code
//!   ([`super::sample`]);
//! - memory is flat in the trace length: the iterator keeps the current time, a few counters, a bounded
//!   ring of recent request ids, and per-key capacities only for keys whose config differs from the
//!   default (tier keys and keys of the population that were reconfigured), never one entry per op;
//! - independent aspects draw from independent streams (keys, arrivals, costs, clock, op kinds, request
//!   ids), so turning one knob does not reshuffle the others.
//!
//! Order of a trace: first one `Reconfigure` per tier key at the start time, then `length` ops, one per
//! step. At each step the true time advances by the arrival pattern (and maybe jumps), the clock reading
//! is derived from it (frozen, rolled back, jittered), then the op kind is chosen: a scheduled
//! reconfiguration whose step has come, a sweep, a forget, a random reconfiguration, else an acquire.
//! A step of an eviction-summary pressure phase (`[pressure]`, [`bucketproof_trace::pressure`]) is the phase's
//! own: its op on fresh keys, the true time advanced by the phase's spacing instead of the arrival
//! pattern (so that no victim is full again when it returns), the clock read as at any step.

use std::collections::{BTreeMap, VecDeque};

use rand_chacha::ChaCha8Rng;

use super::sample::{self, Chance, WeightedTable};
use super::{
    ArrivalPattern, BoundaryOffset, CostRange, CostValue, IdSpace, KeyDistribution, Scenario,
    ScheduledReconfig,
};
use bucketproof_trace::boundary::Boundaries;
use bucketproof_trace::duration::SECOND;
use bucketproof_trace::pressure::Phase;
use bucketproof_trace::trace::ATTACKER_KEY_BASE;
use bucketproof_trace::trace::{Acquire, Op, Settle};

/// Stream numbers: one per aspect, fixed forever (changing one changes every seed's meaning).
mod streams {
    pub const KEYS: u64 = 1;
    pub const ARRIVALS: u64 = 2;
    pub const COSTS: u64 = 3;
    pub const CLOCK: u64 = 4;
    pub const KINDS: u64 = 5;
    pub const REQUEST_IDS: u64 = 6;
}

/// The `[clock] boundary` menu: the boundary gaps within the clock
/// ([`Boundaries::gaps_within_clock`]) of every config the scenario names (the default, the tiers,
/// the reconfiguration targets), sorted and deduplicated. A gap whose line lies beyond the clock is
/// left out: drawn once, it would end the clock for the rest of the trace (`start_before_end` is the
/// way to the clock's end).
pub(super) fn boundary_gaps(scenario: &Scenario) -> Vec<u64> {
    let tiers = scenario.tiers.iter().map(|tier| tier.config.clone());
    let scheduled = scenario
        .reconfigure
        .schedule
        .iter()
        .map(|entry| entry.config.clone());
    let targets = scenario.reconfigure.configs.iter().map(|c| c.0.clone());
    let mut gaps: Vec<u64> = std::iter::once(scenario.setup.0.config.clone())
        .chain(tiers)
        .chain(scheduled)
        .chain(targets)
        .filter_map(|spec| Boundaries::of(&spec).ok())
        .flat_map(|boundaries| boundaries.gaps_within_clock())
        .collect();
    gaps.sort_unstable();
    gaps.dedup();
    gaps
}

/// The lazy op stream of one scenario and seed. Build it with [`Scenario::expand`].
pub struct Expansion {
    scenario: Scenario,
    default_capacity: u64,
    zipf: Option<WeightedTable>,
    costs: WeightedTable,
    boundary_period: u64,
    boundary_gaps: Vec<u64>,
    schedule: Vec<ScheduledReconfig>,
    pressure: Option<Phase>,
    // Streams.
    keys_rng: ChaCha8Rng,
    arrivals_rng: ChaCha8Rng,
    costs_rng: ChaCha8Rng,
    clock_rng: ChaCha8Rng,
    kinds_rng: ChaCha8Rng,
    ids_rng: ChaCha8Rng,
    // Chances, precomputed as integer thresholds.
    attacker: Chance,
    frozen: Chance,
    rollback: Chance,
    jump: Chance,
    boundary: Chance,
    sweep: Chance,
    forget: Chance,
    reconfigure: Chance,
    with_id: Chance,
    repeat: Chance,
    settle: Chance,
    settle_elsewhere: Chance,
    // Cursor.
    tier: usize,
    tier_key: u64,
    step: u64,
    start: u64,
    true_time: u64,
    jumped: u64,
    on_until: u64,
    previous_reading: Option<u64>,
    schedule_next: usize,
    round_robin: u64,
    next_attacker: u64,
    /// The pressure phase under way: its first key and the index of its next op.
    phase_at: Option<(u64, u64)>,
    next_request_id: u64,
    recent: VecDeque<(u64, u64, u64)>,
    capacities: BTreeMap<u64, u64>,
}

impl Expansion {
    pub(super) fn new(scenario: &Scenario, seed: u64) -> Expansion {
        let setup = scenario.setup();
        let default_config = setup.config.to_bandwidths().ok().map(|set| *set.first());
        let default_capacity = setup.config.smallest_capacity();
        let zipf = (scenario.keys.distribution == KeyDistribution::Zipf)
            .then(|| WeightedTable::zipf(scenario.keys.count, scenario.keys.zipf_exponent));
        let costs = if scenario.costs.is_empty() {
            WeightedTable::new([1])
        } else {
            WeightedTable::new(scenario.costs.iter().map(|c| c.weight))
        };
        // One token's refill time under the default config, rounded up: rate p/q tokens per second
        // refills one token in q * 10^9 / p ns.
        let boundary_period = scenario.arrivals.period.map_or_else(
            || {
                default_config.map_or(1, |config| {
                    let (p, q) = (config.rate().numer() as u128, config.rate().denom() as u128);
                    if p == 0 {
                        1
                    } else {
                        u64::try_from((q * u128::from(SECOND)).div_ceil(p)).unwrap_or(u64::MAX)
                    }
                })
            },
            |period| period.0.max(1),
        );
        let mut schedule = scenario.reconfigure.schedule.clone();
        schedule.sort_by_key(|entry| entry.step); // stable: same-step entries keep file order
        let start = match (scenario.clock.start, scenario.clock.start_before_end) {
            (_, Some(before_end)) => u64::MAX - before_end.0,
            (Some(start), None) => start.0,
            (None, None) => 0,
        };
        let clock = &scenario.clock;
        Expansion {
            default_capacity,
            zipf,
            costs,
            boundary_period,
            boundary_gaps: boundary_gaps(scenario),
            pressure: (scenario.pressure.every > 0)
                .then(|| Phase::of(&setup))
                .flatten(),
            schedule,
            keys_rng: sample::stream(seed, streams::KEYS),
            arrivals_rng: sample::stream(seed, streams::ARRIVALS),
            costs_rng: sample::stream(seed, streams::COSTS),
            clock_rng: sample::stream(seed, streams::CLOCK),
            kinds_rng: sample::stream(seed, streams::KINDS),
            ids_rng: sample::stream(seed, streams::REQUEST_IDS),
            attacker: scenario.keys.attacker.chance(),
            frozen: clock.frozen.chance(),
            rollback: clock
                .rollback
                .as_ref()
                .map_or(Chance::NEVER, |r| r.probability.chance()),
            jump: clock
                .jump
                .as_ref()
                .map_or(Chance::NEVER, |j| j.probability.chance()),
            boundary: clock.boundary.chance(),
            sweep: scenario.maintenance.sweep.chance(),
            forget: scenario.maintenance.forget.chance(),
            reconfigure: scenario.reconfigure.probability.chance(),
            with_id: scenario.request_ids.probability.chance(),
            repeat: scenario.request_ids.repeat.chance(),
            settle: scenario.request_ids.settle.chance(),
            settle_elsewhere: scenario.request_ids.settle_elsewhere.chance(),
            tier: 0,
            tier_key: scenario.tiers.first().map_or(0, |t| t.keys[0]),
            step: 0,
            start,
            true_time: start,
            jumped: 0,
            on_until: start.saturating_add(scenario.arrivals.on.0),
            previous_reading: None,
            schedule_next: 0,
            round_robin: 0,
            next_attacker: ATTACKER_KEY_BASE,
            phase_at: None,
            next_request_id: 1,
            recent: VecDeque::new(),
            capacities: BTreeMap::new(),
            scenario: scenario.clone(),
        }
    }

    fn capacity_of(&self, key: u64) -> u64 {
        self.capacities
            .get(&key)
            .copied()
            .unwrap_or(self.default_capacity)
    }

    /// The next tier reconfiguration, if the tier setup is not done.
    fn next_tier_op(&mut self) -> Option<Op> {
        let tier = self.scenario.tiers.get(self.tier)?;
        let key = self.tier_key;
        let op = Op::Reconfigure {
            key,
            now: self.start,
            config: tier.config.clone(),
        };
        self.capacities.insert(key, tier.config.smallest_capacity());
        if key >= tier.keys[1] {
            self.tier += 1;
            self.tier_key = self.scenario.tiers.get(self.tier).map_or(0, |t| t.keys[0]);
        } else {
            self.tier_key += 1;
        }
        Some(op)
    }

    /// Moves the true time to this step's arrival.
    fn advance(&mut self, step: u64) {
        let arrivals = &self.scenario.arrivals;
        if let Some(jump) = &self.scenario.clock.jump
            && step > 0
            && self.jump.hit(&mut self.clock_rng)
        {
            self.jumped = self.jumped.saturating_add(jump.size.0);
            self.true_time = self.true_time.saturating_add(jump.size.0);
            self.on_until = self.on_until.saturating_add(jump.size.0);
        }
        if step > 0 && self.boundary.hit(&mut self.clock_rng) {
            // Validation keeps the menu non-empty when the chance is not zero.
            let index = sample::below(&mut self.clock_rng, self.boundary_gaps.len() as u64);
            if let Some(&gap) = self.boundary_gaps.get(index as usize) {
                self.jumped = self.jumped.saturating_add(gap);
                self.true_time = self.true_time.saturating_add(gap);
                self.on_until = self.on_until.saturating_add(gap);
            }
        }
        if step < arrivals.initial_burst.max(1) {
            return; // the burst (and the first op) come at the start time
        }
        let index = step - arrivals.initial_burst.max(1);
        match arrivals.pattern {
            ArrivalPattern::Poisson => {
                let gap = sample::exponential(&mut self.arrivals_rng, arrivals.gap.0);
                self.true_time = self.true_time.saturating_add(gap);
            }
            ArrivalPattern::Fixed => {
                self.true_time = self.true_time.saturating_add(arrivals.gap.0);
            }
            ArrivalPattern::Bursts => {
                let gap = sample::exponential(&mut self.arrivals_rng, arrivals.gap.0);
                self.true_time = self.true_time.saturating_add(gap);
                if self.true_time > self.on_until {
                    // The on phase is over: silence for `off`, then a new on phase.
                    self.true_time = self.on_until.saturating_add(arrivals.off.0);
                    self.on_until = self.true_time.saturating_add(arrivals.on.0);
                }
            }
            ArrivalPattern::Boundary => {
                let (grid, before) = match arrivals.offset {
                    BoundaryOffset::At => (index + 1, false),
                    BoundaryOffset::Before => (index + 1, true),
                    BoundaryOffset::Both => (index / 2 + 1, index.is_multiple_of(2)),
                };
                let on_grid = self
                    .start
                    .saturating_add(self.jumped)
                    .saturating_add(grid.saturating_mul(self.boundary_period));
                self.true_time = on_grid - u64::from(before && on_grid > 0);
            }
        }
    }

    /// What the clock reads at this step.
    fn read_clock(&mut self) -> u64 {
        let clock = &self.scenario.clock;
        if let Some(previous) = self.previous_reading
            && self.frozen.hit(&mut self.clock_rng)
        {
            return previous;
        }
        let mut reading = self.true_time;
        if let Some(rollback) = &clock.rollback
            && self.rollback.hit(&mut self.clock_rng)
        {
            reading = reading.saturating_sub(rollback.size.0);
        }
        if clock.jitter.0 > 0 {
            let jitter = clock.jitter.0;
            let offset = sample::between(&mut self.clock_rng, 0, jitter.saturating_mul(2));
            reading = if offset >= jitter {
                reading.saturating_add(offset - jitter)
            } else {
                reading.saturating_sub(jitter - offset)
            };
        }
        self.previous_reading = Some(reading);
        reading
    }

    /// The op of step `step` if it belongs to a pressure phase: the next of the one under way, or
    /// the first of a new one at every `[pressure] every`-th step, on fresh keys (the attackers'
    /// counter, so they are never seen before).
    fn pressure_op(&mut self, step: u64) -> Option<Op> {
        let phase = self.pressure?;
        let (first, index) = match self.phase_at {
            Some(at) => at,
            None if step > 0 && step.is_multiple_of(self.scenario.pressure.every) => {
                let first = self.next_attacker;
                self.next_attacker = first.saturating_add(phase.keys());
                (first, 0)
            }
            None => return None,
        };
        self.phase_at = (index + 1 < phase.len()).then_some((first, index + 1));
        self.true_time = self.true_time.saturating_add(phase.gap());
        let now = self.read_clock();
        phase.op(first, index, now)
    }

    /// A key of the population (never an attacker's).
    fn population_key(&mut self) -> u64 {
        let count = self.scenario.keys.count;
        match self.scenario.keys.distribution {
            KeyDistribution::Uniform => sample::below(&mut self.keys_rng, count),
            KeyDistribution::Zipf => match &self.zipf {
                Some(table) => table.draw(&mut self.keys_rng) as u64,
                None => 0,
            },
            KeyDistribution::RoundRobin => {
                let key = self.round_robin % count;
                self.round_robin = self.round_robin.wrapping_add(1);
                key
            }
        }
    }

    /// A fresh request id: the next of the trace's one counter, or a uniform draw from the shared
    /// space `1..=ids`, which may hit an id this key sent recently (then the limiter sees a retry) or
    /// one another key sent (then it must not).
    fn fresh_request_id(&mut self) -> u64 {
        match (
            self.scenario.request_ids.space,
            self.scenario.request_ids.ids,
        ) {
            (IdSpace::Shared, Some(ids)) => 1 + sample::below(&mut self.ids_rng, ids),
            // Validation refuses a shared space without a size.
            (IdSpace::Shared, None) | (IdSpace::Unique, _) => {
                let id = self.next_request_id;
                self.next_request_id += 1;
                id
            }
        }
    }

    fn acquire(&mut self, now: u64) -> Op {
        if !self.recent.is_empty() && self.settle.hit(&mut self.ids_rng) {
            let index = sample::below(&mut self.ids_rng, self.recent.len() as u64) as usize;
            let (mut key, request_id, _) = self.recent[index];
            if self.settle_elsewhere.hit(&mut self.ids_rng) {
                key = self.population_key();
            }
            let capacity = self.capacity_of(key);
            let actual = sample::below(&mut self.ids_rng, capacity.saturating_add(1));
            return Op::Settle(Settle {
                key,
                request_id,
                actual,
                now,
            });
        }
        if !self.recent.is_empty() && self.repeat.hit(&mut self.ids_rng) {
            let index = sample::below(&mut self.ids_rng, self.recent.len() as u64) as usize;
            let (key, id, cost) = self.recent[index];
            return Op::Acquire(Acquire {
                key,
                cost,
                now,
                request_id: Some(id),
            });
        }
        let key = if self.attacker.hit(&mut self.keys_rng) {
            let key = self.next_attacker;
            self.next_attacker += 1;
            key
        } else {
            self.population_key()
        };
        let capacity = self.capacity_of(key);
        let cost = if self.scenario.costs.is_empty() {
            1
        } else {
            let choice = self.costs.draw(&mut self.costs_rng);
            match self.scenario.costs[choice].cost {
                CostRange::One(CostValue::Tokens(cost)) => cost,
                CostRange::One(CostValue::Capacity) => capacity,
                CostRange::One(CostValue::OverCapacity) => capacity.saturating_add(1),
                CostRange::Range(low, high) => sample::between(&mut self.costs_rng, low, high),
            }
        };
        let request_id = self.with_id.hit(&mut self.ids_rng).then(|| {
            let id = self.fresh_request_id();
            if self.recent.len() >= self.scenario.request_ids.recent {
                self.recent.pop_front();
            }
            self.recent.push_back((key, id, cost));
            id
        });
        Op::Acquire(Acquire {
            key,
            cost,
            now,
            request_id,
        })
    }
}

impl Iterator for Expansion {
    type Item = Op;

    fn next(&mut self) -> Option<Op> {
        if let Some(op) = self.next_tier_op() {
            return Some(op);
        }
        if self.step >= self.scenario.length {
            return None;
        }
        let step = self.step;
        self.step += 1;
        if let Some(op) = self.pressure_op(step) {
            return Some(op);
        }
        self.advance(step);
        let now = self.read_clock();

        if let Some(entry) = self.schedule.get(self.schedule_next)
            && entry.step <= step
        {
            self.schedule_next += 1;
            let (key, config) = (entry.key, entry.config.clone());
            let capacity = config.smallest_capacity();
            self.capacities.insert(key, capacity);
            return Some(Op::Reconfigure { key, now, config });
        }
        let every = self.scenario.maintenance.sweep_every;
        if (every > 0 && (step + 1).is_multiple_of(every)) || self.sweep.hit(&mut self.kinds_rng) {
            return Some(Op::Sweep { now });
        }
        if self.forget.hit(&mut self.kinds_rng) {
            let key = self.population_key();
            return Some(Op::Forget { key });
        }
        if self.reconfigure.hit(&mut self.kinds_rng) {
            let key = self.population_key();
            let configs = &self.scenario.reconfigure.configs;
            let index = sample::below(&mut self.kinds_rng, configs.len() as u64) as usize;
            let config = configs[index].0.clone();
            self.capacities.insert(key, config.smallest_capacity());
            return Some(Op::Reconfigure { key, now, config });
        }
        Some(self.acquire(now))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.scenario.total_ops().saturating_sub(self.step) as usize;
        (0, Some(left))
    }
}

#[cfg(test)]
mod tests;
