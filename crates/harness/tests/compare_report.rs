//! The float-versus-rational comparison: the exact core matches the model in every cell,
//! the float and governor subjects do not, and the committed report is what the code produces now.
//!
//! Regenerate the committed report with
//! `BUCKETPROOF_REGENERATE=1 cargo test -p bucketproof-harness --release --test compare_report`.

use std::path::PathBuf;
use std::sync::OnceLock;

use bucketproof_harness::compare::{self, CompareOptions, CompareReport, REPORT_STEM};

/// One run of the CI grid, shared by the tests of this binary (it is the expensive part).
fn report() -> &'static CompareReport {
    static REPORT: OnceLock<CompareReport> = OnceLock::new();
    REPORT.get_or_init(|| compare::run(&CompareOptions::ci()).expect("the CI grid runs"))
}

fn reports_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../reports")
}

#[test]
fn the_exact_core_matches_the_model_in_every_cell() {
    let report = report();
    assert_eq!(
        report.cells.len(),
        report.options.rates.len()
            * report.options.capacities.len()
            * report.options.horizons_ns.len()
    );
    for cell in &report.cells {
        let core = &cell.subjects[0];
        assert_eq!(core.subject, "core");
        assert!(cell.ops > 0, "an empty trace proves nothing: {cell:?}");
        assert_eq!(core.steps, cell.ops, "{cell:?}");
        assert_eq!(core.status, "pass", "{cell:?}");
        assert!(!core.diverged(), "{cell:?}");
        assert_eq!(core.max_token_error, 0.0);
    }
}

#[test]
fn floats_and_governor_diverge_and_someone_oversells() {
    let report = report();
    let diverging: u64 = ["float-textbook", "float-go", "governor"]
        .iter()
        .map(|s| {
            report
                .totals_of(s)
                .expect("subject ran")
                .decision_mismatches
        })
        .sum();
    assert!(
        diverging > 0,
        "no float or governor decision differs: {:?}",
        report.totals
    );
    let over: u64 = report.totals.iter().map(|t| t.over_admissions).sum();
    assert!(over > 0, "no over-admission anywhere: {:?}", report.totals);
    // governor's truncated emission interval (142 ns for 142.857 ns) oversells at 7,000,000/s.
    let fast = report
        .cells
        .iter()
        .filter(|c| c.rate.numer == 7_000_000)
        .flat_map(|c| c.subjects.iter().filter(|s| s.subject == "governor"))
        .map(|s| s.over_admissions)
        .sum::<u64>();
    assert!(fast > 0, "governor does not oversell at 7,000,000/s");
}

#[test]
fn the_committed_report_is_fresh() {
    let files = compare::render_files(report()).expect("renders");
    let dir = reports_dir();
    if std::env::var_os("BUCKETPROOF_REGENERATE").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        for (name, contents) in &files {
            std::fs::write(dir.join(name), contents).unwrap();
        }
    }
    for (name, contents) in &files {
        let path = dir.join(name);
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == *contents,
            "{} is stale or missing; regenerate with `BUCKETPROOF_REGENERATE=1 cargo test -p \
             bucketproof-harness --release --test compare_report`",
            path.display()
        );
    }
    assert!(
        files
            .iter()
            .any(|(n, _)| *n == format!("{REPORT_STEM}.svg"))
    );
}

/// The scenario files of the two Go issues: they pass on the exact core through the scenario engine,
/// and fail on the Go-style float subjects (with an under-admission: a request exact arithmetic admits
/// is denied).
#[test]
fn the_go_scenario_files_pass_on_the_core_and_fail_on_go() {
    use bucketproof_check::runner::{RunOptions, run_trace};
    use bucketproof_harness::Registry;
    use bucketproof_harness::engine::{Engine, EngineOptions, Status};
    use bucketproof_scenario::Scenario;

    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    let registry = Registry::default();
    // The float failures are expected: a small shrink budget keeps the test quick.
    let engine = Engine::new(
        &registry,
        EngineOptions {
            shrink_budget: bucketproof_check::shrink::ShrinkBudget::runs(20),
            ..EngineOptions::default()
        },
    );
    for (file, go) in [
        ("go-34861.toml", "float-go-2019"),
        ("go-46579.toml", "float-go"),
    ] {
        let scenario = Scenario::load(&dir.join(file)).expect("the scenario loads");
        let mut under = 0;
        for &seed in &scenario.seeds {
            let core = engine.run(&scenario, seed, "core");
            assert_eq!(
                core.status,
                Status::Pass,
                "{file} seed {seed}: {:?}",
                core.status
            );
            let float = engine.run(&scenario, seed, go);
            assert!(
                float.status.is_failure(),
                "{file} seed {seed} passes on {go}"
            );
            let mut subject = registry.build(go, &scenario.setup()).unwrap();
            let options = RunOptions {
                stop_at_first: false,
                ..RunOptions::default()
            };
            let ops = scenario.expand(seed);
            let report = run_trace(&scenario.setup(), ops, subject.as_mut(), &options).unwrap();
            under += report.divergence.under_admissions;
        }
        assert!(under > 0, "{file}: {go} never denies what the model admits");
    }
}
