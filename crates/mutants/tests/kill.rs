//! The mutation self-test: every mutant is killed, each by a counterexample of at most
//! six ops, with a median time to kill under 2 s (asserted in release builds; a debug build only
//! reports it), and the oracle that kills it first also kills it alone. And the controls that make a
//! kill mean something: the shared wrapper with no mistake passes every trace the runner tries, the
//! racy variant passes them sequentially, and the real limiter never breaches under the race hunt.
//! The kill runner takes any subject factory: a foreign mutant is killed, and a name the factory
//! cannot build is an error, never a survival.

use std::collections::BTreeMap;
use std::time::Duration;

use bucketproof_check::runner::{RunOptions, Verdict, run_trace};
use bucketproof_check::subjects::CoreSubject;
use bucketproof_mutants::keyed::{Keyed, Mistake, control};
use bucketproof_mutants::kill::{
    KillError, KillOptions, MAX_SHRUNK_OPS, first_violation, kill, kill_all, load_scenarios,
    median_time_to_kill, scenario_kills,
};
use bucketproof_mutants::race::{RacySubject, exact_acquire, hunt_race};
use bucketproof_mutants::traces::{Family, generate};
use bucketproof_mutants::{KillBy, Mutant, MutantSubjects};
use bucketproof_trace::events::EVENTS;
use bucketproof_trace::{Setup, Subject, SubjectError, SubjectFactory, Trace};

/// Every trace the kill runner may try, in its order.
fn search_space(options: &KillOptions) -> impl Iterator<Item = (String, Trace)> + '_ {
    options.lengths.iter().flat_map(move |&len| {
        (0..options.seeds).flat_map(move |seed| {
            Family::ALL.into_iter().map(move |family| {
                (
                    format!("{} seed {seed}, {len} ops", family.name()),
                    generate(family, seed, len),
                )
            })
        })
    })
}

fn verdict(subject: &mut dyn Subject, trace: &Trace) -> Verdict {
    run_trace(
        &trace.setup,
        trace.ops.iter().cloned(),
        subject,
        &RunOptions::default(),
    )
    .expect("generated setups are valid")
    .verdict
}

#[test]
fn every_mutant_is_killed_by_a_small_counterexample() {
    let kills = kill_all(&KillOptions::default()).expect("the catalogue builds");
    let mut table = String::new();
    for kill in &kills {
        table.push_str(&format!(
            "{:<32} {:<14} {:<32} shrunk {:>2} ops  {:?}\n",
            kill.mutant.name(),
            kill.violation
                .as_ref()
                .map_or("SURVIVED", |v| v.oracle.name()),
            kill.found_by,
            kill.shrunk_ops.unwrap_or(0),
            kill.time_to_kill,
        ));
    }
    // `cargo test -- --nocapture` shows the table; a failure shows it in the message too.
    println!("{table}");

    let survivors: Vec<String> = kills
        .iter()
        .filter(|k| !k.killed())
        .map(|k| k.mutant.name())
        .collect();
    let too_big: Vec<String> = kills
        .iter()
        .filter(|k| k.shrunk_ops.is_some_and(|n| n > MAX_SHRUNK_OPS))
        .map(|k| format!("{} ({} ops)", k.mutant.name(), k.shrunk_ops.unwrap_or(0)))
        .collect();
    assert!(survivors.is_empty(), "survivors: {survivors:?}\n{table}");
    for kill in &kills {
        let first = kill.violation.as_ref().map(|v| v.oracle);
        assert!(
            first.is_some_and(|oracle| kill.alone.contains(&oracle)),
            "{}: killed first by {first:?}, alone by {:?}",
            kill.mutant.name(),
            kill.alone
        );
    }
    assert!(
        too_big.is_empty(),
        "counterexamples above {MAX_SHRUNK_OPS} ops: {too_big:?}\n{table}"
    );

    let median = median_time_to_kill(&kills).expect("every mutant was killed");
    println!("median time to kill: {median:?}");
    if !cfg!(debug_assertions) {
        assert!(
            median < Duration::from_secs(2),
            "median time to kill {median:?}\n{table}"
        );
    }
}

#[test]
fn every_shrunk_counterexample_replays_to_the_same_violation() {
    let options = KillOptions {
        // The race is not a trace; the other kills are deterministic.
        race_rounds: 0,
        alone: false,
        ..KillOptions::default()
    };
    for kill in kill_all(&options).expect("the catalogue builds") {
        let (Some(trace), Some(violation)) = (&kill.counterexample, &kill.violation) else {
            continue;
        };
        let again = first_violation(&MutantSubjects, &kill.mutant.name(), trace)
            .expect("the catalogue builds");
        assert_eq!(again.as_ref(), Some(violation), "{}", kill.mutant.name());
    }
}

/// The control also shows the trace families are not vacuous: together they reach every event the
/// mutants' mistakes need (a rollback, an exact boundary, a replay, a reconfiguration, ...).
#[test]
fn the_wrapper_without_a_mistake_passes_every_trace_the_runner_tries() {
    let mut reached: BTreeMap<String, u64> = BTreeMap::new();
    for (label, trace) in search_space(&KillOptions::default()) {
        // The wrapper holds one bandwidth per key; a trace of several runs on the real limiter, the
        // control of the set mutants.
        let mut subject: Box<dyn Subject> = if trace.setup.config.bandwidths().len() > 1 {
            Box::new(CoreSubject::new(&trace.setup).expect("valid setup"))
        } else {
            Box::new(control(&trace.setup).expect("valid setup"))
        };
        let report = run_trace(
            &trace.setup,
            trace.ops.iter().cloned(),
            subject.as_mut(),
            &RunOptions::default(),
        )
        .expect("generated setups are valid");
        assert_eq!(report.verdict, Verdict::Pass, "{label}");
        for (event, count) in report.events {
            *reached.entry(event).or_default() += count;
        }
    }
    // Every event the runner counts, except those of a key bound: the families run without one (no
    // mutant is about eviction; the attack scenarios of `bucketproof check` cover it).
    let not_targeted = ["evicted", "key_limit", "created_owing"];
    let needed = EVENTS.iter().filter(|event| !not_targeted.contains(event));
    let missing: Vec<&str> = needed
        .filter(|event| reached.get(**event).copied().unwrap_or(0) == 0)
        .copied()
        .collect();
    assert!(missing.is_empty(), "never reached {missing:?}: {reached:?}");
}

#[test]
fn the_racy_variant_is_indistinguishable_one_call_at_a_time() {
    let options = KillOptions::default();
    let plain = search_space(&options).filter(|(label, _)| label.starts_with("plain"));
    for (label, trace) in plain {
        let mut subject = RacySubject::new(&trace.setup).expect("valid setup");
        assert_eq!(verdict(&mut subject, &trace), Verdict::Pass, "{label}");
    }
}

#[test]
fn the_real_limiter_never_breaches_under_the_race_hunt() {
    let outcome = hunt_race(exact_acquire, Duration::from_secs(2), 20_000);
    assert_eq!(outcome.violation, None, "after {} rounds", outcome.rounds);
    assert!(outcome.rounds > 0, "the hunt ran no round");
}

/// The scenario suite (`scenarios/*.toml`, the harness's engine) kills every sequential mutant too,
/// each scenario cut to its first 400 ops to keep a debug run short (the report runs them whole).
#[test]
fn the_scenario_suite_kills_every_sequential_mutant() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    let mut suite = load_scenarios(&dir).expect("the repository's scenarios load");
    assert!(!suite.is_empty(), "no scenario in {}", dir.display());
    for scenario in &mut suite {
        scenario.length = scenario.length.min(400);
    }
    let rows = scenario_kills(&suite, 50);
    let mut survivors = Vec::new();
    for row in &rows {
        println!(
            "{:<32} killed by {}/{} scenarios",
            row.mutant.name(),
            row.killed_by.len(),
            row.ran
        );
        match row.mutant.kill_by {
            KillBy::Traces if row.killed_by.is_empty() => survivors.push(row.mutant.name()),
            // One call at a time the racy variant is the real limiter: a sequential kill would be
            // a false alarm of the scenario engine.
            KillBy::Threads => assert!(row.killed_by.is_empty(), "{:?}", row.killed_by),
            KillBy::Traces => {}
        }
    }
    assert!(survivors.is_empty(), "no scenario kills {survivors:?}");
}

/// A mistake defined here, outside the catalogue: a bucket that admits a request short of one unit
/// (half a nanosecond of refill at most), the kind of rounding slip a user's own limiter may have.
struct OneUnitShort;

impl Mistake for OneUnitShort {
    fn allows(&self, balance: u128, cost_units: u128) -> bool {
        balance + 1 >= cost_units
    }
}

const FOREIGN: Mutant = Mutant {
    number: 0,
    slug: "one-unit-short",
    mistake: "admits a request one unit short of its cost",
    seen: "this test",
    kill_by: KillBy::Traces,
};

/// A user's factory: builds the foreign mutant and nothing else.
struct Foreign;

impl SubjectFactory for Foreign {
    fn names(&self) -> Vec<String> {
        vec![FOREIGN.name()]
    }

    fn build(&self, name: &str, setup: &Setup) -> Option<Result<Box<dyn Subject>, SubjectError>> {
        (name == FOREIGN.name())
            .then(|| Keyed::new(name, OneUnitShort, setup).map(|s| Box::new(s) as Box<dyn Subject>))
    }
}

/// A factory that knows the name but cannot build it.
struct Broken;

impl SubjectFactory for Broken {
    fn names(&self) -> Vec<String> {
        vec![FOREIGN.name()]
    }

    fn build(&self, _name: &str, _setup: &Setup) -> Option<Result<Box<dyn Subject>, SubjectError>> {
        Some(Err(SubjectError::Build("no such limiter here".into())))
    }
}

#[test]
fn a_foreign_mutant_is_killed_through_its_own_factory() {
    let kill = kill(&FOREIGN, &Foreign, &KillOptions::default()).expect("the factory builds it");
    assert!(kill.killed(), "{}", kill.found_by);
    assert!(kill.shrunk_ops.is_some_and(|n| n <= MAX_SHRUNK_OPS));
    assert!(!kill.alone.is_empty());
    let trace = kill.counterexample.as_ref().expect("a trace kill");
    assert_eq!(
        first_violation(&Foreign, &FOREIGN.name(), trace).expect("builds"),
        kill.violation
    );
}

#[test]
fn a_factory_that_cannot_build_the_mutant_is_an_error_not_a_survival() {
    let options = KillOptions::default();
    assert_eq!(
        kill(&FOREIGN, &MutantSubjects, &options).err(),
        Some(KillError::UnknownSubject(FOREIGN.name()))
    );
    assert!(matches!(
        kill(&FOREIGN, &Broken, &options),
        Err(KillError::Build { .. })
    ));
    let threaded = Mutant {
        kill_by: KillBy::Threads,
        ..FOREIGN
    };
    assert_eq!(
        kill(&threaded, &Foreign, &options).err(),
        Some(KillError::NoThreadedHunt(FOREIGN.name()))
    );
}
