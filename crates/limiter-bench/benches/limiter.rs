//! Time per decision: bucketproof's exact limiters against governor 0.10 and a textbook f64 bucket.
//!
//! Every comparison lives in this one criterion binary so that one run gives ratios measured under
//! the same machine load. What is equalized, everywhere:
//!
//! - **the clock:** every subject reads the same [`BenchClock`] (benches/common/clock.rs) through its
//!   own library's clock trait, one relaxed load; the loop sets it with one relaxed store before each
//!   call, 1 µs after the last. No subject gets `now` as an argument, none pays a compare-and-swap to
//!   move time;
//! - **the keys, configs and decision mix:** the same key (or the same pre-generated ChaCha8 index
//!   sequence), the same burst and rate, cost 1, so every subject admits the same calls (each group
//!   prints the allowed count of every subject after measuring, outside the timed loop);
//! - **what is kept of a result:** the allow bit, through `std::hint::black_box`, for every subject.
//!   Ours returns a 72-byte `Decision`, governor a 40-byte `Result`; keeping whole results would
//!   charge each side for its result's size, not for deciding.
//!
//! Groups:
//! - `one_key`: one key, thread-safe path: [`DirectLimiter`] (the peer of governor's direct limiter),
//!   the keyed [`Limiter`] on one key (one bandwidth and three), governor's direct limiter, and
//!   `lock_unlock_alone`, an uncontended lock and unlock of an `AtomicBool` (the floor of any locked
//!   design). Capacity 10, 500,000 tokens/s (one token per 2 µs): about half the calls are denied.
//! - `two_threads`: two threads deciding on one shared key at once, each call reading one shared
//!   real clock (`Instant`-based, the same for both peers); time per decision of the pair. Two mixes
//!   that do not depend on speed: `denied` (a bucket of 10 refilling 1 token a day, empty: every call
//!   denied) and `allowed` (a bucket of 10^9 refilling 10^9 a second: every call allowed).
//! - `settle`: reserve, then settle on one key of the keyed [`Limiter`]: a plain `acquire`,
//!   `acquire_with_id` (a fresh request id per call) and the pairs `acquire_with_id_then_settle_refund`
//!   (reserve 4, actual 1) and `..._extra` (reserve 1, actual 4), on one config whose bucket is full
//!   again at every step (a burst of 1,000 refilled one token per ns), so every call and every settle
//!   is allowed. A settle needs a live record, so it is timed in a pair with its acquire: settle =
//!   pair - `acquire_with_id`.
//! - `transition`: one key, no synchronization: `internal::transition` against the textbook f64
//!   bucket (`tokens = min(cap, tokens + dt * rate)`), `now` passed to both.
//! - `keys_1m`: 1,000,000 existing keys, random access (one pre-generated index sequence shared by
//!   all): the keyed [`Limiter<u64>`] against governor's keyed DashMap limiter. Capacity 4, 1 token per
//!   2 s per key, every bucket created empty, so about half the calls are denied and a bucket rarely
//!   refills to full. `ours_no_sweep` shows the amortized sweep's cost; `proto_flat_table`
//!   (benches/common, evidence, not the product) the same transition over hashbrown tables.
//!
//! Run: `cargo bench -p bucketproof-limiter-bench --bench limiter`. Instruction counts of the one-key paths
//! come from `examples/one_key_loop.rs` under callgrind (reports/bench-limiter.md); bytes per key from
//! the `memory` bench target.

mod common;

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bucketproof_limiter::internal::{Attempt, transition};
use bucketproof_limiter::{
    Bandwidth, Bandwidths, BucketState, Config, Decision, DirectLimiter, Limiter, Rate, Request,
    Settle,
};
use common::clock::BenchClock;
use criterion::{Criterion, criterion_group, criterion_main};
use governor::{Quota, RateLimiter};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Simulated time between two calls.
const STEP_NS: u64 = 1_000;
/// One-key config: burst 10, 500,000 tokens/s (one token every 2 µs).
const ONE_KEY_CAPACITY: u32 = 10;
const ONE_KEY_RATE_PER_S: u32 = 500_000;
/// Keyed config: burst 4, one token per 2 s.
const KEYED_CAPACITY: u32 = 4;
const KEYED_PERIOD: Duration = Duration::from_secs(2);
const KEYS: u64 = 1_000_000;
/// Length of the pre-generated index sequence (a power of two, 4x the key count).
const SEQUENCE_LEN: usize = 1 << 22;

fn one_key_config() -> Config {
    Config::new(
        ONE_KEY_CAPACITY as u64,
        Rate::per_second(ONE_KEY_RATE_PER_S as u64),
    )
    .unwrap()
}

fn one_key_quota() -> Quota {
    Quota::per_second(NonZeroU32::new(ONE_KEY_RATE_PER_S).unwrap())
        .allow_burst(NonZeroU32::new(ONE_KEY_CAPACITY).unwrap())
}

fn keyed_config() -> Config {
    Config::new(KEYED_CAPACITY as u64, Rate::per(1, KEYED_PERIOD).unwrap()).unwrap()
}

/// `config` and two wider bandwidths (twice and four times its capacity, twice its rate): a set of
/// three whose decisions are the one bandwidth's, call for call (the wider ones cover whatever the
/// first covers, from a fresh key on), so a bench over it times deciding three bandwidths on the
/// same decision mix.
fn with_two_wider(config: Config) -> Bandwidths {
    let rate = Rate::per(
        2 * config.rate().numer(),
        Duration::from_secs(config.rate().denom()),
    )
    .unwrap();
    let wider =
        |factor: u64| Bandwidth::new(Config::new(factor * config.capacity(), rate).unwrap());
    Bandwidths::new([Bandwidth::new(config), wider(2), wider(4)]).unwrap()
}

fn keyed_quota() -> Quota {
    Quota::with_period(KEYED_PERIOD)
        .unwrap()
        .allow_burst(NonZeroU32::new(KEYED_CAPACITY).unwrap())
}

/// The textbook f64 token bucket: tokens as a float, refilled by `dt * rate` and clamped.
struct FloatBucket {
    tokens: f64,
    last_ns: u64,
    capacity: f64,
    rate_per_ns: f64,
}

impl FloatBucket {
    fn new(capacity: f64, rate_per_s: f64, now: u64) -> FloatBucket {
        FloatBucket {
            tokens: capacity,
            last_ns: now,
            capacity,
            rate_per_ns: rate_per_s / 1e9,
        }
    }

    /// Returns (allowed, remaining tokens).
    #[inline]
    fn acquire(&mut self, now: u64, cost: f64) -> (bool, f64) {
        let elapsed = now.saturating_sub(self.last_ns);
        self.tokens = self
            .capacity
            .min(self.tokens + elapsed as f64 * self.rate_per_ns);
        self.last_ns = self.last_ns.max(now);
        let allowed = self.tokens >= cost;
        if allowed {
            self.tokens -= cost;
        }
        (allowed, self.tokens)
    }
}

/// Measures `decide` (returning the allow bit) with the clock set 1 µs later before each call, then
/// prints how many of the next 100,000 calls it allowed (as `{group_name}/{name}`).
fn timed_one_key(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    group_name: &str,
    name: &str,
    clock: &BenchClock,
    mut decide: impl FnMut() -> bool,
) {
    let mut now = START;
    group.bench_function(name, |b| {
        b.iter(|| {
            now += STEP_NS;
            clock.set(now);
            black_box(decide());
        })
    });
    let allowed: u32 = (0..100_000)
        .map(|_| {
            now += STEP_NS;
            clock.set(now);
            decide() as u32
        })
        .sum();
    eprintln!("{group_name}/{name}: allowed {allowed} of the next 100000 calls");
}

fn one_key(c: &mut Criterion) {
    let mut group = c.benchmark_group("one_key");
    let key = 7u64;

    let clock = BenchClock::new(START);
    let ours = DirectLimiter::with_clock(one_key_config(), clock.clone());
    timed_one_key(&mut group, "one_key", "ours_direct", &clock, || {
        ours.acquire(black_box(1)).is_ok_and(|d| d.is_allowed())
    });

    let clock = BenchClock::new(START);
    let ours: Limiter<u64, BenchClock> = Limiter::builder(one_key_config())
        .clock(clock.clone())
        .build();
    timed_one_key(&mut group, "one_key", "ours_keyed", &clock, || {
        ours.acquire(black_box(&key), black_box(1))
            .is_ok_and(|d| d.is_allowed())
    });

    let clock = BenchClock::new(START);
    let ours: Limiter<u64, BenchClock> = Limiter::builder(with_two_wider(one_key_config()))
        .clock(clock.clone())
        .build();
    timed_one_key(
        &mut group,
        "one_key",
        "ours_keyed_3_bandwidths",
        &clock,
        || {
            ours.acquire_set_with(black_box(&key), Request::cost(black_box(1)))
                .is_ok_and(|d| d.decision.is_allowed())
        },
    );

    let clock = BenchClock::new(START);
    let proto = common::cas_proto::CasDirectProto::new(one_key_config(), clock.clone());
    timed_one_key(&mut group, "one_key", "proto_direct_cas128", &clock, || {
        proto.acquire(black_box(1)).is_some_and(|d| d.is_allowed())
    });

    let clock = BenchClock::new(START);
    let governor = RateLimiter::direct_with_clock(one_key_quota(), clock.clone());
    timed_one_key(&mut group, "one_key", "governor_direct", &clock, || {
        governor.check().is_ok()
    });

    // The floor of any locked design: one uncontended lock (compare-and-swap, Acquire) and unlock
    // (store, Release) of an `AtomicBool`, the DirectLimiter's lock with nothing inside it.
    let flag = AtomicBool::new(false);
    group.bench_function("lock_unlock_alone", |b| {
        b.iter(|| {
            let locked = flag
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok();
            flag.store(false, Ordering::Release);
            black_box(locked);
        })
    });
    // The floor of any design that writes the state on every call (a denial moves the cursor): one
    // uncontended compare-and-swap, always succeeding, with the clock set and read as above.
    let clock = BenchClock::new(START);
    let word = std::sync::atomic::AtomicU64::new(0);
    timed_one_key(&mut group, "one_key", "cas_alone", &clock, || {
        let now = bucketproof_limiter::Clock::now(&clock);
        let seen = word.load(Ordering::Relaxed);
        word.compare_exchange(seen, now, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    });
    group.finish();
}

/// A clock both peers read the same way in the two-thread group: nanoseconds of one `Instant` origin
/// (shared by both threads, so their times interleave as real callers' do).
#[derive(Clone, Copy)]
struct RealClock(Instant);

impl bucketproof_limiter::Clock for RealClock {
    fn now(&self) -> u64 {
        START + self.0.elapsed().as_nanos() as u64
    }
}

impl governor::clock::Clock for RealClock {
    type Instant = governor::nanos::Nanos;
    fn now(&self) -> governor::nanos::Nanos {
        (START + self.0.elapsed().as_nanos() as u64).into()
    }
}

/// Two threads calling `decide` on one shared limiter, `iters` calls in all; the elapsed time of the
/// pair. Also checks the mix: `want_allowed` of every call.
fn two_threads_bench(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    want_allowed: bool,
    decide: impl Fn() -> bool + Sync,
) {
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let per_thread = iters.div_ceil(2);
            let started = Instant::now();
            let unexpected: u64 = std::thread::scope(|scope| {
                let workers: Vec<_> = (0..2)
                    .map(|_| {
                        scope.spawn(|| {
                            (0..per_thread)
                                .map(|_| u64::from(black_box(decide()) != want_allowed))
                                .sum::<u64>()
                        })
                    })
                    .collect();
                workers.into_iter().map(|w| w.join().unwrap()).sum()
            });
            let elapsed = started.elapsed();
            assert_eq!(unexpected, 0, "{name}: the decision mix moved");
            elapsed
        })
    });
}

fn two_threads(c: &mut Criterion) {
    let mut group = c.benchmark_group("two_threads");
    let origin = RealClock(Instant::now());
    let day = Duration::from_secs(86_400);
    // (mix, every call allowed?, capacity, ours' rate, governor's period per token)
    let mixes = [
        ("denied", false, 10u32, Rate::per(1, day).unwrap(), day),
        // A burst of 10^9 refilled one token per ns: no two threads can drain it.
        (
            "allowed",
            true,
            1_000_000_000,
            Rate::per_second(1_000_000_000),
            Duration::from_nanos(1),
        ),
    ];
    for (mix, allowed, capacity, rate, period) in mixes {
        let config = Config::new(capacity as u64, rate).unwrap();
        let quota = Quota::with_period(period)
            .unwrap()
            .allow_burst(NonZeroU32::new(capacity).unwrap());
        let ours = DirectLimiter::with_clock(config, origin);
        let proto = common::cas_proto::CasDirectProto::new(config, origin);
        let governor = RateLimiter::direct_with_clock(quota, origin);
        if !allowed {
            // Drain every bucket first: every timed call is a denial.
            assert!(ours.acquire(capacity as u64).unwrap().is_allowed());
            assert!(proto.acquire(capacity as u64).unwrap().is_allowed());
            for _ in 0..capacity {
                assert!(governor.check().is_ok());
            }
        }
        let name = |subject: &str| format!("{subject}_{mix}");
        two_threads_bench(&mut group, &name("ours_direct"), allowed, || {
            ours.acquire(1).is_ok_and(|d| d.is_allowed())
        });
        two_threads_bench(&mut group, &name("proto_direct_cas128"), allowed, || {
            proto.acquire(1).is_some_and(|d| d.is_allowed())
        });
        two_threads_bench(&mut group, &name("governor_direct"), allowed, || {
            governor.check().is_ok()
        });
    }
    // The floor of any design that writes one shared word on every call: the same clock read, then
    // a compare-and-swap loop on a shared `AtomicU64` (what a lock-free exact state would pay at
    // least, whatever its arithmetic).
    let word = std::sync::atomic::AtomicU64::new(0);
    two_threads_bench(&mut group, "shared_cas_alone", true, || {
        let now = bucketproof_limiter::Clock::now(&origin);
        let mut seen = word.load(Ordering::Relaxed);
        while let Err(actual) =
            word.compare_exchange_weak(seen, seen.max(now), Ordering::AcqRel, Ordering::Relaxed)
        {
            seen = actual;
        }
        true
    });
    group.finish();
}

/// Settle config: a burst of 1,000 refilled one token per ns, so the bucket is full again at every
/// 1 µs step: every acquire, refund and extra is allowed, whatever the subject's speed.
fn settle_config() -> Config {
    Config::new(1_000, Rate::per_second(1_000_000_000)).unwrap()
}

/// Reserve, then settle, on one key of the keyed limiter, against a plain acquire on the same
/// settings: each subject a fresh limiter of [`settle_config`] (default request-id records: 60 s,
/// 8 per key), the same key, the same clock set 1 µs later before each call; a settle runs at the
/// same clock reading as its acquire. A settle needs an acquire with a live id before it, so it is
/// timed as a pair: `settle` = `acquire_with_id_then_settle_*` - `acquire_with_id`.
fn settle(c: &mut Criterion) {
    let mut group = c.benchmark_group("settle");
    let key = 7u64;
    let limiter = |clock: &BenchClock| -> Limiter<u64, BenchClock> {
        Limiter::builder(settle_config())
            .clock(clock.clone())
            .build()
    };

    let clock = BenchClock::new(START);
    let ours = limiter(&clock);
    timed_one_key(&mut group, "settle", "acquire", &clock, || {
        (ours.acquire_with(black_box(&key), Request::cost(black_box(1))))
            .is_ok_and(|a| a.decision.is_allowed())
    });

    let clock = BenchClock::new(START);
    let ours = limiter(&clock);
    let mut id = 0u64;
    timed_one_key(&mut group, "settle", "acquire_with_id", &clock, || {
        id += 1;
        (ours.acquire_with(black_box(&key), Request::cost(black_box(1)).id(id)))
            .is_ok_and(|a| a.decision.is_allowed())
    });

    // (name, reserved, actual): a refund of 3, an extra of 3.
    for (name, reserved, actual) in [
        ("acquire_with_id_then_settle_refund", 4, 1),
        ("acquire_with_id_then_settle_extra", 1, 4),
    ] {
        let clock = BenchClock::new(START);
        let ours = limiter(&clock);
        let mut id = 0u64;
        timed_one_key(&mut group, "settle", name, &clock, || {
            id += 1;
            let reserved =
                ours.acquire_with(black_box(&key), Request::cost(black_box(reserved)).id(id));
            let settled = ours.settle(black_box(&key), Settle::new(id, black_box(actual)));
            reserved.is_ok_and(|a| a.decision.is_allowed())
                && settled.is_ok_and(|s| s.decision.is_allowed() && !s.replayed)
        });
    }
    group.finish();
}

fn pure_transition(c: &mut Criterion) {
    let mut group = c.benchmark_group("transition");

    let config = one_key_config();
    let attempt = |now| Attempt {
        cost: black_box(1),
        now,
    };
    let mut state = BucketState::full(&config, 1_000_000_000);
    let mut now = 1_000_000_000u64;
    group.bench_function("ours_transition", |b| {
        b.iter(|| {
            now += STEP_NS;
            let (next, decision): (BucketState, Decision) =
                transition(black_box(&config), state, attempt(now)).unwrap();
            state = next;
            let _ = black_box(decision);
        })
    });

    let mut state = BucketState::full(&config, 1_000_000_000);
    let mut now = 1_000_000_000u64;
    group.bench_function("ours_transition_allowed_only", |b| {
        b.iter(|| {
            now += STEP_NS;
            let (next, decision) = transition(black_box(&config), state, attempt(now)).unwrap();
            state = next;
            let _ = black_box(decision.is_allowed());
        })
    });

    let mut bucket = FloatBucket::new(
        ONE_KEY_CAPACITY as f64,
        ONE_KEY_RATE_PER_S as f64,
        1_000_000_000,
    );
    let mut now = 1_000_000_000u64;
    group.bench_function("f64_textbook", |b| {
        b.iter(|| {
            now += STEP_NS;
            let _ = black_box(black_box(&mut bucket).acquire(now, black_box(1.0)));
        })
    });
    group.finish();
}

/// Indices into the key space, uniform, from a fixed ChaCha8 seed (multiply-shift, no library
/// distribution code).
fn index_sequence() -> Vec<u32> {
    let mut rng = ChaCha8Rng::seed_from_u64(0x6275_636b_6574);
    (0..SEQUENCE_LEN)
        .map(|_| ((rng.next_u32() as u64 * KEYS) >> 32) as u32)
        .collect()
}

/// Untimed calls before measuring (once through the sequence), so caches and branch history are warm.
const WARM_UP_CALLS: usize = SEQUENCE_LEN;

/// Runs one keyed subject: create 1,000,000 keys with one acquire of the whole capacity each (so every
/// bucket starts empty: the steady state, where about one call in two is allowed), spread over one
/// token period (2 µs apart, 2 s in all) so the buckets do not refill in lockstep; warm up; measure;
/// then count the decision mix of the next 100,000 calls (outside the timed loop).
/// `acquire(key, now, cost)` returns whether the call was allowed.
fn keyed_bench<F: FnMut(u64, u64, u64) -> bool>(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    sequence: &[u32],
    mut acquire: F,
) {
    let mut now = START;
    for key in 0..KEYS {
        now += FILL_STEP_NS;
        assert!(acquire(key, now, KEYED_CAPACITY as u64));
    }
    let mut i = 0usize;
    let mut next = || {
        let key = sequence[i & (SEQUENCE_LEN - 1)] as u64;
        i += 1;
        now += STEP_NS;
        (key, now)
    };
    for _ in 0..WARM_UP_CALLS {
        let (key, now) = next();
        acquire(key, now, 1);
    }
    group.bench_function(name, |b| {
        b.iter(|| {
            let (key, now) = next();
            black_box(acquire(black_box(key), now, 1));
        })
    });
    let allowed: u32 = (0..100_000)
        .map(|_| {
            let (key, now) = next();
            acquire(key, now, 1) as u32
        })
        .sum();
    let (_, last) = next();
    eprintln!(
        "{name}: allowed {allowed} of the next 100000 calls (simulated time {:.1} s)",
        (last - START) as f64 / 1e9,
    );
}

const START: u64 = 1_000_000_000;
/// Time between two key creations: 1,000,000 keys over one 2 s token period.
const FILL_STEP_NS: u64 = 2_000;

fn keys_1m(c: &mut Criterion) {
    let sequence = index_sequence();
    let mut group = c.benchmark_group("keys_1m");

    // Every subject sets its clock to the call's `now` (one relaxed store) and reads it (one
    // relaxed load) through its own clock trait.
    for (name, sweep) in [("ours_acquire", 2), ("ours_no_sweep", 0)] {
        let clock = BenchClock::new(START);
        let ours: Limiter<u64, BenchClock> = Limiter::builder(keyed_config())
            .clock(clock.clone())
            .sweep_per_op(sweep)
            .build();
        keyed_bench(&mut group, name, &sequence, |key, now, cost| {
            clock.set(now);
            ours.acquire(&key, cost).is_ok_and(|d| d.is_allowed())
        });
        let stats = ours.stats();
        eprintln!(
            "{name}: live keys {} (of {KEYS}), lossless evictions {}",
            stats.live_keys, stats.evicted_lossless
        );
    }

    let clock = BenchClock::new(START);
    let ours: Limiter<u64, BenchClock> = Limiter::builder(with_two_wider(keyed_config()))
        .clock(clock.clone())
        .build();
    keyed_bench(
        &mut group,
        "ours_acquire_3_bandwidths",
        &sequence,
        |key, now, cost| {
            clock.set(now);
            (ours.acquire_set_with(&key, Request::cost(cost)))
                .is_ok_and(|d| d.decision.is_allowed())
        },
    );
    drop(ours);

    // Evidence, not the product: `now` by argument (it has no clock), so not a peer's figure.
    let proto = common::FlatKeyedProto::new(keyed_config());
    keyed_bench(
        &mut group,
        "proto_flat_table",
        &sequence,
        |key, now, cost| {
            proto
                .acquire_at(key, cost, now)
                .is_ok_and(|d| d.is_allowed())
        },
    );
    drop(proto);

    let clock = BenchClock::new(START);
    let governor = RateLimiter::dashmap_with_clock(keyed_quota(), clock.clone());
    keyed_bench(
        &mut group,
        "governor_dashmap_check_key",
        &sequence,
        |key, now, cost| {
            clock.set(now);
            if cost == 1 {
                governor.check_key(&key).is_ok()
            } else {
                let n = NonZeroU32::new(cost as u32).unwrap();
                governor
                    .check_key_n(&key, n)
                    .is_ok_and(|inner| inner.is_ok())
            }
        },
    );
    eprintln!("governor: live keys {}", governor.len());
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(40);
    targets = one_key, two_threads, settle, pure_transition, keys_1m
}
criterion_main!(benches);
