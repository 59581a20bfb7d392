//! Histories of [`DirectLimiter`] calls from several threads, and the checks every explored execution
//! of one must pass (used by the loom and shuttle suites).
//!
//! - **Atomicity (linearizability):** some sequential order of all calls that keeps each thread's
//!   program order and real-time order (a call that returned before another was invoked goes first)
//!   yields exactly the observed results when replayed through the crate's sequential
//!   [`transition`] / [`snapshot`] from a full bucket, and leaves exactly the limiter's final state.
//!   (The sequential semantics themselves are checked elsewhere: the direct limiter against one key of
//!   the keyed limiter, the keyed limiter against the reference model. Here the question is only
//!   whether the lock makes each call one indivisible step.)
//! - **No overselling:** admitted cost `<= capacity + rate * (t_max - t_min)`, in exact units.
//! - **Invariants:** the final balance is at most the capacity, the cursor is the latest `now` of a
//!   decided acquire.

use std::collections::HashSet;
use std::fmt;

use super::history::LogicalClock;
use bucketproof_limiter::internal::{Attempt, snapshot, transition};
use bucketproof_limiter::{
    AcquireError, BucketState, Clock, Config, Decision, DirectLimiter, Nanos, Snapshot,
};

/// What a call returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DirectRet {
    Acquired(Result<Decision, AcquireError>),
    Peeked(Snapshot),
}

/// One recorded call.
#[derive(Clone, Debug)]
pub struct DirectOp {
    pub thread: usize,
    /// Logical-clock stamps around the call (the explorers run one thread at a time, so a plain
    /// counter gives the real order of these two points).
    pub invoked: u64,
    pub returned: u64,
    pub now: Nanos,
    /// `None` for a peek.
    pub cost: Option<u64>,
    pub ret: DirectRet,
}

impl fmt::Display for DirectOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let call = match self.cost {
            Some(cost) => format!("acquire({cost})"),
            None => "peek".to_string(),
        };
        let ret = match &self.ret {
            DirectRet::Acquired(Ok(d)) => format!(
                "{} remaining {:?} retry_after {:?}",
                if d.is_allowed() { "allowed" } else { "denied" },
                d.remaining().as_ratio(),
                d.retry_after()
            ),
            DirectRet::Acquired(Err(e)) => format!("error {e}"),
            DirectRet::Peeked(s) => format!("remaining {:?}", s.remaining.as_ratio()),
        };
        write!(
            f,
            "thread {} [{}..{}] {call} at {} -> {ret}",
            self.thread, self.invoked, self.returned, self.now
        )
    }
}

/// Stamps calls with one logical clock and turns them into [`DirectOp`]s.
#[derive(Default)]
pub struct DirectRecorder {
    clock: LogicalClock,
}

impl DirectRecorder {
    pub fn new() -> DirectRecorder {
        DirectRecorder::default()
    }

    fn record(
        &self,
        thread: usize,
        now: Nanos,
        cost: Option<u64>,
        call: impl FnOnce() -> DirectRet,
    ) -> DirectOp {
        let (invoked, ret, returned) = self.clock.around(call);
        DirectOp {
            thread,
            invoked,
            returned,
            now,
            cost,
            ret,
        }
    }

    pub fn acquire<C: Clock>(
        &self,
        limiter: &DirectLimiter<C>,
        thread: usize,
        now: Nanos,
        cost: u64,
    ) -> DirectOp {
        self.record(thread, now, Some(cost), || {
            DirectRet::Acquired(limiter.acquire_at(cost, now))
        })
    }

    pub fn peek<C: Clock>(
        &self,
        limiter: &DirectLimiter<C>,
        thread: usize,
        now: Nanos,
    ) -> DirectOp {
        self.record(thread, now, None, || {
            DirectRet::Peeked(limiter.peek_at(now))
        })
    }
}

/// Admitted cost over the history, in tokens.
pub fn admitted(ops: &[DirectOp]) -> u64 {
    ops.iter()
        .filter_map(|op| match (&op.ret, op.cost) {
            (DirectRet::Acquired(Ok(d)), Some(cost)) if d.is_allowed() => Some(cost),
            _ => None,
        })
        .sum()
}

/// Every check above; `Err` carries the history.
pub fn check_direct<C: Clock>(
    config: &Config,
    limiter: &DirectLimiter<C>,
    ops: &[DirectOp],
) -> Result<(), String> {
    let (final_state, final_config) = limiter.inspect();
    let mut problems = Vec::new();
    if final_config != *config {
        problems.push("the config changed".to_string());
    }
    // No overselling, over the decided acquires (peeks and errors move nothing).
    let times = ops
        .iter()
        .filter(|op| matches!(op.ret, DirectRet::Acquired(Ok(_))))
        .map(|op| op.now);
    if let (Some(t_min), Some(t_max)) = (times.clone().min(), times.max()) {
        let admitted_units = admitted(ops) as u128 * config.units_per_token();
        let curve = config.capacity_units()
            + (t_max - t_min) as u128 * config.units_per_nanosecond() as u128;
        if admitted_units > curve {
            problems.push(format!(
                "oversold: admitted {} tokens, arrival curve {:?} units",
                admitted(ops),
                curve
            ));
        }
        if final_state.last_refill() != t_max {
            problems.push(format!(
                "cursor at {} after a call at {t_max}",
                final_state.last_refill()
            ));
        }
    }
    if final_state.balance() > config.capacity_units() {
        problems.push("final balance above capacity".to_string());
    }
    // Atomicity.
    let mut threads: Vec<Vec<&DirectOp>> = Vec::new();
    for op in ops {
        if threads.len() <= op.thread {
            threads.resize(op.thread + 1, Vec::new());
        }
        threads[op.thread].push(op);
    }
    for thread in &mut threads {
        thread.sort_by_key(|op| op.invoked);
    }
    let mut positions = vec![0; threads.len()];
    let mut dead_ends = HashSet::new();
    let start = BucketState::full(config, 0);
    if !linearize(
        config,
        &threads,
        &mut positions,
        start,
        final_state,
        &mut dead_ends,
    ) {
        problems.push("not linearizable: no sequential order of the transition explains it".into());
    }
    if problems.is_empty() {
        return Ok(());
    }
    let mut sorted: Vec<&DirectOp> = ops.iter().collect();
    sorted.sort_by_key(|op| op.invoked);
    let history: Vec<String> = sorted.iter().map(|op| format!("  {op}")).collect();
    Err(format!(
        "{}\nfinal state {final_state:?}\nhistory:\n{}",
        problems.join("\n"),
        history.join("\n")
    ))
}

/// Depth-first search for a sequential order; `dead_ends` memoizes (positions, state) already refuted.
fn linearize(
    config: &Config,
    threads: &[Vec<&DirectOp>],
    positions: &mut Vec<usize>,
    state: BucketState,
    final_state: BucketState,
    dead_ends: &mut HashSet<(Vec<usize>, BucketState)>,
) -> bool {
    if positions.iter().zip(threads).all(|(&p, t)| p == t.len()) {
        return state == final_state;
    }
    if dead_ends.contains(&(positions.clone(), state)) {
        return false;
    }
    // The earliest return among the ops not yet placed: an op invoked after it cannot go next.
    let earliest_return = positions
        .iter()
        .zip(threads)
        .filter_map(|(&p, t)| t.get(p).map(|op| op.returned))
        .min()
        .unwrap_or(u64::MAX);
    for thread in 0..threads.len() {
        let Some(op) = threads[thread].get(positions[thread]) else {
            continue;
        };
        if op.invoked > earliest_return {
            continue;
        }
        let next = match (op.cost, &op.ret) {
            (Some(cost), DirectRet::Acquired(observed)) => {
                match transition(config, state, Attempt { cost, now: op.now }) {
                    Ok((next, decision)) if observed == &Ok(decision) => next,
                    Err(error) if observed == &Err(error.clone()) => state,
                    _ => continue,
                }
            }
            (None, DirectRet::Peeked(observed)) if *observed == snapshot(config, state, op.now) => {
                state
            }
            _ => continue,
        };
        positions[thread] += 1;
        let found = linearize(config, threads, positions, next, final_state, dead_ends);
        positions[thread] -= 1;
        if found {
            return true;
        }
    }
    dead_ends.insert((positions.clone(), state));
    false
}
