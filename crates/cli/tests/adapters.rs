//! The reference adapters in other languages (`adapters/python`, `adapters/node`) through the whole
//! gate: each passes every scenario, seed and oracle under the exact profile, and each of its planted
//! classic mistakes (`--bug NAME`) is caught with a shrunk counterexample of at most 6 ops that
//! replays from its file through the recorded command.
//!
//! A limiter that reports no balance (a fixture over the Python adapter) passes when correct and
//! fails on the arrival curve when it oversells.
//!
//! The millitoken bucket (`adapters/python/millitokens.py`), safe but inexact, passes under the
//! safety profile it declares, cannot be checked as exact, and its overselling bugs are caught.
//!
//! An adapter whose interpreter is missing is skipped with a loud line, and
//! `BUCKETPROOF_REQUIRE_ADAPTERS=1` (CI sets it) turns that skip into a failure.

mod common;

use common::{bucketproof, bucketproof_in, scratch, text};

/// `(interpreter, script, planted bugs)` of each adapter.
const ADAPTERS: [(&str, &str, &[&str]); 2] = [
    (
        "python3",
        "adapters/python/bucket.py",
        &[
            "strict-greater",
            "charge-denied",
            "charge-covering",
            "refund-twice",
        ],
    ),
    (
        "node",
        "adapters/node/bucket.js",
        &[
            "strict-greater",
            "charge-denied",
            "charge-covering",
            "refund-twice",
        ],
    ),
];

/// True if `program` runs here; else a loud skip, or a failure under `BUCKETPROOF_REQUIRE_ADAPTERS=1`.
fn runs(program: &str) -> bool {
    let missing = (!common::program_runs(program)).then(|| format!("{program} is not installed"));
    common::available("adapter tests", missing, "BUCKETPROOF_REQUIRE_ADAPTERS")
}

/// `bucketproof check --json --subject SUBJECT` exits 0 with no failure; its summary.
fn passes_the_gate(subject: &str) -> serde_json::Value {
    let out = bucketproof(&["check", "--json", "--subject", subject]);
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{subject}: {}",
        text(&out.stderr)
    );
    assert_eq!(summary["failures"], 0, "{subject}: {summary}");
    summary
}

#[test]
fn each_reference_adapter_passes_the_whole_gate() {
    for (program, script, _) in ADAPTERS {
        if !runs(program) {
            continue;
        }
        let subject = format!("exec:{program} {script}");
        let summary = passes_the_gate(&subject);
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
            let subject = format!("exec:{program} {script} --bug {bug}");
            // Replayed from the workspace, where the recorded command's script path resolves.
            common::assert_caught_small(None, &subject, &format!("adapter-{program}-{bug}"));
        }
    }
}

#[test]
fn a_safe_inexact_limiter_passes_the_safety_profile_and_its_overselling_is_caught() {
    if !runs("python3") {
        return;
    }
    let out = bucketproof(&["check", "--json", "--subject", "python-millitokens"]);
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(summary["failures"], 0);
    let runs: Vec<&serde_json::Value> = summary["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["runs"].as_array().unwrap())
        .filter(|run| run["status"] == "pass")
        .collect();
    assert!(runs.len() >= 20, "{summary}");
    assert!(runs.iter().all(|run| run["profile"] == "safety"));
    // It rounds, so the model's distance is there, measured and reported, not a failure.
    assert!(
        runs.iter()
            .any(|run| run["divergence"]["value_mismatches"].as_u64() > Some(0)),
        "{summary}"
    );
    for bug in ["no-clamp", "ceil-refill"] {
        let subject = format!("exec:python3 adapters/python/millitokens.py --bug {bug}");
        let reports = scratch(&format!("millitokens-{bug}")).join("reports");
        let out = bucketproof(&[
            "check",
            "--subject",
            &subject,
            "--reports",
            reports.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(1), "{bug}: {}", text(&out.stderr));
    }
    // Asking the exact profile of a subject that declares safety is an error, not a verdict.
    let script = common::workspace().join("adapters/python/millitokens.py");
    let dir = common::project(
        "millitokens-exact",
        &["exact-refill.toml"],
        &format!("command = \"python3\"\nargs = [{script:?}]\nprofile = \"exact\"\n"),
    );
    let out = bucketproof_in(&dir, &["check", "--subject", "mine"]);
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(
        all.contains("declares profile safety; it cannot be checked as exact"),
        "{all}"
    );
}

/// A limiter that exposes no balance (`tests/fixtures/no_remaining.py`: bucket.py with every reply's
/// `remaining` taken away) is judged on what it does report: correct, it passes the whole gate;
/// overselling and showing no state either (`--no-inspect`), it fails on the arrival curve, which
/// never reads a balance, under the safety profile too, where no model compares its decisions.
#[test]
fn a_limiter_without_a_balance_passes_when_correct_and_fails_on_the_arrival_curve_when_it_oversells()
 {
    if !runs("python3") {
        return;
    }
    let fixture = common::workspace().join("crates/cli/tests/fixtures/no_remaining.py");
    let subject = format!("exec:python3 {}", fixture.display());
    passes_the_gate(&subject);
    let dir = common::project(
        "no-remaining-no-clamp",
        &["long-idle.toml"],
        &format!(
            "command = \"python3\"\nargs = [{fixture:?}, \"--no-inspect\", \"--bug\", \"no-clamp\"]\n\
             profile = \"safety\"\n"
        ),
    );
    let out = bucketproof_in(&dir, &["check", "--subject", "mine"]);
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{all}");
    assert!(all.contains("[arrival-curve]"), "{all}");
}

/// A correct limiter that evicts but shows no state (`--no-inspect`) cannot be followed under
/// `EvictKeepingDeficit` at a key bound (a recreated bucket may start owing, and only the state shown
/// says how much): those runs are skipped, naming why, instead of failing a correct subject.
#[test]
fn a_limiter_that_shows_no_state_is_skipped_under_evict_keeping_deficit_not_failed() {
    if !runs("python3") {
        return;
    }
    let fixture = common::workspace().join("crates/cli/tests/fixtures/no_remaining.py");
    let subject = format!("exec:python3 {} --no-inspect", fixture.display());
    let out = bucketproof(&[
        "check",
        "scenarios/attack-evict-keeping-deficit.toml",
        "--allow-skips",
        "--subject",
        &subject,
    ]);
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{all}");
    assert!(all.contains("0 failed, 0 errors, 2 skipped"), "{all}");
    assert!(all.contains("shows no state (no inspect)"), "{all}");
}
