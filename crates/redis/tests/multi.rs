//! Many instances, one quota: 8 limiters on 8 connections hammer 3 keys with server time.
//!
//! Checks, on the history the clients saw:
//! 1. the arrival-curve bound, independent of any model: for every key and every window `[a, b]` of
//!    decision times, admitted units <= capacity_units + p * (b - a) (a fresh bucket starts full);
//! 2. accounting: each key's transitions carry the script's counter `seq`; the seqs must be exactly
//!    `1..=n` (no transition lost or run twice), and replaying them in seq order through the exact core
//!    must give the same decisions and end at the balance stored in Redis, so every admitted unit is
//!    accounted for by `capacity + credited refill - admitted = final balance`.
//!
//! The same checks run against a deliberately non-atomic client (HMGET, compute in Rust, HSET) and must
//! catch it: the test fails if they do not.

mod common;

use std::sync::Arc;

use bucketproof_limiter::internal::{Attempt, state_from_parts, transition};
use bucketproof_limiter::{BucketState, Config, NANOS_PER_SECOND, Nanos, Rate};
use bucketproof_redis::script::{Packed, packed_config};
use bucketproof_redis::{RedisLimiter, Source};
use common::{below, cleanup, heavy, redis_url, unique_prefix};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use redis::aio::MultiplexedConnection;

const KEYS: [&str; 3] = ["k0", "k1", "k2"];
const INSTANCES: usize = 8;

/// One decision as a client saw it.
#[derive(Clone, Copy, Debug)]
struct Seen {
    key: usize,
    /// The call found no bucket and created it.
    created: bool,
    cost: u64,
    now: Nanos,
    allowed: bool,
    remaining_units: u128,
    seq: u64,
}

fn config() -> Config {
    Config::new(20, Rate::per_second(400)).unwrap()
}

/// The deliberately broken client: read, decide in the client, write. Two clients can read the same
/// state and both spend it; the later write silently drops the earlier charge.
struct NonAtomic {
    conn: MultiplexedConnection,
    prefix: String,
    config: Config,
}

impl NonAtomic {
    async fn acquire(&mut self, user: &str, cost: u64) -> redis::RedisResult<Seen> {
        let key = format!("{}{{{user}}}", self.prefix);
        let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut self.conn).await?;
        let now = secs * NANOS_PER_SECOND + micros * 1000;
        let stored: Option<Vec<u8>> = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut self.conn)
            .await?;
        let stored = stored.map(|b| Packed::decode(&b).expect("a packed bucket"));
        let state = match &stored {
            Some(p) => state_from_parts(p.balance, p.last_refill),
            None => BucketState::full(&self.config, now),
        };
        let (next, decision) =
            transition(&self.config, state, Attempt { cost, now }).expect("valid cost");
        let k = stored.as_ref().map(|p| p.seq);
        let seq = k.unwrap_or(0) + 1;
        let bucket = Packed {
            balance: next.balance(),
            last_refill: next.last_refill(),
            seq,
            records_until: (-1, 0),
            config: packed_config(&self.config),
            override_version: None,
        };
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg(bucket.encode())
            .query_async(&mut self.conn)
            .await?;
        Ok(Seen {
            key: 0,
            created: k.is_none(),
            cost,
            now,
            allowed: decision.is_allowed(),
            remaining_units: decision.remaining().units(),
            seq,
        })
    }
}

/// Violations of the arrival-curve bound, per key.
fn arrival_curve_violations(config: &Config, history: &[Seen]) -> Vec<String> {
    let unit = config.units_per_token() as i128;
    let cap = config.capacity_units() as i128;
    let p = config.units_per_nanosecond() as i128;
    let mut out = Vec::new();
    for key in 0..KEYS.len() {
        let mut admitted: Vec<&Seen> = history
            .iter()
            .filter(|s| s.key == key && s.allowed)
            .collect();
        admitted.sort_by_key(|s| (s.now, s.seq));
        // max over b of [U*S_b - p*t_b] + max over a <= b of [p*t_a - U*S_(a-1)] <= cap.
        let mut sum: i128 = 0;
        let mut best_start = i128::MIN;
        for s in admitted {
            best_start = best_start.max(p * s.now as i128 - unit * sum);
            sum += s.cost as i128;
            let excess = unit * sum - p * s.now as i128 + best_start - cap;
            if excess > 0 {
                out.push(format!(
                    "key {key}: admitted {excess} units beyond capacity + rate*window ending at {}",
                    s.now
                ));
                break;
            }
        }
    }
    out
}

/// Violations of exact accounting: seq gaps or duplicates, decisions that a sequential replay would
/// not make, a stored balance that the admitted units do not explain.
fn accounting_violations(
    config: &Config,
    history: &[Seen],
    stored: &[Option<u128>],
) -> Vec<String> {
    let mut out = Vec::new();
    for (key, stored) in stored.iter().enumerate() {
        // A bucket that refilled to full and sat idle past its TTL is dropped by Redis and the next
        // call creates it afresh (seq restarts at 1). Such epochs are separated by at least 1 ms of
        // idleness, so time order splits them; inside an epoch the script's seq is the real order.
        let mut by_time: Vec<&Seen> = history.iter().filter(|s| s.key == key).collect();
        by_time.sort_by_key(|s| (s.now, !s.created, s.seq));
        let mut epochs: Vec<Vec<&Seen>> = Vec::new();
        for s in by_time {
            match epochs.last_mut() {
                Some(epoch) if !s.created => epoch.push(s),
                _ => epochs.push(vec![s]),
            }
        }
        let mut state: Option<BucketState> = None;
        let (mut admitted, mut credited) = (0u128, 0u128);
        'epochs: for mut ops in epochs {
            ops.sort_by_key(|s| s.seq);
            for (i, s) in ops.iter().enumerate() {
                if s.seq != i as u64 + 1 {
                    out.push(format!(
                        "key {key}: seq {} at position {} (lost or doubled)",
                        s.seq,
                        i + 1
                    ));
                    break 'epochs;
                }
            }
            let first = ops[0];
            if let Some(previous) = state {
                // Recreation is only lossless if the old bucket was full by then.
                if !previous.refilled(config, first.now).is_full(config) {
                    out.push(format!(
                        "key {key}: recreated at {} while not full",
                        first.now
                    ));
                    break;
                }
                credited += config.capacity_units() - previous.balance();
            }
            let mut current = BucketState::full(config, first.now);
            for s in &ops {
                let refilled = current.refilled(config, s.now);
                credited += refilled.balance() - current.balance();
                let (next, decision) = transition(
                    config,
                    current,
                    Attempt {
                        cost: s.cost,
                        now: s.now,
                    },
                )
                .unwrap();
                if decision.is_allowed() != s.allowed
                    || decision.remaining().units() != s.remaining_units
                {
                    out.push(format!(
                        "key {key}: seq {} differs from the sequential replay",
                        s.seq
                    ));
                    break 'epochs;
                }
                if s.allowed {
                    admitted += s.cost as u128 * config.units_per_token();
                }
                current = next;
            }
            state = Some(current);
        }
        let Some(state) = state else { continue };
        let expected_final = config.capacity_units() + credited - admitted;
        // The key may have expired after the run (then it was full: nothing is lost).
        let stored_ok = match stored {
            Some(b) => *b == expected_final,
            None => true,
        };
        if !stored_ok || state.balance() != expected_final {
            out.push(format!(
                "key {key}: stored balance {stored:?}, accounting says {expected_final}"
            ));
        }
    }
    out
}

async fn stored_balances(url: &str, prefix: &str) -> Vec<Option<u128>> {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let mut out = Vec::new();
    for key in KEYS {
        let stored = common::stored_bucket(&mut conn, &format!("{prefix}{{{key}}}")).await;
        out.push(stored.map(|p| p.balance));
    }
    out
}

/// `ops` acquires spread over 8 instances (2 tasks each), with seeded keys and costs.
async fn run_real(url: &str, prefix: &str, ops: usize) -> Vec<Seen> {
    let mut tasks = Vec::new();
    for instance in 0..INSTANCES {
        let limiter = Arc::new(
            RedisLimiter::builder(config())
                .prefix(prefix)
                .recovery(bucketproof_redis::Recovery::Trusting)
                .connect(url)
                .await
                .expect("connect"),
        );
        for task in 0..2 {
            let limiter = Arc::clone(&limiter);
            let n = ops / (INSTANCES * 2);
            tasks.push(tokio::spawn(async move {
                let mut rng = ChaCha8Rng::seed_from_u64((instance * 2 + task) as u64);
                let mut seen = Vec::with_capacity(n);
                for _ in 0..n {
                    let key = below(&mut rng, 3) as usize;
                    let cost = 1 + below(&mut rng, 3);
                    let outcome = limiter.acquire(KEYS[key], cost).await.expect("acquire");
                    assert_eq!(outcome.source, Source::Store);
                    let d = outcome.decision();
                    seen.push(Seen {
                        key,
                        created: outcome.acquired.created,
                        cost,
                        now: d.decided_at(),
                        allowed: d.is_allowed(),
                        remaining_units: d.remaining().units(),
                        seq: outcome.seq,
                    });
                }
                seen
            }));
        }
    }
    let mut history = Vec::new();
    for t in tasks {
        history.extend(t.await.unwrap());
    }
    history
}

async fn run_mutant(url: &str, prefix: &str, ops: usize) -> Vec<Seen> {
    let mut tasks = Vec::new();
    for instance in 0..INSTANCES {
        let client = redis::Client::open(url).unwrap();
        let conn = client.get_multiplexed_async_connection().await.unwrap();
        let mut mutant = NonAtomic {
            conn,
            prefix: prefix.to_string(),
            config: config(),
        };
        let n = ops / INSTANCES;
        tasks.push(tokio::spawn(async move {
            let mut rng = ChaCha8Rng::seed_from_u64(100 + instance as u64);
            let mut seen = Vec::with_capacity(n);
            for _ in 0..n {
                let key = below(&mut rng, 3) as usize;
                let cost = 1 + below(&mut rng, 3);
                let mut s = mutant
                    .acquire(KEYS[key], cost)
                    .await
                    .expect("mutant acquire");
                s.key = key;
                seen.push(s);
            }
            seen
        }));
    }
    let mut history = Vec::new();
    for t in tasks {
        history.extend(t.await.unwrap());
    }
    history
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_instances_share_one_exact_quota_and_the_non_atomic_mutant_is_caught() {
    let Some(url) = redis_url("eight_instances_share_one_exact_quota") else {
        return;
    };
    let config = config();
    let ops = if heavy() { 100_000 } else { 10_016 };

    let prefix = unique_prefix("multi");
    let history = run_real(&url, &prefix, ops).await;
    assert_eq!(history.len(), ops);
    let allowed = history.iter().filter(|s| s.allowed).count();
    let denied = history.len() - allowed;
    assert!(
        allowed > 100 && denied > 100,
        "the run must both admit and deny: {allowed}/{denied}"
    );
    let stored = stored_balances(&url, &prefix).await;
    let curve = arrival_curve_violations(&config, &history);
    let accounting = accounting_violations(&config, &history, &stored);
    assert!(curve.is_empty(), "arrival curve: {curve:?}");
    assert!(accounting.is_empty(), "accounting: {accounting:?}");
    let created = history.iter().filter(|s| s.created).count();
    eprintln!(
        "multi-instance: {ops} ops, {allowed} admitted, {denied} denied, {created} bucket creations \
         (first use or lossless expiry), all accounted for"
    );
    cleanup(&url, &prefix).await;

    // The same checks must catch the non-atomic client.
    let prefix = unique_prefix("mutant");
    let history = run_mutant(&url, &prefix, 4_000).await;
    let stored = stored_balances(&url, &prefix).await;
    let curve = arrival_curve_violations(&config, &history);
    let accounting = accounting_violations(&config, &history, &stored);
    eprintln!("mutant: arrival-curve {curve:?}; accounting {accounting:?}");
    assert!(
        !curve.is_empty() || !accounting.is_empty(),
        "the non-atomic GET/compute/SET mutant was NOT caught"
    );
    assert!(
        !accounting.is_empty(),
        "lost updates must show in the accounting check"
    );
    cleanup(&url, &prefix).await;
}

/// The checks themselves can fail: a hand-made over-admission and a doubled seq are reported.
#[test]
fn the_checks_reject_a_doctored_history() {
    let config = config();
    let unit = config.units_per_token();
    let mk = |now, seq, allowed, cost, remaining_units| Seen {
        key: 0,
        created: seq == 1,
        cost,
        now,
        allowed,
        remaining_units,
        seq,
    };
    // 20 tokens at t=0, then 11 more 10 ms later (only 0.4 token refilled).
    let mut h = vec![mk(0, 1, true, 20, 0)];
    for i in 0..11 {
        h.push(mk(10_000_000, 2 + i, true, 1, 0));
    }
    assert!(!arrival_curve_violations(&config, &h).is_empty());
    // Two creations without the bucket having refilled: the second one lost the first one's charge.
    let twice = vec![mk(0, 1, true, 2, 18 * unit), mk(0, 1, true, 2, 18 * unit)];
    let v = accounting_violations(&config, &twice, &[Some(18 * unit), None, None]);
    assert!(v.iter().any(|m| m.contains("while not full")), "{v:?}");
    // A doubled seq inside one epoch.
    let doubled = vec![
        mk(0, 1, true, 2, 18 * unit),
        mk(1, 2, true, 2, 16 * unit),
        mk(2, 2, true, 2, 16 * unit),
    ];
    let v = accounting_violations(&config, &doubled, &[Some(16 * unit), None, None]);
    assert!(v.iter().any(|m| m.contains("lost or doubled")), "{v:?}");
}
