//! Exec subjects end to end: a limiter behind the subject protocol is judged exactly as in process
//! (the built-in core through `bucketproof serve`), a planted bug is caught with a small
//! counterexample that replays through the recorded command, the safety profile passes a limiter
//! that is safe but inexact and catches one that oversells, the state machine runs on an exec
//! subject the same way, and every way a child can break is a harness error (exit 2) naming what
//! happened, never a verdict.

mod common;

use std::path::{Path, PathBuf};

use bucketproof_check::state_machine::{self, Options};
use bucketproof_protocol::ExecSubjects;
use bucketproof_trace::{ConfigSpec, PolicySpec, Setup, Subject, SubjectError};
use common::{bucketproof, bucketproof_in, project, scratch, text, workspace};

/// `exec:` + this test's binary serving `subject`.
fn served(subject: &str) -> String {
    format!("exec:{} serve {subject}", env!("CARGO_BIN_EXE_bucketproof"))
}

fn json_check(dir: &Path, args: &[&str]) -> (Option<i32>, serde_json::Value, String) {
    let out = bucketproof_in(dir, &[&["check", "--json"], args].concat());
    let summary = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out.status.code(), summary, text(&out.stderr))
}

#[test]
fn the_core_behind_the_protocol_passes_the_whole_gate_as_in_process() {
    let (code, in_process, _) = json_check(&workspace(), &[]);
    assert_eq!(code, Some(0));
    let (code, exec, stderr) = json_check(&workspace(), &["--subject", &served("core")]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(exec["runs"], in_process["runs"]);
    assert_eq!(exec["failures"], 0);
    // Step for step the same events as in process: the runs saw the same decisions.
    for (a, b) in exec["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .zip(in_process["scenarios"].as_array().unwrap())
    {
        for (x, y) in a["runs"]
            .as_array()
            .unwrap()
            .iter()
            .zip(b["runs"].as_array().unwrap())
        {
            assert_eq!(x["events"], y["events"], "{}", a["scenario"]);
            assert_eq!(x["profile"], "exact");
        }
    }
}

#[test]
fn a_planted_bug_behind_the_protocol_is_caught_small_and_replays_through_the_recorded_command() {
    let dir = scratch("exec-replay");
    let reports = dir.join("reports");
    let reports = reports.to_str().unwrap();
    let subject = served("mutant:charge-denied");
    let out = bucketproof(&[
        "check",
        "scenarios/repeated-denials.toml",
        "--subject",
        &subject,
        "--reports",
        reports,
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let failures: Vec<PathBuf> = std::fs::read_dir(dir.join("reports/failures"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(!failures.is_empty());
    for file in &failures {
        let counterexample: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
        assert!(
            counterexample["ops"].as_array().unwrap().len() <= 6,
            "{counterexample}"
        );
        assert_eq!(counterexample["exec"]["command"]["args"][0], "serve");
        // Replayed from another directory: the file alone says what to start.
        let replay = bucketproof_in(&dir, &["replay", file.to_str().unwrap()]);
        let all = text(&replay.stdout);
        assert_eq!(
            replay.status.code(),
            Some(1),
            "{all}{}",
            text(&replay.stderr)
        );
        assert!(all.contains("reproduced"), "{all}");
    }
}

fn subject_file(served: &str, profile: &str) -> String {
    format!(
        "command = {:?}\nargs = [\"serve\", {served:?}]\nprofile = {profile}\n",
        env!("CARGO_BIN_EXE_bucketproof")
    )
}

#[test]
fn the_safety_profile_passes_a_safe_inexact_limiter_that_the_exact_profile_fails() {
    // Refills whole tokens only: never more than the spec, so safe, but not bit-identical.
    let scenarios = [
        "exact-refill.toml",
        "repeated-denials.toml",
        "rollback.toml",
    ];
    let exact = project(
        "exec-exact",
        &scenarios,
        &subject_file("mutant:whole-token-refill", "\"exact\""),
    );
    let (code, _, stderr) = json_check(&exact, &["--subject", "mine"]);
    assert_eq!(code, Some(1), "{stderr}");
    let safety = project(
        "exec-safety",
        &scenarios,
        &subject_file("mutant:whole-token-refill", "{ name = \"safety\" }"),
    );
    let (code, summary, stderr) = json_check(&safety, &["--subject", "mine"]);
    assert_eq!(code, Some(0), "{stderr}{summary}");
    let run = &summary["scenarios"][0]["runs"][0];
    assert_eq!(run["profile"], "safety");
    // The distance from the model is measured, not a verdict.
    assert!(
        run["divergence"]["under_admissions"].as_u64().unwrap() > 0,
        "{run}"
    );
    let line = bucketproof_in(&safety, &["check", "--subject", "mine"]);
    assert!(
        text(&line.stdout).contains("profile safety"),
        "{}",
        text(&line.stdout)
    );
    let listed = text(&bucketproof_in(&safety, &["list"]).stdout);
    assert!(
        listed.contains("mine") && listed.contains("mine.toml"),
        "{listed}"
    );
}

#[test]
fn the_safety_profile_catches_overselling_and_an_early_retry_after() {
    for (mutant, scenario, oracle) in [
        (
            "mutant:no-capacity-clamp",
            "long-idle.toml",
            "arrival-curve",
        ),
        (
            "mutant:retry-floor",
            "attack-evict-full.toml",
            "retry-after",
        ),
    ] {
        let dir = project(
            "exec-safety-bugs",
            &[scenario],
            &subject_file(mutant, "\"safety\""),
        );
        let out = bucketproof_in(&dir, &["check", "--subject", "mine"]);
        let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(1), "{mutant}: {all}");
        assert!(
            all.contains(&format!("[{oracle}]")) || all.contains("[invariant]"),
            "{mutant}: {all}"
        );
    }
}

#[test]
fn the_state_machine_runs_on_an_exec_subject_the_same_way() {
    let mut setup = Setup::new(ConfigSpec::new(4, "3/2s"));
    setup.dedupe_window_ns = 5_000_000_000;
    setup.dedupe_per_key = 2;
    setup.max_keys = 1 << 10;
    setup.policy = PolicySpec::EvictFull;
    let mut options = Options::new(setup);
    options.cases = 24;
    let exec = ExecSubjects::new(workspace());
    for (subject, passes) in [("core", true), ("mutant:charge-denied", false)] {
        let name = served(subject);
        let build = |setup: &Setup| -> Result<Box<dyn Subject>, SubjectError> {
            let spec = exec
                .spec(&name)
                .expect("an exec name")
                .map_err(|e| SubjectError::Build(e.to_string()))?;
            Ok(Box::new(exec.build_spec(&name, &spec, setup)?))
        };
        let outcome = state_machine::run(&build, &options).unwrap();
        assert_eq!(outcome.passed(), passes, "{subject}: {outcome}");
    }
}

/// A subject that says `hello` correctly and then does what `then` says (a shell snippet).
fn greets_then(then: &str) -> String {
    let hello = r#"{"id":0,"protocol":1,"name":"sh","version":"0","capabilities":{"reconfigure":false,"forget":false,"sweep":false,"inspect":false,"would_allow":false,"request_ids":false,"evicts":false,"batch":1,"bandwidths":1},"profile":{"name":"exact"}}"#;
    format!("read l; echo '{hello}'; {then}")
}

#[test]
fn a_broken_child_is_a_harness_error_that_says_what_happened() {
    let cases: Vec<(String, &str)> = vec![
        ("echo dying words >&2; exit 3".into(), "dying words"),
        ("echo dying words >&2; exit 3".into(), "exit status: 3"),
        ("read l; echo not-json".into(), "not a reply"),
        (
            r#"read l; echo '{"id":0,"protocol":1,"name":"x","version":"0","capabilities":{},"profile":{"name":"exact"}}'"#.into(),
            "not a reply",
        ),
        (r#"read l; echo '{"id":3,"ok":true}'"#.into(), "out of order"),
        (greets_then(r#"read l; echo '{"id":1,"ok":true,"typo":1}'"#), "unknown field"),
        (greets_then(r#"read l; echo '{"id":1,"allowed":true}'"#), "has no \"ok\""),
        (
            greets_then(r#"read l; echo '{"id":1,"ok":true}'; read l; echo '{"id":2,"allowed":true,"remaining":"1/0","retry_after_ns":null}'"#),
            "is not an amount",
        ),
        (
            r#"read l; echo '{"id":0,"protocol":9,"name":"x","version":"0","capabilities":{"reconfigure":false,"forget":false,"sweep":false,"inspect":false,"would_allow":false,"request_ids":false,"evicts":false,"batch":1,"bandwidths":1},"profile":{"name":"exact"}}'"#.into(),
            "chose protocol 9",
        ),
        (greets_then("exit 0"), "exit status: 0"),
    ];
    for (script, expected) in cases {
        let (code, all) = check_through_sh(&script);
        assert_eq!(code, Some(2), "{script}: {all}");
        assert!(
            all.contains(expected),
            "{script}: expected {expected:?} in {all}"
        );
        assert!(all.contains("broke the protocol"), "{all}");
    }
    // Silence past the per-op timeout of a subject file.
    let dir = project(
        "exec-timeout",
        &["exact-refill.toml"],
        "command = \"sh\"\nargs = [\"-c\", \"sleep 5\"]\ntimeout = \"200ms\"\n",
    );
    let out = bucketproof_in(&dir, &["check", "--subject", "mine"]);
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(all.contains("within 200ms"), "{all}");
    // A command that does not exist.
    let out = bucketproof(&[
        "check",
        "scenarios/exact-refill.toml",
        "--subject",
        "exec:no-such-program-here",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(all.contains("cannot start subject"), "{all}");
}

/// `bucketproof check` of `scenarios/exact-refill.toml` through `sh -c script`: its exit code and
/// all it printed.
fn check_through_sh(script: &str) -> (Option<i32>, String) {
    let subject = format!("exec:sh -c {}", shell_quote(script));
    let out = bucketproof(&[
        "check",
        "scenarios/exact-refill.toml",
        "--subject",
        &subject,
    ]);
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    (out.status.code(), all)
}

fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

#[test]
fn a_setup_the_child_refuses_is_skipped_with_the_childs_own_reason() {
    let script = greets_then(
        r#"read l; echo '{"id":1,"error":{"kind":"unsupported","message":"no key bound here"}}'"#,
    );
    let (_, all) = check_through_sh(&script);
    assert!(all.contains("skipped"), "{all}");
    // The reason line, not the subject's name: the command line holds the message too.
    assert!(
        all.contains("unsupported: this setup (the subject refused it: no key bound here)"),
        "{all}"
    );
}

#[test]
fn a_subject_that_cannot_run_is_one_error_before_any_run_saying_what_to_run() {
    let dir = scratch("not-ready");
    std::fs::write(
        dir.join("unbuilt.toml"),
        "command = \"build/my-limiter\"\nprepare = \"make my-limiter\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("uninstalled.toml"),
        "command = \"sh\"\nneeds = [\"node_modules/pkg\"]\nprepare = \"npm ci\"\n",
    )
    .unwrap();
    let cases = [
        ("exec:", "no command after \"exec:\""),
        (
            "exec:no-such-program-here",
            "cannot start subject no-such-program-here",
        ),
        ("exec:sh -c 'echo broken >&2; exit 3'", "lines:\n    broken"),
        (
            "./unbuilt.toml",
            "build/my-limiter is missing (in directory .); run `make my-limiter` first",
        ),
        (
            "./uninstalled.toml",
            "node_modules/pkg is missing (in directory .); run `npm ci` first",
        ),
        ("./absent.toml", "./absent.toml: No such file"),
    ];
    for (subject, expected) in cases {
        let out = bucketproof_in(&dir, &["check", "--subject", subject]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{subject}: {stderr}");
        // Once, before any run: no run line, no summary.
        assert_eq!(stderr.matches(expected).count(), 1, "{subject}: {stderr}");
        assert!(
            stderr.contains(&format!("subject {subject:?} cannot run")),
            "{subject}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{subject}: {}", text(&out.stdout));
    }
}

#[test]
fn subject_files_load_by_path_relative_or_absolute() {
    let dir = scratch("by-path");
    let file = dir.join("mine.toml");
    std::fs::write(&file, subject_file("core", "\"exact\"")).unwrap();
    let scenario = workspace().join("scenarios/repeated-denials.toml");
    let scenario = scenario.to_str().unwrap();
    for subject in ["./mine.toml", "mine.toml", file.to_str().unwrap()] {
        let out = bucketproof_in(&dir, &["check", scenario, "--subject", subject]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{subject}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stdout).contains("passed, 0 failed"),
            "{}",
            text(&out.stdout)
        );
    }
}

#[test]
fn list_says_what_a_subject_file_still_needs() {
    let dir = project(
        "list-ready",
        &["repeated-denials.toml"],
        "command = \"build/my-limiter\"\nprepare = \"make my-limiter\"\n",
    );
    let out = bucketproof_in(&dir, &["list"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let listed = text(&out.stdout);
    let line = listed
        .lines()
        .find(|l| l.trim_start().starts_with("mine "))
        .unwrap();
    assert!(
        line.ends_with(
            "(not ready: build/my-limiter is missing (in directory .); run `make my-limiter` first)"
        ),
        "{listed}"
    );
    let ready = listed
        .lines()
        .find(|l| l.trim_start().starts_with("core"))
        .unwrap();
    assert!(!ready.contains("not ready"), "{listed}");
}
