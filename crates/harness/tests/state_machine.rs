//! State-machine property tests: the reference model drives generation (proptest-state-machine's
//! `ReferenceStateMachine`), the core limiter is the system under test, and every oracle of the harness
//! runs after every step (through `runner::Stepper`).
//!
//! Transitions: acquires on a few keys with costs `0..=capacity+1` and repeated request ids; time steps
//! of 0, 1 ns, exactly at a key's refill boundary, 1 ns before it, large jumps (years), rollbacks, and
//! times near `u64::MAX`; reconfigure, sweep and forget. Failures shrink to a minimal op list, and
//! regressions persist under `tests/state_machine.proptest-regressions` (committed).
//!
//! `PROPTEST_CASES` raises the case count (default 64, so `cargo test` stays fast).

use std::panic::{AssertUnwindSafe, catch_unwind};

use bucketproof_harness::runner::{RunOptions, Stepper, Verdict};
use bucketproof_harness::scenario::duration::{SECOND, YEAR};
use bucketproof_harness::subjects::CoreSubject;
use bucketproof_harness::subjects::core::observe;
use bucketproof_harness::{
    Acquire, ConfigSpec, Observed, Op, PolicySpec, Setup, Subject, SubjectError,
};
use bucketproof_limiter::internal::{Attempt, state_from_parts, transition};
use bucketproof_limiter::{BucketState, Config};
use bucketproof_model::Rational;
use bucketproof_model::{Model, ModelWait};
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestError, TestRunner};
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest, prop_state_machine};

const KEYS: u64 = 3;
const CAPACITY: u64 = 4;
const RATE: &str = "3/2s";
const TIER_RATES: &[&str] = &["1/3s", "5/s", "7/9s", "0/s"];

fn setup() -> Setup {
    let mut setup = Setup::new(ConfigSpec::new(CAPACITY, RATE));
    setup.dedupe_window_ns = 5 * SECOND;
    setup.dedupe_per_key = 2;
    setup.max_keys = 1 << 10;
    setup.policy = PolicySpec::EvictFull;
    setup
}

/// The reference state: the model plus the clock the generator moves.
#[derive(Clone, Debug)]
struct Reference {
    model: Model,
    clock: u64,
}

/// The exact time at which `key` will hold `cost` tokens with no traffic, if it ever will.
fn boundary(model: &Model, key: u64, now: u64, cost: u64) -> Option<u64> {
    let config = model.config_of(key);
    if cost == 0 || cost > config.capacity() || !config.refills() {
        return None;
    }
    let remaining = model.peek(key, now).remaining;
    let deficit = Rational::from(cost) - remaining;
    if deficit <= Rational::ZERO {
        return model.state(key).map(|(_, last)| last.max(now));
    }
    let last = model.state(key).map_or(now, |(_, last)| last.max(now));
    let wait = u64::try_from((deficit / config.rate_per_ns()).ceil()).ok()?;
    last.checked_add(wait)
}

struct LimiterMachine;

impl ReferenceStateMachine for LimiterMachine {
    type State = Reference;
    type Transition = Op;

    fn init_state() -> BoxedStrategy<Reference> {
        let setup = setup();
        prop_oneof![
            Just(0u64),
            1u64..1_000 * SECOND,
            Just(u64::MAX - 3 * SECOND)
        ]
        .prop_map(move |clock| Reference {
            model: Model::new(
                setup.config.to_model().unwrap(),
                setup.dedupe_window_ns,
                setup.dedupe_per_key,
            ),
            clock,
        })
        .boxed()
    }

    fn transitions(state: &Reference) -> BoxedStrategy<Op> {
        let clock = state.clock;
        // Times worth trying from here: exact refill boundaries (and 1 ns before) of each key.
        let mut boundaries = Vec::new();
        for key in 0..KEYS {
            for cost in [1, CAPACITY] {
                if let Some(at) = boundary(&state.model, key, clock, cost) {
                    boundaries.push(at);
                    boundaries.push(at.saturating_sub(1));
                }
            }
        }
        let time = prop_oneof![
            3 => Just(clock),
            3 => Just(clock.saturating_add(1)),
            4 => (0u64..3 * SECOND).prop_map(move |dt| clock.saturating_add(dt)),
            1 => (1u64..200).prop_map(move |years| clock.saturating_add(years * YEAR)),
            2 => (1u64..10 * SECOND).prop_map(move |back| clock.saturating_sub(back)),
            1 => (0u64..SECOND).prop_map(|back| u64::MAX - back),
            4 => if boundaries.is_empty() {
                Just(clock).boxed()
            } else {
                proptest::sample::select(boundaries).boxed()
            },
        ];
        let key = 0..KEYS;
        prop_oneof![
            12 => (key.clone(), time.clone(), 0..=CAPACITY + 1, proptest::option::weighted(0.3, 0u64..3))
                .prop_map(|(key, now, cost, request_id)| Op::Acquire(Acquire { key, cost, now, request_id })),
            1 => (key.clone(), time.clone(), 1..=CAPACITY + 2, proptest::sample::select(TIER_RATES))
                .prop_map(|(key, now, capacity, rate)| Op::Reconfigure { key, now, config: ConfigSpec::new(capacity, rate) }),
            1 => time.prop_map(|now| Op::Sweep { now }),
            1 => key.prop_map(|key| Op::Forget { key }),
        ]
        .boxed()
    }

    fn apply(mut state: Reference, op: &Op) -> Reference {
        match op {
            Op::Acquire(Acquire {
                key,
                cost,
                now,
                request_id,
            }) => {
                let _ = state.model.acquire(*key, *now, *cost, *request_id);
            }
            Op::Reconfigure { key, now, config } => {
                state
                    .model
                    .reconfigure(*key, config.to_model().unwrap(), *now);
            }
            Op::Forget { key } => {
                state.model.forget(*key);
            }
            Op::Sweep { now } => {
                state.model.sweep(*now);
            }
        }
        if let Some(now) = op.now() {
            state.clock = now;
        }
        state
    }
}

/// The system under test: a subject and the harness's own lockstep model and oracles. The stepper
/// owns the subject, so a case's subject (a Redis connection and runtime, for the Redis test) is
/// dropped with the case.
struct Sut {
    stepper: Stepper<'static>,
}

fn sut_for(subject: Box<dyn Subject>) -> Sut {
    Sut {
        stepper: Stepper::owning(&setup(), subject, &RunOptions::default()).unwrap(),
    }
}

fn step(mut sut: Sut, op: Op) -> Sut {
    sut.stepper.step(op);
    if let Verdict::Fail(failure) = sut.stepper.verdict() {
        panic!("oracle violated: {}", failure.violation);
    }
    sut
}

/// The core limiter against the model, every oracle after every step.
struct CoreUnderTest;

impl StateMachineTest for CoreUnderTest {
    type SystemUnderTest = Sut;
    type Reference = LimiterMachine;

    fn init_test(_: &Reference) -> Sut {
        sut_for(Box::new(CoreSubject::new(&setup()).unwrap()))
    }

    fn apply(sut: Sut, _: &Reference, op: Op) -> Sut {
        step(sut, op)
    }
}

prop_state_machine! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(64),
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
        )),
        ..ProptestConfig::default()
    })]

    /// Property: for every generated op sequence, the core limiter's decisions equal the reference
    /// model's exactly, its state stays within bounds with a monotone cursor, it never admits beyond
    /// the arrival curve, and its retry_after is tight.
    #[test]
    fn the_core_limiter_matches_the_model_and_every_oracle_after_every_step(sequential 1..40 => CoreUnderTest);
}

/// The Redis script (injected time) against the model, every oracle after every step. Runs only with
/// `REDIS_URL` (CI sets it, with `BUCKETPROOF_REQUIRE_REDIS=1` turning a skip into a failure).
struct RedisUnderTest;

impl StateMachineTest for RedisUnderTest {
    type SystemUnderTest = Sut;
    type Reference = LimiterMachine;

    fn init_test(_: &Reference) -> Sut {
        sut_for(Box::new(
            bucketproof_harness::subjects::redis::RedisSubject::new(&setup()).unwrap(),
        ))
    }

    fn apply(sut: Sut, _: &Reference, op: Op) -> Sut {
        step(sut, op)
    }
}

/// Property: the Redis script's decisions equal the reference model's under the same generated op
/// sequences as the core (fewer cases: each one is a round trip per op).
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
    let config = ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(24),
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let mut runner = TestRunner::new(config.clone());
    let result = runner.run(
        &LimiterMachine::sequential_strategy(1..30),
        |(initial, transitions, seen)| {
            RedisUnderTest::test_sequential(config.clone(), initial, transitions, seen);
            Ok(())
        },
    );
    if let Err(error) = result {
        panic!("{error}");
    }
}

/// A deliberately broken single-bucket subject built on the real transition, for proving the tests
/// have teeth. Each variant is one classic bug.
#[derive(Clone, Copy, Debug)]
enum Bug {
    /// `>` instead of `>=`: a request that exactly empties the bucket is denied.
    StrictAllow,
    /// Denied requests are charged.
    ChargesDenials,
    /// A backwards clock moves the cursor back, so the interval is credited again.
    CursorFollowsRollback,
}

struct Broken {
    bug: Bug,
    config: Config,
    buckets: std::collections::BTreeMap<u64, BucketState>,
}

impl Subject for Broken {
    fn name(&self) -> String {
        format!("broken:{:?}", self.bug)
    }

    fn acquire(&mut self, acquire: Acquire) -> Result<Observed, SubjectError> {
        let Acquire { key, cost, now, .. } = acquire;
        let created = !self.buckets.contains_key(&key);
        let state = *self
            .buckets
            .entry(key)
            .or_insert_with(|| BucketState::full(&self.config, now));
        let (mut next, mut decision) = transition(&self.config, state, Attempt { cost, now })
            .map_err(|_| SubjectError::InvalidCost)?;
        match self.bug {
            Bug::StrictAllow if decision.is_allowed() && next.balance() == 0 => {
                // `balance > cost` denies the exact fit: decide again one unit short, charge nothing.
                let refilled = state.refilled(&self.config, now);
                let one_short = state_from_parts(refilled.balance() - 1, refilled.last_refill());
                decision = transition(&self.config, one_short, Attempt { cost, now })
                    .map_err(|_| SubjectError::InvalidCost)?
                    .1;
                next = refilled;
            }
            Bug::ChargesDenials if !decision.is_allowed() => {
                let charged = next
                    .balance()
                    .saturating_sub(cost as u128 * self.config.units_per_token());
                next = state_from_parts(charged, next.last_refill());
            }
            Bug::CursorFollowsRollback if now < state.last_refill() => {
                next = state_from_parts(next.balance(), now);
            }
            _ => {}
        }
        self.buckets.insert(key, next);
        Ok(observe(&decision, created, false))
    }

    fn reconfigure(&mut self, _: u64, _: &ConfigSpec, _: u64) -> Result<(), SubjectError> {
        // Not under test here: keep the default config (the generator's reconfigures are filtered).
        Err(SubjectError::Unsupported("reconfigure"))
    }
}

/// Runs the state machine against `bug` and returns the length of the shrunk failing op list.
fn shrunk_failure_length(bug: Bug) -> Option<usize> {
    struct BrokenUnderTest;
    thread_local!(static BUG: std::cell::Cell<Bug> = const { std::cell::Cell::new(Bug::StrictAllow) });
    impl StateMachineTest for BrokenUnderTest {
        type SystemUnderTest = Sut;
        type Reference = LimiterMachine;
        fn init_test(_: &Reference) -> Sut {
            let config = setup().config.to_config().unwrap();
            sut_for(Box::new(Broken {
                bug: BUG.with(|b| b.get()),
                config,
                buckets: Default::default(),
            }))
        }
        fn apply(sut: Sut, _: &Reference, op: Op) -> Sut {
            // Only acquires: the broken subject has no reconfigure, sweep or forget.
            if matches!(op, Op::Acquire(..)) {
                step(sut, op)
            } else {
                sut
            }
        }
    }
    BUG.with(|b| b.set(bug));
    let config = ProptestConfig {
        cases: 512,
        failure_persistence: None,
        max_shrink_iters: 100_000,
        ..ProptestConfig::default()
    };
    let mut runner = TestRunner::new_with_rng(
        config.clone(),
        proptest::test_runner::TestRng::deterministic_rng(config.rng_algorithm),
    );
    let strategy = LimiterMachine::sequential_strategy(1..30);
    let result = runner.run(&strategy, |(initial, transitions, seen)| {
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            BrokenUnderTest::test_sequential(config.clone(), initial, transitions, seen)
        }));
        outcome.map_err(|_| TestCaseError::fail("oracle violated"))
    });
    match result {
        Err(TestError::Fail(_, (_, transitions, _))) => Some(
            transitions
                .iter()
                .filter(|op| matches!(op, Op::Acquire(..)))
                .count(),
        ),
        _ => None,
    }
}

/// Property: the state-machine test has teeth — each classic bug makes it fail, and proptest shrinks
/// the failure to at most 4 operations.
#[test]
fn each_classic_bug_fails_the_state_machine_with_at_most_4_steps() {
    let previous_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {})); // the expected panics would flood the output
    let results: Vec<(Bug, Option<usize>)> = [
        Bug::StrictAllow,
        Bug::ChargesDenials,
        Bug::CursorFollowsRollback,
    ]
    .into_iter()
    .map(|bug| (bug, shrunk_failure_length(bug)))
    .collect();
    std::panic::set_hook(previous_hook);
    for (bug, length) in results {
        let length = length.unwrap_or_else(|| panic!("{bug:?} survived the state-machine test"));
        assert!(length <= 4, "{bug:?} shrank to {length} steps");
    }
}

/// The reference's boundary helper agrees with the model: the boundary is allowed, 1 ns before not.
#[test]
fn boundaries_from_the_reference_are_exact() {
    let mut model = Model::new(ConfigSpec::new(CAPACITY, RATE).to_model().unwrap(), 0, 0);
    model.acquire(0, 10, CAPACITY, None).unwrap();
    let at = boundary(&model, 0, 10, 1).unwrap();
    let mut early = model.clone();
    assert!(
        !early
            .acquire(0, at - 1, 1, None)
            .unwrap()
            .decision
            .is_allowed()
    );
    assert!(model.acquire(0, at, 1, None).unwrap().decision.is_allowed());
    assert_eq!(
        model
            .acquire(0, at, 1, None)
            .unwrap()
            .decision
            .retry_after(),
        Some(ModelWait::After(666_666_667))
    );
}

/// A case's subject is dropped with its system under test, so a long run holds one case's resources
/// at a time (a Redis subject is a connection and a runtime: leaking one per case ran the process out
/// of file descriptors at 10,000 cases).
#[test]
fn each_case_drops_its_subject() {
    /// Holds a clone of the token while it is alive.
    struct Probe {
        _token: std::sync::Arc<()>,
    }
    impl Subject for Probe {
        fn name(&self) -> String {
            "probe".into()
        }
        fn acquire(&mut self, _: Acquire) -> Result<Observed, SubjectError> {
            Err(SubjectError::Unsupported("acquire"))
        }
    }
    let token = std::sync::Arc::new(());
    for _ in 0..100 {
        drop(sut_for(Box::new(Probe {
            _token: token.clone(),
        })));
    }
    assert_eq!(
        std::sync::Arc::strong_count(&token),
        1,
        "subjects still alive"
    );
}
