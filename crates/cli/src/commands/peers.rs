//! `bucketproof peers`: every third-party limiter of the catalogue through the gate, and the report
//! of what held and what did not (`reports/peers.{md,json}`), written or checked for freshness.
//!
//! Exit codes: 0 written or fresh; 1 stale (with `--check`), or a note whose claims the
//! counterexample beside it does not bear out (nothing is written); 2 a peer that could not run (not
//! installed: run `peers/install`), a bad catalogue or a usage error.

use bucketproof_harness::gate;
use bucketproof_harness::peers::{Catalogue, PeersReport, claims};

use crate::args::PeersArgs;
use crate::fatal::{Fatal, USAGE};
use crate::out::{Out, note};
use crate::progress::{self, Progress};
use crate::project;

/// Runs the peers and writes or checks their report.
pub fn peers(args: PeersArgs, out: &mut Out) -> Result<u8, Fatal> {
    let catalogue_path = args
        .catalogue
        .unwrap_or_else(|| project::project_dir().join("peers").join("peers.toml"));
    let catalogue = Catalogue::load(&catalogue_path)?;
    let registry = project::registry()?;
    let scenarios = gate::load_scenarios(&project::scenario_paths(&[]))?;
    let work_dir = project::project_dir().join("target").join("peers");
    let mut progress = Progress::new();
    let report = PeersReport::run(&registry, &catalogue, &scenarios, &work_dir, &mut progress)?;
    progress.finish();
    for findings in &report.peers {
        out.line(format!(
            "{}: {} runs, {} passed, {} failed, {} skipped, {} errors; {} ops checked",
            findings.peer.name,
            findings.counts.runs,
            findings.counts.passed,
            findings.counts.failed,
            findings.counts.skipped,
            findings.counts.errors,
            findings.ops_checked,
        ))?;
        // Timings go to stderr: stdout and the report are the same on every run.
        let seconds = findings.checking_time.as_secs_f64();
        note(format!(
            "{}: {} ops in {seconds:.2} s of checking runs, {}",
            findings.peer.name,
            findings.ops_checked,
            progress::rate(findings.ops_checked as f64 / seconds.max(1e-9))
        ));
    }
    let broken = report.broken();
    if !broken.is_empty() {
        note(format!(
            "error: could not run {} (installed? run `peers/install`); the report was not {}",
            broken.join(", "),
            if args.check { "checked" } else { "written" }
        ));
        return Ok(USAGE);
    }
    let contradicted: Vec<claims::Contradiction> = report
        .peers
        .iter()
        .flat_map(claims::contradictions)
        .collect();
    if !contradicted.is_empty() {
        for contradiction in &contradicted {
            note(format!("error: {contradiction}"));
        }
        note(format!(
            "the report was not {}: fix the notes' claims (and words) in {}",
            if args.check { "checked" } else { "written" },
            catalogue_path.display()
        ));
        return Ok(1);
    }
    let dir = args.reports.unwrap_or_else(project::reports_dir);
    let files = [
        (dir.join("peers.md"), report.to_markdown()),
        (dir.join("peers.json"), report.to_json()),
    ];
    let mut stale = false;
    for (path, text) in &files {
        if args.check {
            if std::fs::read(path).ok().as_deref() != Some(text.as_bytes()) {
                note(format!(
                    "stale report: {} (regenerate with `bucketproof peers`)",
                    path.display()
                ));
                stale = true;
            }
        } else {
            std::fs::write(path, text)
                .map_err(|e| Fatal(format!("cannot write {}: {e}", path.display())))?;
            note(format!("wrote {}", path.display()));
        }
    }
    Ok(u8::from(stale))
}
