//! The gate as a library, the way a user's own `#[test]` calls it with its own registry: here the
//! registry adds the deliberately broken test fixture, which the shipped binary does not register.
//! A broken subject fails the gate with a counterexample of at most `MAX_COUNTEREXAMPLE_OPS` ops,
//! written under the reports directory where its replay command points, that replays; the JUnit
//! file and the counts agree; a run where every subject skipped is not a pass.

use std::path::{Path, PathBuf};

use bucketproof_check::subjects::broken::{BrokenSubjects, CHARGES_DENIALS};
use bucketproof_harness::Registry;
use bucketproof_harness::counterexample::{
    Counterexample, MAX_COUNTEREXAMPLE_OPS, Replayed, replay,
};
use bucketproof_harness::gate::{Counts, Gate, GateError, GateOptions, Saved, Verdict};
use bucketproof_scenario::Scenario;

const SCENARIO: &str = r#"
seeds = [1, 2]
length = 400
reach = ["allowed", "denied"]
[setup]
capacity = 3
rate = "2/s"
[keys]
count = 3
[arrivals]
gap = "100ms"
"#;

fn scenario() -> Scenario {
    Scenario::parse(SCENARIO, Path::new("gate-test.toml")).unwrap()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("bucketproof-gate-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Records what the gate reported while running.
#[derive(Default)]
struct Seen {
    planned: usize,
    saved: Vec<Saved>,
}

impl bucketproof_harness::gate::Observer for Seen {
    fn planned(&mut self, runs: usize) {
        self.planned = runs;
    }
    fn finished(&mut self, _: &bucketproof_harness::engine::RunResult, saved: Option<&Saved>) {
        self.saved.extend(saved.cloned());
    }
}

#[test]
fn a_broken_subject_fails_the_gate_with_a_small_counterexample_that_replays() {
    let registry = Registry::default().with(BrokenSubjects);
    let dir = scratch("broken");
    let mut options = GateOptions::new(&dir);
    options.subjects = vec!["core".into(), CHARGES_DENIALS.into()];
    options.junit = Some(dir.join("junit.xml"));
    let gate = Gate::new(&registry, options).unwrap();
    let mut seen = Seen::default();
    let outcome = gate.check(&[scenario()], &mut seen).unwrap();

    assert_eq!(outcome.verdict(), Verdict::Fail);
    assert_eq!(outcome.verdict().exit_code(), 1);
    assert_eq!(
        *outcome.counts(),
        Counts {
            runs: 4,
            passed: 2,
            failed: 2,
            errors: 0,
            skipped: 0
        }
    );
    assert_eq!(seen.planned, 4);
    assert_eq!(seen.saved.len(), 2);

    let file = dir
        .join("failures")
        .join("gate-test-seed1-broken-charges-denials.json");
    assert_eq!(seen.saved[0], Saved::Written(file.clone()));
    let counterexample: Counterexample =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert!(
        counterexample.ops.len() <= MAX_COUNTEREXAMPLE_OPS,
        "{:?}",
        counterexample.ops
    );
    assert_eq!(
        counterexample.replay,
        format!("bucketproof replay {}", file.display())
    );
    assert_eq!(
        replay(&registry, &counterexample),
        Replayed::Reproduced(counterexample.violation.clone())
    );

    let xml = std::fs::read_to_string(dir.join("junit.xml")).unwrap();
    assert!(
        xml.contains("tests=\"4\" failures=\"2\" errors=\"0\" skipped=\"0\""),
        "{xml}"
    );
    assert_eq!(xml.matches("<failure ").count(), 2, "{xml}");
    let summary: serde_json::Value = serde_json::from_str(&outcome.to_json()).unwrap();
    assert_eq!(summary["failures"], 2);
    assert_eq!(summary["passed"], false);
    assert!(
        outcome
            .summary_line()
            .contains("4 runs: 2 passed, 2 failed, 0 errors, 0 skipped")
    );
}

#[test]
fn a_gate_where_every_subject_skipped_checked_nothing() {
    let registry = Registry::default();
    let scenario = Scenario::parse(
        &format!("{SCENARIO}[request_ids]\nprobability = 1.0\n"),
        Path::new("ids.toml"),
    )
    .unwrap();
    let mut options = GateOptions::new(scratch("skips"));
    options.subjects = vec!["float-go".into()];
    let outcome = Gate::new(&registry, options.clone())
        .unwrap()
        .check(std::slice::from_ref(&scenario), &mut ())
        .unwrap();
    assert_eq!(outcome.counts().skipped, 2);
    assert_eq!(outcome.verdict(), Verdict::NothingChecked);
    assert_ne!(outcome.verdict().exit_code(), 0);
    assert!(outcome.summary_line().contains("nothing was checked"));

    options.allow_skips = true;
    let outcome = Gate::new(&registry, options)
        .unwrap()
        .check(&[scenario], &mut ())
        .unwrap();
    assert_eq!(outcome.verdict(), Verdict::Pass);
}

#[test]
fn an_unknown_subject_is_refused_before_any_run() {
    let registry = Registry::default();
    let mut options = GateOptions::new(scratch("unknown"));
    options.subjects = vec![CHARGES_DENIALS.into()];
    let mut seen = Seen::default();
    let error = Gate::new(&registry, options)
        .unwrap()
        .check(&[scenario()], &mut seen)
        .unwrap_err();
    assert!(matches!(error, GateError::UnknownSubject { .. }), "{error}");
    assert_eq!(seen.planned, 0);
}
