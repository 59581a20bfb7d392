//! The shrinker: reduces a failing trace to a small one that fails the same way.
//!
//! Delta debugging over operations (drop chunks, halving the chunk size down to single ops), then
//! simplification of values (costs to 1, request ids dropped, keys renumbered from 0, times shifted so
//! the first is 0). A candidate is kept only if it still fails with the same [`Violation::signature`],
//! so the minimal trace shows the original bug rather than another one.

use crate::oracle::Violation;
use crate::trace::{Op, Trace};

/// Shrinks `trace`, which fails with `original` under `fails` (a predicate that runs a trace and returns
/// its first violation). Returns the smallest failing trace found and its violation.
pub fn shrink(
    trace: &Trace,
    original: &Violation,
    mut fails: impl FnMut(&Trace) -> Option<Violation>,
) -> (Trace, Violation) {
    let signature = original.signature();
    let mut best = trace.clone();
    let mut best_violation = original.clone();
    let mut accept = |candidate: &Trace, best: &mut Trace, best_violation: &mut Violation| {
        match fails(candidate) {
            Some(violation) if violation.signature() == signature => {
                *best = candidate.clone();
                *best_violation = violation;
                true
            }
            _ => false,
        }
    };

    // Delta debugging over ops.
    let mut chunk = best.ops.len().div_ceil(2).max(1);
    loop {
        let mut start = 0;
        let mut removed_any = false;
        while start < best.ops.len() {
            let end = (start + chunk).min(best.ops.len());
            let mut candidate = best.clone();
            candidate.ops.drain(start..end);
            if accept(&candidate, &mut best, &mut best_violation) {
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

    // Value simplification, one op at a time, repeated until nothing changes.
    let mut changed = true;
    while changed {
        changed = false;
        for index in 0..best.ops.len() {
            for candidate_op in simpler(&best.ops[index]) {
                let mut candidate = best.clone();
                candidate.ops[index] = candidate_op;
                if accept(&candidate, &mut best, &mut best_violation) {
                    changed = true;
                    break;
                }
            }
        }
        for candidate in [renumber_keys(&best), shift_times(&best)]
            .into_iter()
            .flatten()
        {
            if candidate != best && accept(&candidate, &mut best, &mut best_violation) {
                changed = true;
            }
        }
    }
    (best, best_violation)
}

/// Simpler variants of one op, simplest first.
fn simpler(op: &Op) -> Vec<Op> {
    let mut out = Vec::new();
    if let Op::Acquire {
        key,
        at,
        cost,
        request_id,
    } = op
    {
        if request_id.is_some() {
            out.push(Op::Acquire {
                key: *key,
                at: *at,
                cost: *cost,
                request_id: None,
            });
        }
        if *cost > 1 {
            out.push(Op::Acquire {
                key: *key,
                at: *at,
                cost: 1,
                request_id: *request_id,
            });
            out.push(Op::Acquire {
                key: *key,
                at: *at,
                cost: cost / 2,
                request_id: *request_id,
            });
        }
    }
    out
}

/// Keys renumbered 0, 1, 2, ... in order of first use.
fn renumber_keys(trace: &Trace) -> Option<Trace> {
    let mut order: Vec<u64> = Vec::new();
    for op in &trace.ops {
        if let Some(key) = op.key()
            && !order.contains(&key)
        {
            order.push(key);
        }
    }
    let rename = |key: u64| order.iter().position(|&k| k == key).unwrap_or(0) as u64;
    let mut out = trace.clone();
    for op in &mut out.ops {
        match op {
            Op::Acquire { key, .. } | Op::Reconfigure { key, .. } | Op::Forget { key } => {
                *key = rename(*key)
            }
            Op::Sweep { .. } => {}
        }
    }
    Some(out)
}

/// Every time shifted down so the earliest is 0 (differences, hence refills, are unchanged).
fn shift_times(trace: &Trace) -> Option<Trace> {
    let earliest = trace.ops.iter().filter_map(Op::at).min()?;
    if earliest == 0 {
        return None;
    }
    let mut out = trace.clone();
    for op in &mut out.ops {
        match op {
            Op::Acquire { at, .. } | Op::Reconfigure { at, .. } | Op::Sweep { at } => {
                *at -= earliest
            }
            Op::Forget { .. } => {}
        }
    }
    Some(out)
}
