//! The kill runner's own trace families against the shipped limiter and against the model: every
//! family, at every seed and length the runner tries by default ([`KillOptions::default`]), must pass
//! every oracle on the exact core (`core` in the harness's registry, key bound included) and on the
//! model as a subject. A mutant's kill means something only if the real thing survives the same
//! traces.
//!
//! `BUCKETPROOF_FAMILY_SEEDS=N` runs `N` seeds per family and length instead of the default (for a
//! heavier release run); the default already covers every family at every default length.
//!
//! Below them: the two shapes the families found at the key bound, small enough to read (a
//! reconfigure of a new key refused at the bound; a key dropped by `EvictLeastRecent` for a pinned
//! one and refused when it comes back), and the refusals the eviction-legality check must still
//! reject.

use bucketproof_check::runner::{RunOptions, Verdict, run_trace};
use bucketproof_check::subjects::CoreSubject;
use bucketproof_harness::Registry;
use bucketproof_mutants::kill::KillOptions;
use bucketproof_mutants::traces::{Family, generate};
use bucketproof_trace::{
    Acquire, ConfigSpec, Inspection, Observed, Op, PolicySpec, Setup, Subject, SubjectError, Trace,
};

/// Seeds per family and length: the kill runner's default unless the environment asks for more.
fn seeds() -> u64 {
    std::env::var("BUCKETPROOF_FAMILY_SEEDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(KillOptions::default().seeds)
}

/// Every generated trace, labelled as the kill runner labels it.
fn every_trace() -> Vec<(String, Trace)> {
    let seeds = seeds();
    let mut traces = Vec::new();
    for len in KillOptions::default().lengths {
        for seed in 0..seeds {
            for family in Family::ALL {
                let label = format!("{} seed {seed}, {len} ops", family.name());
                traces.push((label, generate(family, seed, len)));
            }
        }
    }
    traces
}

/// Runs every trace against the registry's `subject` with every oracle; panics with the count and
/// the first failure unless every run passes to its end.
fn every_family_passes(subject: &str) {
    let registry = Registry::default();
    let traces = every_trace();
    let mut failures = Vec::new();
    for (label, trace) in &traces {
        let mut built = registry
            .build(subject, &trace.setup)
            .unwrap_or_else(|e| panic!("{subject} on {label}: {e}"));
        let report = run_trace(
            &trace.setup,
            trace.ops.iter().cloned(),
            built.as_mut(),
            &RunOptions::default(),
        )
        .unwrap_or_else(|e| panic!("{subject} on {label}: {e}"));
        match report.verdict {
            Verdict::Pass => {}
            Verdict::Fail(failure) => failures.push(format!(
                "{label}: step {} {:?}: {}",
                failure.step, failure.op, failure.violation
            )),
            // Both subjects support every op the families generate: stopping early is a failure.
            Verdict::Incompatible { step, reason } => {
                failures.push(format!("{label}: stopped at step {step}: {reason}"))
            }
            Verdict::Broken { step, message } => {
                failures.push(format!("{label}: broke at step {step}: {message}"))
            }
        }
    }
    // `--nocapture` shows every failure; the assertion names the first.
    for failure in &failures {
        println!("{subject}: {failure}");
    }
    assert!(
        failures.is_empty(),
        "{subject}: {} of {} generated traces fail; first: {}",
        failures.len(),
        traces.len(),
        failures[0]
    );
}

#[test]
fn every_family_passes_on_the_shipped_limiter() {
    every_family_passes("core");
}

#[test]
fn every_family_passes_on_the_model_against_the_model() {
    every_family_passes("model");
}

/// Capacity 2 at 7/5 s, a key bound of 2 over the core's 4 shards (one key per shard), no amortized
/// sweep, and `policy`.
fn one_key_per_shard(policy: PolicySpec) -> Setup {
    Setup {
        max_keys: 2,
        policy,
        sweep_per_op: 0,
        ..Setup::new(ConfigSpec::new(2, "7/5s"))
    }
}

/// Keys 0 and 3 share a shard of the core subject (its hasher seed is fixed), so at one key per
/// shard either takes the other's place.
fn shared_shard(setup: &Setup) {
    let core = CoreSubject::new(setup).expect("valid setup");
    assert_eq!(core.limiter().shard_key_bound(), 1);
    assert_eq!(core.limiter().shard_of(&0), core.limiter().shard_of(&3));
}

const SECOND: u64 = 1_000_000_000;

fn acquire(key: u64, cost: u64, now: u64) -> Op {
    Op::Acquire(Acquire {
        key,
        cost,
        now,
        request_id: None,
    })
}

fn reconfigure(key: u64, now: u64) -> Op {
    Op::Reconfigure {
        key,
        now,
        config: ConfigSpec::new(5, "1/3s"),
    }
}

fn verdict(subject: &mut dyn Subject, setup: &Setup, ops: &[Op]) -> Verdict {
    run_trace(setup, ops.iter().cloned(), subject, &RunOptions::default())
        .expect("valid setup")
        .verdict
}

fn core_verdict(setup: &Setup, ops: &[Op]) -> Verdict {
    let mut core = CoreSubject::new(setup).expect("valid setup");
    verdict(&mut core, setup, ops)
}

/// A reconfigure of a new key at the bound is refused and changes nothing: afterwards key 0 is still
/// new, with the default config (capacity 2, not the refused 5).
#[test]
fn a_reconfigure_refused_at_the_key_bound_is_legal_and_changes_nothing() {
    for policy in [PolicySpec::RejectNewKeys, PolicySpec::EvictFull] {
        let setup = one_key_per_shard(policy);
        shared_shard(&setup);
        let ops = [
            acquire(3, 2, SECOND),
            reconfigure(0, SECOND),
            Op::Forget { key: 3 },
            acquire(0, 2, SECOND),
            acquire(0, 1, SECOND),
        ];
        assert_eq!(core_verdict(&setup, &ops), Verdict::Pass, "{policy:?}");
    }
}

/// `EvictLeastRecent` drops key 3 (not full: 1.4 tokens) to make room for the pinned key 0, then
/// refuses key 3: its shard holds only a pinned key, which no policy drops.
#[test]
fn a_key_dropped_for_a_pinned_one_may_be_refused_when_it_comes_back() {
    let setup = one_key_per_shard(PolicySpec::EvictLeastRecent);
    shared_shard(&setup);
    let ops = [
        acquire(3, 2, SECOND),
        reconfigure(0, 2 * SECOND),
        acquire(3, 1, 2 * SECOND),
        // Once the pinned key is forgotten, key 3 comes back fresh.
        Op::Forget { key: 0 },
        acquire(3, 2, 2 * SECOND),
    ];
    assert_eq!(core_verdict(&setup, &ops), Verdict::Pass);
}

/// The core limiter, except that one chosen call (counting acquires and reconfigures from 0) answers
/// `KeyLimitReached` without touching the limiter: a refusal the legality check must judge.
struct RefusesCall {
    core: CoreSubject,
    refused: usize,
    calls: usize,
}

impl RefusesCall {
    fn new(setup: &Setup, refused: usize) -> RefusesCall {
        RefusesCall {
            core: CoreSubject::new(setup).expect("valid setup"),
            refused,
            calls: 0,
        }
    }

    fn refuses_now(&mut self) -> bool {
        self.calls += 1;
        self.calls - 1 == self.refused
    }
}

impl Subject for RefusesCall {
    fn name(&self) -> String {
        "refuses-call".into()
    }
    fn acquire(&mut self, acquire: Acquire) -> Result<Observed, SubjectError> {
        if self.refuses_now() {
            return Err(SubjectError::KeyLimitReached);
        }
        self.core.acquire(acquire)
    }
    fn reconfigure(&mut self, key: u64, config: &ConfigSpec, now: u64) -> Result<(), SubjectError> {
        if self.refuses_now() {
            return Err(SubjectError::KeyLimitReached);
        }
        self.core.reconfigure(key, config, now)
    }
    fn forget(&mut self, key: u64) -> Result<(), SubjectError> {
        self.core.forget(key)
    }
    fn sweep(&mut self, now: u64) -> Result<(), SubjectError> {
        self.core.sweep(now)
    }
    fn would_allow(&mut self, acquire: Acquire) -> Option<bool> {
        self.core.would_allow(acquire)
    }
    fn inspect(&mut self, key: u64) -> Inspection {
        self.core.inspect(key)
    }
    fn may_evict(&self) -> bool {
        true
    }
}

fn refusal_verdict(setup: &Setup, ops: &[Op], refused: usize) -> String {
    let mut subject = RefusesCall::new(setup, refused);
    match verdict(&mut subject, setup, ops) {
        Verdict::Fail(failure) => failure.violation.what,
        other => format!("{other:?}"),
    }
}

/// The legality check still has teeth: it rejects a refusal of a key the subject cannot have
/// dropped (not evictable under a lossless policy; pinned under any), and under `EvictLeastRecent`
/// a refusal while no key is pinned (that policy had an unpinned key to drop).
#[test]
fn refusals_without_cause_are_still_caught() {
    let illegal = "refused a key at the key bound without cause";
    // Key 1 emptied, then refused while not full: only a lossy policy may have dropped it, and
    // `EvictLeastRecent` refuses only when the keys it sees are all pinned; none is.
    let ops = [acquire(1, 2, SECOND), acquire(1, 1, SECOND)];
    for policy in [
        PolicySpec::RejectNewKeys,
        PolicySpec::EvictFull,
        PolicySpec::EvictLeastRecent,
    ] {
        let setup = one_key_per_shard(policy);
        assert_eq!(refusal_verdict(&setup, &ops, 1), illegal, "{policy:?}");
    }
    // A pinned key is never dropped: refusing its reconfigure or its acquire is illegal, even
    // under `EvictLeastRecent` while it holds a pinned key.
    let setup = one_key_per_shard(PolicySpec::EvictLeastRecent);
    let ops = [reconfigure(1, SECOND), reconfigure(1, SECOND)];
    assert_eq!(refusal_verdict(&setup, &ops, 1), illegal);
    let ops = [reconfigure(1, SECOND), acquire(1, 1, SECOND)];
    assert_eq!(refusal_verdict(&setup, &ops, 1), illegal);
    // And the legal ones pass: under `EvictLeastRecent` with a pinned key held, an unpinned key
    // may have been dropped; under `EvictFull`, a new key may be refused while the held ones are
    // not evictable.
    let ops = [
        acquire(2, 2, SECOND),
        reconfigure(1, SECOND),
        acquire(2, 1, SECOND),
    ];
    assert_eq!(refusal_verdict(&setup, &ops, 2), "Pass");
    let ops = [acquire(2, 2, SECOND), reconfigure(1, SECOND)];
    assert_eq!(
        refusal_verdict(&setup, &ops, 1),
        illegal,
        "no pinned key held"
    );
    let setup = one_key_per_shard(PolicySpec::EvictFull);
    assert_eq!(refusal_verdict(&setup, &ops, 1), "Pass");
}
