//! A flood of fresh ids against a keyed limiter at its key bound, per eviction policy and per
//! pattern of legitimate traffic: how many of the legitimate users' requests are admitted, against the
//! same run without the flood and against each user's budget.
//!
//! The run: a limiter bounded at `--max-keys` keys (100,000; 8 shards, fixed hasher seed); for
//! `--seconds` (10) of simulated time, 100 legitimate users on a bucket of 10 refilling 5/s, cost 1,
//! and, in the attacked run, an attacker sending one request a microsecond, each from an id never
//! seen before (`--attackers` in all, 10,000,000 by default). The users' pattern (`--pattern`):
//! - `steady`: each user sends 10 requests a second, user `u` at `u` ms past every 100 ms;
//! - `bursty`: each user sends 12 requests at one instant every 2.5 s, user `u` at `25 u` ms past
//!   each period (unattacked, every burst finds a full bucket and 10 of its 12 are admitted);
//! - `thinking`: each user sends bursts of 1 to 12 requests at one instant, separated by think times
//!   drawn uniformly from 0.1 s to 4 s (a seeded generator per user, so every run is the same).
//!
//! Time is injected, so every run makes the same decisions on every machine.
//!
//! A user's budget over any interval `[a, b]` is `10 + 5 * (b - a)` tokens; an over-admission is a
//! request admitted beyond it in some interval (checked for every interval, exactly, in
//! microsecond units). Peak RSS is the process's (Linux `VmHWM`), so each run is a process of its own.
//!
//! `--deficit-slots N` sizes `EvictKeepingDeficit`'s array (`Builder::deficit_slots_per_key`), to
//! measure memory against legitimate loss.
//!
//! `--explain` adds, per pattern and policy, how the attacked run's bursts started: the key still
//! live or recreated, and full or owing, with the tokens owed.
//!
//! ```text
//! cargo run --release -p bucketproof-limiter --example flood                       # every pattern and policy
//! cargo run --release -p bucketproof-limiter --example flood -- --pattern bursty --policy evict-keeping-deficit
//! cargo run --release -p bucketproof-limiter --example flood -- --attackers 1000000 --seconds 2
//! ```

#[path = "support/budget.rs"]
mod budget;

use std::collections::BTreeMap;
use std::process::Command;

use bucketproof_limiter::{
    AcquireError, Config, DEFICIT_SLOTS_PER_KEY, EvictionPolicy, Limiter, Rate,
};
use budget::Budget;

const USERS: u64 = 100;
const CAPACITY: u64 = 10;
const RATE_PER_S: u64 = 5;
/// Fixed, so the tables (and the deficit arrays, per shard) are the same on every machine.
const SHARDS: usize = 8;
/// Attacker ids start here, far above every user id.
const ATTACKER_BASE: u64 = 1 << 40;

const POLICIES: [(&str, EvictionPolicy); 4] = [
    ("reject-new-keys", EvictionPolicy::RejectNewKeys),
    ("evict-full", EvictionPolicy::EvictFull),
    ("evict-least-recent", EvictionPolicy::EvictLeastRecent),
    ("evict-keeping-deficit", EvictionPolicy::EvictKeepingDeficit),
];

const PATTERNS: [&str; 3] = ["steady", "bursty", "thinking"];

#[derive(Clone, Copy)]
struct Run {
    max_keys: usize,
    seconds: u64,
    attackers: u64,
    deficit_slots: usize,
    explain: bool,
}

/// One legitimate burst: `count` requests of cost 1 from `user` at `t_us`.
#[derive(Clone, Copy)]
struct Burst {
    t_us: u64,
    user: u64,
    count: u64,
}

/// A small seeded generator (splitmix64), so the `thinking` pattern needs no dependency and is the
/// same everywhere.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi` (the modulo bias is far below anything measured here).
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

/// Every legitimate burst of `pattern` in `[0, seconds)`, in time order (users in order within an
/// instant).
fn bursts(pattern: &str, seconds: u64) -> Result<Vec<Burst>, String> {
    let end = seconds * 1_000_000;
    let mut all = Vec::new();
    for user in 0..USERS {
        match pattern {
            "steady" => all.extend((user * 1_000..end).step_by(100_000).map(|t_us| Burst {
                t_us,
                user,
                count: 1,
            })),
            "bursty" => all.extend((user * 25_000..end).step_by(2_500_000).map(|t_us| Burst {
                t_us,
                user,
                count: 12,
            })),
            "thinking" => {
                let mut rng = SplitMix(0x5EED_0000 + user);
                let mut t_us = rng.between(0, 4_000_000);
                while t_us < end {
                    all.push(Burst {
                        t_us,
                        user,
                        count: rng.between(1, 12),
                    });
                    t_us += rng.between(100_000, 4_000_000);
                }
            }
            other => {
                return Err(format!(
                    "no pattern {other:?}; one of {}",
                    PATTERNS.join(", ")
                ));
            }
        }
    }
    all.sort_by_key(|burst| (burst.t_us, burst.user));
    Ok(all)
}

/// What one run saw.
#[derive(Default)]
struct Seen {
    legit_sent: u64,
    legit_allowed: u64,
    legit_denied: u64,
    legit_refused: u64,
    over_admitted: u64,
    attacker_sent: u64,
    attacker_allowed: u64,
    attacker_refused: u64,
    /// How bursts started (`--explain`): [live full, live owing, recreated full, recreated owing].
    starts: [u64; 4],
    /// Tokens owed at the start of bursts whose key was recreated owing, and the most owed at one.
    owed_recreated: f64,
    owed_recreated_max: f64,
    /// Tokens owed at the start of bursts whose key was still live and not full.
    owed_live: f64,
}

fn run(
    policy: EvictionPolicy,
    params: Run,
    pattern: &[Burst],
    attacked: bool,
) -> (Seen, Limiter<u64>) {
    let config = Config::new(CAPACITY, Rate::per_second(RATE_PER_S)).expect("a valid config");
    let limiter: Limiter<u64> = Limiter::builder(config)
        .max_keys(params.max_keys, policy)
        .shards(SHARDS)
        .deficit_slots_per_key(params.deficit_slots)
        .hasher_seed(7)
        .build();
    let mut seen = Seen::default();
    let mut budgets: BTreeMap<u64, Budget> = BTreeMap::new();
    let mut next_attacker = 0u64;
    let mut next_burst = 0;
    for t_us in 0..params.seconds * 1_000_000 {
        if attacked && next_attacker < params.attackers {
            match limiter.acquire_at(&(ATTACKER_BASE + next_attacker), 1, t_us * 1_000) {
                Ok(decision) if decision.is_allowed() => seen.attacker_allowed += 1,
                Ok(_) => {}
                Err(_) => seen.attacker_refused += 1,
            }
            next_attacker += 1;
            seen.attacker_sent += 1;
        }
        while let Some(burst) = pattern.get(next_burst).filter(|burst| burst.t_us == t_us) {
            next_burst += 1;
            let now = t_us * 1_000;
            if params.explain {
                let peek = limiter.peek_at(&burst.user, now);
                let owed = CAPACITY as f64 - peek.remaining.to_f64_lossy();
                let owing = owed > 0.0;
                seen.starts[usize::from(!peek.present) * 2 + usize::from(owing)] += 1;
                if !peek.present {
                    seen.owed_recreated += owed;
                    seen.owed_recreated_max = seen.owed_recreated_max.max(owed);
                } else {
                    seen.owed_live += owed;
                }
            }
            for _ in 0..burst.count {
                seen.legit_sent += 1;
                match limiter.acquire_at(&burst.user, 1, now) {
                    Ok(decision) if decision.is_allowed() => {
                        seen.legit_allowed += 1;
                        if !(budgets.entry(burst.user))
                            .or_insert_with(|| Budget::new(CAPACITY, RATE_PER_S))
                            .admit(t_us)
                        {
                            seen.over_admitted += 1;
                        }
                    }
                    Ok(_) => seen.legit_denied += 1,
                    Err(AcquireError::KeyLimitReached { .. }) => seen.legit_refused += 1,
                    Err(other) => panic!("the flood's requests are valid: {other}"),
                }
            }
        }
    }
    (seen, limiter)
}

fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn one_policy(
    pattern_name: &str,
    name: &str,
    policy: EvictionPolicy,
    params: Run,
) -> Result<(), String> {
    let pattern = bursts(pattern_name, params.seconds)?;
    let (calm, _) = run(policy, params, &pattern, false);
    let (attacked, limiter) = run(policy, params, &pattern, true);
    let stats = limiter.stats();
    let ratio = attacked.legit_allowed as f64 / calm.legit_allowed.max(1) as f64;
    println!(
        "| {pattern_name} | {name} | {} | {} | {} ({:+.2}%) | {} | {} | {} | {} | {} / {} | {} | {} |",
        attacked.legit_sent,
        calm.legit_allowed,
        attacked.legit_allowed,
        (ratio - 1.0) * 100.0,
        attacked.over_admitted,
        attacked.legit_denied,
        attacked.legit_refused,
        stats.evicted_lossy + stats.evicted_owing,
        attacked.attacker_allowed,
        attacked.attacker_sent,
        limiter.deficit_bytes(),
        peak_rss_kib().map_or_else(
            || "?".into(),
            |kib| format!("{:.1} MiB", kib as f64 / 1024.0)
        ),
    );
    if params.explain {
        let [live_full, live_owing, back_full, back_owing] = attacked.starts;
        eprintln!(
            "  {pattern_name} / {name}: bursts starting live and full {live_full}, live and owing {live_owing} ({:.1} tokens owed in all), recreated full {back_full}, recreated owing {back_owing} ({:.1} tokens owed in all, at most {:.2} at one); created owing {}, evicted owing {}",
            attacked.owed_live,
            attacked.owed_recreated,
            attacked.owed_recreated_max,
            stats.created_owing,
            stats.evicted_owing,
        );
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut params = Run {
        max_keys: 100_000,
        seconds: 10,
        attackers: 10_000_000,
        deficit_slots: DEFICIT_SLOTS_PER_KEY,
        explain: false,
    };
    let mut only_policy = None;
    let mut only_pattern = None;
    let mut args = std::env::args().skip(1);
    let usage = "usage: flood [--pattern steady|bursty|thinking] [--policy NAME] [--max-keys N] [--seconds S] [--attackers N] [--deficit-slots N] [--explain]";
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(usage);
        match arg.as_str() {
            "--policy" => only_policy = Some(value()?),
            "--pattern" => only_pattern = Some(value()?),
            "--max-keys" => params.max_keys = value()?.parse()?,
            "--seconds" => params.seconds = value()?.parse()?,
            "--attackers" => params.attackers = value()?.parse()?,
            "--deficit-slots" => params.deficit_slots = value()?.parse()?,
            "--explain" => params.explain = true,
            _ => return Err(usage.into()),
        }
    }
    if let (Some(pattern), Some(name)) = (&only_pattern, &only_policy) {
        let (_, policy) = POLICIES
            .iter()
            .find(|(known, _)| known == name)
            .ok_or_else(|| format!("no policy {name:?}; one of reject-new-keys, evict-full, evict-least-recent, evict-keeping-deficit"))?;
        one_policy(pattern, name, *policy, params)?;
        return Ok(());
    }
    println!(
        "{} users on a bucket of {CAPACITY} refilling {RATE_PER_S}/s for {} s; key bound {} over {SHARDS} shards; {} fresh attacker ids, one per µs; {} deficit slots per key",
        USERS, params.seconds, params.max_keys, params.attackers, params.deficit_slots
    );
    println!(
        "| pattern | policy | legit sent | legit admitted, calm | legit admitted, flood | over-admissions | denied | refused (key limit) | evictions, not full | attacker admitted / sent | deficit bytes | peak RSS |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let me = std::env::current_exe()?;
    let patterns: Vec<&str> = match &only_pattern {
        Some(pattern) => vec![pattern.as_str()],
        None => PATTERNS.to_vec(),
    };
    for pattern in patterns {
        for (name, _) in POLICIES {
            if only_policy.as_ref().is_some_and(|only| only != name) {
                continue;
            }
            let mut child = Command::new(&me);
            child
                .args(["--pattern", pattern, "--policy", name])
                .args(["--max-keys", &params.max_keys.to_string()])
                .args(["--seconds", &params.seconds.to_string()])
                .args(["--attackers", &params.attackers.to_string()])
                .args(["--deficit-slots", &params.deficit_slots.to_string()]);
            if params.explain {
                child.arg("--explain");
            }
            let out = child.output()?;
            if !out.status.success() {
                return Err(format!(
                    "{pattern} / {name}: {}",
                    String::from_utf8_lossy(&out.stderr)
                )
                .into());
            }
            print!("{}", String::from_utf8_lossy(&out.stdout));
            eprint!("{}", String::from_utf8_lossy(&out.stderr));
        }
    }
    Ok(())
}
