//! A flood of fresh ids against the PostgreSQL limiter, beside the in-memory one
//! (`crates/limiter/examples/flood.rs`): how the table grows, what it costs, and how many of the
//! legitimate users' requests are admitted, against the same run without the flood and against each
//! user's budget.
//!
//! The run is the in-memory example's: for `--seconds` (10) of simulated time, 100 legitimate users
//! each send 10 requests a second (user `u` at `u` ms past every 100 ms) on a bucket of 10 refilling
//! 5/s, cost 1; in the attacked run `--attackers` ids never seen before (100,000 by default) each send
//! one request, spread evenly over the run (attacker `i` at `floor(i * run / attackers)` µs: at
//! 10,000,000 in 10 s that is the in-memory example's one per µs). Time is injected, so every run makes
//! the same decisions on every machine. One connection sends every request in order, and the cleanup
//! runs as the crate documents it, one `cleanup(batch)` step on an interval: `--cleanup-batch` (1,000)
//! rows every `--cleanup-every-ms` (100) of simulated time, judged at that instant.
//!
//! `--max-keys N --policy reject-new-keys|evict-full` bounds the table (`PgBuilder::max_keys`; the
//! in-memory example's bound is 100,000); without them there is no bound, the crate's default.
//!
//! Reported per run: rows, table, heap and index bytes (sampled every simulated second, and the peak),
//! legitimate admissions calm and attacked, over-admissions (every interval checked exactly, by the
//! shared `Budget`), attacker admissions, and the latency of each decision as the client sees it
//! (one round trip on loopback; p50 and p99, legitimate and attacker requests together). The
//! limiter's connection runs with `synchronous_commit = off` unless `--sync-commit`: each decision
//! commits, and waiting for the WAL flush would measure the disk.
//!
//! ```text
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/test \
//!   cargo run --release -p bucketproof-postgres --example flood -- --attackers 100000
//! DATABASE_URL=... cargo run --release -p bucketproof-postgres --example flood -- \
//!   --max-keys 100000 --policy evict-full
//! ```

#[path = "../../limiter/examples/support/budget.rs"]
mod budget;

use std::collections::BTreeMap;
use std::time::Instant;

use bucketproof_limiter::{Config, EvictionPolicy, Rate};
use bucketproof_postgres::{PgAcquireError, PgLimiter};
use budget::Budget;

const USERS: u64 = 100;
const CAPACITY: u64 = 10;
const RATE_PER_S: u64 = 5;
const USER_PERIOD_US: u64 = 100_000;
/// Attacker ids start here, far above every user id.
const ATTACKER_BASE: u64 = 1 << 40;

#[derive(Clone, Copy, Debug)]
struct Run {
    seconds: u64,
    attackers: u64,
    cleanup_every_us: u64,
    cleanup_batch: u32,
    /// The key bound and its policy (`None`: no bound).
    bound: Option<(usize, EvictionPolicy)>,
    /// Wait for each commit's WAL flush (PostgreSQL's default) instead of `synchronous_commit = off`.
    sync_commit: bool,
}

/// The table's size at one instant.
#[derive(Clone, Copy, Debug, Default)]
struct Size {
    rows: i64,
    total: i64,
    heap: i64,
    indexes: i64,
}

/// What one run saw.
#[derive(Default)]
struct Seen {
    legit_allowed: u64,
    legit_denied: u64,
    legit_refused: u64,
    over_admitted: u64,
    attacker_sent: u64,
    attacker_allowed: u64,
    attacker_refused: u64,
    removed_by_cleanup: u64,
    /// (simulated second, size) at the end of each second.
    samples: Vec<(u64, Size)>,
    /// Client-side time of each decision, ns.
    latencies: Vec<u64>,
    wall_s: f64,
}

impl Seen {
    fn peak(&self) -> Size {
        let mut peak = Size::default();
        for (_, size) in &self.samples {
            peak.rows = peak.rows.max(size.rows);
            peak.total = peak.total.max(size.total);
            peak.heap = peak.heap.max(size.heap);
            peak.indexes = peak.indexes.max(size.indexes);
        }
        peak
    }

    /// The `p` quantile of the decisions' latencies (sorted at the end of the run).
    fn percentile_us(&self, p: f64) -> f64 {
        let Some(last) = self.latencies.len().checked_sub(1) else {
            return 0.0;
        };
        let index = ((last as f64) * p).round() as usize;
        self.latencies[index.min(last)] as f64 / 1_000.0
    }
}

type Error = Box<dyn std::error::Error>;

async fn size(client: &tokio_postgres::Client, namespace: &str) -> Result<Size, Error> {
    let table = format!("{namespace}.buckets");
    let row = client
        .query_one(
            &format!(
                "SELECT (SELECT count(*) FROM {table}), pg_total_relation_size($1::text::regclass), \
                 pg_relation_size($1::text::regclass), pg_indexes_size($1::text::regclass)"
            ),
            &[&table],
        )
        .await?;
    Ok(Size {
        rows: row.get(0),
        total: row.get(1),
        heap: row.get(2),
        indexes: row.get(3),
    })
}

async fn run(url: &str, params: Run, attacked: bool) -> Result<Seen, Error> {
    let config = Config::new(CAPACITY, Rate::per_second(RATE_PER_S))?;
    let namespace = format!(
        "bp_flood_{}_{}",
        std::process::id(),
        if attacked { "attacked" } else { "calm" }
    );
    let mut builder = PgLimiter::builder(config)
        .namespace(namespace.clone())
        .pool_size(1);
    if let Some((max_keys, policy)) = params.bound {
        builder = builder.max_keys(max_keys, policy);
    }
    let limiter = builder.connect(url).await?;
    let (observer, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    let mut seen = Seen::default();
    let mut budgets: BTreeMap<u64, Budget> = BTreeMap::new();
    let run_us = params.seconds * 1_000_000;
    let mut next_attacker = 0u64;
    let started = Instant::now();
    for t_us in 0..run_us {
        let now = t_us * 1_000;
        // Attacker i arrives at floor(i * run / attackers) µs.
        while attacked
            && next_attacker < params.attackers
            && u128::from(next_attacker) * u128::from(run_us) / u128::from(params.attackers)
                <= u128::from(t_us)
        {
            let id = (ATTACKER_BASE + next_attacker).to_string();
            let sent = Instant::now();
            let answer = limiter.acquire_at(&id, 1, now).await;
            seen.latencies.push(sent.elapsed().as_nanos() as u64);
            match answer {
                Ok(outcome) if outcome.decision().is_allowed() => seen.attacker_allowed += 1,
                Ok(_) => {}
                Err(e) if refused(&e) => seen.attacker_refused += 1,
                Err(e) => return Err(e.into()),
            }
            next_attacker += 1;
            seen.attacker_sent += 1;
        }
        if t_us > 0 && t_us % params.cleanup_every_us == 0 {
            let step = limiter.cleanup_at(params.cleanup_batch, now).await?;
            seen.removed_by_cleanup += step.removed;
        }
        if t_us % 1_000 == 0 {
            let user = (t_us / 1_000) % USER_PERIOD_US.div_ceil(1_000);
            if user < USERS {
                let sent = Instant::now();
                let answer = limiter.acquire_at(&user.to_string(), 1, now).await;
                seen.latencies.push(sent.elapsed().as_nanos() as u64);
                match answer {
                    Ok(outcome) if outcome.decision().is_allowed() => {
                        seen.legit_allowed += 1;
                        let budget = (budgets.entry(user))
                            .or_insert_with(|| Budget::new(CAPACITY, RATE_PER_S));
                        if !budget.admit(t_us) {
                            seen.over_admitted += 1;
                        }
                    }
                    Ok(_) => seen.legit_denied += 1,
                    Err(e) if refused(&e) => seen.legit_refused += 1,
                    Err(e) => return Err(e.into()),
                }
            }
        }
        if (t_us + 1) % 1_000_000 == 0 {
            seen.samples
                .push(((t_us + 1) / 1_000_000, size(&observer, &namespace).await?));
        }
    }
    seen.wall_s = started.elapsed().as_secs_f64();
    seen.latencies.sort_unstable();
    limiter.drop_namespace().await?;
    Ok(seen)
}

/// A refusal of a new key (the key bound): counted, not an error of the run.
fn refused(error: &PgAcquireError) -> bool {
    matches!(error, PgAcquireError::KeyLimitReached { .. })
}

fn mib(bytes: i64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let mut params = Run {
        seconds: 10,
        attackers: 100_000,
        cleanup_every_us: 100_000,
        cleanup_batch: 1_000,
        bound: None,
        sync_commit: false,
    };
    let (mut max_keys, mut policy) = (None, None);
    let mut args = std::env::args().skip(1);
    let usage = "usage: flood [--seconds S] [--attackers N] [--cleanup-every-ms MS] \
                 [--cleanup-batch ROWS] [--sync-commit] [--max-keys N --policy NAME]";
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(usage);
        match arg.as_str() {
            "--seconds" => params.seconds = value()?.parse()?,
            "--attackers" => params.attackers = value()?.parse()?,
            "--cleanup-every-ms" => params.cleanup_every_us = value()?.parse::<u64>()? * 1_000,
            "--cleanup-batch" => params.cleanup_batch = value()?.parse()?,
            "--sync-commit" => params.sync_commit = true,
            "--max-keys" => max_keys = Some(value()?.parse::<usize>()?),
            "--policy" => {
                policy = Some(match value()?.as_str() {
                    "reject-new-keys" => EvictionPolicy::RejectNewKeys,
                    "evict-full" => EvictionPolicy::EvictFull,
                    other => {
                        return Err(format!(
                            "no policy {other:?} on PostgreSQL: reject-new-keys or evict-full"
                        )
                        .into());
                    }
                })
            }
            _ => return Err(usage.into()),
        }
    }
    params.bound = match (max_keys, policy) {
        (Some(max_keys), Some(policy)) => Some((max_keys, policy)),
        (None, None) => None,
        _ => return Err("--max-keys and --policy go together".into()),
    };
    if params.seconds == 0 || params.attackers == 0 || params.cleanup_every_us == 0 {
        return Err("seconds, attackers and the cleanup interval must be at least 1".into());
    }
    let mut url = std::env::var("DATABASE_URL")
        .map_err(|_| "DATABASE_URL must name a database the example may create namespaces in")?;
    if !params.sync_commit {
        // Every decision is one commit: with the WAL flushed at each, the disk's flush time is the
        // latency. Off, a crash may lose the last commits (never half of one); the decisions, the
        // rows and their sizes are the same either way.
        let separator = if url.contains('?') { '&' } else { '?' };
        url = format!("{url}{separator}options=-c%20synchronous_commit%3Doff");
    }
    println!(
        "{USERS} users at 10/s on a bucket of {CAPACITY} refilling {RATE_PER_S}/s for {} s; {} fresh \
         attacker ids spread over the run; cleanup({}) every {} ms of simulated time; synchronous_commit \
         {}; key bound {}",
        params.seconds,
        params.attackers,
        params.cleanup_batch,
        params.cleanup_every_us / 1_000,
        if params.sync_commit { "on" } else { "off" },
        params.bound.map_or_else(
            || "none".into(),
            |(max_keys, policy)| format!("{max_keys}, {policy:?}")
        ),
    );
    let calm = run(&url, params, false).await?;
    let attacked = run(&url, params, true).await?;
    let ratio = attacked.legit_allowed as f64 / calm.legit_allowed.max(1) as f64;
    let peak = attacked.peak();
    let last = attacked
        .samples
        .last()
        .map(|(_, size)| *size)
        .unwrap_or_default();
    println!(
        "| legit admitted, calm | legit admitted, flood | over-admissions (calm + flood) | denied | refused (key \
         limit) | attacker admitted / sent | attacker refused | removed by cleanup | peak rows | \
         rows at end | peak total / heap / indexes | p50 / p99 calm | p50 / p99 flood | decisions/s \
         flood |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|---:|");
    println!(
        "| {} | {} ({:+.2}%) | {} | {} | {} | {} / {} | {} | {} | {} | {} | {} / {} / {} | {:.0} / \
         {:.0} µs | {:.0} / {:.0} µs | {:.0} |",
        calm.legit_allowed,
        attacked.legit_allowed,
        (ratio - 1.0) * 100.0,
        attacked.over_admitted + calm.over_admitted,
        attacked.legit_denied,
        attacked.legit_refused,
        attacked.attacker_allowed,
        attacked.attacker_sent,
        attacked.attacker_refused,
        attacked.removed_by_cleanup,
        peak.rows,
        last.rows,
        mib(peak.total),
        mib(peak.heap),
        mib(peak.indexes),
        calm.percentile_us(0.50),
        calm.percentile_us(0.99),
        attacked.percentile_us(0.50),
        attacked.percentile_us(0.99),
        attacked.latencies.len() as f64 / attacked.wall_s,
    );
    let rows: Vec<String> = (attacked.samples.iter())
        .map(|(second, size)| format!("{second}s: {} rows, {}", size.rows, mib(size.total)))
        .collect();
    println!("rows over time (flood): {}", rows.join("; "));
    Ok(())
}
