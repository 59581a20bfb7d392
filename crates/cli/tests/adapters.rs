//! The reference adapters in other languages (`adapters/python`, `adapters/node`) through the whole
//! gate: each passes every scenario, seed and oracle under the exact profile, and each of its planted
//! classic mistakes (`--bug NAME`) is caught with a shrunk counterexample of at most 6 ops that
//! replays from its file through the recorded command.
//!
//! An adapter whose interpreter is missing is skipped with a loud line, and
//! `BUCKETPROOF_REQUIRE_ADAPTERS=1` (CI sets it) turns that skip into a failure.

mod common;

use std::path::PathBuf;

use common::{bucketproof, bucketproof_in, scratch, text};

/// The most ops a planted bug's counterexample may have.
const MAX_OPS: usize = 6;

/// `(interpreter, script, planted bugs)` of each adapter.
const ADAPTERS: [(&str, &str, &[&str]); 2] = [
    (
        "python3",
        "adapters/python/bucket.py",
        &["strict-greater", "charge-denied"],
    ),
    (
        "node",
        "adapters/node/bucket.js",
        &["strict-greater", "charge-denied"],
    ),
];

/// True if `program` runs here; else a loud skip, or a failure under `BUCKETPROOF_REQUIRE_ADAPTERS=1`.
fn runs(program: &str) -> bool {
    if std::process::Command::new(program)
        .arg("--version")
        .output()
        .is_ok()
    {
        return true;
    }
    assert!(
        std::env::var("BUCKETPROOF_REQUIRE_ADAPTERS").as_deref() != Ok("1"),
        "{program} is not installed but BUCKETPROOF_REQUIRE_ADAPTERS=1"
    );
    eprintln!("\n!!!!! SKIP adapter tests for {program}: it is not installed !!!!!\n");
    false
}

#[test]
fn each_reference_adapter_passes_the_whole_gate() {
    for (program, script, _) in ADAPTERS {
        if !runs(program) {
            continue;
        }
        let subject = format!("exec:{program} {script}");
        let out = bucketproof(&["check", "--json", "--subject", &subject]);
        let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{subject}: {}",
            text(&out.stderr)
        );
        assert_eq!(summary["failures"], 0);
        assert_eq!(summary["skipped"], 0, "every scenario runs: {summary}");
    }
}

#[test]
fn each_planted_bug_is_caught_small_and_replays() {
    for (program, script, bugs) in ADAPTERS {
        if !runs(program) {
            continue;
        }
        for bug in bugs {
            let dir = scratch(&format!("adapter-{program}-{bug}"));
            let reports = dir.join("reports");
            let subject = format!("exec:{program} {script} --bug {bug}");
            let out = bucketproof(&[
                "check",
                "--subject",
                &subject,
                "--reports",
                reports.to_str().unwrap(),
            ]);
            assert_eq!(
                out.status.code(),
                Some(1),
                "{subject}: {}",
                text(&out.stderr)
            );
            let files: Vec<PathBuf> = std::fs::read_dir(reports.join("failures"))
                .unwrap()
                .map(|entry| entry.unwrap().path())
                .collect();
            assert!(!files.is_empty(), "{subject}: no counterexample");
            let smallest = files
                .iter()
                .map(|file| {
                    let value: serde_json::Value =
                        serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
                    (value["ops"].as_array().unwrap().len(), file)
                })
                .min()
                .unwrap();
            assert!(
                smallest.0 <= MAX_OPS,
                "{subject}: {} ops in {}",
                smallest.0,
                smallest.1.display()
            );
            // Replayed from the workspace, where the recorded command's script path resolves.
            let replay = bucketproof_in(
                &common::workspace(),
                &["replay", smallest.1.to_str().unwrap()],
            );
            assert_eq!(replay.status.code(), Some(1), "{}", text(&replay.stderr));
            assert!(
                text(&replay.stdout).contains("reproduced"),
                "{}",
                text(&replay.stdout)
            );
        }
    }
}
