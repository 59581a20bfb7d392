//! Example-based tests of docs/semantics.md, "Several bandwidths per key", one rule (or one corner of a rule) per
//! test. Every expected value is worked out by hand in the comment next to it, independently of the model's code.

use bucketproof_model::{
    ConfigError, Integer, MAX_BANDWIDTHS, Model, ModelBandwidths, ModelConfig, ModelDecision,
    ModelDecisions, ModelError, ModelIdentity, ModelWait, NameRule, Rational,
};

const S: u64 = 1_000_000_000;

fn cfg(capacity: u64, p: u64, q: u64) -> ModelConfig {
    ModelConfig::new(capacity, p, q).expect("valid config in test")
}

fn set<'a>(parts: impl IntoIterator<Item = (Option<&'a str>, ModelConfig)>) -> ModelBandwidths {
    ModelBandwidths::new(parts).expect("valid set in test")
}

fn r(n: i128, d: i128) -> Rational {
    Rational::from_parts_signed(Integer::from(n), Integer::from(d))
}

fn int(n: u64) -> Rational {
    Rational::from(n)
}

/// `fast`: 5 tokens at 5/s (empty to full in 1 s); `slow`: 5 tokens at 1/s (5 s).
fn fast_and_slow() -> ModelBandwidths {
    set([(Some("fast"), cfg(5, 5, 1)), (Some("slow"), cfg(5, 1, 1))])
}

fn decisions(model: &mut Model, key: u64, now: u64, cost: u64) -> ModelDecisions {
    model
        .acquire(key, now, cost, None)
        .expect("valid cost")
        .decisions
}

fn balances(model: &Model, key: u64) -> Option<(Vec<Rational>, u64)> {
    model
        .state_set(key)
        .map(|(tokens, last)| (tokens.to_vec(), last))
}

fn waits(d: &ModelDecisions) -> Vec<Option<ModelWait>> {
    d.bandwidths()
        .iter()
        .map(ModelDecision::retry_after)
        .collect()
}

#[test]
fn a_set_holds_one_to_eight_bandwidths() {
    let one = || (None, cfg(1, 1, 1));
    assert_eq!(ModelBandwidths::new([]), Err(ConfigError::NoBandwidths));
    assert_eq!(ModelBandwidths::new(vec![one(); 8]).map(|s| s.len()), Ok(8));
    assert_eq!(
        ModelBandwidths::new(vec![one(); MAX_BANDWIDTHS + 1]),
        Err(ConfigError::TooManyBandwidths(9))
    );
    // A set error is a config error like any other.
    assert!(matches!(
        ModelError::from(ConfigError::NoBandwidths),
        ModelError::InvalidConfig(ConfigError::NoBandwidths)
    ));
}

/// "a lowercase letter or `*`, then up to 31 of lowercase letters, digits, `_`, `-`, `.`, `*`".
#[test]
fn a_name_is_a_structured_field_key_of_at_most_32_bytes() {
    let named =
        |name: &str| ModelBandwidths::new([(None, cfg(1, 1, 1)), (Some(name), cfg(1, 1, 1))]);
    for good in [
        "a",
        "*",
        "*a",
        "burst",
        "daily.quota",
        "a-1_b.c*",
        &"x".repeat(32),
    ] {
        assert!(named(good).is_ok(), "{good:?}");
    }
    let rule = |name: &str| match named(name) {
        Err(ConfigError::BandwidthName { position: 1, rule }) => rule,
        other => panic!("{name:?}: {other:?}"),
    };
    assert_eq!(rule(""), NameRule::Empty);
    assert_eq!(rule("Burst"), NameRule::First);
    assert_eq!(rule("9a"), NameRule::First);
    assert_eq!(rule("-a"), NameRule::First);
    assert_eq!(rule("bUrst"), NameRule::Later(1));
    assert_eq!(rule("a b"), NameRule::Later(1));
    assert_eq!(rule("ab/c"), NameRule::Later(2));
    assert_eq!(rule("caf\u{e9}"), NameRule::Later(3));
    assert_eq!(rule(&"x".repeat(33)), NameRule::TooLong(33));
}

#[test]
fn names_in_one_set_are_distinct_and_unnamed_bandwidths_are_told_apart_by_position() {
    let twins = ModelBandwidths::new([
        (Some("a"), cfg(1, 1, 1)),
        (None, cfg(2, 1, 1)),
        (Some("a"), cfg(3, 1, 1)),
    ]);
    assert_eq!(
        twins,
        Err(ConfigError::DuplicateBandwidthName {
            first: 0,
            second: 2
        })
    );
    // Two unnamed bandwidths are two identities, `#0` and `#1`.
    let s = set([
        (None, cfg(1, 1, 1)),
        (None, cfg(1, 1, 1)),
        (Some("a"), cfg(1, 1, 1)),
    ]);
    let ids: Vec<ModelIdentity> = (0..3).map(|i| s.identity(i)).collect();
    assert_eq!(
        ids,
        [
            ModelIdentity::Position(0),
            ModelIdentity::Position(1),
            ModelIdentity::Named("a".into())
        ]
    );
    assert_eq!(ids[1].to_string(), "#1");
    assert_eq!(ids[2].to_string(), "a");
    assert_eq!(s.position_of(&ModelIdentity::Named("a".into())), Some(2));
    assert_eq!(s.position_of(&ModelIdentity::Position(2)), None);
}

#[test]
fn a_config_is_the_set_of_one_unnamed_bandwidth_and_the_cost_bound_is_the_smallest_capacity() {
    let one = ModelBandwidths::from(cfg(7, 2, 1));
    assert_eq!(one.len(), 1);
    assert_eq!(one.single(), Some(&cfg(7, 2, 1)));
    assert_eq!(one.identity(0), ModelIdentity::Position(0));
    assert_eq!(one.smallest_capacity(), 7);
    let named = set([(Some("a"), cfg(7, 2, 1))]);
    assert_eq!(
        named.single(),
        None,
        "a named bandwidth is not a plain config"
    );
    let s = set([
        (None, cfg(10, 1, 1)),
        (None, cfg(3, 1, 1)),
        (None, cfg(8, 1, 1)),
    ]);
    assert_eq!(s.smallest_capacity(), 3);
    assert_eq!(s.first(), &cfg(10, 1, 1));
}

/// "`cost == 0` or `cost` above the *smallest* capacity -> `Err(InvalidCost)`; nothing changes."
#[test]
fn a_cost_above_the_smallest_capacity_is_an_error_that_changes_nothing() {
    let s = set([(None, cfg(10, 1, 1)), (Some("small"), cfg(3, 1, 1))]);
    let mut m = Model::new(s, 10 * S, 4);
    for cost in [0, 4, 10] {
        assert_eq!(
            m.acquire(0, 0, cost, Some(1)),
            Err(ModelError::InvalidCost { cost, capacity: 3 })
        );
    }
    assert_eq!(m.state_set(0), None);
    assert!(m.records(0).is_empty());
    // The smallest capacity itself is valid: 3 from both.
    let d = decisions(&mut m, 0, 0, 3);
    assert!(d.is_allowed());
    assert_eq!(balances(&m, 0), Some((vec![int(7), int(0)], 0)));
}

/// "State per key: one `tokens_i` per bandwidth and one `last_refill`"; "Step 3 refills each bandwidth by its own
/// rate and capacity to `t`".
#[test]
fn a_fresh_key_is_full_in_every_bandwidth_and_each_refills_by_its_own_rate_and_capacity() {
    let mut m = Model::new(fast_and_slow(), 0, 0);
    let p = m.peek_set(0, 123);
    assert_eq!(
        p.iter().map(|p| p.remaining.clone()).collect::<Vec<_>>(),
        [int(5), int(5)]
    );
    assert!(p.iter().all(|p| p.reset_after == ModelWait::After(0)));
    assert_eq!(m.state_set(0), None, "a peek creates nothing");
    let first = m.acquire(0, 0, 5, None).unwrap();
    assert!(first.created && first.decisions.is_allowed());
    assert_eq!(balances(&m, 0), Some((vec![int(0), int(0)], 0)));
    // At 0.4 s: fast 0 + 0.4 * 5 = 2, slow 0 + 0.4 * 1 = 2/5: cost 1 is short in slow, so denied, and the refill
    // of both is written back at one cursor.
    assert!(!decisions(&mut m, 0, 2 * S / 5, 1).is_allowed());
    assert_eq!(balances(&m, 0), Some((vec![int(2), r(2, 5)], 2 * S / 5)));
    // At 2 s: fast 2 + 1.6 * 5 = 10, clamped to its own capacity 5; slow 2/5 + 1.6 = 2. Cost 2 from both.
    assert!(decisions(&mut m, 0, 2 * S, 2).is_allowed());
    assert_eq!(balances(&m, 0), Some((vec![int(3), int(0)], 2 * S)));
}

/// "allowed iff *every* `tokens_i >= cost`; then each is charged `cost`. Otherwise denied and no bandwidth is
/// charged, not even those that cover." Per bandwidth: `remaining_i`, `reset_after_i`; `wait_i = 0` if it covers.
#[test]
fn a_denial_charges_no_bandwidth_not_even_those_that_cover() {
    let mut m = Model::new(fast_and_slow(), 0, 0);
    let first = decisions(&mut m, 0, 0, 5);
    // Both emptied: fast full again after 5 / 5 = 1 s, slow after 5 / 1 = 5 s; the whole reset is the larger.
    assert_eq!(
        first.bandwidths(),
        [
            ModelDecision::Allowed {
                remaining: int(0),
                reset_after: ModelWait::After(S)
            },
            ModelDecision::Allowed {
                remaining: int(0),
                reset_after: ModelWait::After(5 * S)
            },
        ]
    );
    assert_eq!(first.reset_after(), ModelWait::After(5 * S));
    assert_eq!(first.retry_after(), None);
    // At 1 s: fast 5 (covers 2), slow 1 (short by 1, 1 s at 1/s). Denied; fast keeps its 5.
    let d = decisions(&mut m, 0, S, 2);
    assert_eq!(
        d.bandwidths(),
        [
            ModelDecision::Denied {
                remaining: int(5),
                retry_after: ModelWait::After(0),
                reset_after: ModelWait::After(0),
            },
            ModelDecision::Denied {
                remaining: int(1),
                retry_after: ModelWait::After(S),
                reset_after: ModelWait::After(4 * S),
            },
        ]
    );
    assert!(!d.is_allowed());
    assert_eq!(d.retry_after(), Some(ModelWait::After(S)));
    assert_eq!(d.reset_after(), ModelWait::After(4 * S));
    assert_eq!(balances(&m, 0), Some((vec![int(5), int(1)], S)));
    // Tight: at 2 s - 1 ns slow holds 2 - 1e-9, at 2 s it holds 2 and both are charged.
    let mut early = m.clone();
    assert!(!decisions(&mut early, 0, 2 * S - 1, 2).is_allowed());
    assert!(decisions(&mut m, 0, 2 * S, 2).is_allowed());
    assert_eq!(balances(&m, 0), Some((vec![int(3), int(0)], 2 * S)));
}

/// "`retry_after = max_i wait_i`": every bandwidth covers from `now + retry_after` on, one does not 1 ns earlier.
#[test]
fn retry_after_is_the_largest_wait_of_the_bandwidths_that_do_not_cover() {
    // a: 2 at 1/s, b: 2 at 1/4 per s. Both emptied at 0; cost 1 waits 1 s in a and 4 s in b.
    let s = set([(Some("a"), cfg(2, 1, 1)), (Some("b"), cfg(2, 1, 4))]);
    let mut m = Model::new(s, 0, 0);
    assert!(decisions(&mut m, 0, 0, 2).is_allowed());
    let d = decisions(&mut m, 0, 0, 1);
    assert_eq!(
        waits(&d),
        [Some(ModelWait::After(S)), Some(ModelWait::After(4 * S))]
    );
    assert_eq!(d.retry_after(), Some(ModelWait::After(4 * S)));
    // At 1 s a covers and b does not: still denied, nothing charged.
    let at_one = decisions(&mut m.clone(), 0, S, 1);
    assert_eq!(
        waits(&at_one),
        [Some(ModelWait::After(0)), Some(ModelWait::After(3 * S))]
    );
    assert!(!decisions(&mut m.clone(), 0, 4 * S - 1, 1).is_allowed());
    let d = decisions(&mut m, 0, 4 * S, 1);
    assert!(d.is_allowed());
    // a refilled to its capacity 2 (4 s at 1/s clamps), b to 1; both charged 1.
    assert_eq!(balances(&m, 0), Some((vec![int(1), int(0)], 4 * S)));
}

/// Waits count from `now` during a rollback: `(t - now) + ceil(...)` per bandwidth, `0` for one that covers.
#[test]
fn under_a_rollback_each_wait_counts_from_now_and_a_covering_bandwidth_still_waits_0() {
    let s = set([(Some("a"), cfg(2, 1, 1)), (Some("b"), cfg(4, 1, 1))]);
    let mut m = Model::new(s, 0, 0);
    assert!(decisions(&mut m, 0, 10 * S, 2).is_allowed()); // a 0, b 2, at 10 s
    // now = 7 s, t = 10 s: a is short by 2: (10 - 7) s + 2 s = 5 s; b covers: 0.
    let d = decisions(&mut m, 0, 7 * S, 2);
    assert_eq!(
        waits(&d),
        [Some(ModelWait::After(5 * S)), Some(ModelWait::After(0))]
    );
    assert_eq!(d.retry_after(), Some(ModelWait::After(5 * S)));
    assert_eq!(balances(&m, 0), Some((vec![int(0), int(2)], 10 * S)));
}

/// "`Never` if any is `Never`, and `Never` when `now + value` would pass `u64::MAX`."
#[test]
fn retry_after_is_never_if_any_wait_is_never_or_the_largest_passes_the_end_of_the_clock() {
    // `frozen` never refills: short in it, the request can never be allowed, however soon `a` covers.
    let s = set([(Some("a"), cfg(2, 1, 1)), (Some("frozen"), cfg(3, 0, 1))]);
    let mut m = Model::new(s, 0, 0);
    assert!(decisions(&mut m, 0, 0, 2).is_allowed()); // a 0, frozen 1
    let d = decisions(&mut m, 0, 0, 2);
    assert_eq!(
        waits(&d),
        [Some(ModelWait::After(2 * S)), Some(ModelWait::Never)]
    );
    assert_eq!(d.retry_after(), Some(ModelWait::Never));
    assert_eq!(d.reset_after(), ModelWait::Never);
    // Near the end of the clock: a wait of 1 s lands exactly on u64::MAX and is kept; 2 s would pass it.
    let end = u64::MAX - S;
    let s = set([(Some("a"), cfg(1, 1, 1)), (Some("b"), cfg(1, 1, 2))]);
    let mut m = Model::new(s.clone(), 0, 0);
    assert!(decisions(&mut m, 0, end, 1).is_allowed());
    let d = decisions(&mut m, 0, end, 1);
    assert_eq!(
        waits(&d),
        [Some(ModelWait::After(S)), Some(ModelWait::Never)]
    );
    assert_eq!(d.retry_after(), Some(ModelWait::Never));
    let s = set([(Some("a"), cfg(1, 1, 1)), (Some("b"), cfg(1, 1, 1))]);
    let mut m = Model::new(s, 0, 0);
    assert!(decisions(&mut m, 0, end, 1).is_allowed());
    assert_eq!(
        decisions(&mut m, 0, end, 1).retry_after(),
        Some(ModelWait::After(S))
    );
}

/// The binding part: for a denial the largest wait (`Never` largest), for an allow the fewest whole tokens left;
/// the first of equals.
#[test]
fn the_binding_part_is_the_largest_wait_or_the_fewest_whole_tokens_and_the_first_of_equals() {
    let is_part = |d: &ModelDecisions, i: usize| std::ptr::eq(d.binding(), &d.bandwidths()[i]);
    let emptied = |s: ModelBandwidths| {
        let mut m = Model::new(s, 0, 0);
        assert!(decisions(&mut m, 0, 0, 3).is_allowed());
        m
    };
    // Allowed, all equal: the first.
    let m = emptied(set([
        (None, cfg(3, 1, 1)),
        (None, cfg(3, 1, 1)),
        (None, cfg(3, 1, 1)),
    ]));
    assert!(is_part(&decisions(&mut m.clone(), 0, 2 * S, 1), 0));
    // 3 tokens at 1/s, 1/2 per s and 1/5 per s, emptied at 0.
    let m = emptied(set([
        (None, cfg(3, 1, 1)),
        (None, cfg(3, 1, 2)),
        (None, cfg(3, 1, 5)),
    ]));
    // Allowed at 5 s: 3 (clamped), 2.5, 1; cost 1 leaves 2, 1.5, 0: the third.
    assert!(is_part(&decisions(&mut m.clone(), 0, 5 * S, 1), 2));
    // Denied at 4 s: 3, 2, 0.8; cost 3 waits 0, (3 - 2) * 2 s = 2 s, (3 - 0.8) * 5 s = 11 s: the third.
    let d = decisions(&mut m.clone(), 0, 4 * S, 3);
    assert_eq!(
        waits(&d),
        [
            Some(ModelWait::After(0)),
            Some(ModelWait::After(2 * S)),
            Some(ModelWait::After(11 * S))
        ]
    );
    assert!(is_part(&d, 2));
    // *Whole* tokens: 1/2 and 2/5 per s, emptied at 0; at 5 s: 2.5 and 2, cost 1 leaves 1.5 and 1. Both are 1
    // whole token: the first, though the second holds less.
    let m = emptied(set([(None, cfg(3, 1, 2)), (None, cfg(3, 2, 5))]));
    let d = decisions(&mut m.clone(), 0, 5 * S, 1);
    assert_eq!(d.bandwidths()[1].remaining(), &int(1));
    assert!(is_part(&d, 0));
    // Denied with equal waits: the first; `Never` is the largest wait.
    let m = emptied(set([(None, cfg(3, 1, 1)), (None, cfg(3, 1, 1))]));
    assert!(is_part(&decisions(&mut m.clone(), 0, 0, 1), 0));
    let m = emptied(set([
        (None, cfg(3, 1, 1)),
        (None, cfg(3, 0, 1)),
        (None, cfg(3, 0, 1)),
    ]));
    assert!(is_part(&decisions(&mut m.clone(), 0, 0, 1), 1));
}

/// `Outcome::decision` is the binding part, so a caller asking for one decision sees the whole retry_after.
#[test]
fn the_outcomes_single_decision_is_the_binding_part() {
    let mut m = Model::new(fast_and_slow(), 0, 0);
    m.acquire(0, 0, 5, None).unwrap();
    let out = m.acquire(0, S, 2, None).unwrap();
    assert_eq!(&out.decision, out.decisions.binding());
    assert_eq!(out.decision.retry_after(), out.decisions.retry_after());
    assert_eq!(out.decision.remaining(), &int(1), "slow binds");
}

/// "A request-id record holds the whole decision (every bandwidth's part); a replay returns it unchanged."
#[test]
fn a_replay_returns_the_whole_recorded_decision_and_charges_nothing() {
    let mut m = Model::new(fast_and_slow(), 10 * S, 4);
    m.acquire(0, 0, 5, Some(1)).unwrap();
    let denied = m.acquire(0, S, 2, Some(2)).unwrap();
    assert!(!denied.replayed && !denied.decisions.is_allowed());
    let state = balances(&m, 0);
    // At 3 s both bandwidths would cover 2 (fast 5, slow 3); the replay still returns the denial, whole.
    let again = m.acquire(0, 3 * S, 2, Some(2)).unwrap();
    assert!(again.replayed);
    assert_eq!(again.decisions, denied.decisions);
    assert_eq!(again.decision, denied.decision);
    assert_eq!(balances(&m, 0), state, "nothing refilled, nothing charged");
    let allowed = m.acquire(0, 3 * S, 2, Some(1)).unwrap();
    assert!(allowed.replayed && allowed.decisions.bandwidths().len() == 2);
    assert_eq!(allowed.decisions.bandwidths()[1].remaining(), &int(0));
}

/// "peek reports every bandwidth's `remaining_i` and `reset_after_i`"; `peek` alone answers with the bandwidth
/// with the fewest whole tokens, the first of equals.
#[test]
fn peek_reports_every_bandwidth_and_its_single_answer_is_the_fewest_whole_tokens() {
    let mut m = Model::new(fast_and_slow(), 0, 0);
    m.acquire(0, 0, 5, None).unwrap();
    // At 0.5 s: fast 2.5 (full in 0.5 s), slow 0.5 (full in 4.5 s).
    let p = m.peek_set(0, S / 2);
    assert_eq!(
        (p[0].remaining.clone(), p[0].reset_after),
        (r(5, 2), ModelWait::After(S / 2))
    );
    assert_eq!(
        (p[1].remaining.clone(), p[1].reset_after),
        (r(1, 2), ModelWait::After(9 * S / 2))
    );
    assert_eq!(m.peek(0, S / 2), p[1]);
    // At 0.1 s: fast 0.5, slow 0.1: both 0 whole, the first answers.
    assert_eq!(m.peek(0, S / 10).remaining, r(1, 2));
    // Read-only.
    assert_eq!(balances(&m, 0), Some((vec![int(0), int(0)], 0)));
}

/// "reconfigure to a new set: refill every old bandwidth to `t` under the old set. Each new bandwidth continues the
/// old bandwidth with the same identity, converted and clamped ...; a new bandwidth with no old one of its identity
/// starts full ..., and an old bandwidth with no new one of its identity is dropped."
#[test]
fn reconfigure_matches_bandwidths_by_identity_not_by_position() {
    let old = set([(Some("burst"), cfg(4, 2, 1)), (None, cfg(10, 1, 1))]);
    let mut m = Model::new(old, 0, 0);
    m.acquire(0, 0, 4, None).unwrap(); // burst 0, #1 6
    let new = set([
        (None, cfg(8, 1, 3)),
        (Some("burst"), cfg(3, 1, 1)),
        (Some("extra"), cfg(5, 1, 1)),
    ]);
    // At 1 s under the old set: burst 0 + 2 = 2, #1 6 + 1 = 7.
    // New #0: the old #0 is named, so no old bandwidth is `#0`: full, 8.
    // New burst continues the old burst: 2, on the grid of 1/s, under capacity 3: 2.
    // New extra: full, 5. The old #1 (7 tokens) has no new `#1` (position 1 is named): dropped.
    assert_eq!(m.reconfigure(0, new.clone(), S), 1);
    assert_eq!(balances(&m, 0), Some((vec![int(8), int(2), int(5)], S)));
    assert_eq!(m.bandwidths_of(0), &new);
    // The same set again: version 2, whatever changed; each bandwidth continues itself (1 s more refill:
    // #0 8 (full), burst 2 + 1 = 3, extra 5).
    assert_eq!(m.reconfigure(0, new, 2 * S), 2);
    assert_eq!(balances(&m, 0), Some((vec![int(8), int(3), int(5)], 2 * S)));
}

/// A continuing bandwidth is converted to its new grid (rounding down) and clamped to its new capacity: "Neither
/// creates tokens in a bandwidth that continues."
#[test]
fn reconfigure_converts_and_clamps_each_continuing_bandwidth_and_never_creates_tokens() {
    // a: 3 at 1/3 per s (unit 1/(3e9)); b: 5 at 1/s (unit 1e-9).
    let old = set([(Some("a"), cfg(3, 1, 3)), (Some("b"), cfg(5, 1, 1))]);
    let mut m = Model::new(old, 0, 0);
    m.acquire(0, 0, 1, None).unwrap(); // a 2, b 4
    // At 1 ns: a 2 + 1/(3e9), b 4 + 1e-9. New order b, a.
    // b: capacity 2, 1/s: 4 + 1e-9 clamped to 2.
    // a: 1/2 per s, unit 1/(2e9): floor((2 + 1/(3e9)) * 2e9) / 2e9 = floor(4e9 + 2/3) / 2e9 = 2.
    let new = set([(Some("b"), cfg(2, 1, 1)), (Some("a"), cfg(3, 1, 2))]);
    m.reconfigure(0, new, 1);
    assert_eq!(balances(&m, 0), Some((vec![int(2), int(2)], 1)));
    // Raising a capacity adds nothing: a to capacity 9 keeps its 2 + 1 ns of refill at 1/2 per s, converted.
    let wider = set([(Some("b"), cfg(2, 1, 1)), (Some("a"), cfg(9, 1, 2))]);
    m.reconfigure(0, wider, 2);
    assert_eq!(
        balances(&m, 0),
        Some((vec![int(2), int(2) + r(1, 2_000_000_000)], 2))
    );
}

/// A set and a single config convert both ways by the same rule: a config is the set of one unnamed `#0`.
#[test]
fn reconfigure_between_a_config_and_a_set_follows_position_zero() {
    let mut m = Model::new(cfg(10, 1, 1), 0, 0);
    m.acquire(0, 0, 4, None).unwrap(); // 6
    // To a set: `#0` continues (6, clamped to 5); `day` starts full.
    let s = set([(None, cfg(5, 1, 1)), (Some("day"), cfg(100, 1, 1000))]);
    m.reconfigure(0, s, 0);
    assert_eq!(balances(&m, 0), Some((vec![int(5), int(100)], 0)));
    m.acquire(0, 0, 5, None).unwrap(); // 0, 95
    // Back to one config: `#0` continues (0 + 2 s at 1/s = 2), `day` is dropped.
    m.reconfigure(0, cfg(10, 1, 1), 2 * S);
    assert_eq!(m.state(0), Some((&int(2), 2 * S)));
    assert_eq!(m.state_set(0).map(|(t, _)| t.len()), Some(1));
}

/// "Evictable: every bandwidth full at the judgment time."
#[test]
fn a_key_is_evictable_only_when_every_bandwidth_is_full() {
    let mut m = Model::new(fast_and_slow(), 0, 0);
    m.acquire(0, 0, 5, None).unwrap();
    // At 1 s fast is full again, slow holds 1 of 5.
    assert!(!m.is_evictable_at(0, S));
    assert!(m.sweep(S).is_empty());
    assert!(!m.is_evictable_at(0, 5 * S - 1));
    assert!(m.is_evictable_at(0, 5 * S));
    assert_eq!(m.sweep(5 * S), vec![0]);
    assert_eq!(m.state_set(0), None);
}

/// A key of one bandwidth keeps today's answers through `state`, `config_of` and `peek`.
#[test]
fn the_single_config_views_read_the_first_bandwidth() {
    let mut m = Model::new(fast_and_slow(), 0, 0);
    m.acquire(0, 0, 5, None).unwrap();
    assert_eq!(m.state(0), Some((&int(0), 0)));
    assert_eq!(m.config_of(0), &cfg(5, 5, 1));
    assert_eq!(m.default_config(), &cfg(5, 5, 1));
    assert_eq!(m.default_bandwidths(), &fast_and_slow());
}
