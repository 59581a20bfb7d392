//! Property tests (quickcheck). Each test's name states its property; its doc comment states it in full.
//!
//! Inputs are drawn from mixtures that hit the corners on purpose: capacities 1 and `u64::MAX`, rates 0, tiny
//! (`1/2^32`) and huge (`u64::MAX`), times near 0 and near `u64::MAX`, rollbacks, zero gaps, gaps of about one token.
//! Buckets are only ever *reachable* states: made fresh and driven by random acquires.

use bucketproof_model::Integer;
use bucketproof_model::Rational;
use bucketproof_model::{
    MAX_BANDWIDTHS, MAX_RATE_DENOM, Model, ModelBandwidths, ModelBucket, ModelConfig,
    ModelDecision, ModelDecisions, ModelError, ModelPeek, ModelSetBucket, ModelWait, cmp_whole,
};
use quickcheck::{Arbitrary, Gen, QuickCheck, TestResult};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

const CASES: u64 = 300;

/// Counts the cases that exercised the interesting branch of a property, so that a property whose generator never
/// reaches that branch fails instead of passing vacuously.
struct Coverage(AtomicU64);

impl Coverage {
    const fn new() -> Self {
        Coverage(AtomicU64::new(0))
    }
    fn hit(&self) {
        self.0.fetch_add(1, Relaxed);
    }
    fn at_least(&self, n: u64, what: &str) {
        let got = self.0.load(Relaxed);
        // `COVERAGE_PRINT=1` shows the counts, to set floors well below what runs reach.
        if std::env::var_os("COVERAGE_PRINT").is_some() {
            eprintln!("COVERAGE {what}: {got} (floor {n})");
        }
        assert!(
            got >= n,
            "only {got} cases reached {what}; the generator must reach it at least {n} times"
        );
    }
}

fn check<A: quickcheck::Testable>(prop: A) {
    QuickCheck::new()
        .tests(CASES)
        .max_tests(CASES * 20)
        .quickcheck(prop);
}

fn draw(g: &mut Gen, n: u64) -> u64 {
    u64::arbitrary(g) % n
}

/// A u64 from a mixture: small, exact corners, anything, near the top.
fn mixed_u64(g: &mut Gen, small: u64) -> u64 {
    match draw(g, 4) {
        0 => draw(g, small) + 1,
        1 => *g
            .choose(&[0, 1, 2, 3, 1_000_000_000, 1 << 32, u64::MAX - 1, u64::MAX])
            .unwrap(),
        2 => u64::arbitrary(g),
        _ => u64::MAX - draw(g, small),
    }
}

#[derive(Debug, Clone)]
struct ArbConfig(ModelConfig);

impl Arbitrary for ArbConfig {
    fn arbitrary(g: &mut Gen) -> Self {
        loop {
            let capacity = match draw(g, 3) {
                0 | 1 => draw(g, 10) + 1,
                _ => mixed_u64(g, 1000).max(1),
            };
            let p = match draw(g, 5) {
                0 => 0,
                1 | 2 => draw(g, 10) + 1,
                _ => mixed_u64(g, 1_000_000_000_000),
            };
            let q = match draw(g, 4) {
                0 | 1 => draw(g, 10) + 1,
                2 => *g.choose(&[1_000_000_000, MAX_RATE_DENOM, 3, 7]).unwrap(),
                _ => draw(g, MAX_RATE_DENOM) + 1,
            };
            if let Ok(c) = ModelConfig::new(capacity, p, q) {
                return ArbConfig(c);
            }
        }
    }
}

/// A step of a trace: where `now` goes next, and a cost.
#[derive(Debug, Clone, Copy)]
enum Step {
    Forward(u64),
    Back(u64),
    Jump(u64),
}

fn gen_step(g: &mut Gen, c: &ModelConfig) -> Step {
    // About the time one token takes: q * 1e9 / p ns (capped), so refills matter.
    let token_ns = if c.refills() {
        (u128::from(c.rate_denom()) * 1_000_000_000 / u128::from(c.rate_numer())).min(1 << 60)
            as u64
    } else {
        1_000_000_000
    };
    match draw(g, 8) {
        0 => Step::Forward(0),
        1..=3 => Step::Forward(draw(g, token_ns.saturating_mul(2).max(2))),
        4 => Step::Forward(token_ns),
        5 => Step::Back(draw(g, token_ns.max(2))),
        6 => Step::Jump(mixed_u64(g, 1 << 40)),
        _ => Step::Forward(mixed_u64(g, 1 << 40)),
    }
}

fn apply(now: u64, s: Step) -> u64 {
    match s {
        Step::Forward(d) => now.saturating_add(d),
        Step::Back(d) => now.saturating_sub(d),
        Step::Jump(t) => t,
    }
}

fn gen_cost(g: &mut Gen, c: &ModelConfig) -> u64 {
    match draw(g, 4) {
        0 => c.capacity(),
        1 => 1,
        _ => draw(g, c.capacity()) + 1,
    }
}

/// A start time: anywhere below 2^40, or a mixed value (round numbers and their neighbours).
fn gen_start(g: &mut Gen) -> u64 {
    if draw(g, 2) == 0 {
        draw(g, 1 << 40)
    } else {
        mixed_u64(g, 1 << 40)
    }
}

/// A config and a reachable bucket under it, with a `now` (the last operation's time).
#[derive(Debug, Clone)]
struct Reached {
    config: ModelConfig,
    bucket: ModelBucket,
    now: u64,
}

impl Arbitrary for Reached {
    fn arbitrary(g: &mut Gen) -> Self {
        let config = ArbConfig::arbitrary(g).0;
        let mut now = gen_start(g);
        let mut bucket = ModelBucket::fresh(&config, now);
        for _ in 0..draw(g, 6) {
            now = apply(now, gen_step(g, &config));
            let cost = gen_cost(g, &config);
            bucket = bucket.decide(&config, now, cost).expect("valid cost").0;
        }
        Reached {
            config,
            bucket,
            now,
        }
    }
}

fn tok(x: u64) -> Rational {
    Rational::from(x)
}

/// Refill additivity: for `t1 <= t2`, `refill(refill(s, t1), t2) == refill(s, t2)`: refilling in two steps gives
/// exactly the one-step result, whatever the split, including splits before `last_refill` and at the clamp.
#[test]
fn prop_refill_twice_at_t1_then_t2_equals_refill_once_at_t2() {
    fn prop(r: Reached, s1: u64, s2: u64, pick: u8) -> bool {
        let g = [s1, s2];
        let (a, b) = match pick % 3 {
            0 => (
                r.now.saturating_add(s1 % (1 << 40)),
                r.now.saturating_add(s2 % (1 << 40)),
            ),
            1 => (
                r.now.saturating_sub(s1 % (1 << 30)),
                r.now.saturating_add(s2 % (1 << 40)),
            ),
            _ => (g[0], g[1]),
        };
        let (t1, t2) = (a.min(b), a.max(b));
        let two = r.bucket.refilled(&r.config, t1).refilled(&r.config, t2);
        let one = r.bucket.refilled(&r.config, t2);
        two == one
    }
    check(prop as fn(Reached, u64, u64, u8) -> bool);
}

/// Retry-after is a ceiling: after a denial with `retry_after = After(w)`, the same request at `now + w` is allowed
/// and at `now + w - 1` denied; `Never` happens exactly when the rate is 0 or the request is still denied at
/// `u64::MAX`.
#[test]
fn prop_retry_after_is_the_least_wait_allowed_at_now_plus_w_denied_at_now_plus_w_minus_1() {
    fn prop(r: Reached, step: u8, cost_seed: u64) -> TestResult {
        let back = u64::from(step) * 997;
        let now = r.now.saturating_sub(back);
        let cost = cost_seed % r.config.capacity() + 1;
        let (after, d) = r.bucket.decide(&r.config, now, cost).unwrap();
        let ModelDecision::Denied { retry_after, .. } = d else {
            return TestResult::discard();
        };
        let allowed_at = |t: u64| after.decide(&r.config, t, cost).unwrap().1.is_allowed();
        match retry_after {
            ModelWait::After(w) => {
                FINITE.hit();
                if now < after.last_refill() {
                    ROLLBACK.hit();
                }
                TestResult::from_bool(w >= 1 && allowed_at(now + w) && !allowed_at(now + w - 1))
            }
            ModelWait::Never => {
                if r.config.refills() {
                    OVERFLOW.hit();
                }
                TestResult::from_bool(!r.config.refills() || !allowed_at(u64::MAX))
            }
        }
    }
    static FINITE: Coverage = Coverage::new();
    static ROLLBACK: Coverage = Coverage::new();
    static OVERFLOW: Coverage = Coverage::new();
    check(prop as fn(Reached, u8, u64) -> TestResult);
    FINITE.at_least(60, "a denial with a finite retry_after");
    ROLLBACK.at_least(40, "a denial during a rollback");
    OVERFLOW.at_least(20, "a Never beyond u64::MAX with a nonzero rate");
}

/// Reset-after is a ceiling too: at `now + reset_after` the bucket is full, 1 ns earlier it is not (unless the
/// reset is 0, when it is full now); `Never` exactly when the rate is 0 or it is still not full at `u64::MAX`.
#[test]
fn prop_reset_after_is_the_least_wait_full_at_now_plus_w_not_full_at_now_plus_w_minus_1() {
    fn prop(r: Reached, back: u16) -> bool {
        let now = r.now.saturating_sub(u64::from(back));
        let peek = r.bucket.peek(&r.config, now);
        let full_at = |t: u64| r.bucket.is_full_at(&r.config, t);
        match peek.reset_after {
            ModelWait::After(0) => peek.remaining == tok(r.config.capacity()),
            ModelWait::After(w) => {
                POSITIVE.hit();
                full_at(now + w) && !full_at(now + w - 1)
            }
            ModelWait::Never => !r.config.refills() || !full_at(u64::MAX),
        }
    }
    static POSITIVE: Coverage = Coverage::new();
    check(prop as fn(Reached, u16) -> bool);
    POSITIVE.at_least(50, "a positive finite reset_after");
}

/// Reconfigure never creates tokens: the new balance is at most the balance refilled under the old config, at most
/// the new capacity, on the new grid `1/(q' * 10^9)`, and loses less than one new unit unless clamped.
#[test]
fn prop_reconfigure_never_creates_tokens_and_rounds_down_by_less_than_one_unit() {
    fn prop(r: Reached, new: ArbConfig, dt: u32) -> bool {
        let new = new.0;
        let now = r.now.saturating_add(u64::from(dt));
        let old_refilled = r.bucket.refilled(&r.config, now);
        let b = r.bucket.reconfigured(&r.config, &new, now);
        let unit = Rational::from_parts_signed(Integer::from(1), new.units_per_token());
        let cap = tok(new.capacity());
        if b.tokens() < old_refilled.tokens() && b.tokens() < &cap {
            ROUNDED.hit();
        }
        b.tokens() <= old_refilled.tokens()
            && b.tokens() <= &cap
            && b.tokens() >= &Rational::ZERO
            && b.is_on_grid(&new)
            && (b.tokens() == &cap || old_refilled.tokens() - b.tokens() < unit)
            && b.last_refill() == old_refilled.last_refill()
    }
    static ROUNDED: Coverage = Coverage::new();
    check(prop as fn(Reached, ArbConfig, u32) -> bool);
    ROUNDED.at_least(
        10,
        "a reconfiguration that rounded tokens down (not clamped)",
    );
}

/// Rate normalization: `k*p / k*q` is the same config as `p/q` (reduced, same value, both valid or both refused),
/// so it makes the same decisions; and a stored rate is always the reduced form of the given one.
#[test]
fn prop_rate_normalization_k_p_over_k_q_is_the_same_config_and_decides_the_same() {
    fn prop(capacity: u64, p: u32, q: u64, k: u16, now: u64, cost: u64) -> TestResult {
        let (capacity, q, k) = (capacity.max(1), q % (1 << 34) + 1, u64::from(k.max(1)));
        let (p, kp, kq) = (u64::from(p), u64::from(p) * k, q * k);
        let base = ModelConfig::new(capacity, p, q);
        let scaled = ModelConfig::new(capacity, kp, kq);
        let (Ok(base), Ok(scaled)) = (base.clone(), scaled.clone()) else {
            return TestResult::from_bool(base.is_err() && scaled.is_err());
        };
        if k > 1 && p != 0 {
            SCALED.hit();
        }
        let (rp, rq) = (scaled.rate_numer(), scaled.rate_denom());
        let same_value =
            Integer::from(rp) * Integer::from(q) == Integer::from(p) * Integer::from(rq);
        let reduced = num_integer_gcd(rp, rq) == 1;
        let cost = cost % capacity + 1;
        let decide = |c: &ModelConfig| {
            let b = ModelBucket::fresh(c, 0).decide(c, 0, capacity).unwrap().0;
            b.decide(c, now, cost).unwrap()
        };
        TestResult::from_bool(
            base == scaled && same_value && reduced && decide(&base) == decide(&scaled),
        )
    }
    static SCALED: Coverage = Coverage::new();
    check(prop as fn(u64, u32, u64, u16, u64, u64) -> TestResult);
    SCALED.at_least(50, "a valid config given in scaled form");
}

fn num_integer_gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Denial and error leave the state as the spec says: a denial writes back exactly the refill (and charges
/// nothing), an allow charges exactly `cost` from the refill, an invalid cost is an error.
#[test]
fn prop_denial_writes_back_only_the_refill_and_allow_charges_exactly_cost() {
    fn prop(r: Reached, dt: u32, cost_seed: u64, bad: bool) -> bool {
        let now = r.now.saturating_add(u64::from(dt));
        if bad {
            let cost = if cost_seed.is_multiple_of(2) {
                0
            } else {
                r.config.capacity().saturating_add(1 + cost_seed % 5)
            };
            // cost > u64::MAX is not expressible; for capacity u64::MAX only cost 0 is invalid.
            if cost == r.config.capacity() {
                return true;
            }
            return r.bucket.decide(&r.config, now, cost)
                == Err(ModelError::InvalidCost {
                    cost,
                    capacity: r.config.capacity(),
                });
        }
        let cost = cost_seed % r.config.capacity() + 1;
        let refilled = r.bucket.refilled(&r.config, now);
        let (after, d) = r.bucket.decide(&r.config, now, cost).unwrap();
        if d.is_allowed() {
            after.tokens() == &(refilled.tokens() - tok(cost))
                && after.last_refill() == refilled.last_refill()
                && d.remaining() == after.tokens()
                && refilled.tokens() >= &tok(cost)
        } else {
            after == refilled
                && d.remaining() == refilled.tokens()
                && refilled.tokens() < &tok(cost)
        }
    }
    check(prop as fn(Reached, u32, u64, bool) -> bool);
}

/// Property: `cmp_whole(a/b, n)` (the model's fast comparison of a balance with a whole number) equals the
/// general comparison of the reduced rationals, for small and wide numerators and denominators, negative
/// values, and `n` up to `u64::MAX`.
#[test]
fn prop_cmp_whole_agrees_with_the_general_rational_comparison() {
    fn prop(numer: i128, denom: u128, whole: u64, small: bool) -> TestResult {
        let (numer, denom) = if small {
            (numer % 1_000, denom % 1_000)
        } else {
            (numer, denom)
        };
        if denom == 0 {
            return TestResult::discard();
        }
        let value = Rational::from_parts(Integer::from(numer), denom.into());
        let whole = if small { whole % 1_000 } else { whole };
        TestResult::from_bool(cmp_whole(&value, whole) == value.cmp(&Rational::from(whole)))
    }
    check(prop as fn(i128, u128, u64, bool) -> TestResult);
}

// ---- Several bandwidths per key ----

/// Names drawn from a small pool, so that two sets often share identities (reconfiguration by identity).
const NAMES: [Option<&str>; 5] = [None, None, Some("a"), Some("b"), Some("c")];

/// A valid bandwidth set: 1 to 4 bandwidths (now and then 8), names from [`NAMES`] (a repeated name is dropped,
/// so the set is valid).
#[derive(Debug, Clone)]
struct ArbSet(ModelBandwidths);

impl Arbitrary for ArbSet {
    fn arbitrary(g: &mut Gen) -> Self {
        let n = if draw(g, 10) == 0 {
            MAX_BANDWIDTHS as u64
        } else {
            draw(g, 4) + 1
        };
        let mut parts: Vec<(Option<&str>, ModelConfig)> = Vec::new();
        for _ in 0..n {
            let name = *g.choose(&NAMES).unwrap();
            let name = name.filter(|name| !parts.iter().any(|(other, _)| *other == Some(name)));
            parts.push((name, ArbConfig::arbitrary(g).0));
        }
        ArbSet(ModelBandwidths::new(parts).expect("distinct names, 1 to 8 bandwidths"))
    }
}

/// A cost valid for every bandwidth of `set`: at most its smallest capacity.
fn gen_set_cost(g: &mut Gen, set: &ModelBandwidths) -> u64 {
    let bound = set.smallest_capacity();
    match draw(g, 4) {
        0 => bound,
        1 => 1,
        _ => draw(g, bound) + 1,
    }
}

/// A step sized by one of the set's bandwidths, so that refills matter in each now and then.
fn gen_set_step(g: &mut Gen, set: &ModelBandwidths) -> Step {
    let position = draw(g, set.len() as u64) as usize;
    gen_step(g, set.config(position).unwrap())
}

/// A bandwidth set and a reachable state under it, with a `now` (the last operation's time).
#[derive(Debug, Clone)]
struct ReachedSet {
    set: ModelBandwidths,
    bucket: ModelSetBucket,
    now: u64,
}

impl Arbitrary for ReachedSet {
    fn arbitrary(g: &mut Gen) -> Self {
        let set = ArbSet::arbitrary(g).0;
        let mut now = gen_start(g);
        let mut bucket = ModelSetBucket::fresh(&set, now);
        for _ in 0..draw(g, 8) {
            now = apply(now, gen_set_step(g, &set));
            let cost = gen_set_cost(g, &set);
            bucket = bucket.decide(&set, now, cost).expect("valid cost").0;
        }
        ReachedSet { set, bucket, now }
    }
}

/// One bandwidth's trace: steps, costs and now and then a reconfiguration.
#[derive(Debug, Clone)]
struct OneTrace {
    config: ModelConfig,
    start: u64,
    ops: Vec<(Step, u64, Option<ModelConfig>)>,
}

impl Arbitrary for OneTrace {
    fn arbitrary(g: &mut Gen) -> Self {
        let config = ArbConfig::arbitrary(g).0;
        let ops = (0..draw(g, 12))
            .map(|_| {
                let step = gen_step(g, &config);
                let cost = match draw(g, 8) {
                    0 => 0,
                    _ => gen_cost(g, &config),
                };
                let new = (draw(g, 5) == 0).then(|| ArbConfig::arbitrary(g).0);
                (step, cost, new)
            })
            .collect();
        OneTrace {
            config,
            start: mixed_u64(g, 1 << 40),
            ops,
        }
    }
}

/// "Every rule above is the one-bandwidth case of this section": the set of one config, driven through any trace
/// (acquires, invalid costs, reconfigurations, peeks), is the single bucket of that config, state for state and
/// decision for decision; its one part is the binding one.
#[test]
fn prop_a_set_of_one_is_the_single_bucket_of_its_config() {
    fn prop(t: OneTrace) -> bool {
        let mut config = t.config;
        let mut single = ModelBucket::fresh(&config, t.start);
        let mut set = ModelSetBucket::fresh(&ModelBandwidths::from(&config), t.start);
        let mut now = t.start;
        for (step, cost, new) in t.ops {
            now = apply(now, step);
            let one = ModelBandwidths::from(&config);
            if let Some(new) = new {
                single = single.reconfigured(&config, &new, now);
                set = set.reconfigured(&one, &ModelBandwidths::from(&new), now);
                config = new;
            } else {
                let peeks: Vec<ModelPeek> = set.peek(&one, now).collect();
                if peeks != [single.peek(&config, now)] {
                    return false;
                }
                match (
                    single.decide(&config, now, cost),
                    set.decide(&one, now, cost),
                ) {
                    (Ok((s, d)), Ok((b, ds))) => {
                        if d.retry_after().is_some() {
                            DENIED.hit();
                        }
                        let same = ds.bandwidths() == [d.clone()]
                            && ds.binding() == &d
                            && ds.retry_after() == d.retry_after()
                            && ds.reset_after() == d.reset_after()
                            && ds.is_allowed() == d.is_allowed();
                        if !same {
                            return false;
                        }
                        (single, set) = (s, b);
                    }
                    (Err(e), Err(f)) if e == f => {}
                    _ => return false,
                }
            }
            if set.tokens() != [single.tokens().clone()]
                || set.last_refill() != single.last_refill()
            {
                return false;
            }
        }
        true
    }
    static DENIED: Coverage = Coverage::new();
    check(prop as fn(OneTrace) -> bool);
    DENIED.at_least(100, "a denial of a set of one");
}

/// Steps 3-5 of a set are the single-bucket rules per bandwidth, tied by "all or none": each bandwidth refilled by
/// its own config; allowed iff each single bucket would allow; then each is exactly its single bucket's charge and
/// decision; otherwise each keeps its refilled balance, reports it with its own `reset_after`, and waits 0 if it
/// covers the cost, else its single bucket's `retry_after`.
#[test]
fn prop_a_set_decides_as_its_bandwidths_each_by_the_single_rules_all_or_none() {
    fn prop(r: ReachedSet, back: bool, dt: u32, cost_seed: u64) -> bool {
        let now = if back {
            r.now.saturating_sub(u64::from(dt))
        } else {
            r.now.saturating_add(u64::from(dt) * 1000)
        };
        let cost = cost_seed % r.set.smallest_capacity() + 1;
        let (after, ds) = r.bucket.decide(&r.set, now, cost).unwrap();
        let singles: Vec<_> = (0..r.set.len())
            .map(|i| {
                let (config, bucket) = (r.set.config(i).unwrap(), r.bucket.bandwidth(i).unwrap());
                let (next, decision) = bucket.decide(config, now, cost).unwrap();
                (
                    bucket.refilled(config, now),
                    next,
                    decision,
                    bucket.peek(config, now),
                )
            })
            .collect();
        let allowed = singles.iter().all(|(_, _, d, _)| d.is_allowed());
        if allowed != ds.is_allowed() || after.last_refill() != now.max(r.bucket.last_refill()) {
            return false;
        }
        if !allowed && singles.iter().any(|(_, _, d, _)| d.is_allowed()) {
            PARTLY_COVERED.hit();
        }
        singles
            .iter()
            .enumerate()
            .all(|(i, (refilled, next, single, peek))| {
                let part = &ds.bandwidths()[i];
                let tokens = &after.tokens()[i];
                if allowed {
                    part == single && tokens == next.tokens()
                } else {
                    let wait = match single {
                        ModelDecision::Allowed { .. } => ModelWait::After(0),
                        denied => denied.retry_after().unwrap(),
                    };
                    tokens == refilled.tokens()
                        && part
                            == &ModelDecision::Denied {
                                remaining: refilled.tokens().clone(),
                                retry_after: wait,
                                reset_after: peek.reset_after,
                            }
                }
            })
    }
    static PARTLY_COVERED: Coverage = Coverage::new();
    check(prop as fn(ReachedSet, bool, u32, u64) -> bool);
    PARTLY_COVERED.at_least(20, "a denial in which some bandwidth covered the cost");
}

/// "every bandwidth covers `cost` from `now + retry_after` on, and one does not 1 ns earlier: the rule of step 5
/// holds unchanged": after a set's denial with `After(w)` the same request is allowed at `now + w` and denied at
/// `now + w - 1`; `Never` exactly when a short bandwidth never refills or the request is still denied at
/// `u64::MAX`.
#[test]
fn prop_a_sets_retry_after_is_the_least_wait_allowed_at_now_plus_w_denied_1_ns_earlier() {
    fn prop(r: ReachedSet, back: u16, cost_seed: u64) -> TestResult {
        let now = r.now.saturating_sub(u64::from(back) * 997);
        let cost = cost_seed % r.set.smallest_capacity() + 1;
        let (after, ds) = r.bucket.decide(&r.set, now, cost).unwrap();
        let Some(retry_after) = ds.retry_after() else {
            return TestResult::discard();
        };
        let allowed_at = |t: u64| after.decide(&r.set, t, cost).unwrap().1.is_allowed();
        let short_frozen = (0..r.set.len()).any(|i| {
            !r.set.config(i).unwrap().refills() && cmp_whole(&after.tokens()[i], cost).is_lt()
        });
        match retry_after {
            ModelWait::After(w) => {
                if r.set.len() > 1 {
                    FINITE.hit();
                }
                TestResult::from_bool(w >= 1 && allowed_at(now + w) && !allowed_at(now + w - 1))
            }
            ModelWait::Never => {
                if !short_frozen {
                    OVERFLOW.hit();
                }
                TestResult::from_bool(short_frozen || !allowed_at(u64::MAX))
            }
        }
    }
    static FINITE: Coverage = Coverage::new();
    static OVERFLOW: Coverage = Coverage::new();
    check(prop as fn(ReachedSet, u16, u64) -> TestResult);
    FINITE.at_least(50, "a finite retry_after of a set of several");
    OVERFLOW.at_least(
        10,
        "a Never beyond u64::MAX with every short bandwidth refilling",
    );
}

/// Reconfiguration by identity: each new bandwidth with an old one of its identity is exactly that old bandwidth's
/// single-bucket reconfiguration (refilled under its old config, converted, clamped: never more than it had), one
/// without starts full, and the one cursor moves to `max(now, last_refill)`.
#[test]
fn prop_reconfigure_continues_each_bandwidth_by_identity_and_never_creates_tokens() {
    fn prop(r: ReachedSet, new: ArbSet, dt: u32) -> bool {
        let new = new.0;
        let now = r.now.saturating_add(u64::from(dt));
        let after = r.bucket.reconfigured(&r.set, &new, now);
        if after.last_refill() != now.max(r.bucket.last_refill())
            || after.tokens().len() != new.len()
        {
            return false;
        }
        (0..new.len()).all(|i| {
            let config = new.config(i).unwrap();
            let tokens = &after.tokens()[i];
            match r.set.position_of(&new.identity(i)) {
                Some(was) => {
                    CONTINUED.hit();
                    let (old, bucket) =
                        (r.set.config(was).unwrap(), r.bucket.bandwidth(was).unwrap());
                    let single = bucket.reconfigured(old, config, now);
                    tokens == single.tokens() && tokens <= bucket.refilled(old, now).tokens()
                }
                None => {
                    STARTED.hit();
                    tokens == &config.capacity_tokens()
                }
            }
        })
    }
    static CONTINUED: Coverage = Coverage::new();
    static STARTED: Coverage = Coverage::new();
    check(prop as fn(ReachedSet, ArbSet, u32) -> bool);
    CONTINUED.at_least(200, "a bandwidth that continues");
    STARTED.at_least(200, "a bandwidth that starts full");
}

/// "No overselling holds per bandwidth: over any `[a, b]`, admitted cost <= `tokens_i` at `a` + `rate_i * (b -
/// a)` for every `i`", over traces of a monotone clock, `tokens_i` at `a` read (peeked) just before the
/// operation at `a`.
#[test]
fn prop_no_bandwidth_of_a_set_is_oversold_over_any_interval() {
    fn prop(r: ReachedSet, gaps: Vec<(u32, u64)>) -> bool {
        let mut bucket = r.bucket;
        let mut now = r.now.max(bucket.last_refill());
        // Per operation: its time, the balances just before it, and the cost it admitted (0 if denied).
        let mut ops: Vec<(u64, Vec<Rational>, u64)> = Vec::new();
        for (gap, cost_seed) in gaps.into_iter().take(16) {
            let Some(next) = now.checked_add(u64::from(gap) * 100_000) else {
                break;
            };
            now = next;
            let cost = cost_seed % r.set.smallest_capacity() + 1;
            let before = bucket.peek(&r.set, now).map(|p| p.remaining).collect();
            let (after, ds) = bucket.decide(&r.set, now, cost).unwrap();
            ops.push((now, before, if ds.is_allowed() { cost } else { 0 }));
            bucket = after;
        }
        for a in 0..ops.len() {
            for b in a..ops.len() {
                // At most 16 costs of at most u64::MAX each: u128 holds the sum.
                let admitted: u128 = ops[a..=b].iter().map(|op| u128::from(op.2)).sum();
                if admitted > 0 && b > a {
                    WINDOW.hit();
                }
                let span = Rational::from(ops[b].0 - ops[a].0);
                for (i, config) in r.set.configs().enumerate() {
                    let bound = &ops[a].1[i] + &span * config.rate_per_ns();
                    if Rational::from(Integer::from(admitted)) > bound {
                        return false;
                    }
                }
            }
        }
        true
    }
    static WINDOW: Coverage = Coverage::new();
    check(prop as fn(ReachedSet, Vec<(u32, u64)>) -> bool);
    WINDOW.at_least(
        100,
        "an interval of several operations that admitted something",
    );
}

/// An op of a keyed trace.
#[derive(Debug, Clone)]
enum Op {
    Acquire {
        key: u64,
        step: Step,
        cost: u64,
        id: Option<u64>,
    },
    Reconfigure {
        key: u64,
        step: Step,
        set: ModelBandwidths,
    },
    Forget(u64),
    Sweep(Step),
}

/// A keyed trace over bandwidth sets (a set of one is the single bucket): a default set, the
/// request-id window and per-key bound, a start time and the ops.
#[derive(Debug, Clone)]
struct Trace {
    default: ModelBandwidths,
    window: u64,
    per_key: usize,
    start: u64,
    ops: Vec<Op>,
}

impl Arbitrary for Trace {
    fn arbitrary(g: &mut Gen) -> Self {
        let default = ArbSet::arbitrary(g).0;
        let window = *g
            .choose(&[0, 1, 1000, 1_000_000_000, 1 << 50, u64::MAX, u64::MAX])
            .unwrap();
        let per_key = *g.choose(&[0, 1, 2, 3, 8, 8]).unwrap();
        let ops = (0..draw(g, 30))
            .map(|_| {
                let key = draw(g, 3);
                let step = gen_set_step(g, &default);
                match draw(g, 10) {
                    0 => Op::Reconfigure {
                        key,
                        step,
                        set: ArbSet::arbitrary(g).0,
                    },
                    1 => Op::Forget(key),
                    // Twice as often as the other ops: a key of several bandwidths is full, and so
                    // swept, less often than a key of one.
                    2 | 3 => Op::Sweep(step),
                    _ => Op::Acquire {
                        key,
                        step,
                        cost: match draw(g, 6) {
                            0 => 0,
                            1 => u64::MAX,
                            _ => gen_set_cost(g, &default),
                        },
                        id: (draw(g, 3) != 0).then(|| draw(g, 3)),
                    },
                }
            })
            .collect();
        Trace {
            default,
            window,
            per_key,
            start: draw(g, 1 << 40),
            ops,
        }
    }
}

/// Over random keyed traces of bandwidth sets (rollbacks, reconfigurations, sweeps, forgets, request
/// ids): a replay changes nothing and returns the whole recorded decision, whose binding part is the
/// outcome's decision; an error changes nothing and names the smallest capacity; every bandwidth of
/// every held key stays in `[0, capacity_i]`; a sweep drops exactly the evictable keys, each with every
/// bandwidth full, and they are gone. (The model also asserts its own invariants after every mutation.)
#[test]
fn prop_keyed_traces_replay_whole_decisions_errors_change_nothing_and_every_bandwidth_stays_in_bounds()
 {
    /// Per key: (key, balances and cursor, request-id records, config version).
    type Snapshot = Vec<(u64, Option<(Vec<Rational>, u64)>, Vec<(u64, u64)>, u64)>;
    fn snapshot(m: &Model) -> Snapshot {
        (0..3)
            .map(|k| {
                (
                    k,
                    m.state_set(k).map(|(t, l)| (t.to_vec(), l)),
                    m.records(k),
                    m.config_version(k),
                )
            })
            .collect()
    }
    /// "Evictable: every bandwidth full at the judgment time", read by peeks.
    fn every_bandwidth_full(m: &Model, k: u64, now: u64) -> bool {
        (m.peek_set(k, now).into_iter())
            .zip(m.bandwidths_of(k).configs())
            .all(|(p, c)| p.remaining == c.capacity_tokens())
    }
    fn prop(t: Trace) -> bool {
        let mut m = Model::new(t.default, t.window, t.per_key);
        let mut first: std::collections::BTreeMap<(u64, u64), ModelDecisions> = Default::default();
        let mut now = t.start;
        for op in &t.ops {
            match op {
                Op::Acquire {
                    key,
                    step,
                    cost,
                    id,
                } => {
                    now = apply(now, *step);
                    let before = snapshot(&m);
                    match m.acquire(*key, now, *cost, *id) {
                        Err(ModelError::InvalidCost { capacity, .. }) => {
                            ERRORS.hit();
                            if snapshot(&m) != before
                                || capacity != m.bandwidths_of(*key).smallest_capacity()
                            {
                                return false;
                            }
                        }
                        Err(_) => return false,
                        Ok(out) => {
                            if &out.decision != out.decisions.binding() {
                                return false;
                            }
                            if out.replayed {
                                REPLAYS.hit();
                                if out.decisions.bandwidths().len() > 1 {
                                    SET_REPLAYS.hit();
                                }
                                let recorded = first.get(&(*key, id.unwrap()));
                                if snapshot(&m) != before || recorded != Some(&out.decisions) {
                                    return false;
                                }
                            } else if let Some(id) = id {
                                first.insert((*key, *id), out.decisions.clone());
                            }
                        }
                    }
                }
                Op::Reconfigure { key, step, set } => {
                    now = apply(now, *step);
                    m.reconfigure(*key, set.clone(), now);
                }
                Op::Forget(key) => {
                    m.forget(*key);
                    first.retain(|(k, _), _| k != key);
                }
                Op::Sweep(step) => {
                    now = apply(now, *step);
                    let evictable: Vec<u64> = (m.keys().into_iter())
                        .filter(|&k| m.is_evictable_at(k, now))
                        .collect();
                    if evictable.iter().any(|&k| !every_bandwidth_full(&m, k, now)) {
                        return false;
                    }
                    let dropped = m.sweep(now);
                    if !dropped.is_empty() {
                        SWEPT.hit();
                    }
                    if dropped != evictable || dropped.iter().any(|k| m.state_set(*k).is_some()) {
                        return false;
                    }
                    first.retain(|(k, _), _| !dropped.contains(k));
                }
            }
            for k in m.keys() {
                let (tokens, _) = m.state_set(k).unwrap();
                let set = m.bandwidths_of(k);
                let in_bounds = tokens.len() == set.len()
                    && (tokens.iter().zip(set.configs()))
                        .all(|(t, c)| t >= &Rational::ZERO && t <= &c.capacity_tokens());
                if !in_bounds {
                    return false;
                }
            }
        }
        true
    }
    static ERRORS: Coverage = Coverage::new();
    static REPLAYS: Coverage = Coverage::new();
    static SET_REPLAYS: Coverage = Coverage::new();
    static SWEPT: Coverage = Coverage::new();
    check(prop as fn(Trace) -> bool);
    ERRORS.at_least(300, "an invalid cost");
    REPLAYS.at_least(25, "a replayed request id");
    SET_REPLAYS.at_least(20, "a replayed decision of several bandwidths");
    SWEPT.at_least(15, "a sweep that dropped a key");
}

/// `holds_pinned` (kept as a count) says whether any key holds an override config, after every mix of the ops
/// that set, keep or drop one: reconfigure pins, forget unpins, acquires, evictions, lost records and sweeps keep
/// the override.
#[test]
fn prop_holds_pinned_is_whether_any_key_is_pinned_after_every_op() {
    fn prop(ops: Vec<(u8, u8)>) -> bool {
        let config = ModelConfig::new(4, 1, 1).expect("valid config");
        let mut model = Model::new(config.clone(), 5_000_000_000, 2);
        for (step, (kind, key)) in ops.into_iter().enumerate() {
            let (key, now) = (u64::from(key % 4), step as u64 * 1_000_000_000);
            match kind % 6 {
                0 => drop(model.reconfigure(key, config.clone(), now)),
                1 => drop(model.forget(key)),
                2 => drop(model.acquire(key, now, 1, Some(step as u64))),
                3 => drop(model.evict(key)),
                4 => drop(model.lose_records(key)),
                _ => drop(model.sweep(now)),
            }
            if model.holds_pinned() != (0..4).any(|key| model.is_pinned(key)) {
                return false;
            }
            if model.holds_pinned() {
                PINNED.hit();
            }
        }
        true
    }
    static PINNED: Coverage = Coverage::new();
    check(prop as fn(Vec<(u8, u8)>) -> bool);
    PINNED.at_least(50, "a pinned key");
}
