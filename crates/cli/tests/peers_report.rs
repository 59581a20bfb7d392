//! `bucketproof peers` end to end, on subjects of the shipped binary standing in for third-party
//! limiters: the report says what held and what did not with the shrunk counterexample, is the same
//! bytes on a second run, `--check` passes a fresh report and fails a stale one, and a peer that
//! cannot run is an error (exit 2) that writes nothing.

mod common;

use std::path::Path;

use common::{bucketproof, scratch, text};

const CATALOGUE: &str = r#"
[[peer]]
name = "the core"
subject = "core"
package = "bucketproof-limiter"
registry = "this workspace"
version = "0"
home = "crates/limiter"
what = "the exact core"
profile_why = "it is the reference"

[[peer]]
name = "a charged denial"
subject = "mutant:charge-denied"
package = "bucketproof-mutants"
registry = "this workspace"
version = "0"
home = "crates/mutants"
what = "a bucket that charges denials"
profile_why = "it claims exactness"
[[peer.note]]
properties = ["model"]
kind = "bug"
claims = ["clock-never-steps-back"]
text = "a denial takes tokens"
source = "crates/mutants"
"#;

fn catalogue(dir: &Path, text: &str) -> String {
    let path = dir.join("peers.toml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn the_report_names_what_held_and_what_did_not_and_is_reproducible() {
    let dir = scratch("peers-report");
    let file = catalogue(&dir, CATALOGUE);
    let reports = dir.display().to_string();
    let out = bucketproof(&["peers", "--catalogue", &file, "--reports", &reports]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let markdown = std::fs::read_to_string(dir.join("peers.md")).unwrap();
    let core_row = markdown
        .lines()
        .find(|l| l.starts_with("| [the core]"))
        .unwrap();
    // Nothing violated, and nothing vacuous: the core answers would_allow and takes request ids.
    assert!(core_row.ends_with("| none | none |"), "{core_row}");
    let mutant_row = markdown
        .lines()
        .find(|l| l.starts_with("| [a charged denial]"))
        .unwrap();
    assert!(mutant_row.contains("model ("), "{mutant_row}");
    assert!(
        markdown.contains("Bug: a denial takes tokens"),
        "{markdown}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("peers.json")).unwrap()).unwrap();
    let model = &json["peers"][1]["properties"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["property"] == "model")
        .unwrap()["state"];
    assert_eq!(model["state"], "violated");
    let ops = model["first"]["ops"].as_array().unwrap().len();
    assert!((1..=6).contains(&ops), "{ops} ops");

    let check = [
        "peers",
        "--catalogue",
        &file,
        "--reports",
        &reports,
        "--check",
    ];
    // Fresh: the same bytes again.
    let out = bucketproof(&check);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // Stale: any change is found.
    std::fs::write(
        dir.join("peers.md"),
        markdown.replace("the exact core", "edited"),
    )
    .unwrap();
    let out = bucketproof(&check);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("stale report"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_peer_that_cannot_run_is_an_error_and_nothing_is_written() {
    let dir = scratch("peers-broken");
    let broken = CATALOGUE.replace(
        "subject = \"core\"",
        "subject = \"exec:bucketproof-no-such-program-anywhere\"",
    );
    let file = catalogue(&dir, &broken);
    let out = bucketproof(&[
        "peers",
        "--catalogue",
        &file,
        "--reports",
        &dir.display().to_string(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("could not run the core"),
        "{}",
        text(&out.stderr)
    );
    assert!(!dir.join("peers.md").exists());
}

#[test]
fn a_bad_catalogue_is_refused_with_its_position() {
    let dir = scratch("peers-bad");
    let file = catalogue(&dir, &CATALOGUE.replace("home =", "homepage ="));
    let out = bucketproof(&["peers", "--catalogue", &file]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("unknown field `homepage`"),
        "{}",
        text(&out.stderr)
    );
}

/// The README shows the committed report's table (its links pointing into the report), so what a
/// reader sees first is what `bucketproof peers --check` holds CI to.
#[test]
fn the_readme_shows_the_committed_peers_table() {
    let report = std::fs::read_to_string(common::workspace().join("reports/peers.md")).unwrap();
    let table = report
        .split("\n\n")
        .find(|block| block.starts_with("| peer | version"))
        .expect("reports/peers.md has its table");
    let shown = table.replace("](#", "](reports/peers.md#");
    let readme = std::fs::read_to_string(common::workspace().join("README.md")).unwrap();
    assert!(
        readme.contains(&shown),
        "README.md's \"Does it find real bugs?\" table differs from reports/peers.md's; copy it:\n{shown}"
    );
}
