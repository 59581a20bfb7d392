//! A fixed loop of keyed decisions, for counting instructions (callgrind) where timings are noisy.
//!
//! `decision_loop <keys> <bandwidths>`: one million acquires at times 1 µs apart, on key 0 when
//! `keys` is 1, else on keys drawn by xorshift from `0..keys`, on a limiter whose default config is
//! one bandwidth (a burst of 10 refilling 5/s) or, when `bandwidths` is 3, that bandwidth plus a
//! minute and a day quota.
//! Same keys, times and costs for both; the hasher seed is fixed, so every run places keys alike.
//!
//! ```text
//! cargo build --release -p bucketproof-limiter --example decision_loop
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/decision_loop 1 1
//! ```
//!
//! The total over one million decisions is the cost of a decision in instructions (the loop's own
//! xorshift adds a handful to each).

use bucketproof_limiter::{Bandwidth, Bandwidths, Config, EvictionPolicy, Limiter};

const DECISIONS: u64 = 1_000_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: decision_loop <keys> <bandwidths: 1 or 3>";
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
    let limiter: Limiter<u64> = Limiter::builder(set)
        .max_keys(2_000_000, EvictionPolicy::EvictFull)
        .hasher_seed(7)
        .build();
    let mut x = 1u64;
    let mut allowed = 0u64;
    for i in 0..DECISIONS {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let key = if keys == 1 { 0 } else { x % keys };
        allowed += u64::from(limiter.acquire_at(&key, 1, i * 1_000)?.is_allowed());
    }
    println!("{allowed} of {DECISIONS} allowed");
    Ok(())
}
