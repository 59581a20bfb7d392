//! Every note of `peers/peers.toml` against the committed report (`reports/peers.json`, kept fresh
//! by `bucketproof peers --check`): each claim a note states must be borne out by the shrunk
//! counterexample it sits beside (`peers::claims`), so a note cannot say "the clock stepped back"
//! beside a counterexample whose clock never did. Needs no peer installed: it reads the two files.

use std::path::PathBuf;

use bucketproof_harness::peers::Catalogue;
use bucketproof_harness::peers::claims;
use bucketproof_harness::peers::findings::Found;

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn every_note_matches_the_counterexample_beside_it() {
    let catalogue = Catalogue::load(&workspace().join("peers/peers.toml")).unwrap();
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(workspace().join("reports/peers.json")).unwrap(),
    )
    .unwrap();
    let peers = report["peers"].as_array().unwrap();
    let mut checked = 0;
    let mut contradictions = Vec::new();
    for peer in &catalogue.peers {
        let found = peers
            .iter()
            .find(|p| p["peer"]["name"] == peer.name.as_str())
            .unwrap_or_else(|| panic!("{:?} is not in reports/peers.json", peer.name));
        let firsts: Vec<(String, Found)> = found["properties"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["state"]["state"] == "violated")
            .map(|p| {
                let first = serde_json::from_value(p["state"]["first"].clone()).unwrap();
                (p["property"].as_str().unwrap().to_owned(), first)
            })
            .collect();
        checked += peer
            .notes
            .iter()
            .flat_map(|n| &n.properties)
            .filter(|p| firsts.iter().any(|(q, _)| q == *p))
            .count();
        contradictions.extend(claims::check(peer, |property| {
            firsts.iter().find(|(p, _)| p == property).map(|(_, f)| f)
        }));
    }
    assert!(
        checked >= 4,
        "only {checked} notes sit beside a counterexample"
    );
    let shown: Vec<String> = contradictions.iter().map(ToString::to_string).collect();
    assert!(shown.is_empty(), "{}", shown.join("\n"));
}
