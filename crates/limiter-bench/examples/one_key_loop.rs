//! A fixed loop of one-key decisions through ours and governor's direct limiters, for counting
//! instructions (callgrind) where timings are noisy.
//!
//! `one_key_loop <subject> <decisions>`: `subject` is `direct` (bucketproof's `DirectLimiter`),
//! `keyed` (bucketproof's keyed `Limiter`, one key), `governor` (governor's direct limiter) or
//! `clock` (no limiter: the loop, the call and one clock read, to subtract).
//! Every subject reads the same [`BenchClock`] (one relaxed load through its own clock trait), set
//! by one relaxed store before each call to a time 1 µs after the last; the same config (a burst of
//! 10 refilling 500,000 tokens a second, so about half the calls are denied), cost 1. The loop prints
//! how many were allowed, so the decision mix can be compared.
//!
//! ```text
//! cargo build --release -p bucketproof-limiter-bench --example one_key_loop
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/one_key_loop direct 1000000
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/one_key_loop direct 0
//! ```
//!
//! The difference between a run of N decisions and a run of 0 is the cost of N decisions (set-up
//! and process start cancel out).

#[path = "../benches/common/clock.rs"]
mod clock;

use std::hint::black_box;
use std::num::NonZeroU32;

use bucketproof_limiter::{Config, DirectLimiter, Limiter, Rate};
use clock::BenchClock;
use governor::{Quota, RateLimiter};

const START: u64 = 1_000_000_000;
const STEP: u64 = 1_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let usage = "usage: one_key_loop <direct|keyed|governor|clock> <decisions>";
    let mut args = std::env::args().skip(1);
    let subject = args.next().ok_or(usage)?;
    let decisions: u64 = args.next().ok_or(usage)?.parse()?;
    let clock = BenchClock::new(START);
    let config = Config::new(10, Rate::per_second(500_000))?;
    let mut decide: Box<dyn FnMut() -> bool> = match subject.as_str() {
        "direct" => {
            let limiter = DirectLimiter::with_clock(config, clock.clone());
            Box::new(move || limiter.acquire(black_box(1)).is_ok_and(|d| d.is_allowed()))
        }
        "keyed" => {
            let limiter: Limiter<u64, BenchClock> = Limiter::builder(config)
                .clock(clock.clone())
                .hasher_seed(7)
                .build();
            Box::new(move || {
                limiter
                    .acquire(black_box(&7), black_box(1))
                    .is_ok_and(|d| d.is_allowed())
            })
        }
        "governor" => {
            let quota = Quota::per_second(NonZeroU32::new(500_000).ok_or(usage)?)
                .allow_burst(NonZeroU32::new(10).ok_or(usage)?);
            let limiter = RateLimiter::direct_with_clock(quota, clock.clone());
            Box::new(move || limiter.check().is_ok())
        }
        // The loop and the clock alone: what every subject's count includes besides deciding.
        "clock" => {
            let clock = clock.clone();
            Box::new(move || black_box(bucketproof_limiter::Clock::now(&clock)).is_multiple_of(2))
        }
        _ => return Err(usage.into()),
    };
    let mut allowed = 0u64;
    for i in 0..decisions {
        clock.set(START + i * STEP);
        // Only the allow bit is kept, for every subject: what a caller reads first, and a result the
        // compiler cannot shrink differently for one side (ours returns 72 bytes, governor 40).
        allowed += u64::from(black_box(decide()));
    }
    println!("{subject}: {allowed} of {decisions} allowed");
    Ok(())
}
