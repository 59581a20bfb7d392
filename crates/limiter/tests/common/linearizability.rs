//! A linearizability checker: a small per-key Wing–Gong search against the reference model.
//!
//! A concurrent history (see [`crate::common::history::Op`]) is *linearizable* when its ops can be put in
//! one sequential order such that
//! - the order respects real time: an op that returned before another was invoked comes first;
//! - replaying the ops in that order on the reference model (docs/semantics.md in big rationals: the
//!   model's `ModelBucket` transition with the per-key rules of `bucketproof_model::Model`, see
//!   [`crate::common::spec`]; a key starts as a fresh full bucket on first use) yields exactly the observed
//!   results: allowed/denied, the exact remaining balance, `reset_after`, `retry_after`, `replayed`,
//!   `created`, peeked balances, config versions, errors.
//!
//! Keys are independent objects, so by locality (Herlihy & Wing) the history is checked key by key. Each
//! key is a depth-first search over "which pending op takes effect next" (Wing & Gong), memoizing
//! (set of ops already placed, model state) as in Lowe's refinement, so the search stays polynomial for a
//! bounded number of threads.
//!
//! Expiry and the key bound are where an implementation may choose (docs/semantics.md): the limiter says
//! per acquire (and per peek) whether it found the key's bucket. When it re-creates a bucket the model
//! still holds, the model follows (drops its bucket) only if that bucket was evictable at the latest
//! `now` any op had reached before the re-creating op returned (or the policy is the lossy
//! `EvictLeastRecent`), and never for a key with an override. A `KeyLimitReached` is accepted the same way
//! (the key must be absent or evictable). A new bucket is full with its cursor at the op's `now` or, if
//! the implementation starts new buckets at an eviction horizon (so that a clock running backwards after
//! an expiry is not credited twice), at a later cursor: every `now` the history had reached by then is
//! tried. `reconfigure` does not say whether it found the bucket, so every branch is explored.
//!
//! On failure the error names the key, the longest prefix that could be explained, and why each op that
//! could come next does not fit.

use std::collections::{HashMap, HashSet};

use bucketproof_limiter::{AcquireError, Config, Decision, Tokens, Wait};
use bucketproof_model::{Integer, Rational};
use bucketproof_model::{ModelConfig, ModelDecision, ModelWait};

use crate::common::history::{Call, Op, Ret, Setup, by_key};
use crate::common::spec::KeySpec;

/// The reference model's view of a limiter config.
pub fn model_config(config: &Config) -> ModelConfig {
    ModelConfig::new(
        config.capacity(),
        config.rate().numer(),
        config.rate().denom(),
    )
    .expect("every limiter config is a valid model config")
}

fn model_wait(wait: Wait) -> ModelWait {
    match wait {
        Wait::After(ns) => ModelWait::After(ns),
        Wait::Never => ModelWait::Never,
    }
}

fn exact(tokens: Tokens) -> Rational {
    let (units, per_token) = tokens.as_ratio();
    Rational::from_parts(Integer::from(units), per_token.into())
}

/// The limiter's decision is the model's, field by field.
pub fn same_decision(decision: &Decision, model: &ModelDecision) -> bool {
    decision.is_allowed() == model.is_allowed()
        && exact(decision.remaining()) == *model.remaining()
        && model_wait(decision.reset_after()) == model.reset_after()
        && decision.retry_after().map(model_wait) == model.retry_after()
}

/// Checks the whole history; `Err` explains the first key that has no linearization.
pub fn check(setup: &Setup, ops: &[Op]) -> Result<(), String> {
    let reach = reach(ops);
    for (key, key_ops) in by_key(ops) {
        KeySearch::new(setup, key, key_ops, &reach).run()?;
    }
    Ok(())
}

/// What an op may have observed of the other ops, by its invoke stamp: the largest `now` of any op
/// invoked before it returned (an eviction it observed was made at a time no later than this), and the
/// distinct `now`s of those ops (every bucket cursor the limiter held by then is one of them).
struct Reach {
    horizon: u64,
    nows: Vec<u64>,
}

fn reach(ops: &[Op]) -> HashMap<u64, Reach> {
    let mut by_invoke: Vec<(u64, u64)> = ops.iter().map(|op| (op.invoked, op.now)).collect();
    by_invoke.sort_unstable();
    ops.iter()
        .map(|op| {
            let count = by_invoke.partition_point(|&(invoked, _)| invoked < op.returned);
            let mut nows: Vec<u64> = by_invoke[..count].iter().map(|&(_, now)| now).collect();
            nows.sort_unstable();
            nows.dedup();
            let horizon = *nows.last().expect("an op is invoked before it returns");
            (op.invoked, Reach { horizon, nows })
        })
        .collect()
}

/// A memo entry: which ops are placed, and the key's spec state (which determines everything after).
type Fingerprint = (Vec<u64>, KeySpec);

struct KeySearch<'a> {
    setup: &'a Setup,
    key: u64,
    ops: Vec<&'a Op>,
    reach: Vec<&'a Reach>,
    memo: HashSet<Fingerprint>,
    /// The longest explained prefix seen, and why each candidate after it failed.
    best: Vec<usize>,
    best_failures: Vec<String>,
}

impl<'a> KeySearch<'a> {
    fn new(
        setup: &'a Setup,
        key: u64,
        mut ops: Vec<&'a Op>,
        reach: &'a HashMap<u64, Reach>,
    ) -> Self {
        ops.sort_by_key(|op| op.invoked);
        let reach = ops.iter().map(|op| &reach[&op.invoked]).collect();
        KeySearch {
            setup,
            key,
            ops,
            reach,
            memo: HashSet::new(),
            best: Vec::new(),
            best_failures: Vec::new(),
        }
    }

    fn run(mut self) -> Result<(), String> {
        let model = KeySpec::new(
            model_config(&self.setup.default_config),
            self.setup.dedupe_window,
            self.setup.dedupe_per_key,
        );
        let mut done = vec![0u64; self.ops.len().div_ceil(64)];
        let mut prefix = Vec::new();
        if self.search(&mut done, &mut prefix, &model) {
            return Ok(());
        }
        let explained: String = self
            .best
            .iter()
            .map(|&i| format!("    {}\n", self.ops[i]))
            .collect();
        Err(format!(
            "key {}: no sequential order of the reference model explains its {} ops.\n  \
             longest explained prefix ({} ops):\n{explained}  then none of the candidates fits:\n{}",
            self.key,
            self.ops.len(),
            self.best.len(),
            self.best_failures
                .iter()
                .map(|why| format!("    {why}\n"))
                .collect::<String>()
        ))
    }

    fn search(&mut self, done: &mut Vec<u64>, prefix: &mut Vec<usize>, model: &KeySpec) -> bool {
        let n = self.ops.len();
        if prefix.len() == n {
            return true;
        }
        let is_done = |done: &Vec<u64>, i: usize| done[i / 64] >> (i % 64) & 1 == 1;
        let first_return = (0..n)
            .filter(|&i| !is_done(done, i))
            .map(|i| self.ops[i].returned)
            .min()
            .expect("some op is pending");
        for i in 0..n {
            // Candidates: pending ops invoked before every pending op returned (minimal in real time).
            if is_done(done, i) || self.ops[i].invoked > first_return {
                continue;
            }
            match self.successors(model, i) {
                Err(why) => self.note_failure(prefix, format!("{}: {why}", self.ops[i])),
                Ok(nexts) => {
                    for next in nexts {
                        done[i / 64] |= 1 << (i % 64);
                        prefix.push(i);
                        let fresh = self.memo.insert(self.fingerprint(done, &next));
                        if fresh && self.search(done, prefix, &next) {
                            return true;
                        }
                        prefix.pop();
                        done[i / 64] &= !(1 << (i % 64));
                    }
                }
            }
        }
        false
    }

    fn note_failure(&mut self, prefix: &[usize], why: String) {
        if prefix.len() > self.best.len() || self.best_failures.is_empty() {
            self.best = prefix.to_vec();
            self.best_failures.clear();
        }
        if prefix.len() == self.best.len() && self.best_failures.len() < 8 {
            self.best_failures.push(why);
        }
    }

    fn fingerprint(&self, done: &[u64], model: &KeySpec) -> Fingerprint {
        (done.to_vec(), model.clone())
    }

    /// The cursors a bucket created by op `i` may start at: its `now`, or any later `now` the limiter had
    /// seen by the time the op returned.
    fn cursors(&self, i: usize) -> impl Iterator<Item = u64> + '_ {
        let now = self.ops[i].now;
        std::iter::once(now).chain(self.reach[i].nows.iter().copied().filter(move |&n| n > now))
    }

    /// The model drops its bucket for the key because the limiter did (at latest by `horizon`).
    fn follow_eviction(&self, model: &mut KeySpec, horizon: u64) -> Result<(), String> {
        let key = self.key;
        if model.version() > 0 {
            return Err(format!(
                "the limiter dropped key {key}'s bucket although the key has an override config"
            ));
        }
        if !self.setup.lossy_eviction && !model.is_evictable_at(horizon) {
            return Err(format!(
                "the limiter dropped key {key}'s bucket, but the model's bucket {:?} is not evictable \
                 at t={horizon} (not full or a live request id)",
                model.describe()
            ));
        }
        model.evict();
        Ok(())
    }

    /// The model states after op `i` that agree with what the op observed (`Err` if none does).
    fn successors(&self, model: &KeySpec, i: usize) -> Result<Vec<KeySpec>, String> {
        let op = self.ops[i];
        let (now, horizon) = (op.now, self.reach[i].horizon);
        let mut next = model.clone();
        match (&op.call, &op.ret) {
            (Call::Acquire { cost, request_id }, Ret::Acquired(Ok(acquired)))
                if acquired.created =>
            {
                if next.held() {
                    self.follow_eviction(&mut next, horizon)?;
                }
                // A new bucket is full with its cursor at `now`, or later (an implementation may start it
                // at an eviction horizon, a cursor it held before): try every cursor it could have held.
                let mut agreeing = Vec::new();
                let mut disagreement = String::new();
                for cursor in self.cursors(i) {
                    let mut candidate = next.clone();
                    candidate.recreate(cursor);
                    let outcome = candidate
                        .acquire(now, *cost, *request_id)
                        .map_err(|e| format!("the model refuses it: {e}"))?;
                    if !outcome.replayed && same_decision(&acquired.decision, &outcome.decision) {
                        agreeing.push(candidate);
                    } else if disagreement.is_empty() {
                        disagreement = format!(
                            "a fresh bucket (cursor {cursor}) decides {:?}",
                            outcome.decision
                        );
                    }
                }
                if agreeing.is_empty() {
                    return Err(disagreement);
                }
                Ok(agreeing)
            }
            (Call::Acquire { cost, request_id }, Ret::Acquired(Ok(acquired))) => {
                let outcome = next
                    .acquire(now, *cost, *request_id)
                    .map_err(|e| format!("the model refuses it: {e}"))?;
                if outcome.created || outcome.replayed != acquired.replayed {
                    return Err(format!(
                        "the model says created {} replayed {}",
                        outcome.created, outcome.replayed
                    ));
                }
                if !same_decision(&acquired.decision, &outcome.decision) {
                    return Err(format!("the model decides {:?}", outcome.decision));
                }
                Ok(vec![next])
            }
            (Call::AcquireRacy { cost }, Ret::AcquiredRacy(Ok(decision))) => {
                let outcome = next
                    .acquire(now, *cost, None)
                    .map_err(|e| format!("the model refuses it: {e}"))?;
                if !same_decision(decision, &outcome.decision) {
                    return Err(format!("the model decides {:?}", outcome.decision));
                }
                Ok(vec![next])
            }
            (
                Call::Acquire { cost, .. } | Call::AcquireRacy { cost },
                Ret::Acquired(Err(error)) | Ret::AcquiredRacy(Err(error)),
            ) => {
                let capacity = next.config().capacity();
                let valid = *cost != 0 && *cost <= capacity;
                match error {
                    AcquireError::InvalidCost { .. } if !valid => Ok(vec![next]),
                    AcquireError::KeyLimitReached { .. } if valid => {
                        if next.held() {
                            self.follow_eviction(&mut next, horizon)?;
                        }
                        Ok(vec![next])
                    }
                    _ => Err(format!(
                        "the model has capacity {capacity}: {}",
                        if valid {
                            "the cost is valid"
                        } else {
                            "the cost is invalid"
                        }
                    )),
                }
            }
            (Call::Peek, Ret::Peeked(peek)) => {
                match (peek.present, next.held()) {
                    (false, true) => self.follow_eviction(&mut next, horizon)?,
                    (true, false) => {
                        return Err("the model holds no bucket for the key".to_string());
                    }
                    _ => {}
                }
                let expected = next.peek(now);
                if exact(peek.remaining) != expected.remaining
                    || model_wait(peek.reset_after) != expected.reset_after
                    || model_config(&peek.config) != next.config()
                {
                    return Err(format!(
                        "the model peeks {expected:?} with {:?}",
                        next.config()
                    ));
                }
                Ok(vec![next])
            }
            (Call::Reconfigure { config }, Ret::Reconfigured(Ok(version))) => {
                // The limiter does not say whether it found the bucket: follow every possibility (it
                // kept it, or it had dropped it and starts a new one at one of the possible cursors).
                let mut candidates = Vec::new();
                if next.held() {
                    candidates.push(next.clone());
                }
                if !next.held() || self.follow_eviction(&mut next, horizon).is_ok() {
                    for cursor in self.cursors(i) {
                        let mut fresh = next.clone();
                        fresh.recreate(cursor);
                        candidates.push(fresh);
                    }
                }
                let agreeing: Vec<KeySpec> = candidates
                    .into_iter()
                    .filter_map(|mut candidate| {
                        let got = candidate.reconfigure(model_config(config), now);
                        (got == *version).then_some(candidate)
                    })
                    .collect();
                if agreeing.is_empty() {
                    return Err(format!(
                        "the model's config version would be {}",
                        model.version() + 1
                    ));
                }
                Ok(agreeing)
            }
            (Call::Reconfigure { .. }, Ret::Reconfigured(Err(error))) => match error {
                AcquireError::KeyLimitReached { .. } => {
                    if next.held() {
                        self.follow_eviction(&mut next, horizon)?;
                    }
                    Ok(vec![next])
                }
                other => Err(format!("reconfigure cannot fail with {other:?}")),
            },
            (call, ret) => Err(format!("malformed op: {call:?} returned {ret:?}")),
        }
    }
}
