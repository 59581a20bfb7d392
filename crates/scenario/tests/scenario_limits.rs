//! The caps on work and the key bound: a scenario that asks for more than the harness will do, or
//! that pins more keys than its bound holds, is refused before anything runs, with the reason.

use std::path::Path;

use bucketproof_scenario::{MAX_OPS_PER_SEED, MAX_SEEDS, Scenario, ScenarioError};

/// A valid scenario with `top` added to its top-level keys and `tables` after `[setup]`.
fn text(top: &str, tables: &str) -> String {
    format!(
        "length = 100\nreach = [\"allowed\"]\n{top}\n[setup]\ncapacity = 2\nrate = \"1/s\"\n{tables}"
    )
}

fn parse(text: &str) -> Result<Scenario, ScenarioError> {
    Scenario::parse(text, Path::new("scenarios/limits.toml"))
}

fn refused(text: &str) -> String {
    match parse(text) {
        Ok(_) => panic!("accepted: {}", text.lines().next().unwrap_or_default()),
        Err(error) => error.to_string(),
    }
}

/// The error of a request that must be refused; the value it would have returned is not printed
/// (a seed list at the cap is long).
fn refusal<T>(result: Result<T, ScenarioError>, what: &str) -> String {
    match result {
        Ok(_) => panic!("{what} was accepted"),
        Err(error) => error.to_string(),
    }
}

#[test]
fn a_length_above_the_cap_is_refused_at_its_line() {
    let error = refused(&text("", "").replace("length = 100", "length = 1000000000000000"));
    assert!(
        error.starts_with("scenarios/limits.toml:1:10: length:"),
        "{error}"
    );
    assert!(error.contains(&MAX_OPS_PER_SEED.to_string()), "{error}");
    let at_cap = format!("length = {MAX_OPS_PER_SEED}");
    assert_eq!(
        parse(&text("", "").replace("length = 100", &at_cap))
            .unwrap()
            .total_ops(),
        MAX_OPS_PER_SEED
    );
}

#[test]
fn tier_setup_counts_toward_the_cap() {
    let length = format!("length = {}", MAX_OPS_PER_SEED - 3);
    let tiers = "max_keys = 8\n[[tiers]]\nkeys = [0, 3]\ncapacity = 1\nrate = \"1/s\"\n";
    let error = refused(&text("", tiers).replace("length = 100", &length));
    assert!(error.contains("with 4 of tier setup"), "{error}");
}

#[test]
fn scaling_refuses_zero_and_totals_above_the_cap() {
    let scenario = parse(&text(
        "",
        "max_keys = 8\n[[tiers]]\nkeys = [0, 1]\ncapacity = 1\nrate = \"1/s\"\n",
    ))
    .unwrap();
    let doubled = scenario.scaled(2).unwrap();
    assert_eq!(doubled.length, 200);
    assert_eq!(doubled.total_ops(), 202, "the tier setup is not scaled");
    let error = refusal(scenario.scaled(0), "scale 0");
    assert!(
        error.starts_with("scenario limits: a scale of 0"),
        "{error}"
    );
    for scale in [1_000_000_000, u64::MAX] {
        let error = refusal(scenario.scaled(scale), &format!("scale {scale}"));
        assert!(
            error.contains(&format!("above the cap of {MAX_OPS_PER_SEED}")),
            "{error}"
        );
    }
    let largest = (MAX_OPS_PER_SEED - 2) / 100;
    assert!(scenario.scaled(largest).is_ok());
    assert!(scenario.scaled(largest + 1).is_err());
}

#[test]
fn extra_seeds_continue_after_the_declared_ones() {
    let scenario = parse(&text("seeds = [5, 2]", "")).unwrap();
    assert_eq!(scenario.seeds_to_run(Some(1)).unwrap(), vec![5]);
    assert_eq!(scenario.seeds_to_run(Some(4)).unwrap(), vec![5, 2, 6, 7]);
    assert_eq!(scenario.seeds_to_run(None).unwrap(), vec![5, 2]);
    // Past u64::MAX the continuation wraps and skips the declared seeds.
    // (TOML integers stop at i64::MAX, so only a program can declare u64::MAX.)
    let mut top = scenario.clone();
    top.seeds = vec![u64::MAX, 1];
    assert_eq!(top.seeds_to_run(Some(4)).unwrap(), vec![u64::MAX, 1, 0, 2]);
}

#[test]
fn seed_counts_are_capped_and_the_largest_allowed_is_built_at_once() {
    let scenario = parse(&text("seeds = [3, 1]", "")).unwrap();
    let seeds = scenario.seeds_to_run(Some(MAX_SEEDS)).unwrap();
    assert_eq!(seeds.len(), MAX_SEEDS);
    let mut distinct = seeds.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), MAX_SEEDS);
    let error = scenario
        .seeds_to_run(Some(MAX_SEEDS + 1))
        .unwrap_err()
        .to_string();
    assert!(
        error.contains(&format!("above the cap of {MAX_SEEDS}")),
        "{error}"
    );
    let error = scenario
        .seeds_to_run(Some(1_000_000_000))
        .unwrap_err()
        .to_string();
    assert!(
        error.starts_with("scenario limits: 1000000000 seeds"),
        "{error}"
    );
    refusal(scenario.seeds_to_run(Some(0)), "0 seeds");
}

#[test]
fn declared_seeds_are_distinct_and_capped() {
    let error = refused(&text("seeds = [4, 7, 4]", ""));
    assert!(error.starts_with("scenarios/limits.toml:3:"), "{error}");
    assert!(
        error.contains("seeds[2]: seed 4 is already seeds[0]"),
        "{error}"
    );
    let many: Vec<String> = (0..=MAX_SEEDS as u64).map(|s| s.to_string()).collect();
    let error = refused(&text(&format!("seeds = [{}]", many.join(", ")), ""));
    assert!(
        error.contains(&format!("above the cap of {MAX_SEEDS}")),
        "{error}"
    );
}

#[test]
fn tiers_that_pin_more_keys_than_the_bound_are_a_scenario_error() {
    // A bound of 8 and tiers of these key ranges.
    let with_tiers = |ranges: &[(u64, u64)]| {
        let tiers: String = ranges
            .iter()
            .map(|(first, last)| {
                format!("[[tiers]]\nkeys = [{first}, {last}]\ncapacity = 5\nrate = \"1/s\"\n")
            })
            .collect();
        text("", &format!("max_keys = 8\n{tiers}"))
    };
    // Exactly the bound fits, in one tier, in two, or in two that overlap (a key counts once).
    for fits in [&[(0, 7)][..], &[(0, 3), (10, 13)], &[(0, 5), (3, 7)]] {
        assert!(parse(&with_tiers(fits)).is_ok(), "{fits:?}");
    }
    // One more does not: the message names the tier that crossed the bound, and the bound.
    let error = refused(&with_tiers(&[(0, 8)]));
    assert!(
        error.starts_with("scenarios/limits.toml:9:8: tiers[0].keys:"),
        "{error}"
    );
    for crosses in [&[(0, 8)][..], &[(0, 3), (20, 24)], &[(0, 5), (3, 8)]] {
        let error = refused(&with_tiers(crosses));
        let tier = format!("tiers[{}].keys", crosses.len() - 1);
        assert!(
            error.contains(&tier)
                && error.contains("pin 9 keys")
                && error.contains("max_keys is 8"),
            "{crosses:?}: {error}"
        );
    }
}
