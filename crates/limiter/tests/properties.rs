//! Quickcheck properties of the pure pieces: rates, refill, waits, reconfiguration. Each property's name
//! states it; each counts that its interesting case was reached, so it cannot pass vacuously.

use bucketproof_limiter::internal::{Attempt, transition};
use bucketproof_limiter::{BucketState, Config, MAX_RATE_DENOMINATOR, Rate, Wait};
use quickcheck::{QuickCheck, TestResult};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// Counts cases that reached the interesting part of a property (not discarded, not trivial).
static RETRY_CASES: AtomicUsize = AtomicUsize::new(0);
static ROLLBACK_RETRY_CASES: AtomicUsize = AtomicUsize::new(0);
static LOSSY_RECONFIGURE_CASES: AtomicUsize = AtomicUsize::new(0);

const SECOND: u64 = bucketproof_limiter::NANOS_PER_SECOND;

fn rate_from(numer: u64, denom: u64) -> Option<Rate> {
    Rate::new(numer, denom % MAX_RATE_DENOMINATOR + 1).ok()
}

fn config_from(capacity: u64, numer: u64, denom: u64) -> Option<Config> {
    Config::new(
        capacity % 1_000 + 1,
        rate_from(numer % 10_000_000, denom % 10_000)?,
    )
    .ok()
}

/// A state reachable from `config`: some balance on the grid at or below capacity.
fn state_from(config: &Config, balance_seed: u128, last: u64) -> BucketState {
    BucketState::new(config, balance_seed % (config.capacity_units() + 1), last)
        .expect("at or below capacity")
}

/// Property: a rate printed and parsed back is the same rate, and `k*p / k*q` reduces to `p/q`.
#[test]
fn rate_display_and_parse_round_trip_and_normalize() {
    fn property(numer: u64, denom: u64, factor: u8) -> TestResult {
        let Some(rate) = rate_from(numer, denom) else {
            return TestResult::discard();
        };
        let parsed: Rate = rate.to_string().parse().unwrap();
        let k = factor as u64 % 7 + 1;
        let scaled = rate
            .numer()
            .checked_mul(k)
            .and_then(|p| Rate::new(p, rate.denom() * k).ok());
        TestResult::from_bool(parsed == rate && scaled.is_none_or(|s| s == rate))
    }
    QuickCheck::new()
        .tests(2_000)
        .quickcheck(property as fn(u64, u64, u8) -> TestResult);
}

/// Property: refilling to `t1` then to `t2` equals refilling straight to `t2` (no drift, ever), for
/// any order of `t1` and `t2` (a later `t1` simply clamps).
#[test]
fn refill_is_additive() {
    fn property(
        capacity: u64,
        numer: u64,
        denom: u64,
        balance: u128,
        last: u64,
        dt1: u32,
        dt2: u64,
    ) -> TestResult {
        let Some(config) = config_from(capacity, numer, denom) else {
            return TestResult::discard();
        };
        let state = state_from(&config, balance, last);
        let t1 = last.saturating_add(dt1 as u64);
        let t2 = t1.saturating_add(dt2 % (1000 * SECOND));
        let stepwise = state.refilled(&config, t1).refilled(&config, t2);
        TestResult::from_bool(stepwise == state.refilled(&config, t2))
    }
    QuickCheck::new()
        .tests(5_000)
        .quickcheck(property as fn(u64, u64, u64, u128, u64, u32, u64) -> TestResult);
}

/// Property: retry_after is the least whole number of ns after which the same request is allowed:
/// allowed at `now + w`, denied at `now + w - 1`.
#[test]
fn retry_after_is_the_ceiling() {
    fn property(
        capacity: u64,
        numer: u64,
        denom: u64,
        balance: u128,
        last: u64,
        back: u32,
        cost: u64,
    ) -> TestResult {
        let Some(config) = config_from(capacity, numer, denom) else {
            return TestResult::discard();
        };
        let state = state_from(&config, balance, last % (u64::MAX / 2));
        let now = state.last_refill().saturating_sub(back as u64 % 3); // sometimes a rollback
        let cost = cost % config.capacity() + 1;
        let (_, decision) = transition(&config, state, Attempt { cost, now }).unwrap();
        let Some(Wait::After(wait)) = decision.retry_after() else {
            return TestResult::discard();
        };
        let allowed_at = |t| {
            transition(&config, state, Attempt { cost, now: t })
                .unwrap()
                .1
                .is_allowed()
        };
        RETRY_CASES.fetch_add(1, Relaxed);
        if now < state.last_refill() {
            ROLLBACK_RETRY_CASES.fetch_add(1, Relaxed);
        }
        TestResult::from_bool(wait > 0 && allowed_at(now + wait) && !allowed_at(now + wait - 1))
    }
    QuickCheck::new()
        .tests(5_000)
        .quickcheck(property as fn(u64, u64, u64, u128, u64, u32, u64) -> TestResult);
    if std::env::var_os("COVERAGE_PRINT").is_some() {
        eprintln!(
            "COVERAGE retry {} rollback {}",
            RETRY_CASES.load(Relaxed),
            ROLLBACK_RETRY_CASES.load(Relaxed)
        );
    }
    assert!(
        RETRY_CASES.load(Relaxed) >= 1_000,
        "too few denials reached"
    );
    assert!(
        ROLLBACK_RETRY_CASES.load(Relaxed) >= 100,
        "too few rollbacks reached"
    );
}

/// Property: reconfiguration never creates tokens: the new balance, in tokens, is at most the old
/// balance refilled to `now`, and at most the new capacity; and it loses less than one new unit.
#[test]
fn reconfiguration_never_creates_tokens() {
    fn property(
        old: (u64, u64, u64),
        new: (u64, u64, u64),
        balance: u128,
        last: u64,
        dt: u32,
    ) -> TestResult {
        let (Some(old), Some(new)) = (
            config_from(old.0, old.1, old.2),
            config_from(new.0, new.1, new.2),
        ) else {
            return TestResult::discard();
        };
        let state = state_from(&old, balance, last);
        let now = last.saturating_add(dt as u64);
        let refilled = state.refilled(&old, now);
        let moved = state.reconfigured(&old, &new, now);
        // Compare balance_new / upt_new <= balance_old / upt_old by cross-multiplying (fits u128 for
        // these sizes: balances < 2^54, grids < 2^44).
        let new_tokens_x = moved.balance() * old.units_per_token();
        let old_tokens_x = refilled.balance() * new.units_per_token();
        let below_capacity = moved.balance() <= new.capacity_units();
        if old_tokens_x > new_tokens_x && moved.balance() < new.capacity_units() {
            LOSSY_RECONFIGURE_CASES.fetch_add(1, Relaxed);
        }
        let loses_under_one_unit = moved.balance() == new.capacity_units()
            || old_tokens_x - new_tokens_x < old.units_per_token();
        TestResult::from_bool(
            new_tokens_x <= old_tokens_x
                && below_capacity
                && loses_under_one_unit
                && moved.last_refill() == refilled.last_refill(),
        )
    }
    QuickCheck::new()
        .tests(5_000)
        .quickcheck(property as fn((u64, u64, u64), (u64, u64, u64), u128, u64, u32) -> TestResult);
    if std::env::var_os("COVERAGE_PRINT").is_some() {
        eprintln!("COVERAGE lossy {}", LOSSY_RECONFIGURE_CASES.load(Relaxed));
    }
    assert!(
        LOSSY_RECONFIGURE_CASES.load(Relaxed) >= 100,
        "too few conversions that had to round down"
    );
}
