//! Under `EvictKeepingDeficit` at a key bound small enough to evict, the runner follows what a
//! correct subject legally does with a victim (docs/semantics.md, "Expiry and the key bound" and
//! "settle"), on the reference adapters in other languages (`subjects/python-bucket.toml`,
//! `subjects/node-bucket.toml`), whose bound is exactly `max_keys` (the core's per-shard bound
//! never evicts in traces this small):
//!
//! - a settle of a request whose key was dropped as a victim is `UnknownRequest` (its record went
//!   with the bucket), not an error where the model decides;
//! - a reconfigure that recreates a key dropped owing starts from the owed balance, not full.
//!
//! The state machine then runs with keys 0-3 against a bound of one or two keys under this policy,
//! with settles and reconfigures on, against the core and every reference adapter (the Rust one
//! too, `subjects/rust-core.toml`, once built): every case passes. Its cases include
//! eviction-summary pressure phases (`bucketproof_trace::pressure`), and the Python adapter with
//! a summary that forgets its early victims (`--bug forget-deficits`) fails them.
//!
//! An adapter whose interpreter is missing (or the Rust one, not built) is skipped with a loud line,
//! and `BUCKETPROOF_REQUIRE_ADAPTERS=1` (CI sets it, and builds the Rust adapter first) turns that
//! skip into a failure.

// The shared helpers live with the check crate's tests, which own the traces they draw.
#[path = "../../check/tests/common/mod.rs"]
mod common;

use std::path::Path;

use bucketproof_check::runner::{RunOptions, Verdict, run_trace};
use bucketproof_check::state_machine::{self, OpKinds, Options, Outcome};
use bucketproof_check::subjects::CoreSubject;
use bucketproof_protocol::ExecSubjects;
use bucketproof_trace::{
    Acquire, ConfigSpec, Op, PolicySpec, Settle, Setup, Subject, SubjectError, SubjectFactory,
};
use common::{SECOND, available, program_available};

/// `(subject file, interpreter)` of each reference adapter in another language.
const ADAPTERS: [(&str, &str); 2] = [("python-bucket", "python3"), ("node-bucket", "node")];

/// Capacity 4 at 1/s, one key at most, `EvictKeepingDeficit`.
fn setup() -> Setup {
    Setup {
        max_keys: 1,
        policy: PolicySpec::EvictKeepingDeficit,
        ..Setup::new(ConfigSpec::new(4, "1/s"))
    }
}

fn acquire(key: u64, cost: u64, now: u64, request_id: Option<u64>) -> Op {
    Op::Acquire(Acquire {
        key,
        cost,
        now,
        request_id,
    })
}

/// The project's subject files (the reference adapters among them), run from the workspace.
fn project_subjects() -> ExecSubjects {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    ExecSubjects::new(&root)
        .with_subject_files(&root)
        .expect("the project's subject files parse")
}

/// Runs `ops` on every reference adapter that runs here; each must pass.
fn assert_adapters_pass(ops: &[Op]) {
    let factory = project_subjects();
    for (name, program) in ADAPTERS {
        if !program_available(program) {
            continue;
        }
        let mut subject = factory
            .build(name, &setup())
            .expect("a subject file of the project")
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let report = run_trace(
            &setup(),
            ops.iter().cloned(),
            subject.as_mut(),
            &RunOptions::default(),
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(report.verdict, Verdict::Pass, "{name}");
    }
}

/// Key 0 reserves one token under request id 1; key 1 needs the one place, so key 0 (owing, with a
/// live record) is the victim; settling id 1 on key 0 then finds no record: `UnknownRequest`.
#[test]
fn a_settle_of_a_request_whose_key_was_a_victim_is_an_unknown_request() {
    assert_adapters_pass(&[
        acquire(0, 1, 0, Some(1)),
        acquire(1, 1, 0, None),
        Op::Settle(Settle {
            key: 0,
            request_id: 1,
            actual: 0,
            now: 0,
        }),
    ]);
}

/// Key 0 is emptied, then dropped owing for key 1; a reconfigure of key 0 one second later
/// recreates it (dropping key 1) with the one token it refilled since, not a full bucket: the next
/// acquire of two tokens is denied and one is admitted.
#[test]
fn a_reconfigure_that_recreates_a_key_dropped_owing_starts_from_what_it_owes() {
    assert_adapters_pass(&[
        acquire(0, 4, 0, None),
        acquire(1, 1, 0, None),
        Op::Reconfigure {
            key: 0,
            now: SECOND,
            config: ConfigSpec::new(4, "1/s"),
        },
        acquire(0, 2, SECOND, None),
        acquire(0, 1, SECOND, None),
    ]);
}

/// The state machine's options at a bound of `max_keys` under `EvictKeepingDeficit`: keys 0-3,
/// request ids, settles and reconfigures on, a few dozen fixed cases, each with room for an
/// eviction-summary pressure phase (on by default under this policy) after a few other ops.
fn small_bound_options(max_keys: usize, config: &ConfigSpec) -> Options {
    let mut setup = setup();
    setup.config = config.clone();
    setup.max_keys = max_keys;
    setup.dedupe_window_ns = 5 * SECOND;
    setup.dedupe_per_key = 2;
    let mut options = Options::new(setup);
    options.keys = 4;
    options.ops = OpKinds::all();
    options.cases = 48;
    options.ops_per_case = 1..64;
    options.deterministic = true;
    options
}

/// The state machine at a bound small enough to evict: keys 0-3 against `max_keys` 1 and 2 under
/// `EvictKeepingDeficit`, request ids, settles and reconfigures on, against the core and each
/// reference adapter that runs here (the Rust adapter when its binary is built). A few dozen cases
/// each, so the adapters' pipes keep it to seconds.
#[test]
fn the_state_machine_at_a_small_key_bound_passes_on_the_core_and_every_reference_adapter() {
    let factory = project_subjects();
    let rust_built = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../adapters/rust/target/release/bucketproof-rust-subject")
        .is_file();
    let mut subjects: Vec<&str> = vec!["core"];
    for (name, program) in ADAPTERS {
        if program_available(program) {
            subjects.push(name);
        }
    }
    let unbuilt = (!rust_built).then(|| {
        "adapters/rust is not built (cargo build --release --manifest-path adapters/rust/Cargo.toml)"
            .to_owned()
    });
    if available("rust-core", unbuilt, "BUCKETPROOF_REQUIRE_ADAPTERS") {
        subjects.push("rust-core");
    }
    // A bucket of 4 at 1/s (its clock-end victims come from the time menu's end of the clock), and
    // one so slow that an emptied bucket is full again only past the end of the clock from anywhere
    // (8 tokens at 1/2^32 per second): the victims whose "full again" instant saturates.
    let configs = [
        ConfigSpec::new(4, "1/s"),
        ConfigSpec::new(8, "1/4294967296s"),
    ];
    for (config, max_keys) in configs.iter().flat_map(|c| [(c, 1), (c, 2)]) {
        for &name in &subjects {
            let options = small_bound_options(max_keys, config);
            let build = |setup: &Setup| -> Result<Box<dyn Subject>, SubjectError> {
                if name == "core" {
                    return Ok(Box::new(CoreSubject::new(setup)?));
                }
                factory
                    .build(name, setup)
                    .expect("a subject file of the project")
            };
            let outcome = state_machine::run(&build, &options).unwrap();
            assert!(
                outcome.passed(),
                "{name}, {config:?}, max_keys {max_keys}: {outcome}"
            );
        }
    }
}

/// The pressure has teeth: the Python adapter with a summary that keeps only as many of the latest
/// victims as its array has slots (`--bug forget-deficits`; each exactly, so only more victims
/// than that before one returns can show it) fails the state machine at both bounds, an early
/// victim coming back fuller than it was dropped.
#[test]
fn a_summary_that_forgets_its_early_victims_fails_the_state_machine() {
    if !program_available("python3") {
        return;
    }
    let factory = project_subjects();
    let forgetful = "exec:python3 adapters/python/bucket.py --bug forget-deficits";
    for max_keys in [1, 2] {
        let build = |setup: &Setup| -> Result<Box<dyn Subject>, SubjectError> {
            factory.build(forgetful, setup).expect("an exec subject")
        };
        let options = small_bound_options(max_keys, &ConfigSpec::new(4, "1/s"));
        let outcome = state_machine::run(&build, &options).unwrap();
        let Outcome::Violated { failure, .. } = &outcome else {
            panic!("max_keys {max_keys}: a forgetting summary was not caught: {outcome}");
        };
        assert!(
            failure.violation.to_string().contains("came back fuller"),
            "max_keys {max_keys}: {outcome}"
        );
    }
}
