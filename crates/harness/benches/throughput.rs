//! The harness's throughput figures: differential steps per second (the core limiter against the reference
//! model, every oracle on), the model alone, and trace generation alone (the floor of any run).
//!
//! ```sh
//! cargo bench -p bucketproof-harness --bench throughput
//! ```
//!
//! Each measurement runs one whole scenario trace (the shipped `scenarios/*.toml`, length x
//! `BENCH_SCALE`, default 10) exactly as `bucketproof run` does, and criterion reports elements
//! (steps) per second. Targets: >= 1,000,000 differential steps/s; >= 20,000,000 for oracle-only runs.

use std::hint::black_box;
use std::path::Path;

use bucketproof_check::{RunOptions, run_trace};
use bucketproof_harness::Registry;
use bucketproof_scenario::Scenario;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const SCENARIOS: [&str; 3] = ["rollback", "mixed-tiers", "attack-evict-full"];

fn scenario(name: &str) -> Scenario {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios")
        .join(format!("{name}.toml"));
    let scenario = Scenario::load(&path).expect("a shipped scenario loads");
    let scale: u64 = std::env::var("BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    scenario
        .scaled(scale)
        .unwrap_or_else(|error| panic!("BENCH_SCALE={scale}: {error}"))
}

fn throughput(c: &mut Criterion) {
    let registry = Registry::default();
    for name in SCENARIOS {
        let scenario = scenario(name);
        let seed = scenario.seeds[0];
        let setup = scenario.setup();
        let steps = scenario.expand(seed).count() as u64;
        let mut group = c.benchmark_group(format!("throughput/{name}"));
        group.throughput(Throughput::Elements(steps));
        group.sample_size(10);
        group.bench_function("expand_only", |b| {
            b.iter(|| black_box(scenario.expand(seed).count()))
        });
        for subject_name in ["core", "model"] {
            let id = if subject_name == "core" {
                "differential_core_vs_model"
            } else {
                "model_vs_model"
            };
            group.bench_function(id, |b| {
                b.iter(|| {
                    let mut subject = registry.build(subject_name, &setup).expect("builds");
                    let options = RunOptions {
                        sample_key: Some(scenario.sample_key),
                        ..RunOptions::default()
                    };
                    let report =
                        run_trace(&setup, scenario.expand(seed), subject.as_mut(), &options)
                            .expect("runs");
                    assert!(report.verdict.passed(), "{name} must pass to be timed");
                    black_box(report.steps)
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, throughput);
criterion_main!(benches);
