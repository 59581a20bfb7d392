//! The `bucketproof` binary end to end, as CI and a user run it: the gate passes on main with one JUnit
//! test case per scenario-seed and fresh committed reports; `run` is byte-reproducible; a broken subject
//! (a mutant of the catalogue, which the shipped binary registers) fails the gate with a counterexample
//! of at most `MAX_COUNTEREXAMPLE_OPS` ops that `replay` reproduces; a malformed scenario is a usage
//! error naming file, line and column.

mod common;

use bucketproof_harness::counterexample::MAX_COUNTEREXAMPLE_OPS;
use common::{
    FAILING_SCENARIO, FAILING_SUBJECT, bucketproof, failing_check, scratch, text, workspace,
};

#[test]
fn check_passes_on_main_with_one_junit_case_per_scenario_seed_and_fresh_reports() {
    let dir = scratch("junit");
    let junit = dir.join("junit.xml");
    let out = bucketproof(&[
        "check",
        "--junit",
        junit.to_str().unwrap(),
        "--check-reports",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let scenarios = bucketproof_scenario::load_all(&workspace().join("scenarios")).unwrap();
    let expected: usize = scenarios
        .iter()
        .map(|s| s.seeds.len() * s.subjects.len())
        .sum();
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert_eq!(xml.matches("<testcase ").count(), expected, "{xml}");
    assert!(!xml.contains("<failure"), "{xml}");
    for scenario in &scenarios {
        for seed in &scenario.seeds {
            let case = format!("name=\"{} seed {seed} [", scenario.name);
            assert!(xml.contains(&case), "no test case {case}");
        }
    }
}

#[test]
fn run_twice_gives_byte_identical_json() {
    let first = bucketproof(&["run", "rollback", "--seed", "2"]);
    let second = bucketproof(&["run", "scenarios/rollback.toml", "--seed", "2"]);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    assert!(!first.stdout.is_empty());
    assert_eq!(first.stdout, second.stdout);
    let json: serde_json::Value = serde_json::from_slice(&first.stdout).unwrap();
    assert_eq!(json["status"], "pass");
    assert_eq!(json["report"]["steps"], 4000);
}

#[test]
fn a_broken_subject_fails_with_a_small_counterexample_that_replay_reproduces() {
    let dir = scratch("broken");
    let out = bucketproof(&failing_check(FAILING_SCENARIO, dir.to_str()));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let failures = dir.join("failures");
    let file = failures.join("repeated-denials-seed1-mutant-charge-denied.json");
    let replay_command = format!("bucketproof replay {}", file.display());
    assert!(stderr.contains(&replay_command), "{stderr}");

    let counterexample: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let ops = counterexample["ops"].as_array().unwrap();
    assert!(
        ops.len() <= MAX_COUNTEREXAMPLE_OPS,
        "{} ops: {ops:?}",
        ops.len()
    );
    for field in [
        "scenario",
        "seed",
        "subject",
        "setup",
        "violation",
        "replay",
    ] {
        assert!(!counterexample[field].is_null(), "missing {field}");
    }
    assert_eq!(counterexample["violation"]["oracle"], "model");

    let replayed = bucketproof(&["replay", file.to_str().unwrap()]);
    let stdout = text(&replayed.stdout);
    assert_eq!(replayed.status.code(), Some(1), "{stdout}");
    let recorded = counterexample["violation"]["what"].as_str().unwrap();
    assert!(stdout.contains("reproduced:"), "{stdout}");
    assert!(stdout.contains(recorded), "{stdout}");

    // The same file against the correct core passes: the failure is the subject's, not the trace's.
    let mut fixed = counterexample.clone();
    fixed["subject"] = "core".into();
    let fixed_file = dir.join("fixed.json");
    std::fs::write(&fixed_file, fixed.to_string()).unwrap();
    let passed = bucketproof(&["replay", fixed_file.to_str().unwrap()]);
    assert_eq!(passed.status.code(), Some(0), "{}", text(&passed.stdout));
}

#[test]
fn a_malformed_scenario_is_a_usage_error_naming_file_line_and_column() {
    let dir = scratch("malformed");
    let file = dir.join("typo.toml");
    std::fs::write(
        &file,
        "length = 10\nreach = [\"allowed\"]\n[setup]\ncapacity = 3\nrate = \"1/s\"\n[arrivals]\npatern = \"poisson\"\n",
    )
    .unwrap();
    let out = bucketproof(&["check", file.to_str().unwrap()]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let place = format!("{}:7:1:", file.display());
    assert!(stderr.contains(&place), "{stderr}");
    assert!(stderr.contains("unknown field `patern`"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    let unknown = bucketproof(&["check", "--subject", "no-such-subject"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(text(&unknown.stderr).contains("unknown subject"));
}

#[test]
fn list_names_scenarios_and_subjects() {
    let out = bucketproof(&["list"]);
    assert_eq!(out.status.code(), Some(0));
    let stdout = text(&out.stdout);
    for name in ["exact-refill", "rollback", "core", "model", FAILING_SUBJECT] {
        assert!(stdout.contains(name), "{stdout}");
    }
}

#[test]
fn mutants_checks_its_report_path_before_running_anything() {
    let started = std::time::Instant::now();
    // Under a regular file: no directory can be made there, not even by root.
    let out = bucketproof(&["mutants", "--report", "Cargo.toml/mutants.md"]);
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(all.contains("Cargo.toml/mutants.md: cannot write"), "{all}");
    // Refused before the suite: no kill table was printed, and it took no time to say so.
    assert!(!all.contains("killed"), "{all}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{all}"
    );
}

/// A subject that breaks two properties: with every oracle on, each run stops at its first
/// violation, so only one property is named; `--each-oracle` names every one, and `--oracle` /
/// `--no-oracle` choose what judges.
#[test]
fn each_oracle_reports_every_violated_property_and_oracles_can_be_chosen() {
    let dir = scratch("each-oracle");
    let reports = dir.to_str().unwrap();
    let base = [
        "check",
        "scenarios/initial-full-bucket.toml",
        "--subject",
        "mutant:no-capacity-clamp",
        "--reports",
        reports,
    ];
    let failed_by = |args: &[&str]| -> Vec<String> {
        let out = bucketproof(&[&base[..], args, &["--json"]].concat());
        let summary: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", text(&out.stderr)));
        let mut oracles: Vec<String> = summary["scenarios"][0]["runs"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|run| run["violation"]["oracle"].as_str().map(String::from))
            .collect();
        oracles.dedup();
        oracles
    };
    // Every oracle on: the runs stop at the model's verdict, and the arrival curve is never heard.
    assert_eq!(failed_by(&[]), ["model"]);
    assert_eq!(failed_by(&["--oracle", "arrival-curve"]), ["arrival_curve"]);
    assert_eq!(
        failed_by(&["--no-oracle", "model", "--no-oracle", "arrival-curve"]),
        ["invariant"]
    );

    let out = bucketproof(&[&base[..], &["--each-oracle"]].concat());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let lines = text(&out.stdout);
    for (oracle, failed) in [
        ("model", 2),
        ("invariant", 2),
        ("arrival-curve", 2),
        ("retry-after", 0),
        ("replay", 0),
    ] {
        let line = lines
            .lines()
            .find(|l| l.starts_with(&format!("{oracle} alone: ")))
            .unwrap_or_else(|| panic!("no line for {oracle}: {lines}"));
        assert!(line.contains(&format!(" {failed} failed")), "{line}");
    }
    // Each counterexample replays under the oracle that found it.
    let file = dir
        .join("arrival-curve/failures")
        .join("initial-full-bucket-seed1-mutant-no-capacity-clamp.json");
    let replayed = bucketproof(&["replay", file.to_str().unwrap()]);
    assert!(
        text(&replayed.stdout).contains("reproduced: [arrival-curve]"),
        "{}",
        text(&replayed.stdout)
    );
    let all_off = [
        "--no-oracle",
        "model",
        "--no-oracle",
        "invariant",
        "--no-oracle",
        "arrival-curve",
        "--no-oracle",
        "retry-after",
        "--no-oracle",
        "replay",
    ];
    let out = bucketproof(&[&base[..], &all_off].concat());
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("judge nothing"),
        "{}",
        text(&out.stderr)
    );
}
