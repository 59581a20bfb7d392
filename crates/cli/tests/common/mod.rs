//! Helpers shared by the binary's end-to-end tests: run `bucketproof` from the workspace root (or a
//! given directory) with plain terminal output, and make a fresh scratch directory per test.

#![allow(dead_code)] // each test file uses its own subset

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The workspace root (where `scenarios/` and `reports/` live).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The binary with the environment a test controls: no progress bar, no colour variables, no scale.
pub fn command(dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_bucketproof"));
    command
        .current_dir(dir)
        .env("CI", "true") // plain lines, no progress bar
        .env_remove("BUCKETPROOF_SCALE")
        .env_remove("NO_COLOR")
        .env_remove("CLICOLOR_FORCE");
    command
}

/// Runs the binary from the workspace root.
pub fn bucketproof(args: &[&str]) -> Output {
    bucketproof_in(&workspace(), args)
}

/// Runs the binary from `dir`.
pub fn bucketproof_in(dir: &Path, args: &[&str]) -> Output {
    command(dir).args(args).output().expect("the binary runs")
}

/// A fresh directory for one test's outputs.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("bucketproof-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Lossy UTF-8, for assertion messages.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A subject of the shipped binary that fails `scenarios/repeated-denials.toml` (a denial is
/// charged), so the end-to-end tests need no test-only subject.
pub const FAILING_SUBJECT: &str = "mutant:charge-denied";

/// A scenario `FAILING_SUBJECT` fails.
pub const FAILING_SCENARIO: &str = "scenarios/repeated-denials.toml";

/// The arguments of a `check` of `scenario` through [`FAILING_SUBJECT`], with `--reports DIR` when
/// given: the one failing run the end-to-end tests share.
pub fn failing_check<'a>(scenario: &'a str, reports: Option<&'a str>) -> Vec<&'a str> {
    let mut args = vec!["check", scenario, "--subject", FAILING_SUBJECT];
    args.extend(reports.into_iter().flat_map(|dir| ["--reports", dir]));
    args
}

/// The shortest counterexample file under `reports/failures`: its op count and path. Panics when
/// there is none.
pub fn smallest_counterexample(reports: &Path) -> (usize, PathBuf) {
    std::fs::read_dir(reports.join("failures"))
        .expect("a failures directory")
        .map(|entry| {
            let file = entry.unwrap().path();
            let value: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
            (value["ops"].as_array().unwrap().len(), file)
        })
        .min()
        .expect("a counterexample")
}

/// `bucketproof replay FILE` from `dir` reproduces the recorded failure (exit 1, "reproduced").
pub fn assert_replays(dir: &Path, file: &Path) {
    let replay = bucketproof_in(dir, &["replay", file.to_str().unwrap()]);
    assert_eq!(replay.status.code(), Some(1), "{}", text(&replay.stderr));
    assert!(
        text(&replay.stdout).contains("reproduced"),
        "{}",
        text(&replay.stdout)
    );
}

/// `bucketproof check [SCENARIO] --subject SUBJECT` (from the workspace, files under a scratch
/// directory named `name`) fails (exit 1), its shortest counterexample has at most the gate's
/// [`MAX_COUNTEREXAMPLE_OPS`](bucketproof_harness::counterexample::MAX_COUNTEREXAMPLE_OPS) ops, and replays
/// from the workspace. Returns what `check` printed (stdout and stderr) and the counterexample.
pub fn assert_caught_small(scenario: Option<&str>, subject: &str, name: &str) -> (String, PathBuf) {
    let reports = scratch(name).join("reports");
    let mut args: Vec<&str> = vec!["check"];
    args.extend(scenario);
    args.extend(["--subject", subject, "--reports", reports.to_str().unwrap()]);
    let out = bucketproof(&args);
    let printed = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{subject}: {printed}");
    let (ops, file) = smallest_counterexample(&reports);
    let max = bucketproof_harness::counterexample::MAX_COUNTEREXAMPLE_OPS;
    assert!(ops <= max, "{subject}: {ops} ops in {}", file.display());
    assert_replays(&workspace(), &file);
    (printed, file)
}

/// Whether a test's outside requirement is here: `missing` says what is not (`None`: all is). A
/// missing one is a loud SKIP line and false, or, when the environment variable `require` is `1`
/// (CI sets it), a failure: a test never passes by not running.
pub fn available(test: &str, missing: Option<String>, require: &str) -> bool {
    let Some(missing) = missing else {
        return true;
    };
    assert!(
        std::env::var(require).as_deref() != Ok("1"),
        "{test}: {missing}, but {require}=1"
    );
    eprintln!("\n!!!!! SKIP {test}: {missing}; it did NOT run !!!!!\n");
    false
}

/// True if `program --version` runs.
pub fn program_runs(program: &str) -> bool {
    Command::new(program).arg("--version").output().is_ok()
}

/// A project directory with the given scenarios (copied from the workspace's) and one subject
/// file, `subjects/mine.toml`: `--subject mine` from inside it.
pub fn project(name: &str, scenarios: &[&str], subject_file: &str) -> PathBuf {
    let dir = scratch(name);
    std::fs::create_dir_all(dir.join("scenarios")).unwrap();
    std::fs::create_dir_all(dir.join("subjects")).unwrap();
    for scenario in scenarios {
        let from = workspace().join("scenarios").join(scenario);
        std::fs::copy(from, dir.join("scenarios").join(scenario)).unwrap();
    }
    std::fs::write(dir.join("subjects/mine.toml"), subject_file).unwrap();
    dir
}
