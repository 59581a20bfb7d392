//! The gate's terminal lines on stderr: an indicatif bar on an interactive terminal, one plain line
//! per run in CI or when piped, and throughput figures.
//!
//! Promise: everything here is for people watching; nothing printed here is deterministic or read by
//! tools (timings live only here, never in reports).

use std::io::IsTerminal;

use bucketproof_harness::engine::{RunResult, Status};
use bucketproof_harness::gate::{Observer, Saved};

use crate::colour;
use crate::out::note;

/// An [`Observer`] that shows each run on stderr.
pub struct Progress {
    bar: Option<indicatif::ProgressBar>,
    color: bool,
}

impl Progress {
    /// Decides bar and colour from stderr and the environment.
    pub fn new() -> Progress {
        let terminal = std::io::stderr().is_terminal();
        Progress {
            bar: None,
            color: colour::enabled(terminal),
        }
    }

    /// Clears the bar.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }

    fn line(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None => note(line),
        }
    }

    fn paint(&self, word: &str, status: &Status) -> String {
        if !self.color {
            return word.to_owned();
        }
        let code = match status {
            Status::Pass => "32",
            Status::Skipped { .. } => "33",
            _ => "31",
        };
        format!("\x1b[{code}m{word}\x1b[0m")
    }
}

impl Observer for Progress {
    fn planned(&mut self, runs: usize) {
        let interactive = std::io::stderr().is_terminal() && std::env::var_os("CI").is_none();
        self.bar = interactive.then(|| {
            let bar = indicatif::ProgressBar::new(runs as u64);
            if let Ok(style) =
                indicatif::ProgressStyle::with_template("{bar:32} {pos}/{len} {wide_msg}")
            {
                bar.set_style(style);
            }
            bar
        });
    }

    fn started(&mut self, scenario: &str, seed: u64, subject: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(format!("{scenario} seed={seed} {subject}"));
        }
    }

    fn finished(&mut self, result: &RunResult, saved: Option<&Saved>) {
        let mut line = format!(
            "{} {} seed={} {}: {} ops, {}",
            self.paint(&format!("{:<9}", result.status.word()), &result.status),
            result.scenario,
            result.seed,
            result.subject,
            result.report.as_ref().map_or(0, |r| r.steps),
            rate(result.steps_per_second())
        );
        if !matches!(result.status, Status::Pass) {
            line.push_str(&format!("\n    {}", result.status.detail()));
        }
        if let (Some(counterexample), Some(saved)) = (&result.counterexample, saved) {
            line.push_str(&match saved {
                Saved::Written(_) => format!(
                    "\n    {} {} ops; replay with:\n    {}",
                    if counterexample.shrink_budget_exhausted {
                        "the shrink budget ran out at"
                    } else {
                        "shrunk to"
                    },
                    counterexample.ops.len(),
                    counterexample.replay
                ),
                Saved::NotWritten { path, error } => format!(
                    "\n    cannot write counterexample {}: {error}",
                    path.display()
                ),
                _ => String::new(),
            });
        }
        self.line(&line);
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
    }
}

/// Human steps-per-second, for the terminal only.
pub fn rate(steps_per_second: f64) -> String {
    if steps_per_second >= 1e6 {
        format!("{:.2} M steps/s", steps_per_second / 1e6)
    } else {
        format!("{:.0} k steps/s", steps_per_second / 1e3)
    }
}

/// The whole gate's throughput over `results`: a timing, so stderr only.
pub fn throughput(results: &[RunResult]) {
    let steps: u64 = results
        .iter()
        .filter_map(|result| result.report.as_ref())
        .map(|report| report.steps)
        .sum();
    let elapsed: std::time::Duration = results.iter().map(|result| result.elapsed).sum();
    if steps > 0 {
        note(format!(
            "bucketproof check: {steps} steps in {:.2} s of checking runs, {}",
            elapsed.as_secs_f64(),
            rate(steps as f64 / elapsed.as_secs_f64().max(1e-9))
        ));
    }
}
