//! shuttle: thousands of random and PCT schedules of 4 threads on the real keyed limiter.
//!
//! With the `shuttle` feature the limiter's `sync` shim hands out shuttle's `Mutex`, so shuttle schedules
//! the shipped code. Each schedule runs 4 threads x 30 operations (acquires with and without request ids,
//! invalid costs, peeks, sweeps, reconfigures) over 5 keys in one shard bounded to 3 live keys, at
//! per-thread injected clocks that drift apart (so callers lag the bucket's cursor). The operations
//! themselves are drawn from shuttle's controlled randomness, so a schedule string replays everything.
//! After every schedule the history must pass `check_execution`: linearizable against the reference model,
//! no overselling (arrival curve), invariants and counters.
//!
//! A failing schedule makes shuttle print it (`failing schedule: "..."`); pass that string to
//! `shuttle::replay` to reproduce it. The racy-variant tests assert that shuttle finds the double spend and
//! that the printed schedule replays to the same failure.
//!
//! The `direct_*` tests run the unkeyed `DirectLimiter` (its spin lock's atomic flag and cell come from
//! the same shim; each cell access is a scheduling point under shuttle): 2 threads x 12 random
//! acquires and peeks at drifting clocks, random and PCT schedules, each execution checked by
//! `check_direct` (atomicity against the sequential transition, no overselling, invariants), plus the
//! exact final balance when the clocks stand still.
//!
//! Run: `cargo test -p bucketproof-limiter --release --features shuttle,racy-variant --test shuttle --
//! --nocapture`. `BUCKETPROOF_SHUTTLE_ITERATIONS` (default 5000 per scheduler) and
//! `BUCKETPROOF_SHUTTLE_SEED` (default fixed, so CI is reproducible) change the search.
#![cfg(feature = "shuttle")]

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bucketproof_limiter::{AcquireError, Config, DirectLimiter, EvictionPolicy, Limiter, Rate};
use common::direct::{DirectOp, DirectRecorder, DirectRet, admitted, check_direct};
use common::history::{Op, Recorder, Ret, Setup, check_execution};
use shuttle::rand::{Rng, thread_rng};
use shuttle::scheduler::{PctScheduler, RandomScheduler, Scheduler};
use shuttle::{Config as ShuttleConfig, Runner};

const SECOND: u64 = bucketproof_limiter::NANOS_PER_SECOND;
const THREADS: usize = 4;
const OPS_PER_THREAD: usize = 30;
const KEYS: u64 = 5;
const MAX_KEYS: usize = 3;
/// Request ids are used on these keys only (a live record pins a key, and the other keys should churn).
const KEYS_WITH_IDS: u64 = 2;
const PCT_DEPTH: usize = 3;

fn default_config() -> Config {
    Config::new(3, Rate::per_second(4)).unwrap()
}

fn setup() -> Setup {
    Setup {
        dedupe_window: 60 * SECOND,
        dedupe_per_key: 4,
        ..Setup::new(default_config())
    }
}

fn build() -> Limiter<u64> {
    let setup = setup();
    Limiter::builder(setup.default_config)
        .shards(1)
        .max_keys(MAX_KEYS, EvictionPolicy::EvictFull)
        .dedupe(
            Duration::from_nanos(setup.dedupe_window),
            setup.dedupe_per_key,
        )
        .hasher_seed(11)
        .build()
}

fn iterations() -> usize {
    std::env::var("BUCKETPROOF_SHUTTLE_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000)
}

fn seed() -> u64 {
    std::env::var("BUCKETPROOF_SHUTTLE_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x0b0c_6e7f)
}

/// One thread's operations, drawn from shuttle's (recorded, replayable) randomness.
fn thread_body(limiter: &Limiter<u64>, recorder: &Recorder, thread: usize, racy: bool) -> Vec<Op> {
    let mut rng = thread_rng();
    let mut now = rng.gen_range(0..SECOND / 2);
    let capacity = default_config().capacity();
    let mut ops = Vec::with_capacity(OPS_PER_THREAD);
    for _ in 0..OPS_PER_THREAD {
        now += rng.gen_range(0..SECOND / 3);
        let key = rng.gen_range(0..KEYS);
        let op = if racy {
            #[cfg(feature = "racy-variant")]
            {
                recorder.acquire_racy(limiter, thread, key % 2, now, rng.gen_range(1..=capacity))
            }
            #[cfg(not(feature = "racy-variant"))]
            panic!("the racy tests need the racy-variant feature")
        } else {
            match rng.gen_range(0..100) {
                0..=59 => {
                    let cost = match rng.gen_range(0..20) {
                        0 => 0,
                        1 => capacity + 1,
                        _ => rng.gen_range(1..=capacity),
                    };
                    let request_id =
                        (key < KEYS_WITH_IDS && rng.gen_bool(0.4)).then(|| rng.gen_range(0..3));
                    recorder.acquire(limiter, thread, key, now, cost, request_id)
                }
                60..=79 => recorder.peek(limiter, thread, key, now),
                80..=89 => recorder.sweep(limiter, thread, now),
                _ => {
                    // Only key 0 is ever reconfigured (an override pins the key against eviction).
                    let config = if rng.gen_bool(0.5) {
                        Config::new(5, "3/2s".parse().unwrap()).unwrap()
                    } else {
                        default_config()
                    };
                    recorder.reconfigure(limiter, thread, 0, now, config)
                }
            }
        };
        ops.push(op);
    }
    ops
}

/// How often the schedules reached the paths the test is about (printed, and asserted non-zero).
#[derive(Default)]
struct Reached {
    recreated: AtomicUsize,
    key_limit: AtomicUsize,
    replayed: AtomicUsize,
    denied: AtomicUsize,
}

impl Reached {
    fn count(&self, ops: &[Op]) {
        let mut seen_keys = std::collections::BTreeSet::new();
        let mut sorted: Vec<&Op> = ops.iter().collect();
        sorted.sort_by_key(|op| op.returned);
        let mut recreated = false;
        for op in sorted {
            if let Ret::Acquired(Ok(a)) = &op.ret {
                recreated |= a.created && !seen_keys.insert(op.key);
                seen_keys.insert(op.key);
            }
        }
        let any = |f: &dyn Fn(&Ret) -> bool| ops.iter().any(|op| f(&op.ret));
        let bump = |counter: &AtomicUsize, hit: bool| {
            if hit {
                counter.fetch_add(1, Ordering::Relaxed);
            }
        };
        bump(&self.recreated, recreated);
        bump(
            &self.key_limit,
            any(&|r| matches!(r, Ret::Acquired(Err(AcquireError::KeyLimitReached { .. })))),
        );
        bump(
            &self.replayed,
            any(&|r| matches!(r, Ret::Acquired(Ok(a)) if a.replayed)),
        );
        bump(
            &self.denied,
            any(&|r| matches!(r, Ret::Acquired(Ok(a)) if !a.decision.is_allowed())),
        );
    }

    fn summary(&self) -> String {
        format!(
            "schedules with a re-created key {}, a key-limit refusal {}, a replayed request id {}, a denial {}",
            self.recreated.load(Ordering::Relaxed),
            self.key_limit.load(Ordering::Relaxed),
            self.replayed.load(Ordering::Relaxed),
            self.denied.load(Ordering::Relaxed)
        )
    }
}

/// Runs `body` on `threads` threads (thread 0 on the current one) against one limiter and one recorder,
/// and returns every thread's ops.
fn run_threads<L, R, O>(
    limiter: &Arc<L>,
    recorder: R,
    threads: usize,
    body: impl Fn(&L, &R, usize) -> Vec<O> + Clone + Send + Sync + 'static,
) -> Vec<O>
where
    L: Send + Sync + 'static,
    R: Send + Sync + 'static,
    O: Send + 'static,
{
    let recorder = Arc::new(recorder);
    let handles: Vec<_> = (1..threads)
        .map(|thread| {
            let (limiter, recorder, body) = (limiter.clone(), recorder.clone(), body.clone());
            shuttle::thread::spawn(move || body(&limiter, &recorder, thread))
        })
        .collect();
    let mut ops = body(limiter, &recorder, 0);
    for handle in handles {
        ops.extend(handle.join().unwrap());
    }
    ops
}

/// The test body shuttle runs once per schedule.
fn scenario(racy: bool, reached: Arc<Reached>) -> impl Fn() + Send + Sync + 'static {
    move || {
        let limiter = Arc::new(build());
        let ops = run_threads(&limiter, Recorder::new(), THREADS, move |l, r, thread| {
            thread_body(l, r, thread, racy)
        });
        reached.count(&ops);
        if let Err(why) = check_execution(&setup(), &limiter, &ops) {
            panic!("shuttle found a bad execution\n{why}");
        }
    }
}

/// Runs the correct limiter under `scheduler`, prints what was explored, checks the paths were reached.
fn explore(name: &str, scheduler: impl Scheduler + 'static) {
    let reached = Arc::new(Reached::default());
    println!(
        "shuttle {name}: seed {} (set BUCKETPROOF_SHUTTLE_SEED to change; a failure prints its schedule)",
        seed()
    );
    let started = Instant::now();
    let schedules =
        Runner::new(scheduler, ShuttleConfig::new()).run(scenario(false, reached.clone()));
    println!(
        "shuttle {name}: {schedules} schedules of {THREADS} threads x {OPS_PER_THREAD} ops in {:.2?}; {}",
        started.elapsed(),
        reached.summary()
    );
    assert_eq!(schedules, iterations());
    for (what, counter) in [
        ("a re-created key", &reached.recreated),
        ("a key-limit refusal", &reached.key_limit),
        ("a replayed request id", &reached.replayed),
        ("a denial", &reached.denied),
    ] {
        assert!(
            counter.load(Ordering::Relaxed) > 0,
            "{name}: no schedule reached {what}"
        );
    }
}

#[test]
fn random_schedules_of_four_threads_stay_linearizable_and_never_oversell() {
    explore(
        "random",
        RandomScheduler::new_from_seed(seed(), iterations()),
    );
}

#[test]
fn pct_schedules_of_four_threads_stay_linearizable_and_never_oversell() {
    explore(
        "PCT",
        PctScheduler::new_from_seed(seed(), PCT_DEPTH, iterations()),
    );
}

/// Runs the racy variant under `run`, expects a failure, and returns its message (shuttle's schedule
/// included).
fn racy_failure(run: impl FnOnce()) -> String {
    let payload = catch_unwind(AssertUnwindSafe(run))
        .expect_err("shuttle explored the racy variant and missed the double spend");
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

fn assert_names_the_double_spend(message: &str) {
    assert!(
        message.contains("shuttle found a bad execution"),
        "shuttle failed for another reason: {message}"
    );
    assert!(message.contains("not linearizable"), "{message}");
}

/// The failure message of random schedules of the racy variant (the run must fail).
fn random_racy_failure(reached: &Arc<Reached>) -> String {
    racy_failure(|| {
        Runner::new(
            RandomScheduler::new_from_seed(seed(), iterations()),
            ShuttleConfig::new(),
        )
        .run(scenario(true, reached.clone()));
    })
}

#[test]
fn shuttle_finds_the_racy_variants_double_spend_with_random_and_pct_schedules() {
    let reached = Arc::new(Reached::default());
    let random = random_racy_failure(&reached);
    assert_names_the_double_spend(&random);
    assert!(random.contains("failing schedule"), "{random}");
    let pct = racy_failure(|| {
        Runner::new(
            PctScheduler::new_from_seed(seed(), PCT_DEPTH, iterations()),
            ShuttleConfig::new(),
        )
        .run(scenario(true, reached.clone()));
    });
    assert_names_the_double_spend(&pct);
}

#[test]
fn a_printed_failing_schedule_replays_to_the_same_failure() {
    let reached = Arc::new(Reached::default());
    let found = random_racy_failure(&reached);
    // Shuttle's message: `failing schedule:\n"\n<schedule>\n"\npass that string to `shuttle::replay`...`
    let schedule = found
        .split("failing schedule:\n\"\n")
        .nth(1)
        .and_then(|rest| rest.split("\n\"").next())
        .unwrap_or_else(|| panic!("no schedule in the failure message: {found}"))
        .to_string();
    let replayed = racy_failure(|| shuttle::replay(scenario(true, reached.clone()), &schedule));
    assert_names_the_double_spend(&replayed);
    // The same schedule gives the same history, so the same verdict, word for word.
    let history = |message: &str| {
        message
            .split("original panic: ")
            .nth(1)
            .unwrap_or(message)
            .to_string()
    };
    assert_eq!(history(&replayed), history(&found));
}

const DIRECT_THREADS: usize = 2;
const DIRECT_OPS_PER_THREAD: usize = 12;

/// One thread's calls on the direct limiter; `moving` false keeps every call at the same instant.
fn direct_body(
    limiter: &DirectLimiter,
    recorder: &DirectRecorder,
    thread: usize,
    moving: bool,
) -> Vec<DirectOp> {
    let mut rng = thread_rng();
    let mut now = if moving {
        rng.gen_range(0..SECOND / 2)
    } else {
        0
    };
    let capacity = default_config().capacity();
    (0..DIRECT_OPS_PER_THREAD)
        .map(|_| {
            if moving {
                now += rng.gen_range(0..SECOND / 3);
            }
            if rng.gen_range(0..5) == 0 {
                recorder.peek(limiter, thread, now)
            } else {
                recorder.acquire(limiter, thread, now, rng.gen_range(1..=capacity))
            }
        })
        .collect()
}

/// Schedules that had a denial and schedules where both threads were admitted something.
#[derive(Default)]
struct DirectReached {
    denied: AtomicUsize,
    both_admitted: AtomicUsize,
}

fn direct_scenario(moving: bool, reached: Arc<DirectReached>) -> impl Fn() + Send + Sync + 'static {
    move || {
        let config = default_config();
        let limiter = Arc::new(DirectLimiter::new(config));
        let ops = run_threads(
            &limiter,
            DirectRecorder::new(),
            DIRECT_THREADS,
            move |l, r, t| direct_body(l, r, t, moving),
        );
        let allowed =
            |op: &DirectOp| matches!(&op.ret, DirectRet::Acquired(Ok(d)) if d.is_allowed());
        if ops
            .iter()
            .any(|op| matches!(&op.ret, DirectRet::Acquired(Ok(d)) if !d.is_allowed()))
        {
            reached.denied.fetch_add(1, Ordering::Relaxed);
        }
        if (0..DIRECT_THREADS).all(|t| ops.iter().any(|op| op.thread == t && allowed(op))) {
            reached.both_admitted.fetch_add(1, Ordering::Relaxed);
        }
        if let Err(why) = check_direct(&config, &limiter, &ops) {
            panic!("shuttle found a bad execution\n{why}");
        }
        if !moving {
            let (state, _) = limiter.inspect();
            let admitted = admitted(&ops);
            assert!(admitted <= config.capacity(), "admitted {admitted}");
            assert_eq!(
                state.balance(),
                config.capacity_units() - admitted as u128 * config.units_per_token(),
                "final balance != capacity - admitted"
            );
        }
    }
}

fn explore_direct(name: &str, moving: bool, scheduler: impl Scheduler + 'static) {
    let reached = Arc::new(DirectReached::default());
    let started = Instant::now();
    let schedules =
        Runner::new(scheduler, ShuttleConfig::new()).run(direct_scenario(moving, reached.clone()));
    let (denied, both) = (
        reached.denied.load(Ordering::Relaxed),
        reached.both_admitted.load(Ordering::Relaxed),
    );
    println!(
        "shuttle {name}: {schedules} schedules of {DIRECT_THREADS} threads x {DIRECT_OPS_PER_THREAD} ops \
         in {:.2?}; schedules with a denial {denied}, with both threads admitted {both}",
        started.elapsed()
    );
    assert_eq!(schedules, iterations());
    assert!(denied > 0 && both > 0, "{name}: paths not reached");
}

/// `explore_direct` under the random scheduler, then under PCT, with the same seed and count.
fn explore_direct_random_and_pct(name: &str, moving: bool) {
    explore_direct(
        &format!("direct, random, {name}"),
        moving,
        RandomScheduler::new_from_seed(seed(), iterations()),
    );
    explore_direct(
        &format!("direct, PCT, {name}"),
        moving,
        PctScheduler::new_from_seed(seed(), PCT_DEPTH, iterations()),
    );
}

#[test]
fn direct_random_and_pct_schedules_linearize_and_never_oversell() {
    explore_direct_random_and_pct("drifting clocks", true);
}

#[test]
fn direct_schedules_at_one_instant_leave_exactly_capacity_minus_admitted() {
    explore_direct_random_and_pct("one instant", false);
}
