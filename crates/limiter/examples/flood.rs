//! A flood of fresh ids against a keyed limiter at its key bound, per eviction policy: how many of the
//! legitimate users' requests are admitted, against the same run without the flood and against each
//! user's budget.
//!
//! The run: a limiter bounded at `--max-keys` keys (100,000); for `--seconds` (10) of simulated time,
//! 100 legitimate users each send 10 requests a second (user `u` at `u` ms past every 100 ms) on a
//! bucket of 10 refilling 5/s, cost 1; and, in the attacked run, an attacker sends one request a
//! microsecond, each from an id never seen before (`--attackers` in all, 10,000,000 by default).
//! Time is injected, so every run makes the same decisions on every machine.
//!
//! A user's budget over any interval `[a, b]` is `10 + 5 * (b - a)` tokens; an over-admission is a
//! request admitted beyond it in some interval (checked for every interval, exactly, in
//! microsecond units). Peak RSS is the process's (Linux `VmHWM`), so each policy runs in a process of
//! its own.
//!
//! ```text
//! cargo run --release -p bucketproof-limiter --example flood                       # every policy
//! cargo run --release -p bucketproof-limiter --example flood -- --policy evict-keeping-deficit
//! cargo run --release -p bucketproof-limiter --example flood -- --attackers 1000000 --seconds 2
//! ```

use std::collections::BTreeMap;
use std::process::Command;

use bucketproof_limiter::{AcquireError, Config, EvictionPolicy, Limiter, Rate};

const USERS: u64 = 100;
const CAPACITY: u64 = 10;
const RATE_PER_S: u64 = 5;
const USER_PERIOD_US: u64 = 100_000;
/// Attacker ids start here, far above every user id.
const ATTACKER_BASE: u64 = 1 << 40;

const POLICIES: [(&str, EvictionPolicy); 4] = [
    ("reject-new-keys", EvictionPolicy::RejectNewKeys),
    ("evict-full", EvictionPolicy::EvictFull),
    ("evict-least-recent", EvictionPolicy::EvictLeastRecent),
    ("evict-keeping-deficit", EvictionPolicy::EvictKeepingDeficit),
];

#[derive(Clone, Copy)]
struct Run {
    max_keys: usize,
    seconds: u64,
    attackers: u64,
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
}

/// The streaming arrival-curve check for one user, in microseconds and millionths of a token:
/// admitted in `[a, b]` must be at most `CAPACITY + RATE * (b - a)`.
#[derive(Default)]
struct Budget {
    admitted: i128,
    /// max over admitted requests j of `RATE * t_j - admitted_before_j`.
    best: Option<i128>,
}

impl Budget {
    /// Admits one token at `t_us`; false if some interval ending here exceeds the budget.
    fn admit(&mut self, t_us: u64) -> bool {
        let rate_t = RATE_PER_S as i128 * t_us as i128;
        let candidate = rate_t - self.admitted;
        self.best = Some(self.best.map_or(candidate, |best| best.max(candidate)));
        self.admitted += 1_000_000;
        // Over [a, t]: admitted since a = admitted - admitted_before_a; bound = C + RATE (t - a).
        let worst = self.admitted - rate_t + self.best.unwrap_or(candidate);
        worst <= CAPACITY as i128 * 1_000_000
    }
}

fn run(policy: EvictionPolicy, run: Run, attacked: bool) -> (Seen, Limiter<u64>) {
    let config = Config::new(CAPACITY, Rate::per_second(RATE_PER_S)).expect("a valid config");
    let limiter: Limiter<u64> = Limiter::builder(config)
        .max_keys(run.max_keys, policy)
        .hasher_seed(7)
        .build();
    let mut seen = Seen::default();
    let mut budgets: BTreeMap<u64, Budget> = BTreeMap::new();
    let mut next_attacker = 0u64;
    for t_us in 0..run.seconds * 1_000_000 {
        if attacked && next_attacker < run.attackers {
            match limiter.acquire_at(&(ATTACKER_BASE + next_attacker), 1, t_us * 1_000) {
                Ok(decision) if decision.is_allowed() => seen.attacker_allowed += 1,
                Ok(_) => {}
                Err(_) => seen.attacker_refused += 1,
            }
            next_attacker += 1;
            seen.attacker_sent += 1;
        }
        if t_us % 1_000 != 0 {
            continue;
        }
        let user = (t_us / 1_000) % USER_PERIOD_US.div_ceil(1_000);
        if user >= USERS {
            continue;
        }
        match limiter.acquire_at(&user, 1, t_us * 1_000) {
            Ok(decision) if decision.is_allowed() => {
                seen.legit_allowed += 1;
                if !budgets.entry(user).or_default().admit(t_us) {
                    seen.over_admitted += 1;
                }
            }
            Ok(_) => seen.legit_denied += 1,
            Err(AcquireError::KeyLimitReached { .. }) => seen.legit_refused += 1,
            Err(other) => panic!("the flood's requests are valid: {other}"),
        }
    }
    (seen, limiter)
}

fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn one_policy(name: &str, policy: EvictionPolicy, params: Run) {
    let (calm, _) = run(policy, params, false);
    let (attacked, limiter) = run(policy, params, true);
    let stats = limiter.stats();
    let ratio = attacked.legit_allowed as f64 / calm.legit_allowed.max(1) as f64;
    println!(
        "| {name} | {} | {} ({:+.2}%) | {} | {} | {} | {} | {} / {} | {} | {} |",
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
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut params = Run {
        max_keys: 100_000,
        seconds: 10,
        attackers: 10_000_000,
    };
    let mut only = None;
    let mut args = std::env::args().skip(1);
    let usage = "usage: flood [--policy NAME] [--max-keys N] [--seconds S] [--attackers N]";
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(usage);
        match arg.as_str() {
            "--policy" => only = Some(value()?),
            "--max-keys" => params.max_keys = value()?.parse()?,
            "--seconds" => params.seconds = value()?.parse()?,
            "--attackers" => params.attackers = value()?.parse()?,
            _ => return Err(usage.into()),
        }
    }
    if let Some(name) = only {
        let (_, policy) = POLICIES
            .iter()
            .find(|(known, _)| *known == name)
            .ok_or_else(|| format!("no policy {name:?}; one of reject-new-keys, evict-full, evict-least-recent, evict-keeping-deficit"))?;
        one_policy(&name, *policy, params);
        return Ok(());
    }
    println!(
        "{} users at 10/s on a bucket of {CAPACITY} refilling {RATE_PER_S}/s for {} s; key bound {}; {} fresh attacker ids, one per µs",
        USERS, params.seconds, params.max_keys, params.attackers
    );
    println!(
        "| policy | legit admitted, calm | legit admitted, flood | over-admissions | denied | refused (key limit) | evictions, not full | attacker admitted / sent | deficit bytes | peak RSS |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let me = std::env::current_exe()?;
    for (name, _) in POLICIES {
        let out = Command::new(&me)
            .args(["--policy", name])
            .args(["--max-keys", &params.max_keys.to_string()])
            .args(["--seconds", &params.seconds.to_string()])
            .args(["--attackers", &params.attackers.to_string()])
            .output()?;
        if !out.status.success() {
            return Err(format!("{name}: {}", String::from_utf8_lossy(&out.stderr)).into());
        }
        print!("{}", String::from_utf8_lossy(&out.stdout));
    }
    Ok(())
}
