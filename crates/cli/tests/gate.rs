//! The gate's decisions as a user sees them: a run that checked nothing is not green, the text
//! summary, `--json` and JUnit count the same runs the same way, files go to the project's
//! `reports/` (or `--reports`) whatever the scenario's path, bad output paths and `--scale 0` are
//! refused before any run, colour follows `NO_COLOR` / `CLICOLOR_FORCE`, and `run` writes the
//! counterexample whose replay command it prints.

mod common;

use std::path::Path;

use common::{
    FAILING_SCENARIO, FAILING_SUBJECT, bucketproof, bucketproof_in, command, failing_check,
    scratch, text, workspace,
};

#[test]
fn a_gate_where_every_run_skipped_is_not_green_unless_skips_are_allowed() {
    let args = [
        "check",
        "scenarios/duplicate-request-ids.toml",
        "--subject",
        "float-go",
    ];
    let out = bucketproof(&args);
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{all}");
    assert!(all.contains("nothing was checked"), "{all}");

    let allowed = bucketproof(&[&args[..], &["--allow-skips"]].concat());
    assert_eq!(allowed.status.code(), Some(0), "{}", text(&allowed.stderr));

    let json = bucketproof(&[&args[..], &["--json"]].concat());
    assert_eq!(json.status.code(), Some(1));
    let summary: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(summary["passed"], false);
    assert_eq!(summary["skipped"], 2);
    assert_eq!(summary["errors"], 0);
}

/// A scenario whose default config (rate 0) governor cannot build: an error run per seed.
const ZERO_RATE: &str = r#"
seeds = [1, 2]
length = 20
reach = ["allowed"]
[setup]
capacity = 3
rate = "0/s"
[keys]
count = 1
[arrivals]
gap = "100ms"
"#;

fn junit_count(xml: &str, attribute: &str) -> u64 {
    let suites = xml.split("<testsuites ").nth(1).unwrap();
    let value = suites
        .split(&format!(" {attribute}=\""))
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    value.parse().unwrap()
}

#[test]
fn text_json_and_junit_count_a_build_error_the_same_way() {
    let dir = scratch("counts");
    let scenario = dir.join("zero-rate.toml");
    std::fs::write(&scenario, ZERO_RATE).unwrap();
    let junit = dir.join("junit.xml");
    let args = [
        "check",
        scenario.to_str().unwrap(),
        "--subject",
        "core",
        "--subject",
        "governor",
        "--reports",
        dir.to_str().unwrap(),
    ];
    let plain = bucketproof(&args);
    let json = bucketproof(&[&args[..], &["--json", "--junit", junit.to_str().unwrap()]].concat());
    assert_eq!(plain.status.code(), Some(2), "{}", text(&plain.stderr));
    assert_eq!(json.status.code(), Some(2), "{}", text(&json.stderr));

    let summary: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(summary["passed"], false);
    assert_eq!(summary["runs"], 4);
    assert_eq!(summary["failures"], 0);
    assert_eq!(summary["errors"], 2, "{summary}");
    assert_eq!(summary["skipped"], 0);

    let xml = std::fs::read_to_string(&junit).unwrap();
    assert_eq!(junit_count(&xml, "tests"), 4, "{xml}");
    assert_eq!(junit_count(&xml, "failures"), 0, "{xml}");
    assert_eq!(junit_count(&xml, "errors"), 2, "{xml}");
    assert_eq!(junit_count(&xml, "skipped"), 0, "{xml}");

    let stdout = text(&plain.stdout);
    assert!(
        stdout.contains("4 runs: 2 passed, 0 failed, 2 errors, 0 skipped"),
        "{stdout}"
    );
}

/// A project directory of its own (a `scenarios/` directory, as in a clone) to run the binary from.
fn project(name: &str) -> std::path::PathBuf {
    let dir = scratch(name);
    std::fs::create_dir_all(dir.join("scenarios")).unwrap();
    std::fs::copy(
        workspace().join(FAILING_SCENARIO),
        dir.join(FAILING_SCENARIO),
    )
    .unwrap();
    dir
}

#[test]
fn a_scenario_outside_the_project_does_not_decide_where_counterexamples_go() {
    let project = project("where-project");
    let elsewhere = scratch("where-elsewhere");
    let nested = elsewhere.join("some").join("dir");
    std::fs::create_dir_all(&nested).unwrap();
    let scenario = nested.join("x.toml");
    std::fs::copy(workspace().join(FAILING_SCENARIO), &scenario).unwrap();

    let out = bucketproof_in(&project, &failing_check(scenario.to_str().unwrap(), None));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let file = Path::new("reports/failures/x-seed1-mutant-charge-denied.json");
    assert!(project.join(file).is_file(), "{stderr}");
    assert!(
        stderr.contains(&format!("bucketproof replay {}", file.display())),
        "{stderr}"
    );
    assert!(!elsewhere.join("some").join("reports").exists(), "{stderr}");

    // `--reports` decides instead.
    let reports = scratch("where-reports");
    let out = bucketproof_in(
        &project,
        &failing_check(scenario.to_str().unwrap(), reports.to_str()),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        reports
            .join("failures/x-seed1-mutant-charge-denied.json")
            .is_file()
    );
}

#[test]
fn run_on_a_failing_subject_writes_the_counterexample_it_tells_you_to_replay() {
    let project = project("run-writes");
    let out = bucketproof_in(
        &project,
        &["run", "repeated-denials", "--subject", FAILING_SUBJECT],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let replay = json["counterexample"]["replay"].as_str().unwrap();
    let file = replay.strip_prefix("bucketproof replay ").unwrap();
    assert!(project.join(file).is_file(), "{replay} names no file");

    let replayed = bucketproof_in(&project, &["replay", file]);
    assert_eq!(replayed.status.code(), Some(1));
    assert!(text(&replayed.stdout).contains("reproduced:"));
}

/// True if the output shows that a scenario ran.
fn ran_something(stderr: &str) -> bool {
    stderr.lines().any(|line| line.starts_with("pass "))
}

#[test]
fn output_paths_are_checked_before_the_runs_with_the_path_in_the_message() {
    let dir = scratch("paths");
    let file = dir.join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    let out = bucketproof(&["check", "--reports", file.to_str().unwrap()]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&file.display().to_string()), "{stderr}");
    assert!(!ran_something(&stderr), "{stderr}");

    let junit = dir.join("no-such-dir").join("junit.xml");
    let out = bucketproof(&["check", "--junit", junit.to_str().unwrap()]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&junit.display().to_string()), "{stderr}");
    assert!(!ran_something(&stderr), "{stderr}");
}

#[test]
fn scale_zero_is_a_usage_error() {
    for args in [
        &["check", "--scale", "0"][..],
        &["run", "exact-refill", "--scale", "0"][..],
    ] {
        let out = bucketproof(args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    let out = command(&workspace())
        .args(["run", "exact-refill"])
        .env("BUCKETPROOF_SCALE", "0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

/// Runs one scenario with stderr piped (never a terminal) and the given colour variables.
fn coloured(vars: &[(&str, &str)]) -> bool {
    let mut command = command(&workspace());
    command.args(["check", "scenarios/exact-refill.toml"]);
    for (name, value) in vars {
        command.env(name, value);
    }
    let out = command.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    text(&out.stderr).contains("\x1b[32m")
}

#[test]
fn colour_follows_no_color_and_clicolor_force() {
    assert!(!coloured(&[]), "a pipe gets no colour by default");
    assert!(coloured(&[("CLICOLOR_FORCE", "1")]));
    assert!(!coloured(&[("CLICOLOR_FORCE", "0")]));
    assert!(!coloured(&[("CLICOLOR_FORCE", "")]));
    // An empty NO_COLOR disables nothing; a non-empty one wins over CLICOLOR_FORCE.
    assert!(coloured(&[("NO_COLOR", ""), ("CLICOLOR_FORCE", "1")]));
    assert!(!coloured(&[("NO_COLOR", "1"), ("CLICOLOR_FORCE", "1")]));
}

#[test]
fn help_text_names_no_issues() {
    for args in [
        &["--help"][..],
        &["check", "--help"],
        &["run", "--help"],
        &["compare", "--help"],
        &["mutants", "--help"],
    ] {
        let out = bucketproof(args);
        let stdout = text(&out.stdout);
        assert_eq!(out.status.code(), Some(0));
        assert!(
            !stdout.to_lowercase().contains("issue"),
            "{args:?}:\n{stdout}"
        );
    }
}

#[test]
fn the_shipped_binary_lists_no_test_fixtures() {
    let out = bucketproof(&["list"]);
    let stdout = text(&out.stdout);
    assert!(stdout.contains(FAILING_SUBJECT), "{stdout}");
    assert!(!stdout.contains("broken:"), "{stdout}");
}
