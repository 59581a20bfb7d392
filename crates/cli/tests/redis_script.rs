//! Redis script subjects (`redis-script:<file.toml>`, docs/redis-script.md) through the whole gate:
//! bucketproof's own exact integer bucket (`tests/fixtures/redis-script/bucket.lua`) passes under
//! the safety profile and each overselling copy of it is caught in at most 6 ops and replays; a
//! bucket that reads TIME passes through the time prelude; bad descriptions are refused with their
//! place; a script subject file shows in `list`; and the real peer (redis-rate's GCRA script, read
//! from the crate) runs, its verdicts being results, not assertions.
//!
//! Needs `REDIS_URL`; without it each test prints a loud SKIP line and passes, unless
//! `BUCKETPROOF_REQUIRE_REDIS=1` (CI), which turns the skip into a failure.

mod common;

use common::{bucketproof, bucketproof_in, scratch, text, workspace};

const FIXTURES: &str = "tests/fixtures/redis-script";

fn redis_available(test: &str) -> bool {
    let missing = std::env::var("REDIS_URL")
        .is_err()
        .then(|| "REDIS_URL is not set".to_owned());
    common::available(test, missing, "BUCKETPROOF_REQUIRE_REDIS")
}

fn subject(file: &str) -> String {
    format!("redis-script:{FIXTURES}/{file}")
}

/// The overselling bugs planted in copies of `bucket.lua`: (name, the correct text, its
/// replacement). One script, edited at test time, so every copy is the same bucket but for its bug.
const PLANTED: [(&str, &str, &str); 2] = [
    (
        "uncapped",
        "if gained >= full - credit then",
        "if false then -- PLANTED BUG: the refill is not capped at capacity",
    ),
    (
        "rollback",
        "if now > at then\n  local gained = now - at",
        "-- PLANTED BUG: a clock that runs back moves the cursor back, so the same time refills twice.\n\
         if now ~= at then\n  local gained = math.max(now - at, 0)",
    ),
];

/// Writes `bucket.lua` with `correct` replaced by `planted`, and its description, into `dir`; the
/// subject name.
fn planted_copy(dir: &std::path::Path, bug: &str, correct: &str, planted: &str) -> String {
    let fixtures = workspace().join(FIXTURES);
    let lua = std::fs::read_to_string(fixtures.join("bucket.lua")).unwrap();
    assert!(
        lua.contains(correct),
        "bucket.lua no longer has {correct:?}"
    );
    std::fs::write(
        dir.join(format!("bucket-{bug}.lua")),
        lua.replace(correct, planted),
    )
    .unwrap();
    let description = std::fs::read_to_string(fixtures.join("bucket.toml")).unwrap();
    let path = dir.join(format!("bucket-{bug}.toml"));
    let source = format!("\"bucket-{bug}.lua\"");
    std::fs::write(&path, description.replace("\"bucket.lua\"", &source)).unwrap();
    format!("redis-script:{}", path.display())
}

fn summary(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_default()
}

/// Every run of every scenario.
fn runs(summary: &serde_json::Value) -> Vec<serde_json::Value> {
    let scenarios = summary["scenarios"].as_array().cloned().unwrap_or_default();
    scenarios
        .iter()
        .flat_map(|scenario| scenario["runs"].as_array().cloned().unwrap_or_default())
        .collect()
}

fn count(summary: &serde_json::Value, status: &str) -> usize {
    runs(summary)
        .iter()
        .filter(|run| run["status"] == status)
        .count()
}

#[test]
fn our_exact_integer_bucket_and_the_time_reading_one_pass_the_whole_gate() {
    if !redis_available("our_exact_integer_bucket_and_the_time_reading_one_pass_the_whole_gate") {
        return;
    }
    for file in ["bucket.toml", "server.toml"] {
        let subject = subject(file);
        let out = bucketproof(&["check", "--json", "--subject", &subject]);
        let summary = summary(&out);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{subject}: {}",
            text(&out.stderr)
        );
        assert_eq!(summary["failures"], 0);
        assert!(count(&summary, "pass") >= 10, "{subject}: too few passes");
        // Every run that ran was checked under the profile of the description.
        for run in runs(&summary) {
            if run["status"] == "pass" {
                assert_eq!(run["profile"], "safety", "{run}");
            }
        }
    }
}

#[test]
fn each_overselling_copy_is_caught_small_and_replays() {
    if !redis_available("each_overselling_copy_is_caught_small_and_replays") {
        return;
    }
    for (bug, correct, planted) in PLANTED {
        let dir = scratch(&format!("script-{bug}-copy"));
        let subject = planted_copy(&dir, bug, correct, planted);
        common::assert_caught_small(None, &subject, &format!("script-{bug}"));
    }
}

/// A description in a scratch directory, checked against one scenario; its output.
fn check_description(name: &str, description: &str) -> std::process::Output {
    let dir = scratch(&format!("script-bad-{name}"));
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, description).unwrap();
    let lua = workspace().join(FIXTURES).join("bucket.lua");
    std::fs::copy(lua, dir.join("bucket.lua")).unwrap();
    let subject = format!("redis-script:{}", path.display());
    bucketproof(&[
        "check",
        "scenarios/initial-full-bucket.toml",
        "--subject",
        &subject,
        "--reports",
        dir.join("reports").to_str().unwrap(),
    ])
}

#[test]
fn bad_descriptions_are_harness_errors_that_say_what_is_wrong() {
    if !redis_available("bad_descriptions_are_harness_errors_that_say_what_is_wrong") {
        return;
    }
    let good = std::fs::read_to_string(workspace().join(FIXTURES).join("bucket.toml")).unwrap();
    let cases = [
        (
            "unknown-field",
            good.replace("time = ", "clock = "),
            "unknown field `clock`",
        ),
        (
            "missing-source",
            good.replace("\"bucket.lua\"", "\"nowhere.lua\""),
            "cannot read the script",
        ),
        (
            "no-match",
            good.replace(
                "\"bucket.lua\"",
                "{ crate = \"redis-rate\", file = \"src/scripts.rs\", between = [\"r#\\\"\", \"\\\"#\"], containing = \"no such text\" }",
            ),
            "no text between",
        ),
        (
            "no-crate",
            good.replace(
                "\"bucket.lua\"",
                "{ crate = \"no-such-crate\", file = \"src/lib.rs\" }",
            ),
            "is not in cargo metadata",
        ),
        (
            "bad-index",
            good.replace("remaining = { index = 1 }", "remaining = { index = 9 }"),
            "index 9",
        ),
    ];
    for (name, description, needle) in cases {
        let out = check_description(name, &description);
        let shown = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(2), "{name}: {shown}");
        assert!(shown.contains(needle), "{name}: {needle:?} in {shown}");
        assert!(shown.contains(&format!("{name}.toml")), "{name}: {shown}");
    }
}

#[test]
fn a_script_subject_file_is_a_named_subject_in_list_and_check() {
    if !redis_available("a_script_subject_file_is_a_named_subject_in_list_and_check") {
        return;
    }
    let dir = scratch("script-subject-file");
    std::fs::create_dir_all(dir.join("scenarios")).unwrap();
    std::fs::create_dir_all(dir.join("subjects")).unwrap();
    std::fs::copy(
        workspace().join("scenarios/initial-full-bucket.toml"),
        dir.join("scenarios/initial-full-bucket.toml"),
    )
    .unwrap();
    let description = std::fs::read_to_string(workspace().join(FIXTURES).join("bucket.toml"))
        .unwrap()
        .replace("\"bucket.lua\"", "\"../bucket.lua\"");
    std::fs::write(dir.join("subjects/own-bucket.toml"), description).unwrap();
    std::fs::copy(
        workspace().join(FIXTURES).join("bucket.lua"),
        dir.join("bucket.lua"),
    )
    .unwrap();
    let list = bucketproof_in(&dir, &["list"]);
    assert_eq!(list.status.code(), Some(0), "{}", text(&list.stderr));
    assert!(
        text(&list.stdout).contains("own-bucket"),
        "{}",
        text(&list.stdout)
    );
    let out = bucketproof_in(&dir, &["check", "--json", "--subject", "own-bucket"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(count(&summary(&out), "pass"), 2, "{}", summary(&out));
    // A typo in a script subject file stops everything, with its place.
    std::fs::write(
        dir.join("subjects/typo.toml"),
        "[script]\nsource = \"x.lua\"\ntime = \"argument\"\nkeyz = []\n",
    )
    .unwrap();
    let list = bucketproof_in(&dir, &["list"]);
    assert_eq!(list.status.code(), Some(2));
    assert!(
        text(&list.stderr).contains("typo.toml:4:1"),
        "{}",
        text(&list.stderr)
    );
}

/// The real peer: redis-rate's GCRA script, read from the crate. Its verdicts are results
/// (reported in reports/peers.md), so this only holds what must be true of any run: the script
/// was found and loaded, some scenarios ran to a verdict, no run is a harness error, and every
/// failure of the subject itself is the script's own (a Redis error it raised).
#[test]
fn the_redis_gcra_peer_runs_from_its_crate() {
    if !redis_available("the_redis_gcra_peer_runs_from_its_crate") {
        return;
    }
    let out = bucketproof(&[
        "check",
        "--json",
        "--subject",
        "redis-script:peers/redis-gcra.toml",
        "--reports",
        scratch("script-gcra").to_str().unwrap(),
    ]);
    let summary = summary(&out);
    assert!(
        matches!(out.status.code(), Some(0..=2)),
        "{}",
        text(&out.stderr)
    );
    assert!(
        count(&summary, "pass") + count(&summary, "fail") > 0,
        "{summary}"
    );
    for run in runs(&summary) {
        assert_ne!(run["status"], "error", "{run}");
        let message = run.to_string();
        if message.contains("the subject failed") {
            assert!(message.contains("the script raised"), "{message}");
        }
    }
}

#[test]
fn a_script_that_raises_fails_and_an_unreachable_redis_is_a_harness_error() {
    if !redis_available("a_script_that_raises_fails_and_an_unreachable_redis_is_a_harness_error") {
        return;
    }
    let good = std::fs::read_to_string(workspace().join(FIXTURES).join("bucket.toml")).unwrap();
    let dir = scratch("script-raises");
    std::fs::write(
        dir.join("raises.lua"),
        "error('the limiter is out of order')\n",
    )
    .unwrap();
    let path = dir.join("raises.toml");
    std::fs::write(&path, good.replace("\"bucket.lua\"", "\"raises.lua\"")).unwrap();
    let subject = format!("redis-script:{}", path.display());
    let reports = dir.join("reports");
    let args = [
        "check",
        "scenarios/initial-full-bucket.toml",
        "--subject",
        &subject,
        "--reports",
        reports.to_str().unwrap(),
    ];
    let out = bucketproof(&args);
    let shown = format!("{}{}", text(&out.stdout), text(&out.stderr));
    // A limiter that raises instead of deciding fails its callers: a verdict (exit 1), not a
    // harness error, under the safety profile too.
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(shown.contains("the limiter is out of order"), "{shown}");
    assert!(
        shown.contains("the subject failed on a valid request"),
        "{shown}"
    );
    // Nothing listens on port 1.
    let out = common::command(&workspace())
        .args(args)
        .env("REDIS_URL", "redis://127.0.0.1:1/")
        .output()
        .unwrap();
    let shown = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(2), "{shown}");
    assert!(
        shown.contains("cannot reach Redis at REDIS_URL=redis://127.0.0.1:1/"),
        "{shown}"
    );
}
