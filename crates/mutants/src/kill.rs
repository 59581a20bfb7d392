//! The kill runner: goes after a mutant and records who killed it, how fast and with how small a
//! counterexample, and which oracles kill it alone; writes `reports/mutants.md` for the catalogue.
//!
//! Subjects come from a [`SubjectFactory`] the caller hands in ([`MutantSubjects`] for the
//! catalogue), so a user can go after their own broken limiter: a name the factory does not build,
//! or cannot build for a generated setup, is a [`KillError`], never a survival.
//!
//! For a mutant killed by traces, generated traces ([`crate::traces`]) are tried shortest first (every
//! family at every seed for one length, then the next length) through the harness's lockstep runner
//! ([`failure_of`]) with all oracles on; the first failing trace is cut after its failing step and
//! shrunk with the harness's shrinker ([`shrink`]), which keeps only candidates failing the same way.
//! Then the same traces are tried with each oracle alone (the others switched off, [`OracleSet`]):
//! [`Kill::alone`] lists the oracles that kill the mutant by themselves. A mutant only the model
//! kills is a weakness for limiters checked without the model. The racy mutant is hunted by
//! [`crate::race::hunt_race`], whose one oracle is the arrival curve; that hunt drives the
//! catalogue's racy wrapper directly (threads share one limiter, which a `Subject` cannot), so it
//! serves only that catalogue entry.
//!
//! Everything in a [`Kill`] is deterministic (same traces, same verdicts, same counterexamples)
//! except `time_to_kill`, measured with `std::time::Instant`, and, for the race, which round
//! breaks. The report keeps the time in its own column and says so: here the time is the point.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use bucketproof_check::oracle::{OracleKind, OracleSet, Violation};
use bucketproof_check::runner::{Failure, RunOptions, failure_of};
use bucketproof_check::shrink::{ShrinkBudget, shrink};
use bucketproof_harness::Registry;
use bucketproof_harness::engine::{Engine, EngineOptions, Status};
use bucketproof_scenario::{Scenario, load_all};
use bucketproof_trace::{Subject, SubjectError, SubjectFactory, Trace};

use crate::race::{hunt_race, racy_acquire};
use crate::traces::{Family, generate};
use crate::{KillBy, Mutant, MutantSubjects, catalogue};

/// How hard the runner tries.
#[derive(Clone, Debug)]
pub struct KillOptions {
    /// Trace lengths, tried in this order.
    pub lengths: Vec<usize>,
    /// Seeds per family and length.
    pub seeds: u64,
    /// Shrink the first failing trace.
    pub shrink: bool,
    /// Wall-clock budget of the race hunt.
    pub race_budget: Duration,
    /// At most this many race rounds.
    pub race_rounds: u64,
    /// Also try every oracle alone on the same traces ([`Kill::alone`]).
    pub alone: bool,
}

impl Default for KillOptions {
    fn default() -> Self {
        KillOptions {
            lengths: vec![8, 32, 128, 512],
            seeds: 8,
            shrink: true,
            race_budget: Duration::from_secs(20),
            race_rounds: 2_000_000,
            alone: true,
        }
    }
}

/// The outcome for one mutant.
#[derive(Clone, Debug)]
pub struct Kill {
    /// The catalogue entry.
    pub mutant: Mutant,
    /// The first violation (of the shrunk counterexample when shrinking); `None`: it survived.
    pub violation: Option<Violation>,
    /// Where the kill came from: the trace family, seed and length, or the race round.
    pub found_by: String,
    /// Traces (or race rounds) run until the kill or until giving up.
    pub attempts: u64,
    /// Wall-clock time from the start of the hunt to the first failure (not reproducible).
    pub time_to_kill: Option<Duration>,
    /// The shrunk failing trace (traces only).
    pub counterexample: Option<Trace>,
    /// Ops in the shrunk counterexample (for the race: the concurrent acquires of the bad round).
    pub shrunk_ops: Option<usize>,
    /// The oracles that kill it alone, in [`OracleSet::SWITCHABLE`] order (empty unless
    /// [`KillOptions::alone`]; for the race, the arrival curve when it breaks).
    pub alone: Vec<OracleKind>,
}

/// Why the kill runner could not go after a mutant (as opposed to the mutant surviving).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KillError {
    /// The factory does not build a subject of this name.
    UnknownSubject(String),
    /// The factory knows the name but cannot build it for a generated setup.
    Build {
        /// The subject name.
        name: String,
        /// The factory's error.
        error: SubjectError,
    },
    /// A mutant to be hunted by threads that is not the catalogue's racy mutant.
    NoThreadedHunt(String),
}

impl std::fmt::Display for KillError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KillError::UnknownSubject(name) => {
                write!(f, "the subject factory does not build `{name}`")
            }
            KillError::Build { name, error } => write!(f, "cannot build `{name}`: {error}"),
            KillError::NoThreadedHunt(name) => write!(
                f,
                "`{name}` is to be killed by threads, and only the catalogue's racy mutant has a \
                 thread hunt"
            ),
        }
    }
}

impl std::error::Error for KillError {}

impl Kill {
    /// True if an oracle fired.
    pub fn killed(&self) -> bool {
        self.violation.is_some()
    }
}

/// Builds `name` for `setup` with `factory`: an unknown name or a failed build is an error.
fn build(
    factory: &dyn SubjectFactory,
    name: &str,
    setup: &bucketproof_trace::Setup,
) -> Result<Box<dyn Subject>, KillError> {
    match factory.build(name, setup) {
        None => Err(KillError::UnknownSubject(name.to_owned())),
        Some(built) => built.map_err(|error| KillError::Build {
            name: name.to_owned(),
            error,
        }),
    }
}

/// Runs `trace` against the subject `name` built by `factory` ([`MutantSubjects`] for the
/// catalogue) with every oracle; returns the first violation. A subject that cannot run the trace to
/// the end (unsupported op) returns whatever it violated before that point.
pub fn first_violation(
    factory: &dyn SubjectFactory,
    name: &str,
    trace: &Trace,
) -> Result<Option<Violation>, KillError> {
    first_failure(factory, name, trace, OracleSet::ALL)
        .map(|failure| failure.map(|failure| failure.violation))
}

/// The step at which `name` fails `trace` judged by `oracles`, and how, if it does.
fn first_failure(
    factory: &dyn SubjectFactory,
    name: &str,
    trace: &Trace,
    oracles: OracleSet,
) -> Result<Option<Failure>, KillError> {
    // A subject that cannot hold the trace's setup (several bandwidths per key, for one that holds
    // one) is not judged on it.
    let mut subject = match build(factory, name, &trace.setup) {
        Err(KillError::Build {
            error: SubjectError::Unsupported(_),
            ..
        }) => return Ok(None),
        built => built?,
    };
    let options = RunOptions {
        oracles,
        ..RunOptions::default()
    };
    Ok(failure_of(trace, subject.as_mut(), &options))
}

/// The first generated trace, in the runner's order, that `name` fails when judged by `oracles`:
/// the trace, its failure and where it came from; and how many traces were tried.
struct Search {
    found: Option<(Trace, Failure, String)>,
    attempts: u64,
}

fn search(
    factory: &dyn SubjectFactory,
    name: &str,
    options: &KillOptions,
    oracles: OracleSet,
) -> Result<Search, KillError> {
    let mut attempts = 0;
    for &len in &options.lengths {
        for seed in 0..options.seeds {
            for family in Family::ALL {
                let trace = generate(family, seed, len);
                attempts += 1;
                if let Some(failure) = first_failure(factory, name, &trace, oracles)? {
                    let label = format!("{} seed {seed}, {len} ops", family.name());
                    return Ok(Search {
                        found: Some((trace, failure, label)),
                        attempts,
                    });
                }
            }
        }
    }
    Ok(Search {
        found: None,
        attempts,
    })
}

/// Goes after one mutant, building its subjects with `factory` ([`MutantSubjects`] for the
/// catalogue, or a user's own).
pub fn kill(
    mutant: &Mutant,
    factory: &dyn SubjectFactory,
    options: &KillOptions,
) -> Result<Kill, KillError> {
    match mutant.kill_by {
        KillBy::Traces => kill_by_traces(mutant, factory, options),
        KillBy::Threads => kill_by_threads(mutant, options),
    }
}

fn kill_by_traces(
    mutant: &Mutant,
    factory: &dyn SubjectFactory,
    options: &KillOptions,
) -> Result<Kill, KillError> {
    let name = mutant.name();
    let started = Instant::now();
    let Search { found, attempts } = search(factory, &name, options, OracleSet::ALL)?;
    let time_to_kill = started.elapsed();
    let alone = if options.alone {
        killed_alone(mutant, factory, options)?
    } else {
        Vec::new()
    };
    let Some((
        trace,
        Failure {
            step, violation, ..
        },
        found_by,
    )) = found
    else {
        return Ok(Kill {
            mutant: *mutant,
            violation: None,
            found_by: "survived every generated trace".into(),
            attempts,
            time_to_kill: None,
            counterexample: None,
            shrunk_ops: None,
            alone,
        });
    };
    // Ops after the failing step cannot matter to it.
    let cut = Trace {
        setup: trace.setup.clone(),
        ops: trace.ops[..=step as usize].to_vec(),
    };
    let (small, violation) = if options.shrink {
        let shrunk = shrink(cut, &violation, &ShrinkBudget::default(), |candidate| {
            // A candidate the factory cannot build does not fail the same way.
            first_failure(factory, &name, candidate, OracleSet::ALL)
                .ok()
                .flatten()
        });
        (shrunk.trace, shrunk.violation)
    } else {
        (cut, violation)
    };
    Ok(Kill {
        mutant: *mutant,
        violation: Some(violation),
        found_by,
        attempts,
        time_to_kill: Some(time_to_kill),
        shrunk_ops: Some(small.ops.len()),
        counterexample: Some(small),
        alone,
    })
}

/// The oracles that kill `mutant` alone on the same generated traces.
fn killed_alone(
    mutant: &Mutant,
    factory: &dyn SubjectFactory,
    options: &KillOptions,
) -> Result<Vec<OracleKind>, KillError> {
    let mut alone = Vec::new();
    for kind in OracleSet::SWITCHABLE {
        let found = search(factory, &mutant.name(), options, OracleSet::only(kind))?.found;
        if found.is_some() {
            alone.push(kind);
        }
    }
    Ok(alone)
}

fn kill_by_threads(mutant: &Mutant, options: &KillOptions) -> Result<Kill, KillError> {
    if !catalogue()
        .iter()
        .any(|entry| entry == mutant && entry.kill_by == KillBy::Threads)
    {
        return Err(KillError::NoThreadedHunt(mutant.name()));
    }
    let started = Instant::now();
    let outcome = hunt_race(racy_acquire, options.race_budget, options.race_rounds);
    let time_to_kill = started.elapsed();
    let killed = outcome.violation.is_some();
    Ok(Kill {
        mutant: *mutant,
        found_by: if killed {
            format!("2 threads, round {}", outcome.rounds)
        } else {
            format!("2 threads, no breach in {} rounds", outcome.rounds)
        },
        violation: outcome.violation,
        attempts: outcome.rounds,
        time_to_kill: killed.then_some(time_to_kill),
        counterexample: None,
        shrunk_ops: killed.then_some(outcome.ops),
        // The hunt's one oracle is the arrival curve.
        alone: if killed && options.alone {
            vec![OracleKind::ArrivalCurve]
        } else {
            Vec::new()
        },
    })
}

/// Goes after every mutant of the catalogue, in order, with [`MutantSubjects`].
pub fn kill_all(options: &KillOptions) -> Result<Vec<Kill>, KillError> {
    catalogue()
        .iter()
        .map(|m| kill(m, &MutantSubjects, options))
        .collect()
}

/// What the scenario suite (`scenarios/*.toml`, the harness's scenario engine) does to one mutant.
#[derive(Clone, Debug)]
pub struct ScenarioKills {
    /// The catalogue entry.
    pub mutant: Mutant,
    /// Scenarios run (first declared seed each).
    pub ran: usize,
    /// Scenarios the subject cannot run (an unsupported op, e.g. reconfigure on the float bucket).
    pub skipped: usize,
    /// The scenarios that killed it, with the oracle that fired, in file order.
    pub killed_by: Vec<(String, &'static str)>,
    /// The first killing scenario's counterexample as the engine shrank it: ops.
    pub first_shrunk_ops: Option<usize>,
}

/// Runs every scenario in `scenarios` (first declared seed) against every sequential mutant through
/// the harness's scenario engine. The racy mutant is included to show that no sequential scenario can
/// tell it from the real limiter. `shrink_budget` bounds the engine's shrinking of the first kill.
pub fn scenario_kills(scenarios: &[Scenario], shrink_budget: usize) -> Vec<ScenarioKills> {
    let registry = Registry::default().with(MutantSubjects);
    // Counting runs do not shrink; only the first kill of each mutant is shrunk, by a second engine.
    let counting = Engine::new(
        &registry,
        EngineOptions {
            shrink_budget: ShrinkBudget::runs(0),
            ..EngineOptions::default()
        },
    );
    let shrinking = Engine::new(
        &registry,
        EngineOptions {
            shrink_budget: ShrinkBudget::runs(shrink_budget),
            ..EngineOptions::default()
        },
    );
    catalogue()
        .iter()
        .map(|mutant| {
            let name = mutant.name();
            let mut kills = ScenarioKills {
                mutant: *mutant,
                ran: 0,
                skipped: 0,
                killed_by: Vec::new(),
                first_shrunk_ops: None,
            };
            for scenario in scenarios {
                let Some(&seed) = scenario.seeds.first() else {
                    continue;
                };
                kills.ran += 1;
                match counting.run(scenario, seed, &name).status {
                    Status::Fail { violation } => {
                        if kills.first_shrunk_ops.is_none() {
                            let shrunk = shrinking.run(scenario, seed, &name).counterexample;
                            kills.first_shrunk_ops = shrunk.map(|c| c.ops.len());
                        }
                        kills
                            .killed_by
                            .push((scenario.name.clone(), violation.oracle.name()));
                    }
                    Status::Skipped { .. } => kills.skipped += 1,
                    _ => {}
                }
            }
            kills
        })
        .collect()
}

/// Loads `dir` (the repository's `scenarios/`) for [`scenario_kills`]; `None` if it is absent or
/// does not load (the report then says the scenario suite was not run, and why).
pub fn load_scenarios(dir: &Path) -> Result<Vec<Scenario>, String> {
    load_all(dir).map_err(|e| e.to_string())
}

/// The median of the kill times of the killed mutants.
pub fn median_time_to_kill(kills: &[Kill]) -> Option<Duration> {
    let mut times: Vec<Duration> = kills.iter().filter_map(|k| k.time_to_kill).collect();
    times.sort();
    match times.len() {
        0 => None,
        n if n % 2 == 1 => Some(times[n / 2]),
        n => Some((times[n / 2 - 1] + times[n / 2]) / 2),
    }
}

/// The largest shrunk counterexample a kill may have: the gate's own limit, under this crate's name.
pub use bucketproof_harness::counterexample::MAX_COUNTEREXAMPLE_OPS as MAX_SHRUNK_OPS;

/// The cargo-mutants run over `crates/limiter`, recorded by hand in
/// `crates/mutants/cargo-mutants.md`: it takes far longer than this report, so the report embeds
/// the record instead of re-running it.
pub const CARGO_MUTANTS_RUN: &str = include_str!("../cargo-mutants.md");

fn fmt_duration(duration: Option<Duration>) -> String {
    match duration {
        Some(d) if d < Duration::from_millis(1) => format!("{} µs", d.as_micros()),
        Some(d) if d < Duration::from_secs(1) => format!("{:.1} ms", d.as_secs_f64() * 1e3),
        Some(d) => format!("{:.2} s", d.as_secs_f64()),
        None => "—".into(),
    }
}

fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// The markdown report for `kills` and the scenario suite's results (or why it did not run).
pub fn render_markdown(kills: &[Kill], scenarios: &Result<Vec<ScenarioKills>, String>) -> String {
    let mut out = String::new();
    let killed = kills.iter().filter(|k| k.killed()).count();
    let _ = writeln!(out, "# Mutation self-test\n");
    let _ = writeln!(
        out,
        "Generated by `bucketproof_mutants::kill::write_report` \
         (`cargo run --release -p bucketproof-mutants --example report`). Each mutant deviates from \
         the exact transition in one place (`crates/mutants`); the harness's oracles must catch it.\n"
    );
    let _ = writeln!(
        out,
        "**Kill rate: {killed}/{} ({}%).** Median time to kill: {}.\n",
        kills.len(),
        if kills.is_empty() {
            0
        } else {
            killed * 100 / kills.len()
        },
        fmt_duration(median_time_to_kill(kills))
    );
    let _ = writeln!(
        out,
        "Every column is deterministic (same traces, verdicts and counterexamples on every run) \
         except **time to kill**: wall-clock time from the start of the hunt to the first failure, \
         measured with `std::time::Instant` on whatever machine wrote this file (shrinking not \
         included). For `racy-rmw` the round that breaks also depends on the OS scheduler.\n"
    );
    let _ = writeln!(
        out,
        "| # | mutant | mistake | killed by | violation | found by | shrunk ops | time to kill |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|");
    for kill in kills {
        let (oracle, what) = match &kill.violation {
            Some(v) => (v.oracle.name().to_string(), v.what.clone()),
            None => ("**survived**".into(), String::new()),
        };
        let _ = writeln!(
            out,
            "| {} | `{}` | {} | {} | {} | {} | {} | {} |",
            kill.mutant.number,
            kill.mutant.name(),
            cell(kill.mutant.mistake),
            oracle,
            cell(&what),
            cell(&kill.found_by),
            kill.shrunk_ops.map_or("—".into(), |n| n.to_string()),
            fmt_duration(kill.time_to_kill),
        );
    }
    let over: Vec<String> = kills
        .iter()
        .filter(|k| k.shrunk_ops.is_some_and(|n| n > MAX_SHRUNK_OPS))
        .map(|k| k.mutant.name())
        .collect();
    let _ = writeln!(
        out,
        "\nShrunk counterexamples above {MAX_SHRUNK_OPS} ops: {}.\n",
        if over.is_empty() {
            "none".into()
        } else {
            over.join(", ")
        }
    );
    render_alone(&mut out, kills);
    render_scenarios(&mut out, scenarios);
    let _ = writeln!(out, "## Where each mistake was seen\n");
    for kill in kills {
        let _ = writeln!(
            out,
            "- `{}`: {}",
            kill.mutant.name(),
            cell(kill.mutant.seen)
        );
    }
    let _ = writeln!(out, "\n## Shrunk counterexamples\n");
    let _ = writeln!(
        out,
        "Replay one with `bucketproof_mutants::kill::first_violation(&MutantSubjects, name, \
         &trace)`; the setup fields not shown are the defaults.\n"
    );
    for kill in kills {
        let _ = writeln!(out, "### `{}`\n", kill.mutant.name());
        match (&kill.counterexample, &kill.violation) {
            (Some(trace), Some(violation)) => {
                let config = match trace.setup.config.single() {
                    Some(one) => format!("capacity {}, rate `{}`", one.capacity, one.rate),
                    None => trace.setup.config.to_string(),
                };
                let _ = writeln!(
                    out,
                    "Setup: {config}, dedupe window {} ns.\n",
                    trace.setup.dedupe_window_ns
                );
                let _ = writeln!(out, "```text");
                for op in &trace.ops {
                    let _ = writeln!(out, "{op:?}");
                }
                let _ = writeln!(out, "```\n");
                let _ = writeln!(out, "{}\n", cell(&violation.to_string()));
            }
            (None, Some(violation)) => {
                let _ = writeln!(
                    out,
                    "Two threads, 256 acquires of cost 1 each on a fresh key of capacity 256 with \
                     no refill: more than 256 admitted, and two admitted acquires report the same \
                     remaining balance (they spent the same token: the 2-op witness).\n\n{}\n",
                    cell(&violation.to_string())
                );
            }
            _ => {
                let _ = writeln!(out, "Survived.\n");
            }
        }
    }
    let _ = write!(out, "{CARGO_MUTANTS_RUN}");
    out
}

/// The mutants only the model kills alone: the weaknesses of a check without the model.
pub fn only_the_model(kills: &[Kill]) -> Vec<&Kill> {
    kills
        .iter()
        .filter(|k| k.alone == [OracleKind::Model])
        .collect()
}

fn render_alone(out: &mut String, kills: &[Kill]) {
    let _ = writeln!(out, "## Which oracle kills alone\n");
    let _ = writeln!(
        out,
        "Every mutant again, on the same generated traces, with one oracle switched on and the \
         others off (`bucketproof_check::oracle::OracleSet::only`). The model oracle is the \
         decision-by-decision comparison and eviction legality (both judge against the model's \
         state). `racy-rmw` is hunted by threads, whose one oracle is the arrival curve. Deterministic. \
         A mutant only the model kills is flagged: a limiter checked without the model (one that does \
         not promise exact equality with it) would let that mistake through.\n"
    );
    let _ = writeln!(out, "| oracle | mutants it kills alone |");
    let _ = writeln!(out, "|---|---|");
    for kind in OracleSet::SWITCHABLE {
        let count = kills.iter().filter(|k| k.alone.contains(&kind)).count();
        let _ = writeln!(out, "| {} | {count}/{} |", kind.name(), kills.len());
    }
    let _ = writeln!(out, "\n| mutant | killed alone by | |");
    let _ = writeln!(out, "|---|---|---|");
    for kill in kills {
        let names: Vec<&str> = kill.alone.iter().map(|kind| kind.name()).collect();
        let flag = if kill.alone == [OracleKind::Model] {
            "**weakness: only the model sees it**"
        } else if kill.alone.is_empty() {
            "**no oracle alone kills it**"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "| `{}` | {} | {flag} |",
            kill.mutant.name(),
            if names.is_empty() {
                "—".to_owned()
            } else {
                names.join(", ")
            }
        );
    }
    let weak: Vec<String> = only_the_model(kills)
        .iter()
        .map(|k| format!("`{}`", k.mutant.name()))
        .collect();
    let _ = writeln!(
        out,
        "\nOnly the model sees: {}.\n",
        if weak.is_empty() {
            "none".to_owned()
        } else {
            weak.join(", ")
        }
    );
}

fn render_scenarios(out: &mut String, scenarios: &Result<Vec<ScenarioKills>, String>) {
    let _ = writeln!(out, "## The scenario suite against the mutants\n");
    let rows = match scenarios {
        Ok(rows) => rows,
        Err(why) => {
            let _ = writeln!(out, "Not run: {}.\n", cell(why));
            return;
        }
    };
    let _ = writeln!(
        out,
        "Every `scenarios/*.toml` at its first declared seed, through the harness's scenario engine \
         (`bucketproof_harness::engine`), against every mutant. Deterministic. A scenario the subject \
         cannot run (an unsupported op) is skipped; `racy-rmw` is expected to pass them all: one call \
         at a time it is the real limiter.\n"
    );
    let _ = writeln!(
        out,
        "| mutant | killed by scenarios | skipped | first kill shrunk to | scenarios (oracle) |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|");
    for row in rows {
        let names: Vec<String> = row
            .killed_by
            .iter()
            .map(|(scenario, oracle)| format!("{scenario} ({oracle})"))
            .collect();
        let _ = writeln!(
            out,
            "| `{}` | {}/{} | {} | {} | {} |",
            row.mutant.name(),
            row.killed_by.len(),
            row.ran,
            row.skipped,
            row.first_shrunk_ops
                .map_or("—".into(), |n| format!("{n} ops")),
            cell(&names.join(", "))
        );
    }
    let _ = writeln!(out);
}

/// Goes after every mutant with the default options, runs the scenario suite from `scenarios/`
/// (relative to the working directory: run it from the repository root, as the CLI does) and writes
/// the markdown report to `path`.
pub fn write_report(path: &Path) -> std::io::Result<Vec<Kill>> {
    let kills = kill_all(&KillOptions::default()).map_err(std::io::Error::other)?;
    let scenarios = load_scenarios(Path::new("scenarios"))
        .map(|suite| scenario_kills(&suite, SCENARIO_SHRINK_BUDGET));
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, render_markdown(&kills, &scenarios))?;
    Ok(kills)
}

/// Trial runs the engine may spend shrinking a mutant's first scenario kill.
pub const SCENARIO_SHRINK_BUDGET: usize = 2_000;
