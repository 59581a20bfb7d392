//! The generator: which op comes next, given the reference state.
//!
//! Owns the menu of ops, times and costs and their weights. Promises: every op is drawn from the
//! reference state alone (the model and its clock), so a proptest seed gives the same op list on
//! every machine; with [`ExtraValues`] empty the draws are exactly those of the menu below, so seeds
//! persisted before extra values existed replay the same cases.
//!
//! Times: the clock itself, one nanosecond after it, up to three seconds after it, years after it,
//! up to ten seconds before it (rollbacks), the last second before `u64::MAX`, each key's exact
//! refill boundary for one token and for a full bucket and one nanosecond before it, and the
//! caller's extra gaps and instants. Costs: `0..=capacity + 1` (zero and one past the capacity are
//! errors a subject must refuse without a change) and the caller's extra costs. Settles: a key, a
//! request id of the menu's, an actual cost in `0..=capacity + 1`, a time of the menu's.
//!
//! Pressure ([`Options::pressure`], on by default under `EvictKeepingDeficit`): the first op of an
//! eviction-summary pressure phase ([`bucketproof_trace::pressure`]) is on the menu; once drawn, the phase owns
//! the steps until its last op, each one [`Phase::gap`](bucketproof_trace::pressure::Phase::gap) after the
//! previous, so a case of a few dozen ops drops more distinct victims than the summary holds
//! before they return.

use proptest::prelude::*;
use proptest::strategy::Union;

use super::reference::Reference;
use super::{ExtraValues, Options};
use bucketproof_trace::duration::{SECOND, YEAR};
use bucketproof_trace::trace::{Acquire, BandwidthSpec, ConfigSpec, Op, Settle};

/// The initial state: the model of `options.setup` with the clock at zero, anywhere in the first
/// thousand seconds, or three seconds before the end of time.
pub(super) fn init_state(options: &Options) -> BoxedStrategy<Reference> {
    let setup = options.setup.clone();
    prop_oneof![
        Just(0u64),
        1u64..1_000 * SECOND,
        Just(u64::MAX - 3 * SECOND)
    ]
    // `Options::check` has built this model once already, so the filter never rejects.
    .prop_filter_map("the setup's config is valid", move |clock| {
        Reference::new(&setup, clock)
    })
    .boxed()
}

/// How often the first op of a pressure phase is drawn, against the acquires' 12: about one op in
/// ten, so a phase usually starts within a case's first ten ops and has room to end.
const PRESSURE_WEIGHT: u32 = 2;

/// The next op from `state`.
pub(super) fn next_op(options: &Options, state: &Reference) -> BoxedStrategy<Op> {
    let phase = state.phase.filter(|_| options.pressure);
    if let Some(op) =
        phase.and_then(|phase| state.phase_op(state.clock.saturating_add(phase.gap())))
    {
        return Just(op).boxed();
    }
    let capacity = options.setup.config.smallest_capacity();
    let time = time(options, state);
    let cost = cost(capacity, &options.extra);
    let keys = 0..options.keys;
    let request_id = if options.request_ids == 0 {
        Just(None).boxed()
    } else {
        proptest::option::weighted(0.3, 0..options.request_ids).boxed()
    };
    let mut ops: Vec<(u32, BoxedStrategy<Op>)> = vec![(
        12,
        (keys.clone(), time.clone(), cost, request_id)
            .prop_map(|(key, now, cost, request_id)| {
                Op::Acquire(Acquire {
                    key,
                    cost,
                    now,
                    request_id,
                })
            })
            .boxed(),
    )];
    let template = options.setup.config.bandwidths();
    if options.ops.reconfigure && !options.tier_rates.is_empty() && template.len() > 1 {
        ops.push((
            1,
            reconfigure_set(options, template, keys.clone(), time.clone()),
        ));
    } else if options.ops.reconfigure && !options.tier_rates.is_empty() {
        let rates = options.tier_rates.clone();
        ops.push((
            1,
            (
                keys.clone(),
                time.clone(),
                1..=capacity.saturating_add(2),
                proptest::sample::select(rates),
            )
                .prop_map(|(key, now, capacity, rate)| Op::Reconfigure {
                    key,
                    now,
                    config: ConfigSpec::new(capacity, rate),
                })
                .boxed(),
        ));
    }
    if options.ops.sweep {
        ops.push((1, time.clone().prop_map(|now| Op::Sweep { now }).boxed()));
    }
    if options.ops.forget {
        ops.push((1, keys.clone().prop_map(|key| Op::Forget { key }).boxed()));
    }
    if options.ops.settle && options.request_ids > 0 {
        // Actual costs around the capacity: 0 (a full refund) and one past it (an error).
        let settle = (
            keys,
            0..options.request_ids,
            0..=capacity.saturating_add(1),
            time,
        )
            .prop_map(|(key, request_id, actual, now)| {
                Op::Settle(Settle {
                    key,
                    request_id,
                    actual,
                    now,
                })
            });
        ops.push((4, settle.boxed()));
    }
    if let Some(start) = phase.and_then(|phase| phase.op(state.next_fresh, 0, state.clock)) {
        ops.push((PRESSURE_WEIGHT, Just(start).boxed()));
    }
    Union::new_weighted(ops).boxed()
}

/// A reconfigure of a key whose setup has several bandwidths: the first one or more of the setup's
/// bandwidths, each keeping its name (so it continues the old one of its identity) with a capacity
/// drawn from `1..=capacity + 2` and a rate from the menu; the ones left out are dropped.
fn reconfigure_set(
    options: &Options,
    template: &[BandwidthSpec],
    keys: std::ops::Range<u64>,
    time: BoxedStrategy<u64>,
) -> BoxedStrategy<Op> {
    let template = template.to_vec();
    let rates = proptest::sample::select(options.tier_rates.clone());
    let parts: Vec<_> = (template.iter())
        .map(|bandwidth| (1..=bandwidth.capacity.saturating_add(2), rates.clone()))
        .collect();
    (keys, time, 1..=template.len(), parts)
        .prop_map(move |(key, now, kept, parts)| Op::Reconfigure {
            key,
            now,
            config: ConfigSpec::set(template.iter().zip(parts).take(kept).map(
                |(bandwidth, (capacity, rate))| BandwidthSpec {
                    capacity,
                    rate,
                    name: bandwidth.name.clone(),
                },
            )),
        })
        .boxed()
}

/// The next op's time (see the module doc for the menu).
fn time(options: &Options, state: &Reference) -> BoxedStrategy<u64> {
    let clock = state.clock;
    let capacity = options.setup.config.smallest_capacity();
    // Times worth trying from here: exact refill boundaries (and 1 ns before) of each key.
    let mut boundaries = Vec::new();
    for key in 0..options.keys {
        for cost in [1, capacity] {
            for at in state.refill_boundaries(key, clock, cost) {
                boundaries.push(at);
                boundaries.push(at.saturating_sub(1));
            }
        }
    }
    let mut times: Vec<(u32, BoxedStrategy<u64>)> = vec![
        (3, Just(clock).boxed()),
        (3, Just(clock.saturating_add(1)).boxed()),
        (
            4,
            (0u64..3 * SECOND)
                .prop_map(move |dt| clock.saturating_add(dt))
                .boxed(),
        ),
        (
            1,
            (1u64..200)
                .prop_map(move |years| clock.saturating_add(years * YEAR))
                .boxed(),
        ),
        (
            2,
            (1u64..10 * SECOND)
                .prop_map(move |back| clock.saturating_sub(back))
                .boxed(),
        ),
        (1, (0u64..SECOND).prop_map(|back| u64::MAX - back).boxed()),
        (
            4,
            if boundaries.is_empty() {
                Just(clock).boxed()
            } else {
                proptest::sample::select(boundaries).boxed()
            },
        ),
    ];
    // The seam for per-config boundary values: drawn as often as the refill boundaries.
    if !options.extra.gaps.is_empty() {
        let gaps = options.extra.gaps.clone();
        times.push((
            4,
            proptest::sample::select(gaps)
                .prop_map(move |gap| clock.saturating_add(gap))
                .boxed(),
        ));
    }
    if !options.extra.instants.is_empty() {
        times.push((
            2,
            proptest::sample::select(options.extra.instants.clone()).boxed(),
        ));
    }
    Union::new_weighted(times).boxed()
}

/// An acquire's cost: the range around the capacity, and one in four draws from the extra costs if
/// there are any.
fn cost(capacity: u64, extra: &ExtraValues) -> BoxedStrategy<u64> {
    let range = (0..=capacity.saturating_add(1)).boxed();
    if extra.costs.is_empty() {
        range
    } else {
        Union::new_weighted(vec![
            (3, range),
            (1, proptest::sample::select(extra.costs.clone()).boxed()),
        ])
        .boxed()
    }
}
