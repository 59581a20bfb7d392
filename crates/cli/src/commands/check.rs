//! `bucketproof check`: the CI gate. Builds [`GateOptions`] from the flags, runs the harness's
//! [`Gate`] with a terminal [`Progress`], prints its summary (text or JSON) and returns the
//! verdict's exit code.

use bucketproof_harness::gate::{self, Gate, GateOptions, ReportMode, Verdict};

use crate::args::CheckArgs;
use crate::fatal::Fatal;
use crate::out::{Out, note};
use crate::progress::{self, Progress};
use crate::project;

/// Runs the gate.
pub fn check(args: CheckArgs, out: &mut Out) -> Result<u8, Fatal> {
    let registry = project::registry()?;
    let mut options = GateOptions::new(args.reports.unwrap_or_else(project::reports_dir));
    options.subjects = args.subjects;
    options.seeds = args.seeds;
    options.scale = args.scale;
    options.junit = args.junit;
    options.allow_skips = args.allow_skips;
    options.reports = if args.write_reports {
        ReportMode::Write
    } else if args.check_reports {
        ReportMode::Check
    } else {
        ReportMode::Skip
    };
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
