//! Time per decision: bucketproof's exact limiter against governor 0.10 and a textbook f64 bucket.
//!
//! Every comparison lives in this one criterion binary so that one run gives
//! ratios measured under the same machine load:
//!
//! - `one_key`: one key, injected time, thread-safe path. [`Limiter::acquire_at`] and
//!   [`Limiter::acquire_with`] against governor's direct limiter over a `FakeRelativeClock`, the clock
//!   advanced by 1 µs per call (for ours the `now` argument advances by 1 µs). Also ours through a
//!   [`ManualClock`] advanced per call (the same atomic clock bump governor pays), and the cost of
//!   `FakeRelativeClock::advance` alone, so a reader can see how much of governor's time is the clock.
//!   Capacity 10, 500,000 tokens/s (one token per 2 µs): after the first burst about half of the calls
//!   are denied. `proto_direct_mutex_transition` (benches/common) is evidence for the report, not the
//!   product: the same transition behind one `Mutex`, without the keyed map. The fair peer of
//!   governor's (unkeyed) direct limiter is ours: [`DirectLimiter::acquire_at`]
//!   (`ours_direct_acquire_at`, `now` argument advanced) and [`DirectLimiter::acquire`] over a
//!   [`ManualClock`] advanced per call (`ours_direct_acquire_manual_clock`, the same clock bump
//!   governor's figure includes; `manual_clock_advance_alone` is that bump by itself).
//!   `lock_unlock_alone` is the uncontended lock and unlock of the direct limiter's spin lock with
//!   nothing inside: the floor of any locked design on this machine. Every `one_key` closure passes
//!   its whole result to `std::hint::black_box` and returns `()` (criterion 0.5's own `black_box` on
//!   a returned value reads it byte by byte with `read_volatile`, charging for the result's size).
//! - `transition`: one key, no synchronization. [`bucketproof_limiter::internal::transition`] against the
//!   textbook f64 bucket below (`tokens = min(cap, tokens + dt * rate)`), same config and time step.
//!   Each hands what a caller gets (ours a [`Decision`], the f64 bucket a `bool` and the remaining
//!   balance) whole to `std::hint::black_box` and returns `()`, as in `one_key` and for the same
//!   reason (criterion's volatile read would charge ours for its 72-byte result and the f64 bucket for
//!   16 bytes); `ours_transition_allowed_only` passes only the decision bit.
//! - `keys_1m`: 1,000,000 existing keys, random access (one pre-generated ChaCha8 index sequence,
//!   shared by both), time +1 µs per call. [`Limiter<u64>`] against governor's keyed DashMap limiter
//!   with a `FakeRelativeClock`. Capacity 4, 1 token per 2 s per key, every bucket created empty: a
//!   key is hit about once per simulated second, so about half the calls are denied and a bucket
//!   rarely refills to full (so the lossless sweep seldom drops and re-creates keys).
//!   `ours_no_sweep` shows the cost of the amortized sweep; `proto_flat_table` (benches/common,
//!   evidence, not the product) is the same transition over a one-indirection table with the state
//!   inline.
//!
//! Run: `cargo bench -p bucketproof-limiter --bench limiter`. Bytes per key are measured by the
//! `memory` bench target, not here.

mod common;

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bucketproof_limiter::internal::{Attempt, transition};
use bucketproof_limiter::{
    Bandwidth, Bandwidths, BucketState, Config, Decision, DirectLimiter, Limiter, ManualClock,
    Rate, Request,
};
use criterion::{Criterion, criterion_group, criterion_main};
use governor::clock::FakeRelativeClock;
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

fn one_key(c: &mut Criterion) {
    let mut group = c.benchmark_group("one_key");
    let key = 7u64;
    // Every closure here hands its whole result to `std::hint::black_box` and returns `()`:
    // criterion 0.5's own `black_box` (applied to a closure's return value) is a `read_volatile`
    // that reads the value byte by byte, which charges each subject for the size of its result
    // type (ours 72 bytes, governor 48) rather than for deciding.
    eprintln!(
        "one_key result sizes: ours {} bytes, governor {} bytes",
        size_of::<Result<Decision, bucketproof_limiter::AcquireError>>(),
        size_of_val(
            &RateLimiter::direct_with_clock(one_key_quota(), FakeRelativeClock::default()).check()
        ),
    );

    let ours: Limiter<u64> = Limiter::new(one_key_config());
    let mut now = 1_000_000_000u64;
    group.bench_function("ours_acquire_at", |b| {
        b.iter(|| {
            now += STEP_NS;
            let _ = black_box(ours.acquire_at(black_box(&key), black_box(1), now));
        })
    });

    let ours: Limiter<u64> = Limiter::new(with_two_wider(one_key_config()));
    let mut now = 1_000_000_000u64;
    group.bench_function("ours_acquire_at_3_bandwidths", |b| {
        b.iter(|| {
            now += STEP_NS;
            let _ = black_box(ours.acquire_set_at(black_box(&key), black_box(1), now));
        })
    });

    let ours: Limiter<u64> = Limiter::new(one_key_config());
    let mut now = 1_000_000_000u64;
    group.bench_function("ours_acquire_with", |b| {
        b.iter(|| {
            now += STEP_NS;
            let _ =
                black_box(ours.acquire_with(black_box(&key), Request::cost(black_box(1)).at(now)));
        })
    });

    let clock = ManualClock::new(1_000_000_000);
    let ours = Limiter::<u64>::builder(one_key_config())
        .clock(clock.clone())
        .build();
    group.bench_function("ours_acquire_manual_clock", |b| {
        b.iter(|| {
            clock.advance(STEP_NS);
            let _ = black_box(ours.acquire(black_box(&key), black_box(1)));
        })
    });

    let direct = DirectLimiter::new(one_key_config());
    let mut now = 1_000_000_000u64;
    group.bench_function("ours_direct_acquire_at", |b| {
        b.iter(|| {
            now += STEP_NS;
            let _ = black_box(direct.acquire_at(black_box(1), now));
        })
    });

    let clock = ManualClock::new(1_000_000_000);
    let direct = DirectLimiter::with_clock(one_key_config(), clock.clone());
    group.bench_function("ours_direct_acquire_manual_clock", |b| {
        b.iter(|| {
            clock.advance(STEP_NS);
            let _ = black_box(direct.acquire(black_box(1)));
        })
    });

    let proto = common::DirectProto::new(one_key_config(), 1_000_000_000);
    let mut now = 1_000_000_000u64;
    group.bench_function("proto_direct_mutex_transition", |b| {
        b.iter(|| {
            now += STEP_NS;
            let _ = black_box(proto.acquire_at(black_box(1), now));
        })
    });

    let clock = FakeRelativeClock::default();
    clock.advance(Duration::from_secs(1));
    let governor = RateLimiter::direct_with_clock(one_key_quota(), clock.clone());
    group.bench_function("governor_direct_check", |b| {
        b.iter(|| {
            clock.advance(Duration::from_nanos(STEP_NS));
            let _ = black_box(governor.check());
        })
    });

    let clock = FakeRelativeClock::default();
    group.bench_function("fake_clock_advance_alone", |b| {
        b.iter(|| clock.advance(black_box(Duration::from_nanos(STEP_NS))))
    });

    let clock = ManualClock::new(1_000_000_000);
    group.bench_function("manual_clock_advance_alone", |b| {
        b.iter(|| clock.advance(black_box(STEP_NS)))
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
            acquire(black_box(key), now, 1)
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

    for (name, sweep) in [("ours_acquire_at", 2), ("ours_no_sweep", 0)] {
        let ours: Limiter<u64> = Limiter::builder(keyed_config()).sweep_per_op(sweep).build();
        keyed_bench(&mut group, name, &sequence, |key, now, cost| {
            // The whole `Result<Decision, _>` goes through `black_box`, then the bit is read.
            black_box(ours.acquire_at(&key, cost, now))
                .unwrap()
                .is_allowed()
        });
        let stats = ours.stats();
        eprintln!(
            "{name}: live keys {} (of {KEYS}), lossless evictions {}",
            stats.live_keys, stats.evicted_lossless
        );
    }

    let ours: Limiter<u64> = Limiter::new(with_two_wider(keyed_config()));
    keyed_bench(
        &mut group,
        "ours_acquire_at_3_bandwidths",
        &sequence,
        |key, now, cost| {
            black_box(ours.acquire_set_at(&key, cost, now))
                .unwrap()
                .is_allowed()
        },
    );
    drop(ours);

    let proto = common::FlatKeyedProto::new(keyed_config());
    keyed_bench(
        &mut group,
        "proto_flat_table",
        &sequence,
        |key, now, cost| {
            black_box(proto.acquire_at(key, cost, now))
                .unwrap()
                .is_allowed()
        },
    );
    drop(proto);

    let clock = FakeRelativeClock::default();
    clock.advance(Duration::from_nanos(START));
    let governor = RateLimiter::dashmap_with_clock(keyed_quota(), clock.clone());
    let mut clock_at = START;
    keyed_bench(
        &mut group,
        "governor_dashmap_check_key",
        &sequence,
        |key, now, cost| {
            // Governor reads its clock: move it to the same `now` as ours (by one step per call).
            if now > clock_at {
                clock.advance(Duration::from_nanos(now - clock_at));
                clock_at = now;
            }
            if cost == 1 {
                black_box(governor.check_key(&key)).is_ok()
            } else {
                let n = NonZeroU32::new(cost as u32).unwrap();
                governor.check_key_n(&key, n).unwrap().is_ok()
            }
        },
    );
    eprintln!(
        "governor: live keys {}, clock {:.1} s after start",
        governor.len(),
        (governor::clock::Clock::now(&clock).as_u64() - START) as f64 / 1e9
    );
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(40);
    targets = one_key, pure_transition, keys_1m
}
criterion_main!(benches);
