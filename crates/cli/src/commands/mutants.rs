//! `bucketproof mutants`: the mutation self-test. Writes the report, prints the kill table and how
//! many mutants each oracle kills alone (naming those only the model sees), and fails (exit 1) if a
//! mutant survives or its shrunk counterexample is longer than the gate allows.

use std::path::PathBuf;

use bucketproof_check::oracle::OracleSet;
use bucketproof_harness::counterexample::MAX_COUNTEREXAMPLE_OPS;
use bucketproof_harness::gate;
use bucketproof_mutants::kill;

use crate::fatal::Fatal;
use crate::out::Out;
use crate::project;

fn millis(time: std::time::Duration) -> String {
    format!("{:.2} ms", time.as_secs_f64() * 1e3)
}

/// Runs the self-test; `report` defaults to `mutants.md` in the project's reports directory.
pub fn mutants(report: Option<PathBuf>, out: &mut Out) -> Result<u8, Fatal> {
    let path = report.unwrap_or_else(|| project::reports_dir().join("mutants.md"));
    // Before minutes of runs depend on it.
    gate::writable(&path).map_err(|e| Fatal(e.to_string()))?;
    // The scenario part of the report reads `scenarios/` relative to the working directory.
    let kills = kill::write_report(&path)
        .map_err(|e| Fatal(format!("cannot write {}: {e}", path.display())))?;
    out.line(format!(
        "{:<28} {:<14} {:>12} {:>10}",
        "mutant", "killed by", "time", "shrunk"
    ))?;
    let mut failed = false;
    for kill in &kills {
        let killed_by = kill
            .violation
            .as_ref()
            .map_or("SURVIVED", |violation| violation.oracle.name());
        let time = kill.time_to_kill.map_or("-".to_owned(), millis);
        let shrunk = kill
            .shrunk_ops
            .map_or("-".to_owned(), |n| format!("{n} ops"));
        out.line(format!(
            "{:<28} {killed_by:<14} {time:>12} {shrunk:>10}",
            kill.mutant.name()
        ))?;
        let too_big = kill.shrunk_ops.is_some_and(|n| n > MAX_COUNTEREXAMPLE_OPS);
        failed |= !kill.killed() || too_big;
    }
    let alone: Vec<String> = OracleSet::SWITCHABLE
        .iter()
        .map(|kind| {
            let count = kills.iter().filter(|k| k.alone.contains(kind)).count();
            format!("{} {count}", kind.name())
        })
        .collect();
    out.line(format!("killed alone: {}", alone.join(", ")))?;
    let weak: Vec<String> = kill::only_the_model(&kills)
        .iter()
        .map(|k| k.mutant.name())
        .collect();
    if !weak.is_empty() {
        out.line(format!("only the model sees: {}", weak.join(", ")))?;
    }
    let killed = kills.iter().filter(|k| k.killed()).count();
    let median = kill::median_time_to_kill(&kills).map_or("-".to_owned(), millis);
    out.line(format!(
        "{killed}/{} killed ({:.0}%), median time to kill {median}; wrote {}",
        kills.len(),
        100.0 * killed as f64 / kills.len().max(1) as f64,
        path.display()
    ))?;
    Ok(u8::from(failed))
}
