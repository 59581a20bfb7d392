//! The shrinker: reduces a failing trace to a small one that fails the same way, within a budget.
//!
//! Owns every shrinking pass and the budget that bounds them. The passes, in order:
//! 1. the failing key's slice: every op on another key dropped at once (most bugs live on one key,
//!    and a trace with thousands of keys would otherwise take thousands of runs to lose them);
//! 2. delta debugging over ops (drop chunks, halving the chunk size down to single ops);
//! 3. value simplification (costs to 1, request ids dropped, keys renumbered from 0, times shifted so
//!    the first is 0);
//! 4. merging two adjacent acquires on one key into one of their summed cost (which can enable further
//!    deletions, so passes 2-4 alternate until a merge no longer helps);
//! 5. rounding each time down to a whole second, millisecond or microsecond.
//!
//! Promises:
//! - a candidate is kept only if it still fails with the same [`Violation::signature`], so the minimal
//!   trace shows the original bug rather than another one; a kept candidate is cut after the op that
//!   failed (later ops cannot matter to it);
//! - the work is bounded by a [`ShrinkBudget`] (runs, ops stepped through the runner, wall time), and
//!   [`Shrunk::budget_exhausted`] says when it cut shrinking short; the trace returned then still
//!   fails the same way, it is only not as small as it could be;
//! - memory is one copy of the trace plus what one edit removed: each candidate is an edit of the
//!   best trace in place, undone when the candidate does not fail the same way;
//! - the result is a function of the trace and the predicate, unless the time budget was hit.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::oracle::{OracleKind, Violation};
use crate::runner::Failure;
use bucketproof_trace::duration::SECOND;
use bucketproof_trace::trace::{Acquire, Op, Settle, Trace};

/// Bounds on the work of one shrink. Whichever runs out first ends shrinking.
///
/// The runs and steps bounds are deterministic (the same trace shrinks to the same result on every
/// machine); the time bound is a backstop for very long traces, and a result cut short by it depends
/// on the machine's speed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShrinkBudget {
    /// At most this many trial runs. Default 4,000.
    pub runs: usize,
    /// At most this many ops stepped through the runner over all trial runs, counting each trial as
    /// its whole candidate. Default 20,000,000: about 20-40 s of trial runs in a release build.
    pub steps: u64,
    /// At most this much wall time. Default 60 s.
    pub time: Duration,
}

impl Default for ShrinkBudget {
    fn default() -> Self {
        ShrinkBudget {
            runs: 4_000,
            steps: 20_000_000,
            time: Duration::from_secs(60),
        }
    }
}

impl ShrinkBudget {
    /// The default budget with at most `runs` trial runs (0: do not shrink).
    pub fn runs(runs: usize) -> ShrinkBudget {
        ShrinkBudget {
            runs,
            ..ShrinkBudget::default()
        }
    }
}

/// What shrinking produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shrunk {
    /// The smallest failing trace found.
    pub trace: Trace,
    /// Its violation (the same signature as the original's).
    pub violation: Violation,
    /// Trial runs made.
    pub runs: usize,
    /// Ops stepped through over all trial runs (each counted as its whole candidate).
    pub steps: u64,
    /// The budget ended shrinking before the passes were done.
    pub budget_exhausted: bool,
}

/// Shrinks `trace`, which fails with `original` under `fails` (a predicate that runs a trace and
/// returns its first failure), within `budget`.
pub fn shrink(
    trace: Trace,
    original: &Violation,
    budget: &ShrinkBudget,
    fails: impl FnMut(&Trace) -> Option<Failure>,
) -> Shrunk {
    let mut shrinker = Shrinker {
        signature: original.signature(),
        best: trace,
        violation: original.clone(),
        fails,
        budget: budget.clone(),
        started: Instant::now(),
        runs: 0,
        steps: 0,
        exhausted: false,
    };
    shrinker.slice_failing_key();
    loop {
        shrinker.delta_debug();
        shrinker.simplify_values();
        if !shrinker.merge_acquires() {
            break;
        }
    }
    shrinker.round_times();
    Shrunk {
        trace: shrinker.best,
        violation: shrinker.violation,
        runs: shrinker.runs,
        steps: shrinker.steps,
        budget_exhausted: shrinker.exhausted,
    }
}

struct Shrinker<F> {
    signature: (OracleKind, String),
    /// The smallest failing trace so far; a candidate is this trace edited in place until judged.
    best: Trace,
    violation: Violation,
    fails: F,
    budget: ShrinkBudget,
    started: Instant,
    runs: usize,
    steps: u64,
    exhausted: bool,
}

impl<F: FnMut(&Trace) -> Option<Failure>> Shrinker<F> {
    /// Judges the candidate that `best` currently holds: true if it fails the same way (it is kept,
    /// cut after its failing op); false if not or if the budget does not allow the run (the caller
    /// undoes its edit either way).
    fn judge(&mut self) -> bool {
        let len = self.best.ops.len() as u64;
        if self.exhausted
            || self.runs >= self.budget.runs
            || self.steps.saturating_add(len) > self.budget.steps
            || self.started.elapsed() >= self.budget.time
        {
            self.exhausted = true;
            return false;
        }
        self.runs += 1;
        self.steps += len;
        match (self.fails)(&self.best) {
            Some(failure) if failure.violation.signature() == self.signature => {
                self.best
                    .ops
                    .truncate(failure.step.saturating_add(1) as usize);
                self.violation = failure.violation;
                true
            }
            _ => false,
        }
    }

    /// Tries `best` without `start..end`; restores the range if that does not fail the same way.
    fn try_remove(&mut self, start: usize, end: usize) -> bool {
        let removed: Vec<Op> = self.best.ops.drain(start..end).collect();
        if self.judge() {
            return true;
        }
        self.best.ops.splice(start..start, removed);
        false
    }

    /// Tries `best` with op `index` replaced by `op`; restores it if that does not fail the same way.
    fn try_replace(&mut self, index: usize, op: Op) -> bool {
        let old = std::mem::replace(&mut self.best.ops[index], op);
        if self.judge() {
            return true;
        }
        self.best.ops[index] = old;
        false
    }

    /// Tries `best` with every op passed through `edit`, which must be undone by `undo`.
    fn try_map(&mut self, edit: impl Fn(&mut Op), undo: impl Fn(&mut Op)) -> bool {
        self.best.ops.iter_mut().for_each(&edit);
        if self.judge() {
            return true;
        }
        self.best.ops.iter_mut().for_each(&undo);
        false
    }

    /// Pass 1: only the failing op's key, first without, then with the ops that have no key (sweeps).
    fn slice_failing_key(&mut self) {
        let Some(key) = self.best.ops.last().and_then(Op::key) else {
            return;
        };
        for keep_keyless in [false, true] {
            let keep = |op: &Op| op.key().map_or(keep_keyless, |k| k == key);
            if self.best.ops.iter().all(keep) {
                return;
            }
            let all = std::mem::take(&mut self.best.ops);
            self.best.ops = all.iter().filter(|op| keep(op)).cloned().collect();
            if self.judge() {
                return;
            }
            self.best.ops = all;
        }
    }

    /// Pass 2: delta debugging over ops.
    fn delta_debug(&mut self) {
        let mut chunk = self.best.ops.len().div_ceil(2).max(1);
        while !self.exhausted {
            let mut start = 0;
            let mut removed_any = false;
            while start < self.best.ops.len() && !self.exhausted {
                let end = (start + chunk).min(self.best.ops.len());
                if self.try_remove(start, end) {
                    removed_any = true;
                } else {
                    start = end;
                }
            }
            if chunk == 1 && !removed_any {
                break;
            }
            if !removed_any {
                chunk = chunk.div_ceil(2);
            }
        }
    }

    /// Pass 3: simpler values, one op at a time, then keys and times, until nothing changes.
    fn simplify_values(&mut self) {
        let mut changed = true;
        while changed && !self.exhausted {
            changed = false;
            let mut index = 0;
            while index < self.best.ops.len() {
                for candidate in simpler(&self.best.ops[index]) {
                    if self.try_replace(index, candidate) {
                        changed = true;
                        break;
                    }
                }
                index += 1;
            }
            changed |= self.renumber_keys();
            changed |= self.shift_times();
        }
    }

    /// Keys renumbered 0, 1, 2, ... in order of first use.
    fn renumber_keys(&mut self) -> bool {
        let mut rename: BTreeMap<u64, u64> = BTreeMap::new();
        for key in self.best.ops.iter().filter_map(Op::key) {
            let next = rename.len() as u64;
            rename.entry(key).or_insert(next);
        }
        if rename.iter().all(|(old, new)| old == new) {
            return false;
        }
        let back: BTreeMap<u64, u64> = rename.iter().map(|(&old, &new)| (new, old)).collect();
        self.try_map(|op| rename_key(op, &rename), |op| rename_key(op, &back))
    }

    /// Every time shifted down so the earliest is 0 (differences, hence refills, are unchanged).
    fn shift_times(&mut self) -> bool {
        let Some(earliest) = self.best.ops.iter().filter_map(Op::now).min() else {
            return false;
        };
        if earliest == 0 {
            return false;
        }
        self.try_map(
            |op| set_time(op, |now| now - earliest),
            |op| set_time(op, |now| now + earliest),
        )
    }

    /// Pass 4: the first merge of two adjacent acquires on the same key into one whose cost is their
    /// sum (at either op's time) that still fails the same way, e.g. five single-token requests that
    /// drain a bucket become one request for five tokens. True if one was kept.
    fn merge_acquires(&mut self) -> bool {
        let mut index = 0;
        while index + 1 < self.best.ops.len() && !self.exhausted {
            if let Some((key, times, total)) =
                mergeable(&self.best.ops[index], &self.best.ops[index + 1])
            {
                for now in times {
                    let merged = Op::Acquire(Acquire {
                        key,
                        cost: total,
                        now,
                        request_id: None,
                    });
                    let old = std::mem::replace(&mut self.best.ops[index], merged);
                    let next = self.best.ops.remove(index + 1);
                    if self.judge() {
                        return true;
                    }
                    self.best.ops[index] = old;
                    self.best.ops.insert(index + 1, next);
                }
            }
            index += 1;
        }
        false
    }

    /// Pass 5: each op's time rounded down to a whole second, millisecond or microsecond when the trace
    /// still fails the same way, so a counterexample reads `now: 3000000000` rather than
    /// `now: 2899729074` wherever the exact value does not matter.
    fn round_times(&mut self) {
        let mut index = 0;
        while index < self.best.ops.len() && !self.exhausted {
            for unit in [SECOND, SECOND / 1_000, SECOND / 1_000_000] {
                let Some(now) = self.best.ops[index].now() else {
                    break;
                };
                if now % unit == 0 {
                    break; // already round at this unit, hence at the finer ones
                }
                let mut candidate = self.best.ops[index].clone();
                set_time(&mut candidate, |now| now - now % unit);
                if self.try_replace(index, candidate) {
                    break;
                }
            }
            index += 1;
        }
    }
}

/// Simpler variants of one op, simplest first.
fn simpler(op: &Op) -> Vec<Op> {
    let mut out = Vec::new();
    if let Op::Acquire(acquire) = op {
        if acquire.request_id.is_some() {
            out.push(Op::Acquire(Acquire {
                request_id: None,
                ..*acquire
            }));
        }
        if acquire.cost > 1 {
            out.push(Op::Acquire(Acquire {
                cost: 1,
                ..*acquire
            }));
            out.push(Op::Acquire(Acquire {
                cost: acquire.cost / 2,
                ..*acquire
            }));
        }
    }
    out
}

/// Two acquires without request ids on one key: the key, the two times to try, the summed cost.
fn mergeable(first: &Op, second: &Op) -> Option<(u64, [u64; 2], u64)> {
    let (
        Op::Acquire(Acquire {
            key,
            cost,
            now,
            request_id: None,
        }),
        Op::Acquire(Acquire {
            key: next_key,
            cost: next_cost,
            now: next_now,
            request_id: None,
        }),
    ) = (first, second)
    else {
        return None;
    };
    (key == next_key).then_some(())?;
    Some((*key, [*now, *next_now], cost.checked_add(*next_cost)?))
}

/// Renames an op's key (if it has one) by `map`, which holds every key of the trace.
fn rename_key(op: &mut Op, map: &BTreeMap<u64, u64>) {
    if let Op::Acquire(Acquire { key, .. })
    | Op::Reconfigure { key, .. }
    | Op::Forget { key }
    | Op::Settle(Settle { key, .. }) = op
    {
        *key = map.get(key).copied().unwrap_or(*key);
    }
}

/// Sets an op's time (if it has one) to `to(time)`.
fn set_time(op: &mut Op, to: impl Fn(u64) -> u64) {
    match op {
        Op::Acquire(Acquire { now, .. })
        | Op::Reconfigure { now, .. }
        | Op::Sweep { now }
        | Op::Settle(Settle { now, .. }) => *now = to(*now),
        Op::Forget { .. } => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::{RunOptions, failure_of};
    use crate::subjects::CoreSubject;
    use crate::subjects::broken::{BrokenSubjects, CHARGES_DENIALS};
    use bucketproof_trace::{ConfigSpec, Setup, Subject, SubjectFactory};

    /// Runs `trace` on a fresh subject from `build`, counting the ops it is handed into `steps`.
    fn run_counted(
        trace: &Trace,
        steps: &mut u64,
        build: impl Fn(&Setup) -> Box<dyn Subject>,
    ) -> Option<Failure> {
        *steps += trace.ops.len() as u64;
        failure_of(trace, build(&trace.setup).as_mut(), &RunOptions::default())
    }

    /// `keys` pinned keys (a tier: one reconfigure each at time 0), then `acquires` acquires of cost 1
    /// every 10 ms, round robin over the first 4 keys.
    fn tier_trace(setup: Setup, keys: u64, acquires: u64) -> Trace {
        let tier = ConfigSpec::new(5, "2/s");
        let reconfigures = (0..keys).map(|key| Op::Reconfigure {
            key,
            now: 0,
            config: tier.clone(),
        });
        let acquires = (0..acquires).map(|i| {
            Op::Acquire(Acquire {
                key: i % 4,
                cost: 1,
                now: i * 10_000_000,
                request_id: None,
            })
        });
        Trace {
            setup,
            ops: reconfigures.chain(acquires).collect(),
        }
    }

    /// A bug on one key at the end of a trace with an 8,192-key tier: the slice of the failing key
    /// removes the other 8,191 keys in one run, so shrinking takes a few dozen runs, not thousands.
    #[test]
    fn a_one_key_bug_behind_a_huge_tier_shrinks_in_few_runs() {
        let broken = |setup: &Setup| {
            BrokenSubjects
                .build(CHARGES_DENIALS, setup)
                .unwrap()
                .unwrap()
        };
        let trace = tier_trace(Setup::new(ConfigSpec::new(3, "1/s")), 8_192, 2_000);
        let mut steps = 0;
        let failure = run_counted(&trace, &mut steps, broken).expect("the fixture fails");
        let cut = Trace {
            setup: trace.setup.clone(),
            ops: trace.ops[..=failure.step as usize].to_vec(),
        };
        let budget = ShrinkBudget::default();
        let shrunk = shrink(cut, &failure.violation, &budget, |candidate| {
            run_counted(candidate, &mut steps, broken)
        });
        assert!(!shrunk.budget_exhausted, "{} runs", shrunk.runs);
        assert!(shrunk.trace.ops.len() <= 3, "{:?}", shrunk.trace.ops);
        assert_eq!(shrunk.violation.signature(), failure.violation.signature());
        assert!(shrunk.runs <= 40, "{} runs", shrunk.runs);
        // The checking run, the slice's one run over the whole trace, then runs of a few hundred ops.
        assert!(steps <= 3 * 8_192, "{steps} steps");
    }

    /// The core, claiming it never evicts: then any refusal at its key bound is a failure (a subject
    /// without eviction has no bound to hit), so a failure that needs a full shard.
    struct ClaimsNoEviction(CoreSubject);

    impl Subject for ClaimsNoEviction {
        fn name(&self) -> String {
            "claims-no-eviction".into()
        }
        fn acquire(
            &mut self,
            acquire: Acquire,
        ) -> Result<bucketproof_trace::Observed, bucketproof_trace::SubjectError> {
            self.0.acquire(acquire)
        }
        fn reconfigure(
            &mut self,
            key: u64,
            config: &ConfigSpec,
            now: u64,
        ) -> Result<(), bucketproof_trace::SubjectError> {
            self.0.reconfigure(key, config, now)
        }
    }

    /// A failure that needs many keys (more pinned keys than one shard of the core holds, refused by
    /// a subject that claims no key bound) cannot shrink below hundreds of ops, and delta debugging
    /// over them costs runs times ops: the step budget ends it, the result says so, and what it
    /// returns still fails the same way.
    #[test]
    fn a_many_key_failure_stops_at_the_step_budget_and_says_so() {
        let core = |setup: &Setup| {
            Box::new(ClaimsNoEviction(CoreSubject::new(setup).unwrap())) as Box<dyn Subject>
        };
        let mut setup = Setup::new(ConfigSpec::new(3, "1/s"));
        setup.max_keys = 256; // 64 per shard of the core's 4
        let trace = tier_trace(setup, 1_024, 0);
        let mut steps = 0;
        let failure = run_counted(&trace, &mut steps, core).expect("a shard overflows");
        assert!(failure.violation.to_string().contains("key limit reached"));
        let budget = ShrinkBudget {
            steps: 50_000,
            ..ShrinkBudget::default()
        };
        steps = 0;
        let shrunk = shrink(trace, &failure.violation, &budget, |candidate| {
            run_counted(candidate, &mut steps, core)
        });
        assert!(
            steps <= budget.steps,
            "{steps} steps run, budget {}",
            budget.steps
        );
        assert_eq!(shrunk.steps, steps);
        assert!(shrunk.budget_exhausted);
        let again = run_counted(&shrunk.trace, &mut 0, core).expect("still fails");
        assert_eq!(again.violation.signature(), failure.violation.signature());
        assert_eq!(again.step as usize + 1, shrunk.trace.ops.len());
    }
}
