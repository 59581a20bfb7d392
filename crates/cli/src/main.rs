//! `bucketproof`: the scenario gate and its tools.
//!
//! - `check [PATHS]`: runs every scenario x seed x subject through the reference model and every
//!   oracle; exit 0 when all pass, 1 on a violation, an unreached target, stale reports with
//!   `--check-reports`, or a gate that checked nothing; 2 on a usage or scenario error. Writes shrunk
//!   counterexamples under `reports/failures/` and prints the one-line replay command.
//! - `run SCENARIO`: one run, its JSON report on stdout (byte-identical across runs and machines).
//! - `replay FILE`: reproduces a counterexample.
//! - `list`: scenarios and subjects.
//! - `compare`: float versus rational (the exact core, the f64 buckets and governor over a grid of
//!   rates, capacities and horizons); writes `reports/float-vs-rational.{md,json,svg}`.
//! - `peers`: third-party limiters through the gate; writes `reports/peers.{md,json}`.
//! - `mutants`: the mutation self-test; writes `reports/mutants.md`.
//! - `serve SUBJECT`: one of this binary's subjects over the subject protocol on stdin and stdout.
//!
//! The binary is thin: the gate (jobs, verdicts, counts, every file written) is
//! `bucketproof_harness::gate`; this crate parses arguments (`args`), knows the project's layout and
//! subjects (`project`), runs one subcommand (`commands`), and owns the terminal (`out`, `progress`,
//! `colour`). What is deterministic (reports, JSON, JUnit, counterexamples) never contains timings;
//! throughput is printed on stderr only.

mod args;
mod colour;
mod commands;
mod fatal;
mod out;
mod progress;
mod project;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};
use crate::commands::{check, compare, list, mutants, peers, replay, run, serve};
use crate::fatal::{Fatal, USAGE};
use crate::out::{Out, note};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut out = Out::default();
    let outcome = match cli.command {
        Command::Check(args) => check::check(args, &mut out),
        Command::Run(args) => run::run(args, &mut out),
        Command::Replay { file } => replay::replay_file(&file, &mut out),
        Command::List { paths } => list::list(&paths, &mut out),
        Command::Compare(args) => compare::compare(args, &mut out),
        Command::Peers(args) => peers::peers(args, &mut out),
        Command::Mutants { report } => mutants::mutants(report, &mut out),
        Command::Serve { subject } => serve::serve(&subject),
    };
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(Fatal(message)) => {
            note(format!("error: {message}"));
            ExitCode::from(USAGE)
        }
    }
}
