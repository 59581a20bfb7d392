//! Trace generators shared by the integration tests.
#![allow(dead_code)] // each test binary uses a different part

use bucketproof_check::runner::{RunOptions, Verdict, run_trace};
use bucketproof_scenario::sample::{self, below};
use bucketproof_trace::{Acquire, BandwidthSpec, ConfigSpec, Op, Setup, Subject};

pub use bucketproof_trace::duration::SECOND;

/// A deterministic mixed trace: a few keys, awkward time steps, rollbacks, invalid costs, request ids.
/// Drawn with the harness's own sampler, like every generator, so a seed means the same trace forever.
pub fn mixed_trace(len: usize, seed: u64) -> Vec<Op> {
    let mut rng = sample::stream(seed, 0);
    let mut now = 5 * SECOND;
    (0..len)
        .map(|_| {
            now = match below(&mut rng, 10) {
                0 => now.saturating_sub(below(&mut rng, SECOND)), // rollback
                1 => now,                                         // frozen
                2 => now + 3 * SECOND,                            // exact multiple
                _ => now + below(&mut rng, SECOND / 2),
            };
            let key = below(&mut rng, 4);
            match below(&mut rng, 20) {
                0 => Op::Sweep { now },
                1 => Op::Forget { key },
                2 => Op::Reconfigure {
                    key,
                    now,
                    config: ConfigSpec::new(
                        1 + below(&mut rng, 6),
                        ["1/3s", "2/s", "7/5s"][below(&mut rng, 3) as usize],
                    ),
                },
                _ => Op::Acquire(Acquire {
                    key,
                    cost: below(&mut rng, 7),
                    now,
                    request_id: (below(&mut rng, 4) == 0).then(|| below(&mut rng, 3)),
                }),
            }
        })
        .collect()
}

/// Runs `mixed_trace(len, seed)` for each seed through a subject built by `build` and the model with
/// every oracle; asserts a pass and that the traces reached the cases they exist for.
pub fn assert_agrees_on_mixed_traces(
    seeds: std::ops::Range<u64>,
    len: usize,
    build: impl Fn(&Setup) -> Box<dyn Subject>,
) {
    let setup = Setup::new(ConfigSpec::new(5, "3/2s"));
    let events = [
        "rollback",
        "denied",
        "invalid_cost",
        "replayed",
        "saturated",
    ];
    assert_agrees(seeds, &setup, |seed| mixed_trace(len, seed), &events, build);
}

/// The same mixed traces without reconfigurations on keys of three bandwidths (a burst, a sustained
/// rate, a slow quota): every bandwidth's part judged, and denials where one bandwidth covered.
pub fn assert_agrees_on_set_traces(
    seeds: std::ops::Range<u64>,
    len: usize,
    build: impl Fn(&Setup) -> Box<dyn Subject>,
) {
    let setup = Setup::new(ConfigSpec::set([
        BandwidthSpec::new(5, "3/2s"),
        BandwidthSpec::new(8, "1/s").named("sustained"),
        BandwidthSpec::new(12, "1/min"),
    ]));
    let ops = |seed| {
        (mixed_trace(len, seed).into_iter())
            .filter(|op| !matches!(op, Op::Reconfigure { .. }))
            .collect()
    };
    let events = [
        "rollback",
        "denied",
        "invalid_cost",
        "replayed",
        "partial_denial",
    ];
    assert_agrees(seeds, &setup, ops, &events, build);
}

fn assert_agrees(
    seeds: std::ops::Range<u64>,
    setup: &Setup,
    ops: impl Fn(u64) -> Vec<Op>,
    events: &[&str],
    build: impl Fn(&Setup) -> Box<dyn Subject>,
) {
    for seed in seeds {
        let mut subject = build(setup);
        let report = run_trace(setup, ops(seed), subject.as_mut(), &RunOptions::default()).unwrap();
        assert_eq!(report.verdict, Verdict::Pass, "seed {seed}");
        for event in events {
            assert!(
                report.events.get(*event).copied().unwrap_or(0) > 0,
                "seed {seed}: no {event}: {:?}",
                report.events
            );
        }
    }
}

/// True when nothing is `missing`. Otherwise a loud SKIP line naming `test` and what is missing,
/// and false, or, with the environment variable `require` set to 1 (CI sets them), a failure: a
/// test never passes by not running.
pub fn available(test: &str, missing: Option<String>, require: &str) -> bool {
    let Some(missing) = missing else {
        return true;
    };
    assert!(
        std::env::var(require).as_deref() != Ok("1"),
        "{test}: {missing}, but {require}=1"
    );
    eprintln!("\n!!!!! SKIP {test}: {missing}; it did NOT run !!!!!\n");
    false
}

/// `available` for a PostgreSQL test: `DATABASE_URL` set, else `BUCKETPROOF_REQUIRE_POSTGRES`.
pub fn postgres_available(test: &str) -> bool {
    let missing = std::env::var("DATABASE_URL")
        .is_err()
        .then(|| "DATABASE_URL is not set".to_owned());
    available(test, missing, "BUCKETPROOF_REQUIRE_POSTGRES")
}

/// `available` for a Redis test: `REDIS_URL` set, else `BUCKETPROOF_REQUIRE_REDIS`.
pub fn redis_available(test: &str) -> bool {
    let missing = std::env::var("REDIS_URL")
        .is_err()
        .then(|| "REDIS_URL is not set".to_owned());
    available(test, missing, "BUCKETPROOF_REQUIRE_REDIS")
}

/// `available` for an adapter's interpreter: `program --version` runs, else
/// `BUCKETPROOF_REQUIRE_ADAPTERS`.
pub fn program_available(program: &str) -> bool {
    let runs = std::process::Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success());
    let missing = (!runs).then(|| format!("{program} is not installed"));
    available("adapter test", missing, "BUCKETPROOF_REQUIRE_ADAPTERS")
}
