//! What `RedisLimiter`'s own client adds to the transition script: `RedisLimiter::acquire` against
//! the bare script called with the same arguments on plain connections, and a trivial `EVALSHA` that
//! returns a constant (the ceiling of one Redis). Same connections, same concurrency, same server.
//! (Ours against third parties' scripts, through one client loop: `bucketproof-harness`'s
//! `redis_peers` bench.)
//!
//! Beside `exact_limiter` (acquire without a request id), `exact_limiter_with_id` (acquire of 1 with
//! a fresh request id: it reads, writes and records, as every reserve does) and `exact_settle`
//! (`RedisLimiter::settle`, a refund of 1, of a request reserved by an acquire of 2 with a request id
//! just before it; the reserve is not timed). The three run on the same 1000 keys, through the same
//! limiters and connections, with the same calls in flight; every key's FIFO holds its 32 records
//! (`dedupe_per_key`) from before the first timed call, so every call with an id finds a full FIFO
//! and pushes one record out, as in a steady state.
//!
//! After the groups, one untimed-client phase for the server's own cost: `CONFIG RESETSTAT`, then a
//! loop of one subject (256 in flight on one connection), then `INFO commandstats`' `usec_per_call`
//! of `EVALSHA`; the settle's reserves and the floor's requests are made before the reset. Subjects:
//! acquire, acquire with id, settle, and `floor_settle`, a script doing only the Redis calls a settle
//! cannot avoid (`TIME`, `GET` the key, `HGET` the record, `SET .. PX` the key, `HSET` the record,
//! the settle's reply), called with the settle's keys and argument count. Run it on a Redis nothing
//! else uses: the counters are the server's.
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
/// Request-id records kept per key; every key's FIFO is full before timing.
const RECORDS_PER_KEY: usize = 32;

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
                    // A reserve is settled in the next call on its key, long before 32 more reserves
                    // of the key push it out.
                    .dedupe(Duration::from_secs(3600), RECORDS_PER_KEY)
                    .recovery(bucketproof_redis::Recovery::Trusting)
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
        // Fill every key's FIFO, so that every timed call with a request id finds it full.
        for _ in 0..RECORDS_PER_KEY {
            let base = NEXT_ID.fetch_add(1000, Ordering::Relaxed);
            let calls = (0..1000u64).map(|i| {
                let request = Request::cost(1).id(base + i);
                let limiter = &limiters[0];
                async move {
                    let key = format!("u{i}");
                    limiter.acquire_with(&key, request).await.expect("fill")
                }
            });
            join_all(calls).await;
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

/// `per_conn` calls in flight on each of `conns` connections, all awaited together: `call(c, i)` is
/// call `i` on connection `c`. Every round below is this one fan-out with its own call.
async fn in_flight<F, Fut>(conns: usize, per_conn: usize, call: F)
where
    F: Fn(usize, usize) -> Fut,
    Fut: Future<Output = ()>,
{
    let call = &call;
    join_all((0..conns).flat_map(|c| (0..per_conn).map(move |i| call(c, i)))).await;
}

/// One round: `per_conn` limiter calls in flight on each of `conns` connections, all awaited together.
async fn limiter_round(f: &Fixture, conns: usize, per_conn: usize, round: u64) {
    in_flight(conns, per_conn, |c, i| {
        // The limiter adds its own prefix and hash tag.
        let key = format!("u{}", spread_index(round, c, per_conn, i));
        async move {
            let outcome = f.limiters[c].acquire(&key, 1).await.expect("acquire");
            std::hint::black_box(outcome);
        }
    })
    .await;
}

/// The next unused request id (every reserve in the run has its own).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The request id of call `i` on connection `c` in a round whose ids start at `base`.
fn id_of(base: u64, c: usize, per_conn: usize, i: usize) -> u64 {
    base + (c * per_conn + i) as u64
}

/// Takes `conns * per_conn` fresh request ids; returns the first.
fn fresh_ids(conns: usize, per_conn: usize) -> u64 {
    NEXT_ID.fetch_add((conns * per_conn) as u64, Ordering::Relaxed)
}

/// One round of acquires of 1 with a fresh request id each (ids from `base`), on `limiter_round`'s
/// keys.
async fn id_round(f: &Fixture, conns: usize, per_conn: usize, round: u64, base: u64) {
    in_flight(conns, per_conn, |c, i| {
        let key = format!("u{}", spread_index(round, c, per_conn, i));
        let id = id_of(base, c, per_conn, i);
        async move {
            let request = Request::cost(1).id(id);
            let outcome = f.limiters[c]
                .acquire_with(&key, request)
                .await
                .expect("acquire with id");
            std::hint::black_box(outcome);
        }
    })
    .await;
}

/// Untimed: reserves (an acquire of 2 with a request id, ids from `base`) one request for every call
/// of settle round `round`, on the keys that round settles.
async fn reserve_round(f: &Fixture, conns: usize, per_conn: usize, round: u64, base: u64) {
    in_flight(conns, per_conn, |c, i| {
        let key = format!("u{}", spread_index(round, c, per_conn, i));
        let id = id_of(base, c, per_conn, i);
        async move {
            let request = Request::cost(2).id(id);
            let outcome = f.limiters[c]
                .acquire_with(&key, request)
                .await
                .expect("reserve");
            assert!(outcome.decision().is_allowed(), "reserve denied");
        }
    })
    .await;
}

/// One round of settles (a refund of 1 each) of the requests `reserve_round` made.
async fn settle_round(f: &Fixture, conns: usize, per_conn: usize, round: u64, base: u64) {
    in_flight(conns, per_conn, |c, i| {
        let key = format!("u{}", spread_index(round, c, per_conn, i));
        let id = id_of(base, c, per_conn, i);
        async move {
            let outcome = f.limiters[c]
                .settle(&key, Settle::new(id, 1))
                .await
                .expect("settle");
            assert!(!outcome.settled.replayed && outcome.decision().is_allowed());
            std::hint::black_box(outcome);
        }
    })
    .await;
}

/// One round of the constant script on one key.
async fn constant_round(f: &Fixture, conns: usize, per_conn: usize) {
    in_flight(conns, per_conn, |c, _| {
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
    .await;
}

/// The transition script alone, called on a plain connection with the words the limiter would send
/// (`RedisLimiter::script_call`, its own keys `s<i>`): shows how much of the gap is the script in
/// Redis and how much the client side of `RedisLimiter`.
async fn script_round(f: &Fixture, conns: usize, per_conn: usize, round: u64) {
    in_flight(conns, per_conn, |c, i| {
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
    .await;
}

/// The floor of a settle: the Redis calls it cannot avoid (the clock, the key read and written back
/// with its TTL, the record read and written back with a settlement appended) and a reply as long as
/// a settle's of one bandwidth, no arithmetic. Called with a settle's keys and arguments.
const FLOOR_SETTLE: &str = r#"
local tm = redis.call('TIME')
local v = redis.call('GET', KEYS[1])
local rec = redis.call('HGET', KEYS[2], 'r' .. ARGV[5])
redis.call('SET', KEYS[1], v, 'PX', 1000000)
redis.call('HSET', KEYS[2], 'r' .. ARGV[5], rec .. ',1,1700000000,0,1700000000,0,12345,2,1,4000000000000000,0,0,0,0')
return {1, 1700000000, 0, 1700000000, 0, 12345, 2, 1, 4000000000000000, 0, 0, 0, 0}
"#;

/// The server's `usec_per_call` of `EVALSHA` since the last `CONFIG RESETSTAT`, and its call count.
async fn evalsha_stats(conn: &mut MultiplexedConnection) -> (f64, u64) {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    let line = info
        .lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .expect("no EVALSHA counted");
    let field = |name: &str| {
        line.split([':', ','])
            .find_map(|kv| kv.strip_prefix(name))
            .unwrap()
            .to_owned()
    };
    (
        field("usec_per_call=").parse().unwrap(),
        field("calls=").parse().unwrap(),
    )
}

/// One round of `FLOOR_SETTLE` on one connection, on the requests `reserve_round` made.
async fn floor_round(f: &Fixture, floor: &Script, conf: &[u8], round: u64, base: u64) {
    let calls = (0..IN_FLIGHT).map(|i| {
        let key = f.limiters[0].redis_key(&format!("u{}", spread_index(round, 0, IN_FLIGHT, i)));
        let records = f.limiters[0].records_key(&key);
        let id = format!("{:032x}", u128::from(id_of(base, 0, IN_FLIGHT, i)));
        let mut conn = f.constant[0].clone();
        let mut invocation = floor.key(key);
        invocation.key(records);
        for arg in ["s", "0", "0", "0", id.as_str(), "1", "o"] {
            invocation.arg(arg);
        }
        invocation.arg(conf);
        async move {
            let reply: Vec<i64> = invocation.invoke_async(&mut conn).await.expect("floor");
            std::hint::black_box(reply);
        }
    });
    join_all(calls).await;
}

/// The server's own time per call of each subject: `rounds` rounds of `IN_FLIGHT` calls on one
/// connection, between `CONFIG RESETSTAT` and `INFO commandstats`; what a subject needs before its
/// calls (reserves) is made before the reset. Printed, one line per subject.
fn server_side(rt: &Runtime, f: &Fixture, rounds: u64) {
    rt.block_on(async {
        let mut admin = f.constant[0].clone();
        let floor = Script::new(FLOOR_SETTLE);
        let conf = f.limiters[0]
            .script_call("u0", Request::cost(1))
            .expect("one bandwidth")
            .args[1]
            .clone();
        let mut report = Vec::new();
        floor.prepare_invoke().load_async(&mut admin).await.unwrap();
        for subject in ["acquire", "acquire_with_id", "settle", "floor_settle"] {
            // Round 0 runs before the reset (every script loaded, every connection warm).
            let mut bases = Vec::new();
            for round in 0..=rounds {
                let base = fresh_ids(1, IN_FLIGHT);
                if subject == "settle" || subject == "floor_settle" {
                    reserve_round(f, 1, IN_FLIGHT, round, base).await;
                }
                bases.push(base);
            }
            for (round, &base) in bases.iter().enumerate() {
                if round == 1 {
                    let _: () = redis::cmd("CONFIG")
                        .arg("RESETSTAT")
                        .query_async(&mut admin)
                        .await
                        .unwrap();
                }
                let round = round as u64;
                match subject {
                    "acquire" => limiter_round(f, 1, IN_FLIGHT, round).await,
                    "acquire_with_id" => id_round(f, 1, IN_FLIGHT, round, base).await,
                    "settle" => settle_round(f, 1, IN_FLIGHT, round, base).await,
                    _ => floor_round(f, &floor, &conf, round, base).await,
                }
            }
            let (usec, calls) = evalsha_stats(&mut admin).await;
            report.push(format!(
                "server_side/{subject}: {usec:.2} usec_per_call over {calls} EVALSHA"
            ));
        }
        for line in report {
            println!("{line}");
        }
    })
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
        group.bench_function("exact_limiter_with_id", |b| {
            b.iter_custom(|iters| {
                timed(&rt, iters, |round| {
                    id_round(&f, conns, per_conn, round, fresh_ids(conns, per_conn))
                })
            })
        });
        group.bench_function("exact_settle", |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut spent = Duration::ZERO;
                    for round in 0..iters {
                        let base = fresh_ids(conns, per_conn);
                        reserve_round(&f, conns, per_conn, round, base).await;
                        let start = Instant::now();
                        settle_round(&f, conns, per_conn, round, base).await;
                        spent += start.elapsed();
                    }
                    spent
                })
            })
        });
        group.finish();
    }
    server_side(&rt, &f, 80);
}

criterion_group!(benches, bench);
criterion_main!(benches);
