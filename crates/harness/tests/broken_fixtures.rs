//! The engine against the deliberately broken fixtures of `bucketproof_check::subjects::broken`:
//! each bug is caught end to end where a scenario can show it, and nowhere else.

use std::path::Path;

use bucketproof_check::subjects::broken::{BrokenSubjects, GLOBAL_REQUEST_IDS};
use bucketproof_harness::Registry;
use bucketproof_harness::engine::{Engine, EngineOptions, Status};
use bucketproof_scenario::Scenario;

fn starter(name: &str) -> Scenario {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios")
        .join(name);
    Scenario::load(&path).unwrap()
}

/// Request ids not scoped per key are caught by the starter scenario whose users share an id
/// space, and by no scenario whose ids are unique per request: there no key ever sends another
/// key's id, so the fixture answers exactly as the core does.
#[test]
fn global_request_ids_are_caught_only_where_users_share_ids() {
    let registry = Registry::default().with(BrokenSubjects);
    let engine = Engine::new(&registry, EngineOptions::default());
    let shared = engine.run(&starter("shared-request-ids.toml"), 1, GLOBAL_REQUEST_IDS);
    assert!(
        matches!(shared.status, Status::Fail { .. }),
        "{}",
        shared.status.detail()
    );
    let counterexample = shared.counterexample.expect("a counterexample");
    eprintln!(
        "shared-request-ids, seed 1, {GLOBAL_REQUEST_IDS}: {}; shrunk to {} ops: {:?}",
        shared.status.detail(),
        counterexample.ops.len(),
        counterexample.ops
    );
    let unique = engine.run(
        &starter("duplicate-request-ids.toml"),
        1,
        GLOBAL_REQUEST_IDS,
    );
    assert_eq!(unique.status, Status::Pass, "{}", unique.status.detail());
}
