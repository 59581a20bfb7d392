//! The direct limiter against one key of the keyed limiter, and under real-thread contention.
//!
//! - `decides_exactly_like_one_key_of_the_keyed_limiter`: a seeded random sequence of acquires (valid
//!   and invalid costs), peeks and reconfigurations at times that mostly advance and sometimes jump
//!   back (rollbacks), run on a [`DirectLimiter`] and on key 7 of a [`Limiter`] side by side: every
//!   result, every peek and the stored state must be equal after every step. The configs include
//!   balances above `2^62` units, which the keyed limiter keeps outside its packed bucket, and moves
//!   across that line in both directions.
//! - `two_threads_never_oversell`: two OS threads with drifting injected clocks; admitted cost stays
//!   within the arrival curve `capacity + rate * (t_max - t_min)`, exactly, and reaches at least 90% of
//!   it (no refill lost); the final balance is within capacity.
#![cfg(not(any(loom, feature = "shuttle")))] // the std build: its lock is a real lock

use std::sync::Arc;
use std::thread;

use bucketproof_limiter::{Config, DirectLimiter, Limiter, Rate};

/// splitmix64: a tiny deterministic generator, so a failing seed replays.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn below(state: &mut u64, n: u64) -> u64 {
    ((next(state) as u128 * n as u128) >> 64) as u64
}

const SECOND: u64 = bucketproof_limiter::NANOS_PER_SECOND;

/// Small configs, and two whose balances do not fit the keyed limiter's 62-bit packed balance: one
/// whose balance crosses `2^62` units both ways (capacity 5e18 units; a large cost takes it below, a
/// second of refill brings it back), and one always above it (about 6.5e28 units).
fn configs() -> [Config; 6] {
    [
        Config::new(5, Rate::per_second(2)).unwrap(),
        Config::new(3, "7/3s".parse().unwrap()).unwrap(),
        Config::new(10, "1/min".parse().unwrap()).unwrap(),
        Config::new(1, Rate::per_second(1_000_000)).unwrap(),
        Config::new(5_000_000_000, Rate::per_second(1_000_000_000)).unwrap(),
        Config::new(u64::MAX / 2 + 11, "3/7s".parse().unwrap()).unwrap(),
    ]
}

#[test]
fn decides_exactly_like_one_key_of_the_keyed_limiter() {
    const KEY: u64 = 7;
    let mut steps = 0u64;
    let (mut denials, mut rollbacks, mut errors) = (0, 0, 0);
    let (mut wide_states, mut narrow_states_of_wide_configs) = (0, 0);
    for seed in 0..40u64 {
        let mut rng = seed;
        let start = configs()[below(&mut rng, configs().len() as u64) as usize];
        let direct = DirectLimiter::new(start);
        let keyed: Limiter<u64> = Limiter::builder(start).hasher_seed(3).build();
        let mut now = below(&mut rng, 10 * SECOND);
        for _ in 0..500 {
            steps += 1;
            // Mostly forward by up to 1 s, sometimes backwards by up to 3 s (a rollback).
            match below(&mut rng, 10) {
                0 => {
                    now = now.saturating_sub(below(&mut rng, 3 * SECOND));
                    rollbacks += 1;
                }
                1..=3 => {}
                _ => now += below(&mut rng, SECOND),
            }
            let capacity = direct.config().capacity();
            let context = format!("seed {seed}, step {steps}, now {now}");
            match below(&mut rng, 20) {
                0 => {
                    let config = configs()[below(&mut rng, configs().len() as u64) as usize];
                    direct.reconfigure_at(config, now);
                    keyed.reconfigure_at(&KEY, config, now).unwrap();
                }
                1..=3 => {
                    let ours = direct.peek_at(now);
                    let theirs = keyed.peek_at(&KEY, now);
                    assert_eq!(ours.remaining, theirs.remaining, "{context}");
                    assert_eq!(ours.reset_after, theirs.reset_after, "{context}");
                }
                _ => {
                    let cost = match below(&mut rng, 12) {
                        0 => 0,
                        1 => capacity + 1 + below(&mut rng, 3),
                        _ => 1 + below(&mut rng, capacity),
                    };
                    let ours = direct.acquire_at(cost, now);
                    let theirs = keyed.acquire_at(&KEY, cost, now);
                    assert_eq!(ours, theirs, "{context}, cost {cost}");
                    match ours {
                        Ok(decision) if !decision.is_allowed() => denials += 1,
                        Err(_) => errors += 1,
                        _ => {}
                    }
                }
            }
            if let Some(state) = keyed.inspect(&KEY) {
                assert_eq!(direct.inspect(), state, "{context}");
                if state.0.balance() >= 1 << 62 {
                    wide_states += 1;
                } else if state.1.capacity_units() >= 1 << 62 {
                    narrow_states_of_wide_configs += 1;
                }
            }
        }
        let stats = keyed.stats();
        assert_eq!(
            stats.evicted_lossless + stats.evicted_lossy,
            0,
            "seed {seed}: the keyed limiter dropped the key; the comparison assumes one life"
        );
    }
    assert!(
        denials > 1000 && rollbacks > 1000 && errors > 500,
        "the sequence must exercise denials ({denials}), rollbacks ({rollbacks}) and errors ({errors})"
    );
    assert!(
        wide_states > 100 && narrow_states_of_wide_configs > 100,
        "the sequence must keep balances both above 2^62 units ({wide_states}) and below it under a \
         config whose capacity is above ({narrow_states_of_wide_configs})"
    );
}

#[test]
fn two_threads_never_oversell() {
    const CAPACITY: u64 = 20;
    const PER_SECOND: u64 = 1000;
    const OPS: u64 = 500_000;
    let config = Config::new(CAPACITY, Rate::per_second(PER_SECOND)).unwrap();
    let limiter = Arc::new(DirectLimiter::new(config));
    let workers: Vec<_> = (0..2u64)
        .map(|id| {
            let limiter = limiter.clone();
            thread::spawn(move || {
                let mut rng = 0xd1ec7 + id;
                // The two clocks start apart and drift: each advances by 0..4 µs per op, so one
                // thread usually lags the cursor the other pushed.
                let mut now = SECOND + id * 1_000_000;
                let (mut admitted, mut t_min, mut t_max) = (0u64, u64::MAX, 0u64);
                for _ in 0..OPS {
                    now += below(&mut rng, 4_000);
                    let cost = 1 + below(&mut rng, 3);
                    let decision = limiter.acquire_at(cost, now).unwrap();
                    if decision.is_allowed() {
                        admitted += cost;
                    }
                    assert!(decision.remaining().whole() <= CAPACITY);
                    t_min = t_min.min(now);
                    t_max = t_max.max(now);
                }
                (admitted, t_min, t_max)
            })
        })
        .collect();
    let results: Vec<(u64, u64, u64)> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    let admitted: u64 = results.iter().map(|r| r.0).sum();
    let t_min = results.iter().map(|r| r.1).min().unwrap();
    let t_max = results.iter().map(|r| r.2).max().unwrap();
    // Exact, in units: admitted * units_per_token <= capacity_units + (t_max - t_min) * p.
    let units = config.units_per_token();
    let curve =
        config.capacity_units() + (t_max - t_min) as u128 * config.units_per_nanosecond() as u128;
    assert!(
        admitted as u128 * units <= curve,
        "oversold: admitted {admitted} tokens, arrival curve {} tokens",
        curve / units
    );
    assert!(
        admitted as u128 * units * 10 >= curve * 9,
        "lost refill: admitted {admitted} tokens of an arrival curve of {} tokens",
        curve / units
    );
    let (state, _) = limiter.inspect();
    assert!(state.balance() <= config.capacity_units());
    assert_eq!(state.last_refill(), t_max);
}
