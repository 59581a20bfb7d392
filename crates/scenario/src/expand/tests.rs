//! The expansion's unit tests: determinism, boundary arrivals and steps, tiers, clocks (rollbacks, the
//! end of the clock), attackers and request ids, pressure phases.

use std::path::Path;

use super::*;

fn scenario(extra: &str) -> Scenario {
    let text = format!(
        "length = 200\nreach = [\"allowed\"]\n[setup]\ncapacity = 3\nrate = \"1/s\"\n{extra}"
    );
    Scenario::parse(&text, Path::new("t.toml")).unwrap()
}

fn times(ops: &[Op]) -> Vec<u64> {
    ops.iter().filter_map(Op::now).collect()
}

#[test]
fn the_same_seed_gives_the_same_ops_and_another_seed_others() {
    let s = scenario("[keys]\ncount = 50\ndistribution = \"zipf\"\n[clock]\njitter = \"1ms\"\n");
    let a: Vec<Op> = s.expand(7).collect();
    let b: Vec<Op> = s.expand(7).collect();
    let c: Vec<Op> = s.expand(8).collect();
    assert_eq!(a, b);
    assert_ne!(a, c);
    assert_eq!(a.len(), 200);
}

#[test]
fn boundary_arrivals_sit_on_the_refill_grid_and_one_ns_before() {
    let s = scenario("[arrivals]\npattern = \"boundary\"\ninitial_burst = 3\n");
    let ops: Vec<Op> = s.expand(1).collect();
    let t = times(&ops);
    assert_eq!(
        &t[..7],
        &[
            0,
            0,
            0,
            999_999_999,
            1_000_000_000,
            1_999_999_999,
            2_000_000_000
        ]
    );
}

#[test]
fn tiers_come_first_and_capacity_costs_follow_the_tier() {
    let s = scenario(
        "[keys]\ncount = 4\n[[tiers]]\nkeys = [2, 3]\ncapacity = 9\nrate = \"1/s\"\n\
         [[costs]]\ncost = \"capacity\"\n",
    );
    let ops: Vec<Op> = s.expand(1).collect();
    assert_eq!(ops.len() as u64, s.total_ops());
    assert!(matches!(ops[0], Op::Reconfigure { key: 2, now: 0, .. }));
    assert!(matches!(ops[1], Op::Reconfigure { key: 3, now: 0, .. }));
    for op in &ops[2..] {
        let Op::Acquire(Acquire { key, cost, .. }) = op else {
            panic!("{op:?}")
        };
        assert_eq!(*cost, if *key >= 2 { 9 } else { 3 });
    }
}

#[test]
fn rollbacks_go_back_and_frozen_readings_repeat() {
    let s =
        scenario("[clock]\nfrozen = 0.2\n[clock.rollback]\nprobability = 0.2\nsize = \"10s\"\n");
    let t = times(&s.expand(3).collect::<Vec<_>>());
    assert!(t.windows(2).any(|w| w[1] < w[0]), "no rollback");
    assert!(t.windows(2).any(|w| w[1] == w[0]), "no frozen reading");
}

#[test]
fn near_the_end_of_the_clock_times_saturate_instead_of_wrapping() {
    let s = scenario(
        "[clock]\nstart_before_end = \"1s\"\n[clock.jump]\nprobability = 0.5\nsize = \"100y\"\n",
    );
    let t = times(&s.expand(1).collect::<Vec<_>>());
    assert_eq!(t[0], u64::MAX - 1_000_000_000);
    assert!(t.windows(2).all(|w| w[1] >= w[0]));
    assert_eq!(*t.last().unwrap(), u64::MAX);
}

/// With `boundary = 1` and a fixed arrival gap of 0, every step after the first leaps by one of
/// the configs' boundary gaps within the clock: the default's and the reconfiguration target's.
#[test]
fn boundary_steps_leap_by_the_configs_boundary_gaps() {
    let s = scenario(
        "[arrivals]\npattern = \"fixed\"\ngap = 0\n[clock]\nboundary = 1.0\n\
         [reconfigure]\nprobability = 0.01\n\
         configs = [{ capacity = 5000000000, rate = \"1000000000/s\" }]\n",
    );
    let menu = boundary_gaps(&s);
    let wide = Boundaries::of(&bucketproof_trace::ConfigSpec::new(
        5_000_000_000,
        "1000000000/s",
    ))
    .unwrap();
    // The wide config's 2^64 line: ceil(2^64 / 10^9) ns.
    assert!(menu.contains(&18_446_744_074) && wide.gaps.contains(&18_446_744_074));
    assert!(menu.iter().all(|&gap| gap < u64::MAX));
    let t = times(&s.expand(4).collect::<Vec<_>>());
    // Until the leaps have used up the clock (times saturate at its end).
    let leaps: Vec<u64> = t
        .windows(2)
        .filter(|w| w[1] < u64::MAX)
        .map(|w| w[1] - w[0])
        .collect();
    assert!(leaps.iter().all(|leap| menu.contains(leap)), "{leaps:?}");
    let distinct: std::collections::BTreeSet<_> = leaps.iter().collect();
    assert!(distinct.len() > 10, "{distinct:?}");
    // A zero chance draws nothing: the same ops as without the key.
    let off = scenario("[clock]\nboundary = 0.0\n");
    assert_eq!(off.prefix(4, 200), scenario("").prefix(4, 200));
}

#[test]
fn attackers_use_fresh_keys_and_repeats_reuse_ids() {
    let s = scenario(
        "[keys]\ncount = 2\nattacker = 0.5\n[request_ids]\nprobability = 0.5\nrepeat = 0.3\n",
    );
    let ops: Vec<Op> = s.expand(2).collect();
    let attackers: Vec<u64> = ops
        .iter()
        .filter_map(Op::key)
        .filter(|&k| k >= ATTACKER_KEY_BASE)
        .collect();
    // Fresh ids are handed out in order; a key is seen again only through a request-id repeat.
    let mut first_seen: Vec<u64> = Vec::new();
    for key in attackers {
        if !first_seen.contains(&key) {
            first_seen.push(key);
        }
    }
    assert!(first_seen.len() > 50, "{}", first_seen.len());
    assert!(
        first_seen
            .iter()
            .enumerate()
            .all(|(i, &k)| k == ATTACKER_KEY_BASE + i as u64)
    );
    let ids: Vec<u64> = ops
        .iter()
        .filter_map(|op| match op {
            Op::Acquire(Acquire { request_id, .. }) => *request_id,
            _ => None,
        })
        .collect();
    let mut sorted = ids.clone();
    sorted.sort();
    sorted.dedup();
    assert!(sorted.len() < ids.len(), "no repeated request id");
}

/// A phase starts at every `every`-th step, on keys never seen before, its ops spaced by its gap.
#[test]
fn pressure_phases_start_every_n_steps_on_fresh_keys() {
    let s = scenario(
        "max_keys = 2\npolicy = \"evict_keeping_deficit\"\n[keys]\ncount = 3\n\
         [pressure]\nevery = 50\n",
    );
    let phase = Phase::of(&s.setup()).unwrap();
    let ops: Vec<Op> = s.expand(5).collect();
    assert_eq!(ops.len(), 200);
    for (start, first) in [
        (50, ATTACKER_KEY_BASE),
        (100, ATTACKER_KEY_BASE + phase.keys()),
    ] {
        let begin = ops[start - 1].now().unwrap();
        for index in 0..phase.len() {
            let now = begin + (index + 1) * phase.gap();
            let op = &ops[start + index as usize];
            assert_eq!(
                Some(op),
                phase.op(first, index, now).as_ref(),
                "{start} {index}"
            );
        }
    }
    // Between phases, the population's traffic.
    assert!(ops[..50].iter().all(|op| op.key().is_some_and(|k| k < 3)));
    let after = 50 + phase.len() as usize;
    assert!(
        ops[after..100]
            .iter()
            .all(|op| op.key().is_some_and(|k| k < 3))
    );
}

/// For each request id of a trace, the keys that sent it.
fn senders(ops: &[Op]) -> BTreeMap<u64, std::collections::BTreeSet<u64>> {
    let mut senders: BTreeMap<u64, std::collections::BTreeSet<u64>> = BTreeMap::new();
    for op in ops {
        if let Op::Acquire(Acquire {
            key,
            request_id: Some(id),
            ..
        }) = op
        {
            senders.entry(*id).or_default().insert(*key);
        }
    }
    senders
}

#[test]
fn a_shared_id_space_draws_every_keys_ids_from_one_range() {
    let ids = "[keys]\ncount = 4\n[request_ids]\nprobability = 0.8\nrepeat = 0.2\n";
    let shared = scenario(&format!("{ids}space = \"shared\"\nids = 5\n"));
    let drawn = senders(&shared.expand(1).collect::<Vec<_>>());
    assert!(drawn.keys().all(|id| (1..=5).contains(id)), "{drawn:?}");
    assert!(
        drawn.values().any(|keys| keys.len() > 1),
        "no id sent by two keys"
    );
    // The default space: an id belongs to one key (repeats are that key's own retries).
    let unique = senders(&scenario(ids).expand(1).collect::<Vec<_>>());
    assert!(unique.len() > 5, "{unique:?}");
    assert!(unique.values().all(|keys| keys.len() == 1), "{unique:?}");
}
