//! Redis script subjects (`subjects::script`) on a real Redis: a script flushed mid-run is loaded
//! again (NOSCRIPT, also before a pipeline), no key under a subject's prefix survives it, a pipelined
//! run judges exactly as one stepped op by op, a step out of announced order is a harness error, and
//! a script that reads TIME works
//! because of the prelude (without it, the same script sees Redis's own clock and denies what the
//! op's now has refilled). Needs `REDIS_URL`; without it each test prints a loud SKIP line and
//! passes, unless `BUCKETPROOF_REQUIRE_REDIS=1` (CI), which makes the skip a failure.

// The shared helpers live with the check crate's tests, which own the traces they draw.
#[path = "../../check/tests/common/mod.rs"]
mod common;

use std::path::PathBuf;
use std::sync::Arc;

use bucketproof_subjects::script::{Loaded, ScriptSpec, ScriptSubjects, redis_url};
use bucketproof_trace::{Acquire, ConfigSpec, Setup, Subject};
use common::{SECOND, redis_available};

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixture(name: &str) -> PathBuf {
    workspace().join("tests/fixtures/redis-script").join(name)
}

/// The exact bucket fixture, loaded (its script read, ready to build subjects of).
fn bucket() -> Arc<Loaded> {
    ScriptSubjects::new(workspace())
        .load(&fixture("bucket.toml"))
        .unwrap()
}

fn acquire(cost: u64, now: u64) -> Acquire {
    Acquire {
        key: 7,
        cost,
        now,
        request_id: None,
    }
}

fn connection() -> redis::Connection {
    redis::Client::open(redis_url().as_str())
        .unwrap()
        .get_connection()
        .unwrap()
}

fn keys_under(prefix: &str) -> Vec<String> {
    redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query(&mut connection())
        .unwrap()
}

#[test]
fn a_flushed_script_is_loaded_again_and_no_key_outlives_the_subject() {
    if !redis_available("a_flushed_script_is_loaded_again_and_no_key_outlives_the_subject") {
        return;
    }
    let loaded = bucket();
    let setup = Setup::new(ConfigSpec::new(3, "1/s"));
    let mut subject = ScriptSubjects::build_loaded("bucket", loaded, &setup).unwrap();
    let prefix = subject.prefix().to_owned();
    assert!(subject.acquire(acquire(2, 0)).unwrap().allowed);
    let mut other = acquire(1, 0);
    other.key = 8;
    assert!(subject.acquire(other).unwrap().allowed);
    assert_eq!(keys_under(&prefix).len(), 2, "one hash per key");
    let flushed: String = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut connection())
        .unwrap();
    assert_eq!(flushed, "OK");
    // The script is gone from Redis; the state is not: one token left, then none.
    let observed = subject.acquire(acquire(1, 0)).unwrap();
    assert!(observed.allowed);
    assert!(!subject.acquire(acquire(1, 0)).unwrap().allowed);
    drop(subject);
    assert!(keys_under(&prefix).is_empty(), "keys left under {prefix}");
}

/// The TIME-reading bucket at capacity 2, 1 token/s: drained at 0, one token back at 1 s.
fn drain_and_wait(loaded: Arc<Loaded>) -> Vec<bool> {
    let setup = Setup::new(ConfigSpec::new(2, "1/s"));
    let mut subject = ScriptSubjects::build_loaded("server", loaded, &setup).unwrap();
    [acquire(2, 0), acquire(1, 0), acquire(1, SECOND)]
        .into_iter()
        .map(|op| subject.acquire(op).unwrap().allowed)
        .collect()
}

#[test]
fn time_reading_scripts_work_because_of_the_prelude() {
    if !redis_available("time_reading_scripts_work_because_of_the_prelude") {
        return;
    }
    let spec = ScriptSpec::load(&fixture("server.toml")).unwrap();
    assert!(spec.prelude);
    let with = Arc::new(Loaded::new(spec.clone(), &workspace()).unwrap());
    assert_eq!(drain_and_wait(with), [true, false, true]);
    // Without the prelude the script reads Redis's own clock: the harness's second has not passed
    // there, so nothing has refilled and the request the op's now allows is denied.
    let without = ScriptSpec {
        prelude: false,
        ..spec
    };
    let without = Arc::new(Loaded::new(without, &workspace()).unwrap());
    assert_eq!(drain_and_wait(without), [true, false, false]);
}

#[test]
fn an_op_the_script_cannot_be_given_is_unsupported_not_a_verdict() {
    if !redis_available("an_op_the_script_cannot_be_given_is_unsupported_not_a_verdict") {
        return;
    }
    let loaded = bucket();
    // 1/3 s per token is not a whole number of ns: the setup is refused, the run skipped.
    let thirds = Setup::new(ConfigSpec::new(3, "3/s"));
    assert!(matches!(
        ScriptSubjects::build_loaded("bucket", Arc::clone(&loaded), &thirds),
        Err(bucketproof_trace::SubjectError::Unsupported(_))
    ));
    let setup = Setup::new(ConfigSpec::new(3, "1/s"));
    let mut subject = ScriptSubjects::build_loaded("bucket", loaded, &setup).unwrap();
    // A time past 2^53 ns (the description's max_time) is refused, not rounded.
    let late = subject.acquire(acquire(1, u64::MAX));
    assert!(
        matches!(late, Err(bucketproof_trace::SubjectError::Unsupported(_))),
        "{late:?}"
    );
    let mut with_id = acquire(1, 0);
    with_id.request_id = Some(1);
    assert!(matches!(
        subject.acquire(with_id),
        Err(bucketproof_trace::SubjectError::Unsupported("request ids"))
    ));
}

/// Acquires only, without request ids (all a script subject runs), from the shared mixed trace:
/// rollbacks, frozen clocks, invalid costs and costs above capacity on four keys.
fn acquires(len: usize, seed: u64) -> Vec<bucketproof_trace::Op> {
    common::mixed_trace(len, seed)
        .into_iter()
        .filter_map(|op| match op {
            bucketproof_trace::Op::Acquire(a) => Some(bucketproof_trace::Op::Acquire(Acquire {
                request_id: None,
                ..a
            })),
            _ => None,
        })
        .collect()
}

#[test]
fn pipelined_calls_judge_exactly_as_lone_calls() {
    if !redis_available("pipelined_calls_judge_exactly_as_lone_calls") {
        return;
    }
    use bucketproof_check::{RunOptions, Stepper, run_trace};
    use bucketproof_subjects::script::PIPELINE;
    let loaded = bucket();
    let setup = Setup::new(ConfigSpec::new(5, "2/s"));
    let options = RunOptions {
        stop_at_first: false,
        ..RunOptions::default()
    };
    for seed in 0..3 {
        let ops = acquires(3000, seed);
        assert!(ops.len() > 3 * PIPELINE, "several pipelines per trace");
        // Announced in chunks by the runner: pipelined.
        let mut subject =
            ScriptSubjects::build_loaded("bucket", Arc::clone(&loaded), &setup).unwrap();
        let pipelined = run_trace(&setup, ops.iter().cloned(), &mut subject, &options).unwrap();
        // Stepped one at a time with nothing announced: one round trip per op.
        let mut subject =
            ScriptSubjects::build_loaded("bucket", Arc::clone(&loaded), &setup).unwrap();
        let mut stepper = Stepper::new(&setup, &mut subject, &options).unwrap();
        for op in ops.iter().cloned() {
            stepper.step(op);
        }
        let lone = stepper.finish();
        assert_eq!(
            lone.steps,
            ops.len() as u64,
            "seed {seed}: {:?}",
            lone.verdict
        );
        assert!(
            lone.divergence.decision_mismatches + lone.divergence.value_mismatches > 0,
            "seed {seed}: the trace reaches answers that differ from the model's"
        );
        assert_eq!(pipelined, lone, "seed {seed}");
    }
}

#[test]
fn a_script_flushed_before_a_pipeline_is_loaded_again_for_it() {
    if !redis_available("a_script_flushed_before_a_pipeline_is_loaded_again_for_it") {
        return;
    }
    let loaded = bucket();
    let setup = Setup::new(ConfigSpec::new(3, "1/s"));
    let mut subject = ScriptSubjects::build_loaded("bucket", loaded, &setup).unwrap();
    let ops = [
        acquire(2, 0),
        acquire(1, 0),
        acquire(1, 0),
        acquire(1, SECOND),
    ];
    subject.upcoming(&ops.map(bucketproof_trace::Op::Acquire));
    let flushed: String = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut connection())
        .unwrap();
    assert_eq!(flushed, "OK");
    let allowed: Vec<bool> = ops
        .into_iter()
        .map(|op| subject.acquire(op).unwrap().allowed)
        .collect();
    assert_eq!(allowed, [true, true, false, true]);
}

#[test]
fn a_step_that_was_not_announced_next_is_a_harness_error() {
    if !redis_available("a_step_that_was_not_announced_next_is_a_harness_error") {
        return;
    }
    let loaded = bucket();
    let setup = Setup::new(ConfigSpec::new(3, "1/s"));
    let mut subject = ScriptSubjects::build_loaded("bucket", loaded, &setup).unwrap();
    subject.upcoming(&[acquire(1, 0), acquire(1, 5)].map(bucketproof_trace::Op::Acquire));
    let stepped = subject.acquire(acquire(1, 5));
    assert!(
        matches!(&stepped, Err(bucketproof_trace::SubjectError::Broken(m)) if m.contains("announced")),
        "{stepped:?}"
    );
}

#[test]
fn a_config_the_scripts_caller_cannot_give_is_skipped() {
    if !redis_available("a_config_the_scripts_caller_cannot_give_is_skipped") {
        return;
    }
    let mut spec = ScriptSpec::load(&fixture("bucket.toml")).unwrap();
    let five = Setup::new(ConfigSpec::new(3, "5/s"));
    let plain = Arc::new(Loaded::new(spec.clone(), &workspace()).unwrap());
    assert!(ScriptSubjects::build_loaded("bucket", plain, &five).is_ok());
    // A caller that refuses a rate above the burst (5 tokens per second, capacity 3).
    spec.configs.capacity_at_least_rate = true;
    let strict = Arc::new(Loaded::new(spec, &workspace()).unwrap());
    let refused = ScriptSubjects::build_loaded("bucket", Arc::clone(&strict), &five);
    assert!(
        matches!(&refused, Err(bucketproof_trace::SubjectError::Unsupported(why)) if why.contains("capacity_at_least_rate")),
        "{:?}",
        refused.err()
    );
    let three = Setup::new(ConfigSpec::new(5, "5/s"));
    assert!(ScriptSubjects::build_loaded("bucket", strict, &three).is_ok());
}
