//! The command line as clap parses it: every subcommand, flag, default and environment variable.
//!
//! Owns the syntax only: flags, defaults, environment variables, and the ranges clap can check
//! itself (`--scale` is at least 1). Turning arguments into gate options is each command's job; the
//! gate checks what clap cannot (output paths, option combinations).

use std::path::PathBuf;

use bucketproof_check::oracle::OracleKind;
use clap::{Parser, Subcommand};

/// `bucketproof`.
#[derive(Parser)]
#[command(
    name = "bucketproof",
    version,
    about = "Check rate limiters against the exact reference model, scenario by scenario"
)]
pub struct Cli {
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand)]
pub enum Command {
    /// Run every scenario x seed x subject; the CI gate.
    Check(CheckArgs),
    /// Run one scenario and print its JSON run report.
    Run(RunArgs),
    /// Replay a counterexample file written by `check` or `run`.
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
    Compare(CompareArgs),
    /// Serve a subject of this binary (e.g. `core`) over the subject protocol on stdin and stdout,
    /// for `check --subject 'exec:bucketproof serve core'`: the protocol's own cost, and a check of
    /// the exec path against a subject whose verdicts are known.
    Serve {
        /// The subject to serve.
        subject: String,
    },
    /// Third-party limiters (`peers/peers.toml`, installed by `peers/install`) through the gate on
    /// every scenario under their profiles; writes `reports/peers.{md,json}`.
    Peers(PeersArgs),
    /// Mutation self-test: goes after every deliberately broken limiter with generated traces (and
    /// real threads for the race), runs the scenario suite against each, prints the kill table and
    /// writes `reports/mutants.md`. Exit 1 if a mutant survives or its counterexample is too long.
    Mutants {
        /// Where to write the report (default: `mutants.md` in the project's `reports/`).
        #[arg(long)]
        report: Option<PathBuf>,
    },
}

/// Multiplies scenario lengths; at least 1.
fn scale_parser() -> clap::builder::RangedU64ValueParser<u64> {
    clap::value_parser!(u64).range(1..)
}

/// The arguments of `bucketproof check`.
#[derive(clap::Args)]
pub struct CheckArgs {
    /// Scenario files or directories (default: `scenarios/`).
    pub paths: Vec<PathBuf>,
    /// Subjects to run (default: each scenario's own list, usually `core`). Repeatable.
    #[arg(long = "subject", short = 's')]
    pub subjects: Vec<String>,
    /// Seeds per scenario: the declared ones first, then the integers after them.
    #[arg(long)]
    pub seeds: Option<usize>,
    /// Multiply every scenario's length (heavy runs; env `BUCKETPROOF_SCALE`). Reports are written
    /// and checked at scale 1 only.
    #[arg(long, env = "BUCKETPROOF_SCALE", default_value_t = 1, value_parser = scale_parser())]
    pub scale: u64,
    /// Write a JUnit XML file: one test case per scenario-seed(-subject).
    #[arg(long)]
    pub junit: Option<PathBuf>,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Regenerate `reports/<scenario>.{md,json}` and the SVG plots.
    #[arg(long, conflicts_with = "check_reports")]
    pub write_reports: bool,
    /// Fail (exit 1) if the committed reports differ from what this run produces.
    #[arg(long)]
    pub check_reports: bool,
    /// Pass even if every run skipped (by default a gate that checked nothing fails).
    #[arg(long)]
    pub allow_skips: bool,
    /// Reports directory, counterexamples under its `failures/` (default: the project's `reports/`,
    /// beside its `scenarios/`).
    #[arg(long)]
    pub reports: Option<PathBuf>,
    /// Judge only by this oracle: model, invariant, arrival-curve, retry-after, replay (a
    /// subject's own failure is always reported). Repeatable; default: all.
    #[arg(long = "oracle", value_name = "ORACLE")]
    pub oracles: Vec<OracleKind>,
    /// Do not judge by this oracle. Repeatable.
    #[arg(long = "no-oracle", value_name = "ORACLE")]
    pub no_oracles: Vec<OracleKind>,
    /// Judge each oracle alone, in runs of its own, so one violation cannot hide another; every
    /// violated property is reported, with its counterexample under `<reports>/<oracle>/failures/`.
    #[arg(long, alias = "each-property", conflicts_with_all = ["junit", "write_reports", "check_reports"])]
    pub each_oracle: bool,
}

/// The arguments of `bucketproof run`.
#[derive(clap::Args)]
pub struct RunArgs {
    /// A scenario file, or the name of one in `scenarios/`.
    pub scenario: String,
    /// Seed (default: the scenario's first).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Subject (default: the scenario's first).
    #[arg(long, short = 's')]
    pub subject: Option<String>,
    /// Multiply the scenario's length (env `BUCKETPROOF_SCALE`).
    #[arg(long, env = "BUCKETPROOF_SCALE", default_value_t = 1, value_parser = scale_parser())]
    pub scale: u64,
    /// Reports directory; a failure's counterexample goes to its `failures/` (default: the
    /// project's `reports/`).
    #[arg(long)]
    pub reports: Option<PathBuf>,
}

/// The arguments of `bucketproof compare`.
#[derive(clap::Args)]
pub struct CompareArgs {
    /// Horizons, e.g. `1s,1d,100y` (default: the grid's).
    #[arg(long = "horizon", value_delimiter = ',')]
    pub horizons: Vec<String>,
    /// Rates as `<tokens>/<period>`, e.g. `10/13s,7000000/s` (default: the grid's).
    #[arg(long, value_delimiter = ',')]
    pub rates: Vec<String>,
    /// The big grid (env `BUCKETPROOF_COMPARE_FULL=1` too); the committed report is the default grid.
    #[arg(long)]
    pub full: bool,
    /// Reports directory (default: the project's `reports/`).
    #[arg(long)]
    pub reports: Option<PathBuf>,
}

/// The arguments of `bucketproof peers`.
#[derive(clap::Args)]
pub struct PeersArgs {
    /// The catalogue (default: `peers/peers.toml` of the project).
    #[arg(long)]
    pub catalogue: Option<PathBuf>,
    /// Fail (exit 1) if the committed `peers.{md,json}` differ from what this run produces, instead
    /// of writing them.
    #[arg(long)]
    pub check: bool,
    /// Reports directory (default: the project's `reports/`); counterexamples go to
    /// `target/peers/failures/`.
    #[arg(long)]
    pub reports: Option<PathBuf>,
}
