//! `bucketproof compare`: float versus rational over the grid; writes the report files, prints the
//! totals.

use bucketproof_harness::compare::{self, CompareOptions};

use crate::args::CompareArgs;
use crate::fatal::Fatal;
use crate::out::{Out, note};
use crate::project;

/// Runs the grid and writes `float-vs-rational.{md,json,svg}`.
pub fn compare(args: CompareArgs, out: &mut Out) -> Result<u8, Fatal> {
    let options = CompareOptions::from_args(args.full, &args.rates, &args.horizons)?;
    let dir = args.reports.unwrap_or_else(project::reports_dir);
    let report = compare::write_report_with(&dir, &options)?;
    note(format!(
        "wrote {}/{}.{{md,json,svg}}",
        dir.display(),
        compare::REPORT_STEM
    ));
    out.print(&compare::summary(&report))?;
    Ok(0)
}
