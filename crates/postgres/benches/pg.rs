//! Decisions per second and p99 latency on PostgreSQL: `PgLimiter` (one statement, the transition in
//! the server under the row lock) against the common client-side pattern, written here as its
//! baseline: `BEGIN`, `SELECT .. FOR UPDATE`, the arithmetic in the client (the core's own exact
//! transition, so both decide alike), `UPDATE` (or `INSERT` on first sight), `COMMIT`: four round
//! trips, the row locked across three of them.
//!
//! What is equalized: one deadpool pool of the same size for both, the same connection count (1 or 8
//! tasks, each holding its own connection), the same keys (one hot key, or a ChaCha8 sequence over
//! 10,000 keys, fixed seed), the same config and cost, every key created and drained by a fifth before
//! timing so every timed call decides on an existing row, and the same decision mix (every call
//! allowed; the allowed counts are printed). Beside them the floor: one `UPDATE` of the key's row per
//! call, what any design that writes the row once per decision pays at least. Subjects rotate within
//! each of 3 rounds; each ratio is ours / that subject within a round, the median round is shown.
//!
//! Then reserve, then settle, in the same run (the same limiter, pool, keys, sequences and
//! connection counts): each call of the sequence is an acquire of 2 with a fresh request id followed
//! on the same connection by its settle at an actual of 1 (a refund of 1), each timed on its own;
//! the table gives the mean and p99 of each and settle / acquire-with-id per decision (the median
//! round). An acquire with an id is the fair peer: both rewrite the key's records. The limiter keeps
//! 32 records per key (60 s), so no settle of the hot key finds its record pushed out.
//!
//! Last, server-side execution per decision without the round trip and the commit (`server_side`).
//!
//! Needs `DATABASE_URL` (prints a SKIP line without it). Run from a clone:
//! `DATABASE_URL=postgres://postgres@127.0.0.1:5432/test cargo bench -p bucketproof-postgres --bench pg`
//! (`-- --quick` for a short run). Figures: reports/bench-postgres.md.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bucketproof_limiter::internal::{Attempt, state_from_parts, transition};
use bucketproof_limiter::{BucketState, Config, Nanos, Rate, Request, Settle};
use bucketproof_postgres::PgLimiter;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use tokio_postgres::NoTls;

const KEYS: usize = 10_000;

fn config() -> Config {
    Config::new(5_000_000, Rate::per_second(1000)).unwrap()
}

fn unix_ns() -> Nanos {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as Nanos
}

/// The client-side pattern: four round trips, the arithmetic in the client.
struct Baseline {
    pool: Pool,
    table: String,
}

impl Baseline {
    async fn acquire(&self, key: &str, cost: u64) -> bool {
        let config = config();
        let mut client = self.pool.get().await.unwrap();
        let tx = client.transaction().await.unwrap();
        let select = tx
            .prepare_cached(&format!(
                "SELECT balance::text, last_refill::text FROM {} WHERE key = $1 FOR UPDATE",
                self.table
            ))
            .await
            .unwrap();
        let now = unix_ns();
        let row = tx.query_opt(&select, &[&key]).await.unwrap();
        let state = match &row {
            Some(row) => state_from_parts(
                row.get::<_, &str>(0).parse().unwrap(),
                row.get::<_, &str>(1).parse().unwrap(),
            ),
            None => BucketState::full(&config, now),
        };
        let (next, decision) = transition(&config, state, Attempt { cost, now }).unwrap();
        let write = if row.is_some() {
            format!(
                "UPDATE {} SET balance = $2::text::numeric, last_refill = $3::text::numeric \
                 WHERE key = $1",
                self.table
            )
        } else {
            format!(
                "INSERT INTO {} VALUES ($1, $2::text::numeric, $3::text::numeric)",
                self.table
            )
        };
        let write = tx.prepare_cached(&write).await.unwrap();
        tx.execute(
            &write,
            &[
                &key,
                &next.balance().to_string(),
                &next.last_refill().to_string(),
            ],
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
        decision.is_allowed()
    }
}

impl Baseline {
    /// The floor of any design that writes the key's row once per decision: one `UPDATE` of one
    /// column in autocommit, no arithmetic, no answer. The row lock is held through the commit's WAL
    /// flush, so on one hot key commits take turns, whatever the statement.
    async fn floor(&self, key: &str) -> bool {
        let client = self.pool.get().await.unwrap();
        let update = client
            .prepare_cached(&format!(
                "UPDATE {} SET last_refill = last_refill + 1 WHERE key = $1",
                self.table
            ))
            .await
            .unwrap();
        client.execute(&update, &[&key]).await.unwrap() == 1
    }
}

#[derive(Clone, Copy)]
enum Who {
    Ours,
    Baseline,
    Floor,
}

/// What one timed phase measured.
struct Phase {
    per_second: f64,
    p99: Duration,
    allowed: usize,
}

async fn phase(
    who: Who,
    ours: &Arc<PgLimiter>,
    baseline: &Arc<Baseline>,
    tasks: usize,
    keys: &Arc<Vec<String>>,
    sequence: &Arc<Vec<usize>>,
) -> Phase {
    let per_task = sequence.len() / tasks;
    let started = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let (ours, baseline, keys, sequence) = (
                ours.clone(),
                baseline.clone(),
                keys.clone(),
                sequence.clone(),
            );
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(per_task);
                let mut allowed = 0;
                for &i in &sequence[t * per_task..(t + 1) * per_task] {
                    let call = Instant::now();
                    let ok = match who {
                        Who::Ours => ours
                            .acquire(&keys[i], 1)
                            .await
                            .unwrap()
                            .decision()
                            .is_allowed(),
                        Who::Baseline => baseline.acquire(&keys[i], 1).await,
                        Who::Floor => baseline.floor(&keys[i]).await,
                    };
                    latencies.push(call.elapsed());
                    allowed += usize::from(ok);
                }
                (latencies, allowed)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    let mut allowed = 0;
    for handle in handles {
        let (l, a) = handle.await.unwrap();
        latencies.extend(l);
        allowed += a;
    }
    let elapsed = started.elapsed();
    latencies.sort();
    Phase {
        per_second: latencies.len() as f64 / elapsed.as_secs_f64(),
        p99: latencies[latencies.len() * 99 / 100],
        allowed,
    }
}

/// One timed reserve-then-settle phase: per call of the sequence, an acquire of 2 with a fresh id,
/// then its settle at 1 on the same task; each call's latency on its own.
struct Reconciled {
    acquire: Vec<Duration>,
    settle: Vec<Duration>,
    allowed: usize,
    refunded: usize,
}

async fn reserve_settle(
    ours: &Arc<PgLimiter>,
    tasks: usize,
    keys: &Arc<Vec<String>>,
    sequence: &Arc<Vec<usize>>,
    ids: &Arc<AtomicU64>,
) -> Reconciled {
    let per_task = sequence.len() / tasks;
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let (ours, keys, sequence, ids) =
                (ours.clone(), keys.clone(), sequence.clone(), ids.clone());
            tokio::spawn(async move {
                let mut run = Reconciled {
                    acquire: Vec::with_capacity(per_task),
                    settle: Vec::with_capacity(per_task),
                    allowed: 0,
                    refunded: 0,
                };
                for &i in &sequence[t * per_task..(t + 1) * per_task] {
                    let id = ids.fetch_add(1, Ordering::Relaxed);
                    let call = Instant::now();
                    let reserved = (ours.acquire_with(&keys[i], Request::cost(2).id(id)))
                        .await
                        .unwrap();
                    run.acquire.push(call.elapsed());
                    run.allowed += usize::from(reserved.decision().is_allowed());
                    let call = Instant::now();
                    let settled = ours.settle(&keys[i], Settle::new(id, 1)).await;
                    run.settle.push(call.elapsed());
                    // Counted, not unwrapped: a record pushed out of the FIFO would show here.
                    run.refunded +=
                        usize::from(settled.is_ok_and(|s| s.decision.is_allowed() && !s.replayed));
                }
                run
            })
        })
        .collect();
    let mut all = Reconciled {
        acquire: Vec::new(),
        settle: Vec::new(),
        allowed: 0,
        refunded: 0,
    };
    for handle in handles {
        let run = handle.await.unwrap();
        all.acquire.extend(run.acquire);
        all.settle.extend(run.settle);
        all.allowed += run.allowed;
        all.refunded += run.refunded;
    }
    all.acquire.sort();
    all.settle.sort();
    all
}

/// Mean and p99 of sorted latencies, in microseconds.
fn mean_p99(sorted: &[Duration]) -> (f64, f64) {
    let mean = sorted.iter().map(Duration::as_secs_f64).sum::<f64>() / sorted.len() as f64;
    (
        mean * 1e6,
        sorted[sorted.len() * 99 / 100].as_secs_f64() * 1e6,
    )
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let Ok(url) = std::env::var("DATABASE_URL") else {
        eprintln!("!!!!! SKIP pg bench: DATABASE_URL is not set, nothing measured !!!!!");
        return;
    };
    let quick = std::env::args().any(|a| a == "--quick");
    // CI's smoke mode (`cargo test --benches`): every subject driven, figures meaningless.
    let smoke = std::env::var_os("BUCKETPROOF_BENCH_SMOKE").is_some();
    let (rounds, calls) = match (smoke, quick) {
        (true, _) => (1, 40),
        (false, true) => (1, 800),
        (false, false) => (3, 4000),
    };
    let ns = format!("bp_bench_{}", std::process::id());
    // 32 records per key: on the hot key, 8 connections reserving between one reserve and its settle
    // must not push its record out of the FIFO (a settle of a pushed-out record is unknown).
    let ours = Arc::new(
        PgLimiter::builder(config())
            .namespace(&ns)
            .dedupe(Duration::from_secs(60), 32)
            .connect(&url)
            .await
            .unwrap(),
    );
    let manager = Manager::from_config(
        url.parse().unwrap(),
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    let pool = Pool::builder(manager).max_size(16).build().unwrap();
    let table = format!("{ns}.baseline");
    pool.get()
        .await
        .unwrap()
        .batch_execute(&format!(
            "CREATE TABLE {table} (key text PRIMARY KEY, balance numeric NOT NULL, \
             last_refill numeric NOT NULL)"
        ))
        .await
        .unwrap();
    let baseline = Arc::new(Baseline { pool, table });
    let keys: Arc<Vec<String>> = Arc::new((0..KEYS).map(|k| format!("k{k}")).collect());
    // Every key created and drained by a fifth: far from full, every timed call an allowed decision.
    for key in keys.iter() {
        ours.acquire(key, 1_000_000).await.unwrap();
        baseline.acquire(key, 1_000_000).await;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(22);
    let uniform: Vec<usize> = (0..calls)
        .map(|_| (rng.next_u64() % KEYS as u64) as usize)
        .collect();
    println!(
        "| keys | connections | subject | decisions/s | p99 | allowed (floor: rows updated) | ours / this |"
    );
    println!("|---|---:|---|---:|---:|---|---:|");
    let sequences = [
        ("hot key", Arc::new(vec![0; calls])),
        ("10,000 uniform", Arc::new(uniform)),
    ];
    for (keys_name, sequence) in &sequences {
        let sequence = sequence.clone();
        for tasks in [1, 8] {
            let mut results: [Vec<Phase>; 3] = [Vec::new(), Vec::new(), Vec::new()];
            for round in 0..rounds {
                for turn in 0..3 {
                    let index = (turn + round) % 3;
                    let who = [Who::Ours, Who::Baseline, Who::Floor][index];
                    results[index]
                        .push(phase(who, &ours, &baseline, tasks, &keys, &sequence).await);
                }
            }
            let ratio_to = |peer: usize| -> f64 {
                median(
                    (0..rounds)
                        .map(|r| results[0][r].per_second / results[peer][r].per_second)
                        .collect(),
                )
            };
            for (index, name) in [
                "bucketproof-postgres",
                "baseline (FOR UPDATE, client arithmetic)",
                "floor (one UPDATE of the row)",
            ]
            .iter()
            .enumerate()
            {
                let phases = &results[index];
                let rate = median(phases.iter().map(|p| p.per_second).collect());
                let p99 = median(phases.iter().map(|p| p.p99.as_secs_f64() * 1e6).collect());
                let allowed: Vec<String> = phases.iter().map(|p| p.allowed.to_string()).collect();
                let ratio = match index {
                    0 => String::new(),
                    peer => format!("{:.2}x", ratio_to(peer)),
                };
                println!(
                    "| {keys_name} | {tasks} | {name} | {rate:.0} | {p99:.0} us | {} of {} | {ratio} |",
                    allowed.join("/"),
                    sequence.len() / tasks * tasks
                );
            }
        }
    }
    // Reserve, then settle: the same limiter, pool, keys, sequences and connection counts.
    println!();
    println!(
        "| keys | connections | acquire with id: mean / p99 | settle: mean / p99 | settle / acquire (mean) | admitted / refunded |"
    );
    println!("|---|---:|---:|---:|---:|---|");
    let ids = Arc::new(AtomicU64::new(1));
    for (keys_name, sequence) in &sequences {
        for tasks in [1, 8] {
            let runs: Vec<Reconciled> = {
                let mut runs = Vec::new();
                for _ in 0..rounds {
                    runs.push(reserve_settle(&ours, tasks, &keys, sequence, &ids).await);
                }
                runs
            };
            let ratio = median(
                (runs.iter())
                    .map(|r| mean_p99(&r.settle).0 / mean_p99(&r.acquire).0)
                    .collect(),
            );
            let of = |pick: fn(&Reconciled) -> &Vec<Duration>| {
                let means = runs.iter().map(|r| mean_p99(pick(r)).0).collect();
                let p99s = runs.iter().map(|r| mean_p99(pick(r)).1).collect();
                (median(means), median(p99s))
            };
            let (acquire_mean, acquire_p99) = of(|r| &r.acquire);
            let (settle_mean, settle_p99) = of(|r| &r.settle);
            let counts: Vec<String> = (runs.iter())
                .map(|r| format!("{}/{}", r.allowed, r.refunded))
                .collect();
            println!(
                "| {keys_name} | {tasks} | {acquire_mean:.0} / {acquire_p99:.0} us | {settle_mean:.0} / {settle_p99:.0} us | {ratio:.2}x | {} of {} |",
                counts.join(", "),
                sequence.len() / tasks * tasks
            );
        }
    }
    server_side(&baseline.pool, &ns).await;
    baseline
        .pool
        .get()
        .await
        .unwrap()
        .batch_execute(&format!("DROP SCHEMA {ns} CASCADE"))
        .await
        .unwrap();
}

/// Server-side execution per decision on the hot key's row, without the round trip, the commit or
/// the client: the median of 40 interleaved `EXPLAIN (ANALYZE, TIMING OFF)` runs of each prepared
/// statement (ours, exactly as `acquire` sends it; a PL/pgSQL function that only locks the row and
/// updates it, the floor of a function; one bare `UPDATE`, the floor subject). Times on a noisy
/// machine: the medians are the comparable figure.
async fn server_side(pool: &Pool, ns: &str) {
    let client = pool.get().await.unwrap();
    let config = config();
    let words = format!(
        "('k0', '1', NULL, '{{{cap}}}', '{{{p}}}', '{{{unit}}}', '{unit}/{cap}/{p}', NULL, '60000000000', '8', NULL, 'false')",
        cap = config.capacity_units(),
        p = config.units_per_nanosecond(),
        unit = config.units_per_token(),
    );
    let ours = include_str!("../src/acquire.sql").replace("__NS__", ns);
    client
        .batch_execute(&format!(
            "CREATE FUNCTION {ns}.lock_and_update(k text) RETURNS bigint LANGUAGE plpgsql AS $fn$
             DECLARE v_seq bigint;
             BEGIN
               SELECT b.seq INTO v_seq FROM {ns}.buckets AS b WHERE b.key = k FOR UPDATE;
               UPDATE {ns}.buckets AS b SET seq = v_seq + 1 WHERE b.key = k;
               RETURN v_seq + 1;
             END $fn$;
             PREPARE ours(text, text, text, text, text, text, text, text, text, text, text, boolean) AS {ours};
             PREPARE function_floor(text) AS SELECT {ns}.lock_and_update($1);
             PREPARE bare_update(text) AS
               UPDATE {ns}.buckets SET last_refill = last_refill + 1 WHERE key = $1;"
        ))
        .await
        .unwrap();
    let subjects = [
        (
            "bucketproof-postgres (the transition's function)",
            format!("ours{words}"),
        ),
        (
            "a PL/pgSQL function that locks and updates the row",
            "function_floor('k0')".to_owned(),
        ),
        ("one bare UPDATE of the row", "bare_update('k0')".to_owned()),
    ];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); subjects.len()];
    for run in 0..43 {
        for (index, (_, execute)) in subjects.iter().enumerate() {
            let explain = format!("EXPLAIN (ANALYZE, SUMMARY, TIMING OFF) EXECUTE {execute}");
            let lines = client.simple_query(&explain).await.unwrap();
            let ms = lines
                .iter()
                .filter_map(|message| match message {
                    tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0),
                    _ => None,
                })
                .find_map(|line| line.trim().strip_prefix("Execution Time: "))
                .and_then(|rest| rest.trim_end_matches(" ms").parse::<f64>().ok())
                .expect("an Execution Time line");
            // The first runs warm the plans and the function's cache.
            if run >= 3 {
                times[index].push(ms);
            }
        }
    }
    println!();
    println!("| server-side execution on the hot row (median of 40) | ms |");
    println!("|---|---:|");
    for ((name, _), times) in subjects.iter().zip(times) {
        println!("| {name} | {:.3} |", median(times));
    }
}
