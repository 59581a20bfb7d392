//! Deterministic trace generation for the kill runner: a [`Family`] (what the trace stresses) and a
//! seed give the same [`Trace`] on every machine and every version of the `rand` crates.
//!
//! The stream is the harness's ChaCha8 stream for the seed, one stream number per family, and every
//! draw is the harness's own unbiased integer sampling (`bucketproof_scenario::sample`, not a
//! library distribution, whose algorithm may change between releases; design.md section 7), so a seed
//! in a report replays next year.
//!
//! Families cover what the mutants get wrong: clock rollbacks and recoveries, exact refill
//! boundaries (and 1 ns before), idle gaps from a minute to centuries and the end of the clock,
//! reconfiguration, request ids (replays, expiry, the per-key FIFO), invalid costs (0, capacity + 1,
//! `u64::MAX`), key bounds (small `max_keys` under every policy, with sweeps and forgets), the lines
//! of the arithmetic, and a mix of everything.
//!
//! Every family has the boundary values of its configs' arithmetic on its menu
//! ([`bucketproof_trace::boundary`]): now and then a trace starts with (or reconfigures to) one of
//! the configs that sit on the lines, a step is one of the key's boundary gaps or a jump to one of
//! its boundary instants, and a cost one of its boundary costs. [`Family::Arithmetic`] draws them
//! most of the time: uniform draws essentially never land on `ceil(2^64 / p)` ns or on a balance of
//! exactly `2^62` units. Only [`Family::Plain`] stays within what every subject supports (acquires without
//! request ids), for the float bucket and the racy variant.

use std::collections::BTreeMap;

use bucketproof_scenario::sample;
use bucketproof_trace::boundary::{self, Boundaries};
use bucketproof_trace::duration::{SECOND, YEAR};
use bucketproof_trace::{Acquire, BandwidthSpec, ConfigSpec, Op, PolicySpec, Settle, Setup, Trace};
use rand_chacha::ChaCha8Rng;

/// What a generated trace stresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    /// Acquires only, no request ids: every subject can run it.
    Plain,
    /// Clock rollbacks, frozen clocks and recoveries.
    Rollback,
    /// Steps of exactly the time `k` tokens take to refill, and 1 ns less.
    Boundary,
    /// Long idle gaps: past a minute-long TTL, hours, years, the end of the `u64` clock.
    Idle,
    /// Per-key reconfigurations to faster, slower, larger and smaller configs.
    Reconfigure,
    /// Repeated request ids, a short dedupe window and a small per-key FIFO.
    RequestIds,
    /// Costs of 0, the capacity, capacity + 1 and `u64::MAX`.
    InvalidCost,
    /// Many keys against a small `max_keys`, with sweeps and forgets.
    KeyBound,
    /// The configs on the lines of the arithmetic, and their boundary gaps, instants and costs.
    Arithmetic,
    /// All of the above at once.
    Mixed,
    /// Keys of several bandwidths (a burst, a sustained rate, a quota), costs that one bandwidth covers
    /// and another does not, reconfigurations between sets, request ids and rollbacks. Only a subject
    /// that holds several bandwidths per key runs it; for any other the build is unsupported.
    Bandwidths,
    /// Reserve, then settle: acquires with request ids on two keys and settles of those ids (on
    /// either key) with actual costs from 0 to one past the capacity, retried, after refills and
    /// rollbacks. Only a subject that settles runs it to the end.
    Settle,
}

impl Family {
    /// Every family, in the order the kill runner tries them.
    pub const ALL: [Family; 12] = [
        Family::Plain,
        Family::Boundary,
        Family::Rollback,
        Family::InvalidCost,
        Family::RequestIds,
        Family::Reconfigure,
        Family::Idle,
        Family::KeyBound,
        Family::Mixed,
        Family::Arithmetic,
        // Last, so that the earlier families keep their stream numbers (and their traces).
        Family::Bandwidths,
        Family::Settle,
    ];

    /// A stable name for reports and replay.
    pub fn name(self) -> &'static str {
        match self {
            Family::Plain => "plain",
            Family::Rollback => "rollback",
            Family::Boundary => "boundary",
            Family::Idle => "idle",
            Family::Reconfigure => "reconfigure",
            Family::RequestIds => "request-ids",
            Family::InvalidCost => "invalid-cost",
            Family::KeyBound => "key-bound",
            Family::Arithmetic => "arithmetic",
            Family::Mixed => "mixed",
            Family::Bandwidths => "bandwidths",
            Family::Settle => "settle",
        }
    }

    /// Percent chances of each kind of step, per op.
    fn weights(self) -> Weights {
        let base = Weights {
            rollback: 0,
            frozen: 10,
            boundary: 10,
            idle: 0,
            reconfigure: 0,
            forget: 0,
            sweep: 0,
            request_id: 0,
            settle: 0,
            invalid: 0,
            keys: 2,
            capacity_cost: 30,
            arith: 4,
            line_configs: 5,
        };
        match self {
            Family::Plain => base,
            Family::Rollback => Weights {
                rollback: 25,
                ..base
            },
            Family::Boundary => Weights {
                boundary: 50,
                ..base
            },
            Family::Idle => Weights { idle: 30, ..base },
            Family::Reconfigure => Weights {
                reconfigure: 20,
                ..base
            },
            // Rollbacks too: a record's liveness is judged in the key's own time, which a caller
            // clock that runs backwards must not move.
            Family::RequestIds => Weights {
                request_id: 60,
                rollback: 15,
                ..base
            },
            Family::InvalidCost => Weights {
                invalid: 25,
                ..base
            },
            Family::KeyBound => Weights {
                sweep: 10,
                forget: 5,
                idle: 10,
                keys: 6,
                ..base
            },
            Family::Mixed => Weights {
                rollback: 10,
                frozen: 10,
                boundary: 15,
                idle: 8,
                reconfigure: 6,
                forget: 3,
                sweep: 4,
                request_id: 25,
                // None, so that the mixed traces stay the ones reports were made on.
                settle: 0,
                invalid: 6,
                keys: 4,
                capacity_cost: 30,
                arith: 8,
                line_configs: 10,
            },
            Family::Bandwidths => Weights {
                rollback: 8,
                boundary: 30,
                reconfigure: 5,
                request_id: 20,
                sweep: 3,
                invalid: 4,
                capacity_cost: 25,
                arith: 0,
                line_configs: 0,
                ..base
            },
            Family::Settle => Weights {
                rollback: 10,
                boundary: 20,
                request_id: 80,
                settle: 40,
                invalid: 5,
                capacity_cost: 20,
                arith: 0,
                line_configs: 0,
                ..base
            },
            // Every seed on a line config (see `generate`); costs of the capacity empty a bucket
            // exactly, so that a boundary gap lands the balance on a line.
            Family::Arithmetic => Weights {
                frozen: 20,
                arith: 60,
                line_configs: 100,
                keys: 1,
                capacity_cost: 50,
                ..base
            },
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Weights {
    rollback: u64,
    frozen: u64,
    boundary: u64,
    idle: u64,
    reconfigure: u64,
    forget: u64,
    sweep: u64,
    request_id: u64,
    /// A settle of one of the request ids (the rolls after reconfigure, forget and sweep).
    settle: u64,
    invalid: u64,
    keys: u64,
    /// A cost of exactly the key's capacity.
    capacity_cost: u64,
    /// A step to a boundary gap or instant, and (separately) a boundary cost.
    arith: u64,
    /// The trace's config, or a reconfiguration's, is one of the configs on the lines.
    line_configs: u64,
}

/// Configs traces start with and reconfigure to: awkward rates (thirds, sevenths), slow ones (a
/// minute per two tokens, so a minute-long idle leaves a bucket non-full), fast ones and no refill.
pub const CONFIGS: [(u64, &str); 8] = [
    (3, "3/2s"),
    (5, "1/3s"),
    (1, "1/s"),
    (2, "7/5s"),
    (5, "2/min"),
    (4, "1000/s"),
    (2, "0/s"),
    (10, "3/s"),
];

/// Bandwidth sets the [`Family::Bandwidths`] traces start with and reconfigure to: a burst over a
/// sustained rate, a quota that refills slower than the rest, a set whose first bandwidth is the
/// largest (so the smallest capacity is not the first), and named sets that rename and drop a
/// bandwidth across a reconfiguration.
const SETS: [&[(u64, &str, Option<&str>)]; 5] = [
    &[(3, "3/s", None), (5, "1/s", None)],
    &[(4, "2/s", None), (10, "1/s", None), (6, "1/min", None)],
    &[(10, "5/s", None), (2, "1/3s", None)],
    &[(5, "5/s", Some("burst")), (8, "2/s", Some("minute"))],
    &[(6, "1/s", Some("minute")), (3, "7/5s", Some("daily"))],
];

fn set_spec(parts: &[(u64, &str, Option<&str>)]) -> ConfigSpec {
    ConfigSpec::set(parts.iter().map(|&(capacity, rate, name)| {
        let bandwidth = BandwidthSpec::new(capacity, rate);
        match name {
            Some(name) => bandwidth.named(name),
            None => bandwidth,
        }
    }))
}

/// A key's config as the generator aims at it: the spec, its boundary values, and the lines alone
/// (drawn half the time, so that a line itself comes up more often than its neighbours).
#[derive(Clone, Debug)]
struct Aim {
    spec: ConfigSpec,
    boundaries: Boundaries,
    lines: Boundaries,
}

impl Aim {
    fn new(spec: ConfigSpec) -> Aim {
        // Every config on either menu is valid (a test checks it); an invalid one has no lines.
        let boundaries = Boundaries::of(&spec).unwrap_or_default();
        let lines = Boundaries::lines(&spec).unwrap_or_default();
        Aim {
            spec,
            boundaries,
            lines,
        }
    }

    /// The boundary values to draw from: the lines alone or with their neighbours, half and half.
    fn menu(&self, draw: &mut Draw) -> &Boundaries {
        if draw.percent(50) {
            &self.lines
        } else {
            &self.boundaries
        }
    }

    fn capacity(&self) -> u64 {
        self.spec.smallest_capacity()
    }
}

struct Draw(ChaCha8Rng);

impl Draw {
    /// Uniform in `0..n` (0 when `n == 0`).
    fn below(&mut self, n: u64) -> u64 {
        sample::below(&mut self.0, n)
    }

    fn percent(&mut self, chance: u64) -> bool {
        self.below(100) < chance
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }

    /// A config: for a [`Family::Bandwidths`] trace one of [`SETS`]; else one on the lines of the
    /// arithmetic with `line_configs` percent, else one of [`CONFIGS`].
    fn config(&mut self, family: Family, line_configs: &[ConfigSpec], chance: u64) -> Aim {
        if family == Family::Bandwidths {
            let index = self.below(SETS.len() as u64) as usize;
            Aim::new(set_spec(SETS[index]))
        } else if self.percent(chance) {
            let index = self.below(line_configs.len() as u64) as usize;
            Aim::new(line_configs[index].clone())
        } else {
            let (capacity, rate) = self.pick(&CONFIGS);
            Aim::new(ConfigSpec::new(capacity, rate))
        }
    }
}

/// Nanoseconds `k` tokens take to refill at `rate` (rounded up), if the rate refills at all.
fn refill_ns(rate: &str, k: u64) -> Option<u64> {
    let spec = ConfigSpec::new(1, rate).to_config().ok()?;
    let p = spec.rate().numer() as u128;
    if p == 0 {
        return None;
    }
    let units = k as u128 * spec.units_per_token();
    u64::try_from(units.div_ceil(p)).ok()
}

/// The trace of `family` for `seed`, `len` ops long.
pub fn generate(family: Family, seed: u64, len: usize) -> Trace {
    let stream = Family::ALL.iter().position(|f| *f == family).unwrap_or(0) as u64;
    let mut draw = Draw(sample::stream(seed, stream));
    let weights = family.weights();
    let line_configs = boundary::configs();
    let default = if family == Family::Arithmetic {
        // One line config per seed, in turn: eight seeds cover every one of them.
        Aim::new(line_configs[seed as usize % line_configs.len()].clone())
    } else {
        draw.config(family, &line_configs, weights.line_configs)
    };
    let mut setup = Setup::new(default.spec.clone());
    if family == Family::Settle {
        setup.dedupe_window_ns = 60 * SECOND;
        setup.dedupe_per_key = 2 + draw.below(3) as usize;
    } else if weights.request_id > 0 {
        setup.dedupe_window_ns = draw.pick(&[5 * SECOND, 60 * SECOND, 0]);
        setup.dedupe_per_key = 1 + draw.below(3) as usize;
    }
    if family == Family::KeyBound || family == Family::Mixed {
        setup.max_keys = 2 + draw.below(3) as usize;
        setup.policy = draw.pick(&[
            PolicySpec::RejectNewKeys,
            PolicySpec::EvictFull,
            PolicySpec::EvictLeastRecent,
        ]);
    }
    // Per-key config, to aim costs at the capacity in force and boundaries at its rate.
    let mut configs: BTreeMap<u64, Aim> = BTreeMap::new();
    let mut now: u64 = 5 * SECOND;
    let mut latest = now;
    let mut ops = Vec::with_capacity(len);
    while ops.len() < len {
        let key = draw.below(weights.keys);
        let aim = configs.get(&key).unwrap_or(&default);
        let key_capacity = aim.capacity();
        // An arithmetic trace's first op comes at the start, on a fresh, full bucket: the largest
        // refill sums start from there, before any jump has used up the clock.
        if !(ops.is_empty() && family == Family::Arithmetic) {
            now = next_time(&mut draw, &weights, now, latest, aim);
        }
        latest = latest.max(now);
        let roll = draw.below(100);
        let op = if roll < weights.reconfigure {
            let config = draw.config(family, &line_configs, weights.line_configs);
            let spec = config.spec.clone();
            configs.insert(key, config);
            Op::Reconfigure {
                key,
                now,
                config: spec,
            }
        } else if roll < weights.reconfigure + weights.forget {
            configs.remove(&key);
            Op::Forget { key }
        } else if roll < weights.reconfigure + weights.forget + weights.sweep {
            Op::Sweep { now }
        } else if roll < weights.reconfigure + weights.forget + weights.sweep + weights.settle {
            // 0 (a full refund) to one past the capacity (an error), the capacity most often.
            let actual = if draw.percent(weights.invalid) {
                key_capacity.saturating_add(1)
            } else if draw.percent(weights.capacity_cost) {
                key_capacity
            } else {
                draw.below(key_capacity.saturating_add(1))
            };
            Op::Settle(Settle {
                key,
                request_id: draw.below(3),
                actual,
                now,
            })
        } else {
            let cost = if draw.percent(weights.invalid) {
                draw.pick(&[0, key_capacity.saturating_add(1), u64::MAX])
            } else if draw.percent(weights.arith) && !aim.boundaries.costs.is_empty() {
                let costs = &aim.menu(&mut draw).costs;
                draw.pick(costs)
            } else if draw.percent(weights.capacity_cost) {
                key_capacity
            } else {
                1 + draw.below(key_capacity)
            };
            let request_id = draw.percent(weights.request_id).then(|| draw.below(3));
            Op::Acquire(Acquire {
                key,
                cost,
                now,
                request_id,
            })
        };
        ops.push(op);
    }
    Trace { setup, ops }
}

fn next_time(draw: &mut Draw, weights: &Weights, now: u64, latest: u64, aim: &Aim) -> u64 {
    let roll = draw.below(100);
    let mut threshold = weights.frozen;
    if roll < threshold {
        return now;
    }
    threshold += weights.rollback;
    if roll < threshold {
        // Back by up to 3 s, or, half the time, recover to just past the latest time seen.
        return if draw.percent(50) {
            now.saturating_sub(1 + draw.below(3 * SECOND))
        } else {
            latest.saturating_add(draw.below(SECOND / 2))
        };
    }
    threshold += weights.arith;
    if roll < threshold {
        // Mostly an idle gap on a line of the key's refill arithmetic (one within the clock: a
        // clamped gap would pin the rest of the trace at its end); else a jump forward to an instant
        // on a line of its clock arithmetic (a rate of 0 has no gap lines). Never back: a family
        // without rollbacks stays without them.
        let menu = aim.menu(draw);
        let gaps = menu.gaps_within_clock();
        return if !gaps.is_empty() && draw.percent(85) {
            now.saturating_add(draw.pick(&gaps))
        } else {
            draw.pick(&menu.instants).max(now)
        };
    }
    threshold += weights.boundary;
    // A rate of 0 never refills: no boundary to aim at, fall through to the other steps. A key of
    // several bandwidths aims at one of them (the first, unless the draw says otherwise).
    let bandwidths = aim.spec.bandwidths();
    let aimed = if bandwidths.len() > 1 {
        draw.below(bandwidths.len() as u64) as usize
    } else {
        0
    };
    if roll < threshold
        && let Some(step) = refill_ns(&bandwidths[aimed].rate, 1 + draw.below(3))
    {
        return now.saturating_add(step - draw.below(2));
    }
    threshold += weights.idle;
    if roll < threshold {
        let gap = match draw.below(6) {
            // Just past a one-minute TTL, before a slow bucket is full again.
            0 | 1 => 61 * SECOND + draw.below(30 * SECOND),
            2 => 3_600 * SECOND,
            3 => YEAR,
            4 => 100 * YEAR,
            _ => return u64::MAX - draw.below(1_000),
        };
        return now.saturating_add(gap);
    }
    now.saturating_add(1 + draw.below(SECOND / 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_trace_and_another_seed_another() {
        for family in Family::ALL {
            assert_eq!(generate(family, 7, 50), generate(family, 7, 50));
            assert_ne!(generate(family, 7, 50), generate(family, 8, 50));
        }
    }

    #[test]
    fn plain_traces_hold_only_acquires_without_request_ids() {
        for seed in 0..20 {
            for op in generate(Family::Plain, seed, 100).ops {
                assert!(matches!(
                    op,
                    Op::Acquire(Acquire {
                        request_id: None,
                        ..
                    })
                ));
            }
        }
    }

    #[test]
    fn every_config_on_either_menu_is_valid() {
        let specs = CONFIGS
            .iter()
            .map(|&(capacity, rate)| ConfigSpec::new(capacity, rate));
        for spec in specs.chain(boundary::configs()) {
            spec.to_model().unwrap();
        }
    }

    /// The arithmetic family puts the lines on its menu: configs on them, and the exact gaps,
    /// instants and costs of each key's config.
    #[test]
    fn arithmetic_traces_hit_their_configs_boundary_values() {
        let (mut gaps, mut instants, mut costs, mut line_configs) = (0, 0, 0, 0);
        for seed in 0..8 {
            let trace = generate(Family::Arithmetic, seed, 128);
            let aim = Aim::new(trace.setup.config.clone());
            line_configs += usize::from(boundary::configs().contains(&aim.spec));
            let mut previous = None;
            for op in &trace.ops {
                // One key: the setup's config holds until the first reconfiguration.
                if matches!(op, Op::Reconfigure { .. }) {
                    break;
                }
                let now = op.now().unwrap_or(0);
                if let Some(previous) = previous
                    && now > previous
                    && aim.boundaries.gaps.contains(&(now - previous))
                {
                    gaps += 1;
                }
                instants += usize::from(aim.boundaries.instants.contains(&now));
                if let Op::Acquire(Acquire { cost, .. }) = op {
                    costs += usize::from(aim.boundaries.costs.contains(cost));
                }
                previous = Some(now);
            }
        }
        assert!(
            line_configs >= 4,
            "{line_configs} of 8 traces on line configs"
        );
        assert!(
            gaps > 10 && instants > 10 && costs > 10,
            "{gaps} {instants} {costs}"
        );
    }

    #[test]
    fn boundary_steps_are_the_exact_refill_time_and_one_ns_less() {
        assert_eq!(refill_ns("1/3s", 1), Some(3 * SECOND));
        assert_eq!(refill_ns("3/2s", 1), Some(666_666_667));
        assert_eq!(refill_ns("0/s", 1), None);
    }
}
