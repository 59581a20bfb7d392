//! What `RedisLimiter`'s own client adds to the transition script: `RedisLimiter::acquire` against
//! the bare script called with the same arguments on plain connections, and a trivial `EVALSHA` that
//! returns a constant (the ceiling of one Redis). Same connections, same concurrency, same server.
//! (Ours against third parties' scripts, through one client loop: `bucketproof-harness`'s
//! `redis_peers` bench.)
//!
//! Beside `exact_limiter` (acquire), `exact_settle`: `RedisLimiter::settle` on the same keys, with the
//! same limiters and in-flight count, each call settling (a refund of 1) a request reserved by an
//! acquire of 2 with a request id before its timed batch (the reserves are not timed).
//!
//! - `one_conn`: one multiplexed connection, 256 calls in flight (the connection pipelines them);
//! - `eight_conns`: 8 connections (8 limiters), 32 calls in flight on each.
//!
//! Needs `REDIS_URL`; prints a SKIP line and measures nothing without it. Run:
//! `REDIS_URL=redis://127.0.0.1:6379/ cargo bench -p bucketproof-redis --bench redis`

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bucketproof_limiter::{Config, Rate, Request, Settle};
use bucketproof_redis::RedisLimiter;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures_util::future::join_all;
use redis::Script;
use redis::aio::MultiplexedConnection;
use tokio::runtime::Runtime;

const IN_FLIGHT: usize = 256;
const CONNS: usize = 8;

struct Fixture {
    limiters: Vec<RedisLimiter>,
    constant: Vec<MultiplexedConnection>,
    script: Script,
    transition: Script,
    prefix: String,
}

fn fixture(rt: &Runtime, url: &str) -> Fixture {
    rt.block_on(async {
        // Buckets that stay far below capacity for the whole run (5M tokens at 1000/s, 1000 keys, each
        // drained by 1,000,000 tokens before timing, so its TTL is about 1000 s): every call is an
        // ordinary allow on an existing key. A bucket near full would expire within milliseconds
        // between calls and measure key creation instead.
        let config = Config::new(5_000_000, Rate::per_second(1000)).unwrap();
        let prefix = format!("bpbench:{}:", std::process::id());
        let mut limiters = Vec::new();
        let mut constant = Vec::new();
        let client = redis::Client::open(url).unwrap();
        for _ in 0..CONNS {
            limiters.push(
                RedisLimiter::builder(config)
                    .prefix(&prefix)
                    // Room for every reserve of a timed batch until it is settled.
                    .dedupe(Duration::from_secs(3600), 1024)
                    .connect(url)
                    .await
                    .expect("connect"),
            );
            constant.push(client.get_multiplexed_async_connection().await.unwrap());
        }
        let script = Script::new("return 1");
        script
            .prepare_invoke()
            .load_async(&mut constant[0])
            .await
            .unwrap();
        let transition = bucketproof_redis::script::script();
        transition
            .prepare_invoke()
            .load_async(&mut constant[0])
            .await
            .unwrap();
        for user in (0..1000).flat_map(|i| [format!("u{i}"), format!("s{i}")]) {
            limiters[0].acquire(&user, 1_000_000).await.expect("drain");
        }
        Fixture {
            limiters,
            constant,
            script,
            transition,
            prefix,
        }
    })
}

/// Which of 1000 keys call `i` on connection `c` in round `round` uses: spread out, the same order for
/// every function (each under its own key names, so no two functions share buckets).
fn spread_index(round: u64, c: usize, per_conn: usize, i: usize) -> usize {
    (round as usize * 7919 + c * per_conn + i) % 1000
}

/// One round: `per_conn` limiter calls in flight on each of `conns` connections, all awaited together.
async fn limiter_round(f: &Fixture, conns: usize, per_conn: usize, round: u64) {
    let calls = (0..conns).flat_map(|c| {
        (0..per_conn).map(move |i| {
            // The limiter adds its own prefix and hash tag.
            let key = format!("u{}", spread_index(round, c, per_conn, i));
            async move {
                let outcome = f.limiters[c].acquire(&key, 1).await.expect("acquire");
                std::hint::black_box(outcome);
            }
        })
    });
    join_all(calls).await;
}

/// The next unused request id (every reserve in the run has its own).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The request id of call `i` on connection `c` in round `round` of a batch whose ids start at `base`.
fn id_of(base: u64, round: u64, c: usize, conns: usize, per_conn: usize, i: usize) -> u64 {
    base + (round * conns as u64 + c as u64) * per_conn as u64 + i as u64
}

/// Untimed: reserves (an acquire of 2 with a request id) one request for every call of `rounds`
/// settle rounds, on the keys those calls use; returns the batch's first id.
async fn reserve_rounds(f: &Fixture, conns: usize, per_conn: usize, rounds: u64) -> u64 {
    let base = NEXT_ID.fetch_add(rounds * (conns * per_conn) as u64, Ordering::Relaxed);
    for round in 0..rounds {
        let calls = (0..conns).flat_map(|c| {
            (0..per_conn).map(move |i| {
                let key = format!("u{}", spread_index(round, c, per_conn, i));
                let id = id_of(base, round, c, conns, per_conn, i);
                async move {
                    let request = Request::cost(2).id(id);
                    let outcome = f.limiters[c]
                        .acquire_with(&key, request)
                        .await
                        .expect("reserve");
                    assert!(outcome.decision().is_allowed(), "reserve denied");
                }
            })
        });
        join_all(calls).await;
    }
    base
}

/// One round of settles (a refund of 1 each) of the requests `reserve_rounds` made.
async fn settle_round(f: &Fixture, conns: usize, per_conn: usize, round: u64, base: u64) {
    let calls = (0..conns).flat_map(|c| {
        (0..per_conn).map(move |i| {
            let key = format!("u{}", spread_index(round, c, per_conn, i));
            let id = id_of(base, round, c, conns, per_conn, i);
            async move {
                let outcome = f.limiters[c]
                    .settle(&key, Settle::new(id, 1))
                    .await
                    .expect("settle");
                assert!(!outcome.settled.replayed && outcome.decision().is_allowed());
                std::hint::black_box(outcome);
            }
        })
    });
    join_all(calls).await;
}

/// One round of the constant script on one key.
async fn constant_round(f: &Fixture, conns: usize, per_conn: usize) {
    let calls = (0..conns).flat_map(|c| {
        (0..per_conn).map(move |_| {
            let key = format!("{}const", f.prefix);
            let mut conn = f.constant[c].clone();
            async move {
                let one: i64 = f
                    .script
                    .key(key)
                    .invoke_async(&mut conn)
                    .await
                    .expect("evalsha");
                std::hint::black_box(one);
            }
        })
    });
    join_all(calls).await;
}

/// The transition script alone, called on a plain connection with the words the limiter would send
/// (`RedisLimiter::script_call`, its own keys `s<i>`): shows how much of the gap is the script in
/// Redis and how much the client side of `RedisLimiter`.
async fn script_round(f: &Fixture, conns: usize, per_conn: usize, round: u64) {
    let calls = (0..conns).flat_map(|c| {
        (0..per_conn).map(move |i| {
            let user = format!("s{}", spread_index(round, c, per_conn, i));
            let call = f.limiters[c]
                .script_call(&user, Request::cost(1))
                .expect("one bandwidth");
            let mut conn = f.constant[c].clone();
            async move {
                let mut invocation = f.transition.prepare_invoke();
                for key in &call.keys {
                    invocation.key(key);
                }
                for arg in &call.args {
                    invocation.arg(arg);
                }
                let reply: Vec<i64> = invocation.invoke_async(&mut conn).await.expect("evalsha");
                std::hint::black_box(reply);
            }
        })
    });
    join_all(calls).await;
}

/// Times `iters` rounds of `round` (given the round number) on the runtime.
fn timed<Fut: Future<Output = ()>>(
    rt: &Runtime,
    iters: u64,
    round: impl Fn(u64) -> Fut,
) -> Duration {
    rt.block_on(async {
        let start = Instant::now();
        for index in 0..iters {
            round(index).await;
        }
        start.elapsed()
    })
}

fn bench(c: &mut Criterion) {
    let Ok(url) = std::env::var("REDIS_URL") else {
        eprintln!("!!!!! SKIP redis bench: REDIS_URL is not set, nothing measured !!!!!");
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let f = fixture(&rt, &url);
    for (name, conns, per_conn) in [
        ("one_conn", 1, IN_FLIGHT),
        ("eight_conns", CONNS, IN_FLIGHT / CONNS),
    ] {
        let mut group = c.benchmark_group(name);
        group.throughput(Throughput::Elements((conns * per_conn) as u64));
        group.sample_size(20);
        group.warm_up_time(Duration::from_secs(1));
        group.measurement_time(Duration::from_secs(4));
        group.bench_function("constant_evalsha", |b| {
            b.iter_custom(|iters| timed(&rt, iters, |_| constant_round(&f, conns, per_conn)))
        });
        group.bench_function("transition_script_only", |b| {
            b.iter_custom(|iters| {
                timed(&rt, iters, |round| script_round(&f, conns, per_conn, round))
            })
        });
        group.bench_function("exact_limiter", |b| {
            b.iter_custom(|iters| {
                timed(&rt, iters, |round| {
                    limiter_round(&f, conns, per_conn, round)
                })
            })
        });
        group.bench_function("exact_settle", |b| {
            b.iter_custom(|iters| {
                let base = rt.block_on(reserve_rounds(&f, conns, per_conn, iters));
                timed(&rt, iters, |round| {
                    settle_round(&f, conns, per_conn, round, base)
                })
            })
        });
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
