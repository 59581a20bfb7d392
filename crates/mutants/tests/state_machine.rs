//! The harness's state machine against the catalogue's arithmetic mutants: on the configs on the
//! lines (`boundary::configs`, whose boundary values `Options::new` puts on the menu) it kills each
//! mutant a single line value reveals, with a counterexample of at most 6 ops. (The configs do most
//! of the work here: the state machine already jumps by years and to the end of the clock, so on
//! these configs an empty menu kills the same three.)

use bucketproof_check::state_machine::{self, OpKinds, Options, Outcome};
use bucketproof_harness::Registry;
use bucketproof_mutants::MutantSubjects;
use bucketproof_trace::boundary;
use bucketproof_trace::duration::SECOND;
use bucketproof_trace::{BandwidthSpec, ConfigSpec, Setup};

/// The mistakes a single value on an arithmetic line reveals. `packed-line-off-by-one` and
/// `clock-end-exclusive` need two ops in a row on their lines (empty the bucket, then land exactly on
/// the line); the state machine draws those rarely, and the kill runner's arithmetic family and the
/// `packed-line` and `clock-end-exact` scenarios kill them.
const ARITHMETIC: [&str; 3] = [
    "mutant:wrapping-credit",
    "mutant:capacity-units-u64",
    "mutant:wrapping-refill-sum",
];

fn options(config: ConfigSpec) -> Options {
    let mut setup = Setup::new(config);
    setup.dedupe_window_ns = 5 * SECOND;
    let mut options = Options::new(setup);
    options.ops = OpKinds::acquires_only();
    options.keys = 1;
    options.cases = 256;
    options.deterministic = true;
    options
}

fn outcome(name: &str, options: &Options) -> Outcome {
    let registry = Registry::default().with(MutantSubjects);
    state_machine::run(&|setup| registry.build(name, setup), options).unwrap()
}

#[test]
fn the_boundary_menu_kills_every_arithmetic_mutant_in_at_most_6_ops() {
    // The configs on the lines: each mutant's line lies within the clock for at least one of them.
    for name in ARITHMETIC {
        let caught = boundary::configs()
            .into_iter()
            .map(|config| outcome(name, &options(config)))
            .find(|outcome| matches!(outcome, Outcome::Violated { .. }));
        let Some(Outcome::Violated { trace, .. }) = &caught else {
            panic!("{name} survived the state machine on every config on the lines");
        };
        eprintln!("{name}: {} ops", trace.ops.len());
        assert!(trace.ops.len() <= 6, "{name}: {}", caught.as_ref().unwrap());
    }
}

/// The multi-limit mistakes under the state machine on a key of three bandwidths (a burst, a
/// sustained rate that refills between nanoseconds, a slow quota), with sweeps and forgets (the chain
/// of limiters has no reconfigure): each is caught, and shrunk to at most 6 ops. The real limiter
/// passes the same cases (the control).
#[test]
fn the_state_machine_kills_every_multi_limit_mutant_in_at_most_6_ops() {
    let config = ConfigSpec::set([
        BandwidthSpec::new(3, "3/s").named("burst"),
        BandwidthSpec::new(5, "3/2s").named("sustained"),
        BandwidthSpec::new(8, "1/min").named("quota"),
    ]);
    let mut options = options(config);
    options.ops = OpKinds {
        reconfigure: false,
        settle: false,
        ..OpKinds::all()
    };
    options.keys = 2;
    let control = outcome("core", &options);
    assert!(control.passed(), "{control}");
    for name in [
        "mutant:charge-in-order",
        "mutant:smallest-wait",
        "mutant:one-rate",
    ] {
        let caught = outcome(name, &options);
        let Outcome::Violated { trace, .. } = &caught else {
            panic!("{name} survived the state machine: {caught}");
        };
        eprintln!("{name}: {} ops", trace.ops.len());
        assert!(trace.ops.len() <= 6, "{name}: {caught}");
    }
}

/// The classic refund mistakes of reserve-and-settle (refund twice, refund above capacity, refund
/// another key's request) under the state machine: acquires with request ids and settles on two
/// keys, with sweeps and forgets. Each is caught and shrunk to at most 6 ops; the real limiter
/// passes the same cases (the control).
#[test]
fn the_state_machine_kills_every_refund_mutant_in_at_most_6_ops() {
    let mut options = options(ConfigSpec::new(4, "3/2s"));
    options.ops = OpKinds {
        reconfigure: false,
        ..OpKinds::all()
    };
    options.keys = 2;
    options.request_ids = 2;
    let control = outcome("core", &options);
    assert!(control.passed(), "{control}");
    for name in [
        "mutant:refund-twice",
        "mutant:refund-above-capacity",
        "mutant:refund-other-keys-request",
    ] {
        let caught = outcome(name, &options);
        let Outcome::Violated { trace, .. } = &caught else {
            panic!("{name} survived the state machine: {caught}");
        };
        eprintln!("{name}: {} ops: {caught}", trace.ops.len());
        assert!(trace.ops.len() <= 6, "{name}: {caught}");
    }
}
