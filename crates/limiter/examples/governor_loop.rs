//! `decision_loop`'s keys, times and costs through governor 0.10's keyed DashMap limiter, for
//! counting instructions against ours under callgrind.
//!
//! `governor_loop <keys>`: one million `check_key` calls at times 1 µs apart, on key 0 when `keys` is
//! 1, else on keys drawn by the same xorshift from `0..keys`, with the quota of `decision_loop`'s one
//! bandwidth (a burst of 10 refilling 5/s). Governor's clock here is the benches' `BenchClock`, a plain relaxed
//! load of a shared `AtomicU64` that the loop stores into before each call (ours takes `now` by argument, no load at all), and
//! its map hashes with the standard library's randomly keyed SipHash-1-3, as `decision_loop`'s seeded
//! hasher does (SipHash-1-3 with fixed keys). Governor never evicts: its map keeps every key it saw.
//!
//! ```text
//! cargo build --release -p bucketproof-limiter --example governor_loop
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/governor_loop 1000000
//! ```
//!
//! It prints the allowed count, which equals `decision_loop <keys> 1`'s (same decisions).

#[path = "../benches/common/clock.rs"]
mod clock;

use std::num::NonZeroU32;

use clock::BenchClock;
use governor::{Quota, RateLimiter};

const DECISIONS: u64 = 1_000_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: governor_loop <keys>";
    let keys: u64 = args.next().ok_or(usage)?.parse()?;
    if keys == 0 {
        return Err(usage.into());
    }
    let quota = Quota::per_second(NonZeroU32::new(5).ok_or(usage)?)
        .allow_burst(NonZeroU32::new(10).ok_or(usage)?);
    let clock = BenchClock::new(0);
    let limiter = RateLimiter::dashmap_with_clock(quota, clock.clone());
    let mut x = 1u64;
    let mut allowed = 0u64;
    for i in 0..DECISIONS {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let key = if keys == 1 { 0 } else { x % keys };
        clock.set(i * 1_000);
        allowed += u64::from(limiter.check_key(&key).is_ok());
    }
    println!("{allowed} of {DECISIONS} allowed");
    Ok(())
}
