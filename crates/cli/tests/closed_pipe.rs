//! A closed stdout (`bucketproof run exact-refill | head -1`) ends every subcommand quietly: no
//! panic message, never exit 101, the exit code the run would have had, and the files the run writes
//! (JUnit, reports) still written. The pipe's read end is closed before the child starts, so every
//! write to stdout fails with `BrokenPipe` no matter how fast the child is.

mod common;

use std::path::Path;
use std::process::{Output, Stdio};

use common::{FAILING_SCENARIO, bucketproof, command, failing_check, scratch, text, workspace};

/// Runs `args` with stdout a pipe nobody reads; stderr captured, or closed too with `close_stderr`.
fn with_closed_stdout(args: &[&str], close_stderr: bool) -> Output {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let mut command = command(&workspace());
    command.args(args).stdout(writer).stdin(Stdio::null());
    if close_stderr {
        let (reader, writer) = std::io::pipe().expect("a pipe");
        drop(reader);
        command.stderr(writer);
    } else {
        command.stderr(Stdio::piped());
    }
    command
        .spawn()
        .expect("the binary starts")
        .wait_with_output()
        .expect("the binary ends")
}

/// Every subcommand, with the exit code it has when its output is read.
fn cases(dir: &Path) -> Vec<(Vec<String>, i32)> {
    // A counterexample to replay, written by a normal run.
    let reports = dir.join("failing");
    let out = bucketproof(&failing_check(FAILING_SCENARIO, reports.to_str()));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let counterexample = reports
        .join("failures")
        .join("repeated-denials-seed1-mutant-charge-denied.json");
    assert!(counterexample.is_file(), "{}", text(&out.stderr));
    let dir = dir.display();
    let cases: [(&[&str], i32); 8] = [
        (&["run", "exact-refill"], 0),
        (&["list"], 0),
        (&["check", "--junit", &format!("{dir}/junit.xml")], 0),
        (&["check", "--json"], 0),
        (&["replay", counterexample.to_str().unwrap()], 1),
        (
            &[
                "compare",
                "--rates",
                "10/13s",
                "--horizon",
                "1s",
                "--reports",
                &format!("{dir}/compare"),
            ],
            0,
        ),
        (&["mutants", "--report", &format!("{dir}/mutants.md")], 0),
        (&["--help"], 0),
    ];
    cases
        .iter()
        .map(|(args, code)| (args.iter().map(|a| a.to_string()).collect(), *code))
        .collect()
}

#[test]
fn every_subcommand_ends_quietly_on_a_closed_stdout_and_keeps_its_files() {
    let dir = scratch("closed-pipe");
    let mut wrong = Vec::new();
    for (args, code) in cases(&dir) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = with_closed_stdout(&args, false);
        let stderr = text(&out.stderr);
        if out.status.code() != Some(code) || stderr.contains("panicked") {
            wrong.push(format!(
                "bucketproof {}: exit {:?} (want {code})\n{stderr}",
                args.join(" "),
                out.status.code()
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    for file in ["junit.xml", "mutants.md", "compare/float-vs-rational.md"] {
        assert!(dir.join(file).is_file(), "{file} not written");
    }
}

#[test]
fn every_subcommand_ends_quietly_when_stdout_and_stderr_are_both_closed() {
    let dir = scratch("closed-pipes");
    for (args, code) in cases(&dir) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = with_closed_stdout(&args, true);
        assert_eq!(
            out.status.code(),
            Some(code),
            "bucketproof {}",
            args.join(" ")
        );
    }
}
