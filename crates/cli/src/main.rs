//! `bucketproof`: the scenario gate and its tools.
//!
//! - `check [PATHS]`: runs every scenario x seed x subject through the reference model and every
//!   oracle; exit 0 when all pass, 1 on a violation (or an unreached target, or stale reports with
//!   `--check-reports`), 2 on a usage or scenario error. Writes shrunk counterexamples under
//!   `reports/failures/` and prints the one-line replay command.
//! - `run SCENARIO`: one run, its JSON report on stdout (byte-identical across runs and machines).
//! - `replay FILE`: reproduces a counterexample.
//! - `list`: scenarios and subjects.
//! - `compare`: float versus rational (the exact core, the f64 buckets and governor over a grid of
//!   rates, capacities and horizons); writes `reports/float-vs-rational.{md,json,svg}`.
//!
//! What is deterministic (reports, JSON, JUnit, counterexamples) never contains timings; throughput is
//! printed on stderr only.

mod junit;
mod plots;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use bucketproof_harness::Registry;
use bucketproof_harness::engine::{
    Counterexample, Engine, EngineOptions, Replayed, RunResult, Status, replay,
};
use bucketproof_harness::report::ScenarioReport;
use bucketproof_harness::scenario::{self, Scenario};
use clap::{Parser, Subcommand};
use serde::Serialize;

/// Every subject the CLI can build. Add a factory here with one `.with(...)`.
fn registry() -> Registry {
    Registry::default()
        .with(bucketproof_harness::subjects::broken::BrokenSubjects)
        .with(bucketproof_mutants::MutantSubjects)
}

#[derive(Parser)]
#[command(
    name = "bucketproof",
    version,
    about = "Check rate limiters against the exact reference model, scenario by scenario"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run every scenario x seed x subject; the CI gate.
    Check(CheckArgs),
    /// Run one scenario and print its JSON run report.
    Run {
        /// A scenario file, or the name of one in `scenarios/`.
        scenario: String,
        /// Seed (default: the scenario's first).
        #[arg(long)]
        seed: Option<u64>,
        /// Subject (default: the scenario's first).
        #[arg(long, short = 's')]
        subject: Option<String>,
        /// Multiply the scenario's length (env `BUCKETPROOF_SCALE`).
        #[arg(long, env = "BUCKETPROOF_SCALE", default_value_t = 1)]
        scale: u64,
    },
    /// Replay a counterexample file written by `check`.
    Replay {
        /// The JSON file.
        file: PathBuf,
    },
    /// List scenarios and subjects.
    List {
        /// Scenario files or directories (default: `scenarios/`).
        paths: Vec<PathBuf>,
    },
    /// Float versus rational: identical traces through the exact core, the f64 buckets and governor
    /// over a grid of rates, capacities and horizons; writes `float-vs-rational.{md,json,svg}`.
    Compare {
        /// Horizons, e.g. `1s,1d,100y` (default: the grid's).
        #[arg(long = "horizon", value_delimiter = ',')]
        horizons: Vec<String>,
        /// Rates as `<tokens>/<period>`, e.g. `10/13s,7000000/s` (default: the eight).
        #[arg(long, value_delimiter = ',')]
        rates: Vec<String>,
        /// The big grid (env `BUCKETPROOF_COMPARE_FULL=1` too); the committed report is the default grid.
        #[arg(long)]
        full: bool,
        /// Reports directory (default: `reports/` beside the scenarios directory).
        #[arg(long)]
        reports: Option<PathBuf>,
    },
    /// Mutation self-test: goes after every deliberately broken limiter with generated traces (and
    /// real threads for the race), runs the scenario suite against each, prints the kill table and
    /// writes `reports/mutants.md`. Exit 1 if a mutant survives or a counterexample exceeds 6 ops.
    Mutants {
        /// Where to write the report (default: `reports/mutants.md` beside the scenarios directory).
        #[arg(long)]
        report: Option<PathBuf>,
    },
}

/// Exit codes.
const PASS: u8 = 0;
const VIOLATION: u8 = 1;
const USAGE: u8 = 2;

/// A failure to report and the exit code it maps to.
struct Fatal(String);

impl<E: std::fmt::Display> From<E> for Fatal {
    fn from(error: E) -> Fatal {
        Fatal(error.to_string())
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Check(args) => check(args),
        Command::Run {
            scenario,
            seed,
            subject,
            scale,
        } => run(&scenario, seed, subject, scale),
        Command::Replay { file } => replay_file(&file),
        Command::List { paths } => list(&paths),
        Command::Compare {
            horizons,
            rates,
            full,
            reports,
        } => compare(&horizons, &rates, full, reports),
        Command::Mutants { report } => mutants(report),
    };
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(Fatal(message)) => {
            eprintln!("error: {message}");
            ExitCode::from(USAGE)
        }
    }
}

/// The default scenarios directory: `./scenarios`, else the workspace's.
fn default_scenarios_dir() -> PathBuf {
    let local = PathBuf::from("scenarios");
    if local.is_dir() {
        return local;
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    workspace.canonicalize().unwrap_or(workspace)
}

fn scenario_paths(paths: &[PathBuf]) -> Vec<PathBuf> {
    if paths.is_empty() {
        vec![default_scenarios_dir()]
    } else {
        paths.to_vec()
    }
}

/// `reports/` beside the first scenarios directory (or beside a file's directory).
fn default_reports_dir(paths: &[PathBuf]) -> PathBuf {
    let first = paths.first().cloned().unwrap_or_else(default_scenarios_dir);
    let dir = if first.is_dir() {
        first
    } else {
        first.parent().map(Path::to_path_buf).unwrap_or_default()
    };
    match dir.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.join("reports"),
        _ => PathBuf::from("reports"),
    }
}

fn load_scenarios(paths: &[PathBuf]) -> Result<Vec<Scenario>, Fatal> {
    let mut scenarios: Vec<Scenario> = Vec::new();
    for path in paths {
        for loaded in scenario::load_all(path)? {
            if scenarios.iter().any(|s| s.name == loaded.name) {
                return Err(Fatal(format!(
                    "{}: duplicate scenario name {:?}",
                    path.display(),
                    loaded.name
                )));
            }
            scenarios.push(loaded);
        }
    }
    if scenarios.is_empty() {
        return Err(Fatal(format!(
            "no scenarios (*.toml) found in {}",
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(scenarios)
}

fn check_subjects(registry: &Registry, names: &[String]) -> Result<(), Fatal> {
    let known = registry.names();
    for name in names {
        if !known.contains(name) {
            return Err(Fatal(format!(
                "unknown subject {name:?}; known: {}",
                known.join(", ")
            )));
        }
    }
    Ok(())
}

/// Terminal output: an indicatif bar on an interactive terminal, plain lines in CI or when piped.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    color: bool,
}

impl Progress {
    fn new(total: u64) -> Progress {
        let interactive = std::io::stderr().is_terminal() && std::env::var_os("CI").is_none();
        let color = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        let bar = interactive.then(|| {
            let bar = indicatif::ProgressBar::new(total);
            let template = "{bar:32} {pos}/{len} {wide_msg}";
            if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
                bar.set_style(style);
            }
            bar
        });
        Progress { bar, color }
    }

    fn start(&self, what: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(what.to_owned());
        }
    }

    fn line(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }

    fn done_one(&self) {
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }

    fn paint(&self, word: &str, status: &Status) -> String {
        if !self.color {
            return word.to_owned();
        }
        let code = match status {
            Status::Pass => "32",
            Status::Fail { .. } | Status::Unreached { .. } | Status::Error { .. } => "31",
            Status::Skipped { .. } => "33",
        };
        format!("\x1b[{code}m{word}\x1b[0m")
    }
}

/// Human steps-per-second, for the terminal only.
fn rate(steps_per_second: f64) -> String {
    if steps_per_second >= 1e6 {
        format!("{:.2} M steps/s", steps_per_second / 1e6)
    } else {
        format!("{:.0} k steps/s", steps_per_second / 1e3)
    }
}

/// The arguments of `bucketproof check`.
#[derive(clap::Args)]
struct CheckArgs {
    /// Scenario files or directories (default: `scenarios/`).
    paths: Vec<PathBuf>,
    /// Subjects to run (default: each scenario's own list, usually `core`). Repeatable.
    #[arg(long = "subject", short = 's')]
    subjects: Vec<String>,
    /// Seeds per scenario: the declared ones first, then the integers after them.
    #[arg(long)]
    seeds: Option<usize>,
    /// Multiply every scenario's length (heavy runs; env `BUCKETPROOF_SCALE`). Reports are written
    /// and checked at scale 1 only.
    #[arg(long, env = "BUCKETPROOF_SCALE", default_value_t = 1)]
    scale: u64,
    /// Write a JUnit XML file: one test case per scenario-seed(-subject).
    #[arg(long)]
    junit: Option<PathBuf>,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// Regenerate `reports/<scenario>.{md,json}` and the SVG plots.
    #[arg(long, conflicts_with = "check_reports")]
    write_reports: bool,
    /// Fail (exit 1) if the committed reports differ from what this run produces.
    #[arg(long)]
    check_reports: bool,
    /// Reports directory (default: `reports/` beside the scenarios directory).
    #[arg(long)]
    reports: Option<PathBuf>,
}

/// The summary `--json` prints (no timings).
#[derive(Serialize)]
struct JsonSummary<'a> {
    passed: bool,
    runs: usize,
    failures: usize,
    skipped: usize,
    scenarios: Vec<&'a ScenarioReport>,
    stale_reports: Vec<String>,
}

fn check(args: CheckArgs) -> Result<u8, Fatal> {
    if args.seeds == Some(0) {
        return Err(Fatal("--seeds must be at least 1".into()));
    }
    if args.scale != 1 && (args.write_reports || args.check_reports) {
        return Err(Fatal(
            "reports are written and checked at scale 1 only (drop --scale / BUCKETPROOF_SCALE)"
                .into(),
        ));
    }
    let paths = scenario_paths(&args.paths);
    let scenarios: Vec<Scenario> = load_scenarios(&paths)?
        .iter()
        .map(|s| s.scaled(args.scale))
        .collect::<Result<_, _>>()?;
    let registry = registry();
    for scenario in &scenarios {
        let subjects = if args.subjects.is_empty() {
            &scenario.subjects
        } else {
            &args.subjects
        };
        check_subjects(&registry, subjects)?;
    }
    let reports_dir = args
        .reports
        .clone()
        .unwrap_or_else(|| default_reports_dir(&paths));
    let failures_dir = reports_dir.join("failures");
    let engine = Engine::new(
        &registry,
        EngineOptions {
            failures_dir: failures_dir.display().to_string(),
            ..EngineOptions::default()
        },
    );

    let mut jobs: Vec<(usize, u64, String)> = Vec::new();
    for (index, scenario) in scenarios.iter().enumerate() {
        let subjects = if args.subjects.is_empty() {
            &scenario.subjects
        } else {
            &args.subjects
        };
        for seed in scenario.seeds_to_run(args.seeds)? {
            jobs.extend(subjects.iter().map(|s| (index, seed, s.clone())));
        }
    }
    let progress = Progress::new(jobs.len() as u64);
    let mut results: Vec<Vec<RunResult>> = vec![Vec::new(); scenarios.len()];
    let mut errors = 0;
    for (index, seed, subject) in &jobs {
        let scenario = &scenarios[*index];
        let what = format!("{} seed={seed} {subject}", scenario.name);
        progress.start(&what);
        let result = engine.run(scenario, *seed, subject);
        let mut line = format!(
            "{} {what}: {} ops, {}",
            progress.paint(&format!("{:<9}", result.status.word()), &result.status),
            result.report.as_ref().map_or(0, |r| r.steps),
            rate(result.steps_per_second())
        );
        if !matches!(result.status, Status::Pass) {
            line.push_str(&format!("\n    {}", result.status.detail()));
        }
        if let Some(counterexample) = &result.counterexample {
            let written = write_counterexample(&failures_dir, counterexample);
            match written {
                Ok(()) => line.push_str(&format!(
                    "\n    shrunk to {} ops; replay with:\n    {}",
                    counterexample.ops.len(),
                    counterexample.replay
                )),
                Err(error) => line.push_str(&format!("\n    cannot write counterexample: {error}")),
            }
        }
        if matches!(result.status, Status::Error { .. }) {
            errors += 1;
        }
        progress.line(&line);
        progress.done_one();
        results[*index].push(result);
    }
    progress.finish();

    let reports: Vec<ScenarioReport> = scenarios
        .iter()
        .zip(&results)
        .map(|(scenario, runs)| ScenarioReport::new(scenario, runs))
        .collect();
    let mut stale = Vec::new();
    if args.write_reports || args.check_reports {
        for report in &reports {
            for (name, bytes) in report_files(report)? {
                let path = reports_dir.join(&name);
                if args.write_reports {
                    std::fs::create_dir_all(&reports_dir)
                        .and_then(|()| std::fs::write(&path, bytes))
                        .map_err(|e| Fatal(format!("{}: cannot write: {e}", path.display())))?;
                } else if std::fs::read(&path).ok().as_deref() != Some(bytes.as_bytes()) {
                    stale.push(path.display().to_string());
                }
            }
        }
        if args.write_reports {
            eprintln!(
                "wrote {} scenario reports to {}",
                reports.len(),
                reports_dir.display()
            );
        }
        for path in &stale {
            eprintln!("stale report: {path} (regenerate with `bucketproof check --write-reports`)");
        }
    }

    let all: Vec<&RunResult> = results.iter().flatten().collect();
    let failures = all.iter().filter(|r| r.status.is_failure()).count();
    let skipped = all
        .iter()
        .filter(|r| matches!(r.status, Status::Skipped { .. }))
        .count();
    if let Some(path) = &args.junit {
        std::fs::write(path, junit::render(&reports))
            .map_err(|e| Fatal(format!("{}: cannot write: {e}", path.display())))?;
    }
    let passed = failures == 0 && stale.is_empty() && errors == 0;
    // The gate's whole throughput, on stderr like the per-run lines: a timing, so never in a report.
    let steps: u64 = all
        .iter()
        .filter_map(|result| result.report.as_ref())
        .map(|report| report.steps)
        .sum();
    let elapsed: std::time::Duration = all.iter().map(|result| result.elapsed).sum();
    if steps > 0 {
        eprintln!(
            "bucketproof check: {steps} steps in {:.2} s of checking runs, {}",
            elapsed.as_secs_f64(),
            rate(steps as f64 / elapsed.as_secs_f64().max(1e-9))
        );
    }
    if args.json {
        let summary = JsonSummary {
            passed,
            runs: all.len(),
            failures,
            skipped,
            scenarios: reports.iter().collect(),
            stale_reports: stale.clone(),
        };
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        println!(
            "bucketproof check: {} scenarios, {} runs: {} passed, {} failed, {} skipped{}",
            scenarios.len(),
            all.len(),
            all.len() - failures - skipped - errors,
            failures + errors,
            skipped,
            if stale.is_empty() {
                String::new()
            } else {
                format!(", {} stale reports", stale.len())
            }
        );
    }
    Ok(if errors > 0 {
        USAGE
    } else if passed {
        PASS
    } else {
        VIOLATION
    })
}

fn write_counterexample(dir: &Path, counterexample: &Counterexample) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(
        dir.join(counterexample.file_name()),
        counterexample.to_json(),
    )
}

/// Every file of one scenario's report: name (relative to the reports directory) and content.
fn report_files(report: &ScenarioReport) -> Result<Vec<(String, String)>, Fatal> {
    let mut files = Vec::new();
    let mut links = Vec::new();
    let balance_name = format!("{}-balance.svg", report.scenario);
    let arrival_name = format!("{}-arrival.svg", report.scenario);
    if report.samples.len() >= 2 {
        files.push((
            balance_name.clone(),
            plots::balance(&report.scenario, report.sample_key, &report.samples)
                .map_err(|e| Fatal(format!("plotting {}: {e}", report.scenario)))?,
        ));
        files.push((
            arrival_name.clone(),
            plots::arrival(&report.scenario, report.sample_key, &report.samples)
                .map_err(|e| Fatal(format!("plotting {}: {e}", report.scenario)))?,
        ));
        links.push(("balance: subject vs model", balance_name.as_str()));
        links.push((
            "admitted cost vs arrival-curve bound",
            arrival_name.as_str(),
        ));
    }
    let markdown = report.to_markdown(&links);
    files.push((format!("{}.md", report.scenario), markdown));
    files.push((format!("{}.json", report.scenario), report.to_json()));
    Ok(files)
}

/// Finds a scenario by path, or by name in the default directory.
fn find_scenario(spec: &str) -> Result<Scenario, Fatal> {
    let path = Path::new(spec);
    if path.is_file() {
        return Ok(Scenario::load(path)?);
    }
    let dir = default_scenarios_dir();
    let by_file = dir.join(format!("{spec}.toml"));
    if by_file.is_file() {
        return Ok(Scenario::load(&by_file)?);
    }
    scenario::load_all(&dir)?
        .into_iter()
        .find(|s| s.name == spec)
        .ok_or_else(|| {
            Fatal(format!(
                "no scenario {spec:?}: not a file, and not a scenario name in {}",
                dir.display()
            ))
        })
}

/// What `run` prints: deterministic, no timings.
#[derive(Serialize)]
struct RunJson<'a> {
    scenario: &'a str,
    seed: u64,
    subject: &'a str,
    #[serde(flatten)]
    status: &'a Status,
    report: Option<&'a bucketproof_harness::RunReport>,
    counterexample: Option<&'a Counterexample>,
}

fn run(spec: &str, seed: Option<u64>, subject: Option<String>, scale: u64) -> Result<u8, Fatal> {
    let scenario = find_scenario(spec)?.scaled(scale)?;
    let registry = registry();
    let seed = seed.unwrap_or(scenario.seeds[0]);
    let subject = subject.unwrap_or_else(|| scenario.subjects[0].clone());
    check_subjects(&registry, std::slice::from_ref(&subject))?;
    let engine = Engine::new(&registry, EngineOptions::default());
    let result = engine.run(&scenario, seed, &subject);
    eprintln!(
        "{} seed={seed} {subject}: {}, {}",
        scenario.name,
        result.status.word(),
        rate(result.steps_per_second())
    );
    let json = RunJson {
        scenario: &scenario.name,
        seed,
        subject: &subject,
        status: &result.status,
        report: result.report.as_ref(),
        counterexample: result.counterexample.as_ref(),
    };
    println!("{}", serde_json::to_string_pretty(&json)?);
    Ok(match result.status {
        Status::Pass | Status::Skipped { .. } => PASS,
        Status::Error { .. } => USAGE,
        _ => VIOLATION,
    })
}

fn replay_file(file: &Path) -> Result<u8, Fatal> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| Fatal(format!("{}: cannot read: {e}", file.display())))?;
    let counterexample: Counterexample = serde_json::from_str(&text).map_err(|e| {
        Fatal(format!(
            "{}:{}:{}: not a counterexample file: {e}",
            file.display(),
            e.line(),
            e.column()
        ))
    })?;
    let registry = registry();
    check_subjects(&registry, std::slice::from_ref(&counterexample.subject))?;
    println!(
        "replaying {} ({} seed {}, subject {}): {} ops",
        file.display(),
        counterexample.scenario,
        counterexample.seed,
        counterexample.subject,
        counterexample.ops.len()
    );
    for (index, op) in counterexample.ops.iter().enumerate() {
        println!("  {index}: {}", serde_json::to_string(op)?);
    }
    Ok(match replay(&registry, &counterexample) {
        Replayed::Reproduced(violation) => {
            println!("reproduced: {violation}");
            VIOLATION
        }
        Replayed::Different(violation) => {
            println!("fails differently than recorded: {violation}");
            println!("recorded: {}", counterexample.violation);
            VIOLATION
        }
        Replayed::Passed => {
            println!("passes now: the recorded failure no longer reproduces");
            PASS
        }
        Replayed::Incompatible(reason) => {
            return Err(Fatal(format!("cannot replay: {reason}")));
        }
    })
}

fn list(paths: &[PathBuf]) -> Result<u8, Fatal> {
    let scenarios = load_scenarios(&scenario_paths(paths))?;
    println!("scenarios:");
    for scenario in &scenarios {
        let reach: Vec<&str> = scenario.reach.iter().map(|e| e.0.as_str()).collect();
        println!(
            "  {:<28} {:>7} ops x {} seed(s)  reach: {}",
            scenario.name,
            scenario.total_ops(),
            scenario.seeds.len(),
            reach.join(", ")
        );
    }
    println!("subjects:");
    for name in registry().names() {
        println!("  {name}");
    }
    Ok(PASS)
}

/// `compare`: runs the grid, writes the report, prints the totals.
fn compare(
    horizons: &[String],
    rates: &[String],
    full: bool,
    reports: Option<PathBuf>,
) -> Result<u8, Fatal> {
    use bucketproof_harness::compare::{self, CompareOptions};
    let options = CompareOptions::from_args(full, rates, horizons)?;
    let dir = reports.unwrap_or_else(|| default_reports_dir(&[]));
    let report = compare::write_report_with(&dir, &options)?;
    print!("{}", compare::summary(&report));
    eprintln!(
        "wrote {}/{}.{{md,json,svg}}",
        dir.display(),
        compare::REPORT_STEM
    );
    Ok(PASS)
}

/// The largest shrunk counterexample a kill may have (issue 7).
const MAX_COUNTEREXAMPLE_OPS: usize = 6;

fn mutants(report: Option<PathBuf>) -> Result<u8, Fatal> {
    let path = report.unwrap_or_else(|| default_reports_dir(&[]).join("mutants.md"));
    // The scenario part of the report reads `scenarios/` relative to the working directory.
    let kills = bucketproof_mutants::kill::write_report(&path)
        .map_err(|e| Fatal(format!("cannot write {}: {e}", path.display())))?;
    println!(
        "{:<28} {:<14} {:>12} {:>10}",
        "mutant", "killed by", "time", "shrunk"
    );
    let mut failed = false;
    for kill in &kills {
        let killed_by = kill
            .violation
            .as_ref()
            .map_or("SURVIVED", |violation| violation.oracle.name());
        let time = kill.time_to_kill.map_or("-".to_owned(), |t| {
            format!("{:.2} ms", t.as_secs_f64() * 1e3)
        });
        let shrunk = kill
            .shrunk_ops
            .map_or("-".to_owned(), |n| format!("{n} ops"));
        println!(
            "{:<28} {killed_by:<14} {time:>12} {shrunk:>10}",
            kill.mutant.name()
        );
        let too_big = kill.shrunk_ops.is_some_and(|n| n > MAX_COUNTEREXAMPLE_OPS);
        failed |= !kill.killed() || too_big;
    }
    let killed = kills.iter().filter(|k| k.killed()).count();
    let median = bucketproof_mutants::kill::median_time_to_kill(&kills)
        .map_or("-".to_owned(), |t| {
            format!("{:.2} ms", t.as_secs_f64() * 1e3)
        });
    println!(
        "{killed}/{} killed ({:.0}%), median time to kill {median}; wrote {}",
        kills.len(),
        100.0 * killed as f64 / kills.len().max(1) as f64,
        path.display()
    );
    Ok(if failed { VIOLATION } else { PASS })
}
