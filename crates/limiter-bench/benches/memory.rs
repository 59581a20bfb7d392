//! Resident bytes per key at 1,000,000 keys: bucketproof's `Limiter<u64>` against governor 0.10's keyed
//! DashMap limiter, and the same at other key counts, because a table's bytes per
//! key depend on where its growth steps fall: one size alone could flatter either side.
//!
//! A counting `#[global_allocator]` (a thin wrapper around `System`) keeps the number of live heap
//! bytes. Each limiter is built, filled with keys `0..n` (one acquire each, at one instant, so nothing
//! is full and nothing is swept), and the live bytes it holds (the delta from just before
//! construction) are divided by the key count. This counts what the allocator handed out, not
//! page-level RSS, and the same way for both. Not a criterion bench: it prints. Figures move by a few
//! percent between runs, because each run's random hasher seed deals the keys to the shards a little
//! differently and each shard's table grows on its own.
//!
//! Run: `cargo bench -p bucketproof-limiter-bench --bench memory`. `BUCKETPROOF_BENCH_SMOKE=1` (CI, through
//! `cargo test --benches`): 1,000 keys and no sweep, figures meaningless, the code still run.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bucketproof_limiter::{
    AcquireError, Acquired, Config, Decision, EvictionPolicy, Limiter, Rate,
};
use governor::clock::FakeRelativeClock;
use governor::{Quota, RateLimiter};

/// `System`, counting live bytes.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            LIVE.fetch_add(new_size, Ordering::Relaxed);
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const KEYS: u64 = 1_000_000;
/// The other key counts of the sweep: both sides of several growth steps of both tables.
const SWEEP: [u64; 6] = [100_000, 250_000, 500_000, 750_000, 1_500_000, 2_000_000];
const START_NS: u64 = 1_000_000_000;

fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

fn report(name: &str, bytes: usize, keys: usize) {
    println!(
        "{name:<44} {keys:>9} keys {bytes:>11} B  {:>7.2} B/key",
        bytes as f64 / keys as f64
    );
}

fn config() -> Config {
    Config::new(4, Rate::per(1, Duration::from_secs(2)).unwrap()).unwrap()
}

/// Live bytes per key of our limiter with defaults (the key bound raised to twice `keys` when the
/// default is too small: the bound is per shard, and the shards do not get exactly equal shares),
/// filled with `keys` keys.
fn ours(keys: u64) -> (usize, usize) {
    let default_bound = Limiter::<u64>::new(config()).key_bound();
    let before = live();
    let limiter: Limiter<u64> = if keys as usize > default_bound {
        Limiter::builder(config())
            .max_keys(2 * keys as usize, EvictionPolicy::default())
            .build()
    } else {
        Limiter::new(config())
    };
    for key in 0..keys {
        limiter.acquire_at(&key, 1, START_NS).unwrap();
    }
    (live() - before, limiter.len())
}

/// The same for governor's keyed limiter.
fn governor(keys: u64) -> (usize, usize) {
    let before = live();
    let clock = FakeRelativeClock::default();
    clock.advance(Duration::from_nanos(START_NS));
    let quota = Quota::with_period(Duration::from_secs(2))
        .unwrap()
        .allow_burst(NonZeroU32::new(4).unwrap());
    let limiter = RateLimiter::dashmap_with_clock(quota, clock);
    for key in 0..keys {
        let _ = limiter.check_key(&key);
    }
    (live() - before, limiter.len())
}

fn main() {
    // `cargo bench` passes `--bench`; nothing to parse.
    let smoke = std::env::var_os("BUCKETPROOF_BENCH_SMOKE").is_some();
    let (keys_measured, sweep): (u64, &[u64]) = if smoke { (1_000, &[]) } else { (KEYS, &SWEEP) };
    println!(
        "size_of: Decision {} B, Result<Acquired, AcquireError> {} B, Result<Decision, AcquireError> {} B",
        size_of::<Decision>(),
        size_of::<Result<Acquired, AcquireError>>(),
        size_of::<Result<Decision, AcquireError>>()
    );
    let (bytes, keys) = ours(keys_measured);
    report("bucketproof Limiter<u64> (defaults)", bytes, keys);
    let (bytes, keys) = governor(keys_measured);
    report("governor 0.10 keyed (DashMap, u64 keys)", bytes, keys);
    let before = live();
    let proto = common::FlatKeyedProto::new(config());
    for key in 0..keys_measured {
        proto.acquire_at(key, 1, START_NS).unwrap();
    }
    report(
        "prototype: flat HashTable, 32-byte slots",
        live() - before,
        proto.len(),
    );
    println!("\nbytes per key at other key counts (ours / governor):");
    for &keys in sweep {
        let (our_bytes, our_keys) = ours(keys);
        let (peer_bytes, peer_keys) = governor(keys);
        let (ours_per_key, peer_per_key) = (
            our_bytes as f64 / our_keys as f64,
            peer_bytes as f64 / peer_keys as f64,
        );
        println!(
            "{keys:>9} keys  {ours_per_key:>6.2} B / {peer_per_key:>6.2} B  ratio {:.2}",
            ours_per_key / peer_per_key
        );
    }
}
