//! The expiry mutants (a horizon kept at the stored cursor, no horizon) are killed by the kill
//! runner's generated traces and by the hand-written trace of the product bug they stand for: the
//! eviction-legality oracle sees a recreated bucket whose old state was not evictable at the fresh
//! cursor. Request ids judged in the caller's clock (a rollback inside the window) are killed by the
//! differential oracle on the product bugs' traces. And the control: the wrapper sweeping before
//! every acquire, with no mistake, passes every trace the kill runner tries.

use bucketproof_check::runner::{RunOptions, failure_of};
use bucketproof_mutants::keyed::{CallerTimeRecords, Exact, Keyed, Mistake};
use bucketproof_mutants::kill::{KillOptions, MAX_SHRUNK_OPS, first_violation, kill};
use bucketproof_mutants::traces::{Family, generate};
use bucketproof_mutants::{MutantSubjects, catalogue};
use bucketproof_trace::{Acquire, ConfigSpec, Op, Setup, Trace};

const SECOND: u64 = 1_000_000_000;

fn acquire(cost: u64, now: u64, request_id: Option<u64>) -> Op {
    Op::Acquire(Acquire {
        key: 0,
        cost,
        now,
        request_id,
    })
}

/// Capacity 2 at 1/s: emptied at 10 s, swept full at 13 s, used again at 10 s.
fn swept_then_rolled_back() -> Trace {
    Trace {
        setup: Setup::new(ConfigSpec::new(2, "1/s")),
        ops: vec![
            acquire(2, 10 * SECOND, None),
            Op::Sweep { now: 13 * SECOND },
            acquire(2, 10 * SECOND, None),
        ],
    }
}

fn with_ids(capacity: u64, window: u64, ops: Vec<Op>) -> Trace {
    let mut setup = Setup::new(ConfigSpec::new(capacity, "1/s"));
    setup.dedupe_window_ns = window;
    setup.dedupe_per_key = 4;
    Trace { setup, ops }
}

/// Capacity 5 at 1/s, window 1 s: the key is at 20 s when id 7 is recorded at caller time 5 s, and
/// retried at caller time 7 s (inside the window in the key's time, outside in the caller's).
fn id_recorded_while_the_caller_lags() -> Trace {
    with_ids(
        5,
        SECOND,
        vec![
            acquire(1, 20 * SECOND, None),
            acquire(1, 5 * SECOND, Some(7)),
            acquire(1, 7 * SECOND, Some(7)),
        ],
    )
}

/// Capacity 5 at 1/s, window 1 s: id 7 at 10 s, the key moves on to 20 s, the retry comes at caller
/// time 10.5 s: dead in the key's time, inside the window in the caller's.
fn id_dead_then_rolled_back() -> Trace {
    with_ids(
        5,
        SECOND,
        vec![
            acquire(1, 10 * SECOND, Some(7)),
            acquire(1, 20 * SECOND, None),
            acquire(1, 10 * SECOND + SECOND / 2, Some(7)),
        ],
    )
}

fn failure<M: Mistake>(mistake: M, eager: bool, trace: &Trace) -> Option<String> {
    let mut subject = Keyed::new("expiry", mistake, &trace.setup).unwrap();
    if eager {
        subject = subject.sweeping_before_every_acquire();
    }
    failure_of(trace, &mut subject, &RunOptions::default())
        .map(|failure| format!("step {}: {:?}", failure.step, failure.violation))
}

fn mutant_name(slug: &str) -> String {
    catalogue()
        .iter()
        .find(|m| m.slug == slug)
        .unwrap_or_else(|| panic!("{slug} is in the catalogue"))
        .name()
}

#[test]
fn the_control_passes_the_expiry_traces_and_every_generated_trace_when_sweeping_eagerly() {
    let hand = [
        swept_then_rolled_back(),
        id_recorded_while_the_caller_lags(),
        id_dead_then_rolled_back(),
    ];
    for (i, trace) in hand.iter().enumerate() {
        for eager in [false, true] {
            assert_eq!(
                failure(Exact, eager, trace),
                None,
                "trace {i}, eager {eager}"
            );
        }
    }
    let options = KillOptions::default();
    for &len in &options.lengths {
        for seed in 0..options.seeds {
            // The keyed wrapper holds one bandwidth per key: the families of several are the set
            // mutants' (their control is the real limiter, in `kill.rs`).
            for family in Family::ALL.into_iter().filter(|&f| f != Family::Bandwidths) {
                let trace = generate(family, seed, len);
                assert_eq!(
                    failure(Exact, true, &trace),
                    None,
                    "{} seed {seed}, {len} ops",
                    family.name()
                );
            }
        }
    }
}

#[test]
fn a_horizon_at_the_stored_cursor_or_none_is_an_illegal_recreation() {
    for slug in ["horizon-stored-cursor", "no-horizon"] {
        let violation = first_violation(
            &MutantSubjects,
            &mutant_name(slug),
            &swept_then_rolled_back(),
        )
        .expect("a catalogue mutant builds")
        .unwrap_or_else(|| panic!("{slug} survived"));
        assert_eq!(
            violation.what,
            "the subject recreated a bucket that was not evictable at its fresh cursor",
            "{slug}: {violation:?}"
        );
    }
}

#[test]
fn request_ids_in_caller_time_are_seen_by_the_model() {
    for trace in [
        id_recorded_while_the_caller_lags(),
        id_dead_then_rolled_back(),
    ] {
        let found =
            failure(CallerTimeRecords, false, &trace).expect("caller-time records survived");
        assert!(found.contains("oracle: Model"), "{found}");
    }
}

#[test]
fn the_kill_runner_kills_every_expiry_mutant_with_a_small_counterexample() {
    for slug in ["horizon-stored-cursor", "no-horizon"] {
        let found = catalogue().iter().find(|m| m.slug == slug).unwrap();
        let killed = kill(found, &MutantSubjects, &KillOptions::default())
            .expect("a catalogue mutant builds");
        println!(
            "{slug}: {} after {} traces, {:?}, shrunk to {:?} ops",
            killed.found_by, killed.attempts, killed.violation, killed.shrunk_ops
        );
        assert!(killed.killed(), "{slug}: {}", killed.found_by);
        assert!(
            killed.shrunk_ops.is_some_and(|ops| ops <= MAX_SHRUNK_OPS),
            "{slug}: {:?} ops",
            killed.shrunk_ops
        );
    }
}
