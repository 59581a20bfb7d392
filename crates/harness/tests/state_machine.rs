//! The state machine (`bucketproof_check::state_machine`) against the project's own subjects: the
//! core limiter, the Redis script, the PostgreSQL limiter, and broken fixtures that must be caught
//! and shrunk.
//!
//! Regressions persist in `tests/state_machine.proptest-regressions` (committed). `PROPTEST_CASES`
//! raises the case count (default: the library's CI-sized default).

use bucketproof_check::state_machine::{self, DEFAULT_CASES, OpKinds, Options, Outcome};
use bucketproof_check::subjects::broken::{Bug, Classic};
use bucketproof_check::subjects::{CoreSubject, broken::BrokenSubjects};
use bucketproof_harness::Registry;
use bucketproof_trace::duration::SECOND;
use bucketproof_trace::{
    BandwidthSpec, ConfigSpec, PolicySpec, Setup, Subject, SubjectError, SubjectFactory,
};

/// The project's setup: a small capacity, a rate whose refill boundaries fall between nanoseconds,
/// short request-id records, a key bound far above the keys used.
fn options() -> Options {
    let mut setup = Setup::new(ConfigSpec::new(4, "3/2s"));
    setup.dedupe_window_ns = 5 * SECOND;
    setup.dedupe_per_key = 2;
    setup.max_keys = 1 << 10;
    setup.policy = PolicySpec::EvictFull;
    let mut options = Options::new(setup);
    options.cases = state_machine::cases_from_env(DEFAULT_CASES);
    options
}

fn core(setup: &Setup) -> Result<Box<dyn Subject>, SubjectError> {
    Ok(Box::new(CoreSubject::new(setup)?))
}

/// Property: for every generated op sequence, the core limiter's decisions equal the reference
/// model's exactly, its state stays within bounds with a monotone cursor, it never admits beyond the
/// arrival curve, and its retry_after is tight.
#[test]
fn the_core_limiter_matches_the_model_and_every_oracle_after_every_step() {
    let mut options = options();
    options.regressions = Some(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/state_machine.proptest-regressions"
    ));
    let outcome = state_machine::run(&core, &options).unwrap();
    assert!(outcome.passed(), "{outcome}");
}

/// Property: the same on keys of three bandwidths (a burst, a sustained rate whose boundaries fall
/// between nanoseconds, a slow quota), with reconfigurations that keep, drop and re-rate bandwidths by
/// name: every bandwidth's part equals the model's and each keeps its own arrival curve.
#[test]
fn the_core_limiter_matches_the_model_on_keys_of_several_bandwidths() {
    let mut options = options();
    options.setup.config = several();
    options.extra = state_machine::ExtraValues::boundaries_of(&options.setup.config).unwrap();
    let outcome = state_machine::run(&core, &options).unwrap();
    assert!(outcome.passed(), "{outcome}");
}

fn several() -> ConfigSpec {
    ConfigSpec::set([
        BandwidthSpec::new(3, "3/s").named("burst"),
        BandwidthSpec::new(4, "3/2s").named("sustained"),
        BandwidthSpec::new(8, "1/min").named("quota"),
    ])
}

/// Property: the Redis script's decisions equal the reference model's under the same generated op
/// sequences (fewer cases: each op is a round trip). Runs only with `REDIS_URL` (CI sets it, with
/// `BUCKETPROOF_REQUIRE_REDIS=1` turning a skip into a failure).
#[test]
fn the_redis_script_matches_the_model_and_every_oracle_after_every_step() {
    if std::env::var("REDIS_URL").is_err() {
        assert!(
            std::env::var("BUCKETPROOF_REQUIRE_REDIS").as_deref() != Ok("1"),
            "REDIS_URL is not set but BUCKETPROOF_REQUIRE_REDIS=1"
        );
        eprintln!(
            "\n!!!!! SKIP the_redis_script_matches_the_model...: REDIS_URL is not set !!!!!\n"
        );
        return;
    }
    let mut options = options();
    options.cases = state_machine::cases_from_env(24);
    options.ops_per_case = 1..30;
    let registry = Registry::default();
    let outcome = state_machine::run(&|setup| registry.build("redis", setup), &options).unwrap();
    assert!(outcome.passed(), "{outcome}");
    // Keys of several bandwidths on the set script (which has no reconfigure of a set).
    options.setup.config = several();
    options.ops.reconfigure = false;
    let outcome = state_machine::run(&|setup| registry.build("redis", setup), &options).unwrap();
    assert!(outcome.passed(), "{outcome}");
}

/// Property: the PostgreSQL limiter's decisions equal the reference model's under the same
/// generated op sequences, with its cleanup as the sweep (fewer cases: each op is a round trip; no
/// key bound, which it does not have). Runs only with `DATABASE_URL` (CI sets it,
/// with `BUCKETPROOF_REQUIRE_POSTGRES=1` turning a skip into a failure).
#[test]
fn the_postgres_limiter_matches_the_model_and_every_oracle_after_every_step() {
    if std::env::var("DATABASE_URL").is_err() {
        assert!(
            std::env::var_os("BUCKETPROOF_REQUIRE_POSTGRES").is_none(),
            "DATABASE_URL is not set but BUCKETPROOF_REQUIRE_POSTGRES is"
        );
        eprintln!(
            "\n!!!!! SKIP the_postgres_limiter_matches_the_model...: DATABASE_URL is not set !!!!!\n"
        );
        return;
    }
    let mut options = options();
    options.setup.max_keys = bucketproof_limiter::defaults::MAX_KEYS;
    options.setup.policy = PolicySpec::default();
    // 200 cases: fewer missed a fresh bucket that ignored the cleanup's horizon (planted).
    options.cases = state_machine::cases_from_env(200);
    options.ops_per_case = 1..30;
    let registry = Registry::default();
    let outcome = state_machine::run(&|setup| registry.build("postgres", setup), &options).unwrap();
    assert!(outcome.passed(), "{outcome}");
    // Keys of several bandwidths, in the same row (no reconfigure of such a key).
    options.setup.config = several();
    options.ops.reconfigure = false;
    options.cases = state_machine::cases_from_env(50);
    let outcome = state_machine::run(&|setup| registry.build("postgres", setup), &options).unwrap();
    assert!(outcome.passed(), "{outcome}");
}

/// Property: the state machine has teeth. Each classic bug of a hand-written bucket, and each
/// broken fixture of the registry (a misreported denial, request ids not scoped per key), fails it,
/// and the failure shrinks to at most 4 ops.
#[test]
fn each_classic_bug_and_broken_fixture_fails_the_state_machine_in_at_most_4_ops() {
    let mut options = options();
    options.cases = 512;
    options.deterministic = true;
    // The fixtures' bugs are in acquires; they have no settle.
    options.ops.settle = false;
    let caught = |name: &str, build: &state_machine::Build<'_>, options: &Options| {
        let outcome = state_machine::run(build, options).unwrap();
        let Outcome::Violated { trace, .. } = &outcome else {
            panic!("{name} was not caught: {outcome}");
        };
        eprintln!("{name}: {} ops: {outcome}", trace.ops.len());
        assert!(trace.ops.len() <= 4, "{name}: {outcome}");
    };
    let registry = Registry::default().with(BrokenSubjects);
    for name in BrokenSubjects.names() {
        caught(&name, &|setup| registry.build(&name, setup), &options);
    }
    options.ops = OpKinds::acquires_only();
    for bug in [
        Bug::StrictAllow,
        Bug::ChargesDenials,
        Bug::CursorFollowsRollback,
    ] {
        let build = |setup: &Setup| -> Result<Box<dyn Subject>, SubjectError> {
            Ok(Box::new(Classic::new(bug, setup)?))
        };
        caught(&format!("{bug:?}"), &build, &options);
    }
}
