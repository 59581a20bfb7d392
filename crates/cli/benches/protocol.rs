//! What the subject protocol costs: gate steps per second through a pipe, batched and one round trip
//! per request, beside the same checks in process.
//!
//! Equalized: every subject runs the same scenarios (the project's, at scale 1, their declared
//! seeds) through the same engine with every oracle on, so each step costs the same harness work
//! (the model, the oracles, the probes); only the subject and the pipe differ. The figure is checked
//! steps divided by the wall time of the checking runs (shrinking excluded; every run passes).
//! Subjects whose program is missing (no Node, the Rust adapter not built) are listed as such.
//!
//! `cargo bench -p bucketproof-cli --bench protocol` (env `BUCKETPROOF_BENCH_ROUNDS`, default 1:
//! rounds per subject, the best one reported). Figures: `reports/bench-protocol.md`. A run a subject
//! cannot express is skipped for it (counted in the table); a failing or broken run stops the bench.
//! `BUCKETPROOF_BENCH_SMOKE=1` (CI, through `cargo test --benches`): one scenario, one seed, figures
//! meaningless, every subject still driven end to end.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bucketproof_harness::Registry;
use bucketproof_harness::engine::{Engine, EngineOptions, Status};
use bucketproof_harness::gate;
use bucketproof_protocol::ExecSubjects;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One measured subject: a name, and a subject file (`None`: the in-process core).
struct Peer {
    label: &'static str,
    file: Option<String>,
    available: bool,
}

/// A peer running `program args`; available if the program runs and its first argument, when it
/// names a file, exists.
fn peer(label: &'static str, program: &str, args: &[String], batch: Option<u64>) -> Peer {
    let script = args.first().filter(|arg| arg.contains('/'));
    let available = (Path::new(program).is_file() || which(program))
        && script.is_none_or(|script| Path::new(script).is_file());
    let mut file = format!(
        "command = {program:?}\nargs = {args:?}\ncwd = {:?}\n",
        workspace()
    );
    if let Some(batch) = batch {
        file.push_str(&format!("batch = {batch}\n"));
    }
    Peer {
        label,
        file: Some(file),
        available,
    }
}

fn which(program: &str) -> bool {
    std::process::Command::new(program)
        .arg("--version")
        .output()
        .is_ok()
}

fn main() {
    let rounds: usize = std::env::var("BUCKETPROOF_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let root = workspace();
    let bin = env!("CARGO_BIN_EXE_bucketproof").to_owned();
    let python = root.join("adapters/python/bucket.py").display().to_string();
    let node = root.join("adapters/node/bucket.js").display().to_string();
    let rust = root
        .join("adapters/rust/target/release/bucketproof-rust-subject")
        .display()
        .to_string();
    let serve = vec!["serve".to_owned(), "core".to_owned()];
    let peers = vec![
        Peer {
            label: "core, in process",
            file: None,
            available: true,
        },
        peer("core via `bucketproof serve`, batched", &bin, &serve, None),
        peer(
            "core via `bucketproof serve`, batch 1",
            &bin,
            &serve,
            Some(1),
        ),
        peer("Rust adapter (adapters/rust), batched", &rust, &[], None),
        peer("Rust adapter (adapters/rust), batch 1", &rust, &[], Some(1)),
        peer(
            "Python adapter, batched",
            "python3",
            std::slice::from_ref(&python),
            None,
        ),
        peer(
            "Python adapter, batch 1",
            "python3",
            std::slice::from_ref(&python),
            Some(1),
        ),
        peer(
            "Node adapter, batched",
            "node",
            std::slice::from_ref(&node),
            None,
        ),
        peer(
            "Node adapter, batch 1",
            "node",
            std::slice::from_ref(&node),
            Some(1),
        ),
    ];
    let smoke = std::env::var_os("BUCKETPROOF_BENCH_SMOKE").is_some();
    let mut scenarios =
        gate::load_scenarios(&[root.join("scenarios")]).expect("the scenarios load");
    if smoke {
        scenarios.truncate(1);
    }
    let project =
        std::env::temp_dir().join(format!("bucketproof-bench-protocol-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&project);
    std::fs::create_dir_all(project.join("subjects")).unwrap();
    println!("| subject | steps/s | x in process | runs skipped |");
    println!("|---|---:|---:|---:|");
    let mut in_process = None;
    for (index, peer) in peers.iter().enumerate() {
        let name = format!("peer{index}");
        if let Some(file) = &peer.file {
            std::fs::write(project.join(format!("subjects/{name}.toml")), file).unwrap();
        }
        if !peer.available {
            println!("| {} | not available here | |", peer.label);
            continue;
        }
        let registry = Registry::default().with(
            ExecSubjects::new(&root)
                .with_subject_files(&project)
                .expect("the bench's subject files parse"),
        );
        let subject = if peer.file.is_some() {
            name.as_str()
        } else {
            "core"
        };
        let engine = Engine::new(&registry, EngineOptions::default());
        let mut best = 0.0f64;
        let mut skipped = 0;
        for _ in 0..rounds {
            let (mut steps, mut elapsed) = (0u64, Duration::ZERO);
            skipped = 0;
            for scenario in &scenarios {
                let mut seeds = scenario.seeds_to_run(None).unwrap();
                if smoke {
                    seeds.truncate(1);
                }
                for seed in seeds {
                    let result = engine.run(scenario, seed, subject);
                    match result.status {
                        Status::Pass => {}
                        Status::Skipped { .. } => skipped += 1,
                        _ => panic!(
                            "{} on {} seed {seed}: {}",
                            peer.label,
                            scenario.name,
                            result.status.detail()
                        ),
                    }
                    steps += result.report.as_ref().map_or(0, |r| r.steps);
                    elapsed += result.elapsed;
                }
            }
            best = best.max(steps as f64 / elapsed.as_secs_f64().max(1e-9));
        }
        let base = *in_process.get_or_insert(best);
        println!(
            "| {} | {:.0} | {:.2} | {skipped} |",
            peer.label,
            best,
            best / base
        );
    }
    let _ = std::fs::remove_dir_all(&project);
}
