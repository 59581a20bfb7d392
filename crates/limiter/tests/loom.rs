//! loom: every interleaving (up to a preemption bound) of small scenarios on the real keyed limiter.
//!
//! Built with `RUSTFLAGS="--cfg loom"`, the limiter's `sync` shim hands out loom's `Mutex`, so loom
//! schedules the shipped code (shard locks, amortized sweep, eviction at the key bound, request ids,
//! reconfigure), not a copy. Each scenario runs 2-3 threads; after every explored execution the history
//! must pass `check_execution`: linearizable against the reference model, no overselling (arrival curve),
//! invariants and counters. The last test runs the deliberately racy acquire and asserts that loom finds
//! its double spend, so a green run means something.
//!
//! The `direct_*` tests run the unkeyed `DirectLimiter`, whose spin lock (an `AtomicBool` and an
//! `UnsafeCell`) also comes from the shim: loom explores every interleaving of its compare-and-swap,
//! spin and unlock, and its `UnsafeCell` reports any access to the bucket that the lock does not order
//! (a data race) as a failure. Each execution must pass `check_direct` (atomicity against the
//! sequential transition, no overselling, invariants).
//!
//! Run (release, own target dir so the loom build does not evict the normal one):
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p bucketproof-limiter --release
//! --features racy-variant --test loom -- --nocapture` (prints the executions explored per scenario).
#![cfg(loom)]

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use bucketproof_limiter::{AcquireError, Config, DirectLimiter, EvictionPolicy, Limiter, Rate};
use common::direct::{DirectOp, DirectRecorder, DirectRet, admitted, check_direct};
use common::history::{Op, Recorder, Ret, Setup, check_execution};
use loom::sync::Arc;

const SECOND: u64 = bucketproof_limiter::NANOS_PER_SECOND;
/// Preemptions explored per execution (design.md section 8: 2-3).
const PREEMPTION_BOUND: usize = 3;

fn config(capacity: u64, per_second: u64) -> Config {
    Config::new(capacity, Rate::per_second(per_second)).unwrap()
}

/// A thread body of one scenario: it gets the limiter, the recorder and its thread number, and returns
/// the operations it recorded.
type ThreadBody<L, R, O> = fn(&L, &R, usize) -> Vec<O>;
type Body = ThreadBody<Limiter<u64>, Recorder, Op>;

/// A property of one execution's history that a scenario must reach in at least one execution, so a
/// test proves the racing path it is named after was explored (e.g. "key 1 was evicted and re-created").
type PathWitness<O> = (&'static str, fn(&[O]) -> bool);
type Witness = PathWitness<Op>;

/// [`explore_with`] on the keyed limiter: every execution must pass `check_execution`.
fn explore(
    name: &str,
    setup: Setup,
    build: fn(Config) -> Limiter<u64>,
    bodies: Vec<Body>,
    witnesses: &'static [Witness],
) -> usize {
    let default_config = setup.default_config;
    explore_with(
        name,
        move || (build(default_config), Recorder::new()),
        bodies,
        move |limiter, ops| check_execution(&setup, limiter, ops),
        witnesses,
    )
}

/// Runs `bodies` as concurrent threads (the first on loom's main thread) under every interleaving loom
/// explores, checks each execution with `check`, asserts every witness was reached, and returns the
/// number of executions. `make` builds a fresh limiter and recorder for each execution.
fn explore_with<L, R, O>(
    name: &str,
    make: impl Fn() -> (L, R) + Send + Sync + 'static,
    bodies: Vec<ThreadBody<L, R, O>>,
    check: impl Fn(&L, &[O]) -> Result<(), String> + Send + Sync + 'static,
    witnesses: &'static [PathWitness<O>],
) -> usize
where
    L: Send + Sync + 'static,
    R: Send + Sync + 'static,
    O: Send + 'static,
{
    let executions = std::sync::Arc::new(AtomicUsize::new(0));
    let seen: std::sync::Arc<Vec<AtomicUsize>> =
        std::sync::Arc::new(witnesses.iter().map(|_| AtomicUsize::new(0)).collect());
    let (counter, seen_in_model) = (executions.clone(), seen.clone());
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(PREEMPTION_BOUND);
    let started = Instant::now();
    builder.check(move || {
        counter.fetch_add(1, Ordering::Relaxed);
        let (limiter, recorder) = make();
        let (limiter, recorder) = (Arc::new(limiter), Arc::new(recorder));
        let handles: Vec<_> = bodies[1..]
            .iter()
            .enumerate()
            .map(|(i, body)| {
                let (limiter, recorder, body) = (limiter.clone(), recorder.clone(), *body);
                loom::thread::spawn(move || body(&limiter, &recorder, i + 1))
            })
            .collect();
        let mut ops = bodies[0](&limiter, &recorder, 0);
        for handle in handles {
            ops.extend(handle.join().unwrap());
        }
        if let Err(why) = check(&limiter, &ops) {
            panic!("loom found a bad execution\n{why}");
        }
        for ((_, witness), count) in witnesses.iter().zip(seen_in_model.iter()) {
            if witness(&ops) {
                count.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    let executions = executions.load(Ordering::Relaxed);
    let reached: Vec<String> = witnesses
        .iter()
        .zip(seen.iter())
        .map(|((what, _), count)| format!("{what}: {}", count.load(Ordering::Relaxed)))
        .collect();
    println!(
        "loom {name}: {executions} executions (preemption bound {PREEMPTION_BOUND}) in {:.2?}; {}",
        started.elapsed(),
        reached.join(", ")
    );
    for ((what, _), count) in witnesses.iter().zip(seen.iter()) {
        assert!(
            count.load(Ordering::Relaxed) > 0,
            "{name}: no execution reached \"{what}\""
        );
    }
    executions
}

/// The ops of `key` that are acquires, in return order.
fn acquires(ops: &[Op], key: u64) -> Vec<&Op> {
    let mut found: Vec<&Op> = ops
        .iter()
        .filter(|op| op.key == key && matches!(op.ret, Ret::Acquired(_)))
        .collect();
    found.sort_by_key(|op| op.returned);
    found
}

/// Some acquire of `key` after its first one re-created the bucket (it had been evicted).
fn recreated(ops: &[Op], key: u64) -> bool {
    acquires(ops, key)
        .iter()
        .skip(1)
        .any(|op| matches!(&op.ret, Ret::Acquired(Ok(a)) if a.created))
}

fn denied(ops: &[Op]) -> bool {
    ops.iter()
        .any(|op| matches!(&op.ret, Ret::Acquired(Ok(a)) if !a.decision.is_allowed()))
}

fn key_limit_reached(ops: &[Op]) -> bool {
    ops.iter().any(|op| {
        matches!(
            &op.ret,
            Ret::Acquired(Err(AcquireError::KeyLimitReached { .. }))
        )
    })
}

fn one_shard(config: Config) -> Limiter<u64> {
    Limiter::builder(config).shards(1).hasher_seed(5).build()
}

fn bounded(config: Config, policy: EvictionPolicy) -> Limiter<u64> {
    Limiter::builder(config)
        .shards(1)
        .max_keys(1, policy)
        .sweep_per_op(0)
        .hasher_seed(5)
        .build()
}

/// Some op ran at an earlier `now` than an op that had already returned (a caller whose clock lags).
fn lagging_clock(ops: &[Op]) -> bool {
    ops.iter()
        .any(|a| ops.iter().any(|b| a.returned < b.invoked && b.now < a.now))
}

#[test]
fn three_threads_on_one_key_never_oversell_and_linearize() {
    let executions = explore(
        "one key, 3 threads",
        Setup::new(config(2, 1)),
        one_shard,
        vec![
            |l, r, t| {
                vec![
                    r.acquire(l, t, 1, 0, 1, None),
                    r.acquire(l, t, 1, SECOND / 2, 1, None),
                    r.acquire(l, t, 1, 2 * SECOND, 2, None),
                ]
            },
            |l, r, t| {
                vec![
                    r.acquire(l, t, 1, SECOND / 2, 2, None),
                    r.peek(l, t, 1, SECOND),
                    r.acquire(l, t, 1, SECOND, 1, None),
                ]
            },
            |l, r, t| {
                vec![
                    r.acquire(l, t, 1, SECOND, 1, None),
                    r.acquire(l, t, 1, SECOND, 1, None),
                ]
            },
        ],
        &[("a denial", denied), ("a lagging clock", lagging_clock)],
    );
    assert!(executions > 100, "only {executions} executions explored");
}

#[test]
fn two_keys_in_one_shard_with_the_amortized_sweep_stay_independent() {
    // One shard: both keys share its lock, its map and its sweep cursor. Every acquire also sweeps two
    // entries, so a key that refilled to full may be dropped by an operation on the other key and re-created.
    let executions = explore(
        "two keys in one shard, amortized sweep",
        Setup::new(config(2, 1)),
        one_shard,
        vec![
            |l, r, t| {
                vec![
                    r.acquire(l, t, 1, 0, 1, None),
                    r.acquire(l, t, 2, 2 * SECOND, 1, None),
                    r.acquire(l, t, 1, 2 * SECOND, 1, None),
                ]
            },
            |l, r, t| {
                vec![
                    r.acquire(l, t, 2, 0, 2, None),
                    r.acquire(l, t, 1, 2 * SECOND, 2, None),
                    r.acquire(l, t, 2, 3 * SECOND, 2, None),
                ]
            },
            |l, r, t| {
                vec![
                    r.acquire(l, t, 1, SECOND, 1, None),
                    r.peek(l, t, 2, 2 * SECOND),
                ]
            },
        ],
        &[
            ("key 1 swept and re-created", |ops| recreated(ops, 1)),
            ("key 2 swept and re-created", |ops| recreated(ops, 2)),
        ],
    );
    assert!(executions > 100, "only {executions} executions explored");
}

#[test]
fn evict_full_at_the_key_bound_racing_an_acquire_is_lossless() {
    // One key fits. Key 2 arriving at 1 s may evict key 1 only if key 1 has refilled to full; key 1 is
    // re-acquired concurrently (emptying it), and a full sweep races both.
    let executions = explore(
        "EvictFull at max_keys 1 + sweep",
        Setup::new(config(2, 1)),
        |c| bounded(c, EvictionPolicy::EvictFull),
        vec![
            |l, r, t| {
                vec![
                    r.acquire(l, t, 1, 0, 1, None),
                    r.acquire(l, t, 1, SECOND, 2, None),
                ]
            },
            |l, r, t| vec![r.acquire(l, t, 2, SECOND, 1, None), r.peek(l, t, 1, SECOND)],
            |l, r, t| vec![r.sweep(l, t, SECOND)],
        ],
        &[
            ("key 1 evicted and re-created", |ops| recreated(ops, 1)),
            ("a new key refused at the bound", key_limit_reached),
        ],
    );
    assert!(executions > 100, "only {executions} executions explored");
}

#[test]
fn evict_least_recent_racing_an_acquire_is_lossy_only_by_contract() {
    // Key 2 arriving while key 1 is drained evicts key 1 anyway (lossy, by contract): the checker then
    // lets the model drop a non-full bucket, but everything else must still linearize.
    let setup = Setup {
        lossy_eviction: true,
        ..Setup::new(config(2, 1))
    };
    let executions = explore(
        "EvictLeastRecent at max_keys 1",
        setup,
        |c| bounded(c, EvictionPolicy::EvictLeastRecent),
        vec![
            |l, r, t| {
                vec![
                    r.acquire(l, t, 1, 0, 2, None),
                    r.acquire(l, t, 1, SECOND / 2, 1, None),
                ]
            },
            |l, r, t| {
                vec![
                    r.acquire(l, t, 2, SECOND / 4, 1, None),
                    r.peek(l, t, 1, SECOND / 2),
                ]
            },
            |l, r, t| vec![r.acquire(l, t, 2, SECOND / 2, 1, None)],
        ],
        &[("key 1 dropped while drained and re-created", |ops| {
            recreated(ops, 1)
        })],
    );
    assert!(executions > 100, "only {executions} executions explored");
}

#[test]
fn a_reconfigure_racing_acquires_is_atomic() {
    // Capacity 2 at 1/s becomes 4 at 3/2 per second at 0.5 s. A cost of 3 is an error before and a
    // decision after; every acquire sees the old or the new config whole, never a mix.
    let executions = explore(
        "reconfigure racing acquires",
        Setup::new(config(2, 1)),
        one_shard,
        vec![
            |l, r, t| {
                vec![
                    r.acquire(l, t, 1, 0, 2, None),
                    r.acquire(l, t, 1, SECOND, 2, None),
                ]
            },
            |l, r, t| {
                let new = Config::new(4, "3/2s".parse().unwrap()).unwrap();
                vec![
                    r.reconfigure(l, t, 1, SECOND / 2, new),
                    r.peek(l, t, 1, SECOND),
                ]
            },
            |l, r, t| {
                vec![
                    r.acquire(l, t, 1, SECOND / 2, 1, None),
                    r.acquire(l, t, 1, SECOND, 3, None),
                ]
            },
        ],
        &[
            ("cost 3 refused under the old config", |ops| {
                ops.iter().any(|op| {
                    matches!(
                        &op.ret,
                        Ret::Acquired(Err(AcquireError::InvalidCost { .. }))
                    )
                })
            }),
            ("cost 3 decided under the new config", |ops| {
                ops.iter().any(|op| {
                    matches!(
                        (&op.call, &op.ret),
                        (
                            common::history::Call::Acquire { cost: 3, .. },
                            Ret::Acquired(Ok(_))
                        )
                    )
                })
            }),
        ],
    );
    assert!(executions > 100, "only {executions} executions explored");
}

#[test]
fn a_duplicate_request_id_racing_itself_is_charged_once() {
    // Two threads send request 9 at once (a client retry racing the original), while a third spends
    // from the same key: whatever the order, request 9 is charged once and both copies get one decision.
    let executions = explore(
        "duplicate request id",
        Setup::new(config(3, 1)),
        one_shard,
        vec![
            |l, r, t| vec![r.acquire(l, t, 1, 0, 2, Some(9)), r.peek(l, t, 1, 0)],
            |l, r, t| vec![r.acquire(l, t, 1, 0, 2, Some(9))],
            |l, r, t| {
                vec![
                    r.acquire(l, t, 1, 0, 1, None),
                    r.acquire(l, t, 1, 0, 2, Some(10)),
                ]
            },
        ],
        &[
            ("request 9 replayed as allowed", |ops| {
                ops.iter().any(|op| {
                    matches!(&op.ret, Ret::Acquired(Ok(a)) if a.replayed && a.decision.is_allowed())
                })
            }),
            ("request 9 replayed as denied", |ops| {
                ops.iter().any(|op| {
                    matches!(&op.ret, Ret::Acquired(Ok(a)) if a.replayed && !a.decision.is_allowed())
                })
            }),
        ],
    );
    assert!(executions > 100, "only {executions} executions explored");
}

#[test]
fn loom_finds_the_racy_variants_double_spend() {
    // Two threads take the only token of a fresh bucket through `acquire_racy_at` (read and write in two
    // critical sections). Some interleaving lets both read "full" before either writes: loom must find it,
    // and the checks must name both the broken linearizability and the overselling.
    let found = catch_unwind(AssertUnwindSafe(|| {
        explore(
            "racy variant",
            Setup::new(config(1, 1)),
            |c| {
                Limiter::builder(c)
                    .shards(1)
                    .sweep_per_op(0)
                    .hasher_seed(5)
                    .build()
            },
            vec![|l, r, t| vec![r.acquire_racy(l, t, 1, 0, 1)], |l, r, t| {
                vec![r.acquire_racy(l, t, 1, 0, 1)]
            }],
            &[],
        )
    }));
    let payload = found.expect_err("loom explored every interleaving and missed the double spend");
    let message = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    assert!(
        message.contains("loom found a bad execution"),
        "loom failed for another reason: {message}"
    );
    assert!(message.contains("not linearizable"), "{message}");
    assert!(message.contains("oversold key 1"), "{message}");
}

/// The thread bodies of a direct-limiter scenario.
type DirectBody = fn(&DirectLimiter, &DirectRecorder, usize) -> Vec<DirectOp>;

/// A property some execution of a direct-limiter scenario must reach (see [`Witness`]).
type DirectWitness = (&'static str, fn(&[DirectOp]) -> bool);

/// [`explore_with`] on a [`DirectLimiter`]: every execution must pass `check_direct` and `extra`.
fn explore_direct(
    name: &str,
    config: Config,
    bodies: Vec<DirectBody>,
    extra: fn(&Config, &DirectLimiter, &[DirectOp]) -> Result<(), String>,
    witnesses: &'static [DirectWitness],
) -> usize {
    explore_with(
        name,
        move || (DirectLimiter::new(config), DirectRecorder::new()),
        bodies,
        move |limiter, ops| check_direct(&config, limiter, ops).and(extra(&config, limiter, ops)),
        witnesses,
    )
}

fn direct_denied(ops: &[DirectOp]) -> bool {
    ops.iter()
        .any(|op| matches!(&op.ret, DirectRet::Acquired(Ok(d)) if !d.is_allowed()))
}

/// Both threads were admitted something: the token supply was really shared.
fn both_admitted(ops: &[DirectOp]) -> bool {
    (0..2).all(|thread| {
        ops.iter().any(|op| {
            op.thread == thread && matches!(&op.ret, DirectRet::Acquired(Ok(d)) if d.is_allowed())
        })
    })
}

/// The two threads' calls overlapped in real time (some call was invoked while the other thread's
/// call was in flight), so the lock really was contended in this execution.
fn overlapped(ops: &[DirectOp]) -> bool {
    ops.iter().any(|a| {
        ops.iter()
            .any(|b| a.thread != b.thread && a.invoked < b.invoked && b.invoked < a.returned)
    })
}

#[test]
fn direct_two_threads_at_one_instant_sell_at_most_capacity_and_leave_the_exact_balance() {
    // All calls at the same `now`: nothing refills, so the final balance must be exactly capacity minus
    // what was admitted, and the admitted cost at most the capacity (demand is 6 against capacity 3).
    let executions = explore_direct(
        "direct limiter, one instant",
        config(3, 1),
        vec![
            |l, r, t| vec![r.acquire(l, t, 0, 1), r.acquire(l, t, 0, 2)],
            |l, r, t| {
                vec![
                    r.acquire(l, t, 0, 2),
                    r.peek(l, t, 0),
                    r.acquire(l, t, 0, 1),
                ]
            },
        ],
        |config, limiter, ops| {
            let admitted = admitted(ops);
            let (state, _) = limiter.inspect();
            let expected = config.capacity_units() - admitted as u128 * config.units_per_token();
            if admitted > config.capacity() {
                Err(format!(
                    "admitted {admitted} > capacity {}",
                    config.capacity()
                ))
            } else if state.balance() != expected {
                Err(format!(
                    "final balance {} units, expected capacity - admitted = {expected}",
                    state.balance()
                ))
            } else {
                Ok(())
            }
        },
        &[
            ("a denial", direct_denied),
            ("both threads admitted", both_admitted),
            ("overlapping calls", overlapped),
        ],
    );
    assert!(executions > 20, "only {executions} executions explored");
}

#[test]
fn direct_two_threads_with_a_lagging_clock_linearize_and_never_oversell() {
    // Refill between calls, and thread 1's clock lags thread 0's: the cursor must never move back and
    // every execution must be one sequential order of the transition.
    let executions = explore_direct(
        "direct limiter, lagging clock",
        config(2, 1),
        vec![
            |l, r, t| {
                vec![
                    r.acquire(l, t, 0, 2),
                    r.acquire(l, t, SECOND, 1),
                    r.peek(l, t, SECOND),
                ]
            },
            |l, r, t| {
                vec![
                    r.acquire(l, t, SECOND / 2, 1),
                    r.acquire(l, t, SECOND / 4, 1),
                ]
            },
        ],
        |_, _, _| Ok(()),
        &[
            ("a denial", direct_denied),
            ("both threads admitted", both_admitted),
            ("overlapping calls", overlapped),
        ],
    );
    assert!(executions > 20, "only {executions} executions explored");
}
