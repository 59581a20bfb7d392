//! The shipped binary contains no racy limiter code: no crate that `bucketproof-cli` links turns on
//! the limiter's `racy-variant` feature (Cargo unifies features, so one dependent enabling it would
//! compile `Limiter::acquire_racy_at` into the CLI). This crate is the one most tempted to, so the
//! check lives here; the racy mutant uses its own wrapper (`race::RacyKeyed`) instead.

use std::process::Command;

#[test]
fn the_cli_build_does_not_enable_the_limiters_racy_variant() {
    let cargo = env!("CARGO");
    let output = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "-p",
            "bucketproof-cli",
            "-e",
            "features",
            "-i",
            "bucketproof-limiter",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    let tree = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        tree.contains("bucketproof-limiter"),
        "cargo tree did not list the limiter:\n{tree}"
    );
    let racy: Vec<&str> = tree
        .lines()
        .filter(|line| line.contains("racy-variant"))
        .collect();
    assert!(
        racy.is_empty(),
        "the CLI's build enables the limiter's racy-variant:\n{}",
        racy.join("\n")
    );
}
