//! Float versus rational: identical traces through the exact core, the f64 baselines and governor,
//! judged against the reference model, over a grid of rates, capacities and horizons.
//!
//! This file owns the entry points ([`write_report_with`], [`write_report`], [`run`]), the error
//! type and the names the report is known by. The jobs have one file each: `grid` (what is compared:
//! [`CompareOptions`], [`GridRate`]), `traces` (one deterministic trace per cell:
//! [`generate_trace`]), `run` (every subject in lockstep with the model: [`CompareReport`]),
//! `go_repro` (golang/go#46579 and golang/go#34861 as traces: [`named_scenarios`]) and `render`
//! (the report's bytes: [`render_files`], [`summary`]).
//!
//! Promises: the same options give the same report, byte for byte, on every machine; the exact core
//! is judged by the same oracles as the float subjects; bad options are a typed [`CompareError`]
//! before anything runs.

use std::path::{Path, PathBuf};

mod cell;
mod go_repro;
mod grid;
mod render;
mod run;
mod traces;

pub use self::cell::SubjectCell;
pub use self::go_repro::{
    GO_34861_RATE, GO_46579_RATE, GO_46579_TOKENS, NamedScenario, ScenarioResult,
    named_scenario_defs, named_scenarios,
};
pub use self::grid::{CompareOptions, DEFAULT_RATES, GridRate, parse_horizon};
pub use self::render::{render_files, render_json, render_markdown, render_svg, summary};
pub use self::run::{Cell, CompareReport, ErrorPoint, SubjectTotals, run};
pub use self::traces::generate_trace;

/// The subjects every cell runs, in report order.
pub const SUBJECTS: &[&str] = &["core", "float-textbook", "float-go", "governor"];

/// The environment variable that selects the full grid in [`CompareOptions::from_env`].
pub const FULL_ENV: &str = "BUCKETPROOF_COMPARE_FULL";

/// The report's file stem inside the report directory.
pub const REPORT_STEM: &str = "float-vs-rational";

/// Why a comparison could not be set up or written.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CompareError {
    /// A rate that is not `<tokens>/<period>` or not a valid config.
    #[error("bad rate {input:?}: {reason}")]
    BadRate {
        /// What was given.
        input: String,
        /// Why it was refused.
        reason: String,
    },
    /// A horizon that is not `<count><unit>` (units ns, us, ms, s, min, h, d, y).
    #[error("bad horizon {input:?}: {reason}")]
    BadHorizon {
        /// What was given.
        input: String,
        /// Why it was refused.
        reason: String,
    },
    /// A capacity of 0.
    #[error("bad capacity {0}: must be at least 1")]
    BadCapacity(u64),
    /// No rates, capacities, horizons or ops: nothing would be compared.
    #[error("empty grid: {0}")]
    EmptyGrid(&'static str),
    /// The plot could not be drawn.
    #[error("plot: {0}")]
    Plot(String),
    /// A report file could not be written or read.
    #[error("{path}: {message}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        message: String,
    },
}

/// Runs `options` and writes `float-vs-rational.{md,json,svg}` into `dir` (created if missing).
pub fn write_report_with(
    dir: &Path,
    options: &CompareOptions,
) -> Result<CompareReport, CompareError> {
    let report = run(options)?;
    let io = |path: &Path, e: std::io::Error| CompareError::Io {
        path: path.to_owned(),
        message: e.to_string(),
    };
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    for (name, contents) in render_files(&report)? {
        let path = dir.join(name);
        std::fs::write(&path, contents).map_err(|e| io(&path, e))?;
    }
    Ok(report)
}

/// Writes the committed report (the CI-sized grid, [`CompareOptions::ci`]) into `dir`.
pub fn write_report(dir: &Path) -> Result<CompareReport, CompareError> {
    write_report_with(dir, &CompareOptions::ci())
}
