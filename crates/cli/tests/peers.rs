//! Third-party limiters installed from the registries (`peers/`, installed by `peers/install`)
//! through the gate, each under the safety profile its subject file declares: each passes one
//! scenario, and fails another with a shrunk counterexample of at most 6 ops that replays from its
//! file through the recorded command. What they fail is what the packages do (peers/README.md);
//! these tests pin it, so a change of pins or adapters that changes a verdict shows here.
//!
//! Peers that are not installed are skipped with a loud line, and `BUCKETPROOF_REQUIRE_PEERS=1`
//! (CI sets it, after running `peers/install`) turns that skip into a failure.

mod common;

use common::{bucketproof, text};

/// One installed peer: its subject file, what must be installed for it, and its verdicts.
struct Peer {
    subject: &'static str,
    interpreter: &'static str,
    /// Relative to the workspace: present once `peers/install` has run.
    installed: &'static str,
    passes: &'static str,
    /// A scenario it fails, and the oracle that catches it.
    fails: &'static str,
    caught_by: &'static str,
}

const PEERS: [Peer; 2] = [
    // npm `limiter`: refills on an exact grid as a float bucket on a ms clock should; under a
    // clock that runs backwards it moves its refill cursor (`lastDrip`) back, which re-credits the
    // same time later.
    Peer {
        subject: "npm-limiter",
        interpreter: "node",
        installed: "peers/npm/node_modules/limiter/package.json",
        passes: "scenarios/exact-refill.toml",
        fails: "scenarios/rollback.toml",
        caught_by: "the refill cursor moved back",
    },
    // falconry `token_bucket`: ignores a clock that runs backwards; holds its tokens in floats, so
    // a balance above 2^53 rounds: at capacity 2^63 - 1 the balance it reports is 2^63, above
    // capacity (and a zero-time "refill" of `tokens + rate * 0.0` rounds a spent token back, which
    // the arrival curve sees when judging alone: reports/peers.md).
    Peer {
        subject: "pypi-token-bucket",
        interpreter: "python3",
        installed: "target/peers/python/token_bucket/__init__.py",
        passes: "scenarios/rollback.toml",
        fails: "scenarios/refill-sum-past-2-128.toml",
        caught_by: "reported remaining outside [0, capacity]",
    },
];

/// True if `peer` is installed and its interpreter runs; else a loud skip, or a failure under
/// `BUCKETPROOF_REQUIRE_PEERS=1`.
fn installed(peer: &Peer) -> bool {
    let missing = if !common::program_runs(peer.interpreter) {
        Some(format!("{} is not installed", peer.interpreter))
    } else if !common::workspace().join(peer.installed).exists() {
        Some(format!("{} is missing (run peers/install)", peer.installed))
    } else {
        None
    };
    common::available(
        &format!("peer tests for {}", peer.subject),
        missing,
        "BUCKETPROOF_REQUIRE_PEERS",
    )
}

#[test]
fn each_installed_peer_passes_a_scenario_under_its_safety_profile() {
    for peer in &PEERS {
        if !installed(peer) {
            continue;
        }
        let out = bucketproof(&["check", "--json", peer.passes, "--subject", peer.subject]);
        let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{} on {}: {}{}",
            peer.subject,
            peer.passes,
            text(&out.stdout),
            text(&out.stderr)
        );
        assert_eq!(summary["failures"], 0, "{summary}");
        assert_eq!(summary["skipped"], 0, "every seed runs: {summary}");
        let runs: Vec<&serde_json::Value> = summary["scenarios"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|s| s["runs"].as_array().unwrap())
            .collect();
        assert!(!runs.is_empty(), "{summary}");
        assert!(
            runs.iter()
                .all(|run| run["status"] == "pass" && run["profile"] == "safety"),
            "{summary}"
        );
    }
}

#[test]
fn each_installed_peer_fails_a_scenario_small_and_the_failure_replays() {
    for peer in &PEERS {
        if !installed(peer) {
            continue;
        }
        let (printed, file) = common::assert_caught_small(
            Some(peer.fails),
            peer.subject,
            &format!("peer-{}", peer.subject),
        );
        assert!(printed.contains(peer.caught_by), "{printed}");
        // The shortest counterexample, which replayed, is the one named.
        let recorded = std::fs::read_to_string(&file).unwrap();
        assert!(recorded.contains(peer.caught_by), "{recorded}");
    }
}
