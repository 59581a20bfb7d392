//! `bucketproof check`: the CI gate. Builds [`GateOptions`] from the flags, runs the harness's
//! [`Gate`] with a terminal [`Progress`], prints its summary (text or JSON) and returns the
//! verdict's exit code.

use bucketproof_check::oracle::OracleSet;
use bucketproof_harness::gate::{self, Gate, GateOptions, ReportMode, Verdict};

use crate::args::CheckArgs;
use crate::fatal::Fatal;
use crate::out::{Out, note};
use crate::progress::{self, Progress};
use crate::project;

/// Runs the gate.
pub fn check(args: CheckArgs, out: &mut Out) -> Result<u8, Fatal> {
    let registry = project::registry()?;
    let mut options = GateOptions::new(args.reports.clone().unwrap_or_else(project::reports_dir));
    options.engine.run.oracles = oracle_set(&args)?;
    options.subjects = args.subjects.clone();
    options.seeds = args.seeds;
    options.scale = args.scale;
    options.junit = args.junit.clone();
    options.allow_skips = args.allow_skips;
    options.reports = if args.write_reports {
        ReportMode::Write
    } else if args.check_reports {
        ReportMode::Check
    } else {
        ReportMode::Skip
    };
    if args.each_oracle {
        return each_oracle(&registry, options, &args, out);
    }
    let gate = Gate::new(&registry, options)?;
    let scenarios = gate::load_scenarios(&project::scenario_paths(&args.paths))?;

    let mut progress = Progress::new();
    let outcome = gate.check(&scenarios, &mut progress)?;
    progress.finish();
    let reports_dir = &gate.options().reports_dir;
    if args.write_reports {
        note(format!(
            "wrote {} scenario reports to {}",
            outcome.reports().len(),
            reports_dir.display()
        ));
    }
    for path in outcome.stale_reports() {
        note(format!(
            "stale report: {} (regenerate with `bucketproof check --write-reports`)",
            path.display()
        ));
    }
    progress::throughput(outcome.results());
    if args.json {
        out.print(&outcome.to_json())?;
    } else {
        out.line(outcome.summary_line())?;
    }
    if outcome.verdict() == Verdict::NothingChecked {
        note(
            "error: nothing was checked (no run passed); --allow-skips accepts a gate whose runs all skipped",
        );
    }
    Ok(outcome.verdict().exit_code())
}

/// The oracles `--oracle` (default: all) and `--no-oracle` leave on; refuses a set with none.
fn oracle_set(args: &CheckArgs) -> Result<OracleSet, Fatal> {
    let chosen = if args.oracles.is_empty() {
        OracleSet::ALL
    } else {
        OracleSet::of(args.oracles.iter().copied())
    };
    let set = (args.no_oracles.iter()).fold(chosen, |set, &kind| set.without(kind));
    if set == OracleSet::NONE {
        return Err(Fatal(
            "every oracle is switched off: the runs would judge nothing".into(),
        ));
    }
    Ok(set)
}

/// `--each-oracle`: the gate once per oracle, each alone; one summary line per oracle.
fn each_oracle(
    registry: &bucketproof_harness::Registry,
    options: GateOptions,
    args: &CheckArgs,
    out: &mut Out,
) -> Result<u8, Fatal> {
    let scenarios = gate::load_scenarios(&project::scenario_paths(&args.paths))?;
    let oracles = options.engine.run.oracles;
    let mut progress = Progress::new();
    let each = gate::each_oracle(registry, &options, oracles, &scenarios, &mut progress)?;
    progress.finish();
    let results: Vec<_> = (each.outcomes.iter())
        .flat_map(|(_, outcome)| outcome.results().iter().cloned())
        .collect();
    progress::throughput(&results);
    if args.json {
        out.print(&each.to_json())?;
    } else {
        for line in each.summary_lines() {
            out.line(line)?;
        }
    }
    Ok(each.verdict().exit_code())
}
