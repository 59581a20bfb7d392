//! `bucketproof run`: one scenario, seed and subject through the gate; its JSON run report on stdout
//! (byte-identical across runs and machines). A failure's counterexample is written where its replay
//! command says.

use bucketproof_check::RunReport;
use bucketproof_harness::counterexample::Counterexample;
use bucketproof_harness::engine::Status;
use bucketproof_harness::gate::{Counts, Gate, GateOptions, Saved};
use serde::Serialize;

use crate::args::RunArgs;
use crate::fatal::Fatal;
use crate::out::{Out, note};
use crate::progress::rate;
use crate::project;

/// What `run` prints: deterministic, no timings.
#[derive(Serialize)]
struct RunJson<'a> {
    scenario: &'a str,
    seed: u64,
    subject: &'a str,
    #[serde(flatten)]
    status: &'a Status,
    report: Option<&'a RunReport>,
    counterexample: Option<&'a Counterexample>,
}

/// Runs one job.
pub fn run(args: RunArgs, out: &mut Out) -> Result<u8, Fatal> {
    let scenario = project::find_scenario(&args.scenario)?;
    let seed = match args.seed.or_else(|| scenario.seeds.first().copied()) {
        Some(seed) => seed,
        None => return Err(Fatal(format!("{}: no seeds; pass --seed", scenario.name))),
    };
    let subject = match args.subject.or_else(|| scenario.subjects.first().cloned()) {
        Some(subject) => subject,
        None => {
            return Err(Fatal(format!(
                "{}: no subjects; pass --subject",
                scenario.name
            )));
        }
    };
    let registry = project::registry()?;
    let mut options = GateOptions::new(args.reports.unwrap_or_else(project::reports_dir));
    options.scale = args.scale;
    let gate = Gate::new(&registry, options)?;
    let (result, saved) = gate.run(&scenario, seed, &subject)?;
    note(format!(
        "{} seed={seed} {subject}: {}, {}",
        scenario.name,
        result.status.word(),
        rate(result.steps_per_second())
    ));
    if let Some(Saved::NotWritten { path, error }) = &saved {
        note(format!(
            "error: cannot write counterexample {}: {error}",
            path.display()
        ));
    }
    let json = RunJson {
        scenario: &scenario.name,
        seed,
        subject: &subject,
        status: &result.status,
        report: result.report.as_ref(),
        counterexample: result.counterexample.as_ref(),
    };
    out.line(serde_json::to_string_pretty(&json)?)?;
    // One run judged as a gate of one, except that a skip is a clean answer here, not an empty gate.
    Ok(Counts::of([&result]).verdict(false, true).exit_code())
}
