//! A fixed loop of keyed decisions, for counting instructions (callgrind) where timings are noisy.
//!
//! `decision_loop <keys> <bandwidths> [ours|governor]`: one million acquires at times 1 µs apart, on
//! key 0 when `keys` is 1, else on keys drawn by xorshift from `0..keys`, on a limiter whose default
//! config is one bandwidth (a burst of 10 refilling 5/s) or, when `bandwidths` is 3, that bandwidth
//! plus a minute and a day quota. The subject is ours (the default) or governor's keyed DashMap
//! limiter (one bandwidth only), both reading the benches' `BenchClock` (one relaxed load), set before
//! each call. Same keys, times and costs for both; ours' hasher seed is fixed, so every run places
//! keys alike; governor hashes with std's randomly keyed SipHash-1-3 and never evicts. Both print
//! their allowed count, which is the same.
//!
//! ```text
//! cargo build --release -p bucketproof-limiter-bench --example decision_loop
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/decision_loop 1 1
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/decision_loop 1 1 governor
//! ```
//!
//! The total over one million decisions is the cost of a decision in instructions (the loop's own
//! xorshift adds a handful to each).
//!
//! Reserve, then settle (one bandwidth only): the subjects `settle-acquire` (a plain acquire),
//! `settle-id` (an acquire with a fresh request id), `settle-refund` (that acquire for 4, then a
//! settle at 1) and `settle-extra` (for 1, then at 4) run on the `settle` bench's config, a burst of
//! 1,000 refilled one token per ns, so every acquire and every settle is allowed; a settle runs at
//! its acquire's time. A settle's instructions are `settle-refund` (or `-extra`) minus `settle-id`.
//!
//! ```text
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/decision_loop 1 1 settle-refund
//! ```

#[path = "../benches/common/clock.rs"]
mod clock;

use std::num::NonZeroU32;

use bucketproof_limiter::{
    Bandwidth, Bandwidths, Config, EvictionPolicy, Limiter, Rate, Request, Settle,
};
use clock::BenchClock;
use governor::{Quota, RateLimiter};

const DECISIONS: u64 = 1_000_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: decision_loop <keys> <bandwidths: 1 or 3> \
        [ours|governor|settle-acquire|settle-id|settle-refund|settle-extra]";
    let keys: u64 = args.next().ok_or(usage)?.parse()?;
    if keys == 0 {
        return Err(usage.into());
    }
    let bandwidths: usize = args.next().ok_or(usage)?.parse()?;
    let burst = Config::new(10, "5/s".parse()?)?;
    let set = match bandwidths {
        1 => Bandwidths::from(burst),
        3 => Bandwidths::new([
            Bandwidth::new(burst),
            Bandwidth::named("minute", Config::new(200, "200/min".parse()?)?)?,
            Bandwidth::named("day", Config::new(10_000, "10000/d".parse()?)?)?,
        ])?,
        _ => return Err(usage.into()),
    };
    // Both subjects read the same clock, set before each call.
    let clock = BenchClock::new(0);
    let mut decide: Box<dyn FnMut(u64) -> bool> = match args.next().as_deref() {
        None | Some("ours") => {
            let limiter: Limiter<u64, BenchClock> = Limiter::builder(set)
                .clock(clock.clone())
                .max_keys(2_000_000, EvictionPolicy::EvictFull)
                .hasher_seed(7)
                .build();
            Box::new(move |key| limiter.acquire(&key, 1).is_ok_and(|d| d.is_allowed()))
        }
        Some(mode @ ("settle-acquire" | "settle-id" | "settle-refund" | "settle-extra"))
            if bandwidths == 1 =>
        {
            let limiter: Limiter<u64, BenchClock> =
                Limiter::builder(Config::new(1_000, Rate::per_second(1_000_000_000))?)
                    .clock(clock.clone())
                    .max_keys(2_000_000, EvictionPolicy::EvictFull)
                    .hasher_seed(7)
                    .build();
            // (request ids?, reserved, actual to settle at)
            let (with_id, reserved, actual) = match mode {
                "settle-acquire" => (false, 1, None),
                "settle-id" => (true, 1, None),
                "settle-refund" => (true, 4, Some(1)),
                _ => (true, 1, Some(4)),
            };
            let mut id = 0u64;
            Box::new(move |key| {
                id += 1;
                let request = Request::cost(reserved);
                let request = if with_id { request.id(id) } else { request };
                let reserved = limiter.acquire_with(&key, request);
                let settled = actual.is_none_or(|actual| {
                    (limiter.settle(&key, Settle::new(id, actual)))
                        .is_ok_and(|s| s.decision.is_allowed())
                });
                reserved.is_ok_and(|a| a.decision.is_allowed()) && settled
            })
        }
        Some("governor") if bandwidths == 1 => {
            let quota = Quota::per_second(NonZeroU32::new(5).ok_or(usage)?)
                .allow_burst(NonZeroU32::new(10).ok_or(usage)?);
            let limiter = RateLimiter::dashmap_with_clock(quota, clock.clone());
            Box::new(move |key| limiter.check_key(&key).is_ok())
        }
        _ => return Err(usage.into()),
    };
    let mut x = 1u64;
    let mut allowed = 0u64;
    for i in 0..DECISIONS {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let key = if keys == 1 { 0 } else { x % keys };
        clock.set(i * 1_000);
        allowed += u64::from(decide(key));
    }
    println!("{allowed} of {DECISIONS} allowed");
    Ok(())
}
