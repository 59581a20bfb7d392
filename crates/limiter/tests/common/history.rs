//! Concurrent histories of limiter calls, and the per-execution checks.
//!
//! A [`Recorder`] wraps each call on the real [`Limiter`] between two stamps of one shared logical clock
//! (a plain `std` atomic: the explorers run one thread at a time, so the stamps are the real order of the
//! explored execution, and they add no schedule points of their own). An [`Op`] keeps the thread, the
//! invoke and return stamps, the key, the injected `now`, the call and what it returned.
//!
//! [`check_execution`] is what loom and shuttle run after every explored execution:
//! 1. no overselling: per key, the admitted cost is at most `capacity + rate * (t_max - t_min)` (the
//!    arrival curve; with reconfigure, the largest capacity and rate the key had; multiplied by the number
//!    of lives of the key when the limiter reports re-creations, see [`check_no_overselling`]);
//! 2. invariants: every key's balance at the end is at most its capacity, live keys stay within the key
//!    bound, and the counters agree with the decisions returned;
//! 3. linearizability against the reference model ([`crate::common::linearizability`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use bucketproof_limiter::{
    AcquireError, Acquired, Clock, Config, Decision, Limiter, Peek, Rate, Request,
};
use bucketproof_model::Integer;

/// What a thread asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    /// `acquire_with(key, Request { cost, now, request_id })`.
    Acquire { cost: u64, request_id: Option<u64> },
    /// The deliberately racy `acquire_racy_at(key, cost, now)` (feature `racy-variant`).
    AcquireRacy { cost: u64 },
    /// `peek_at(key, now)`.
    Peek,
    /// `reconfigure_at(key, config, now)`.
    Reconfigure { config: Config },
    /// `sweep_at(now)`: not about one key (`Op::key` is ignored).
    Sweep,
}

/// What came back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ret {
    Acquired(Result<Acquired, AcquireError>),
    AcquiredRacy(Result<Decision, AcquireError>),
    Peeked(Peek),
    Reconfigured(Result<u64, AcquireError>),
    Swept(usize),
}

/// One completed call of a concurrent history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Op {
    pub thread: usize,
    /// Logical time of the invocation (before the call).
    pub invoked: u64,
    /// Logical time of the response (after the call); `invoked < returned`.
    pub returned: u64,
    pub key: u64,
    /// The injected time the call was made at.
    pub now: u64,
    pub call: Call,
    pub ret: Ret,
}

impl Op {
    /// `self` returned before `other` was invoked: every linearization puts `self` first.
    pub fn precedes(&self, other: &Op) -> bool {
        self.returned < other.invoked
    }

    /// The cost this op took from its key's bucket (0 if it was denied, failed or replayed).
    pub fn admitted_cost(&self) -> u64 {
        match (&self.call, &self.ret) {
            (Call::Acquire { cost, .. }, Ret::Acquired(Ok(acquired)))
                if acquired.decision.is_allowed() && !acquired.replayed =>
            {
                *cost
            }
            (Call::AcquireRacy { cost }, Ret::AcquiredRacy(Ok(decision)))
                if decision.is_allowed() =>
            {
                *cost
            }
            _ => 0,
        }
    }

    /// The limiter reported that this op created the key's bucket (`Some(false)`: it found it; `None`:
    /// the call does not say).
    pub fn created(&self) -> Option<bool> {
        match &self.ret {
            Ret::Acquired(Ok(acquired)) => Some(acquired.created),
            Ret::Peeked(peek) => Some(!peek.present),
            _ => None,
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[t{} {}..{}] key {} now {} {:?} -> ",
            self.thread, self.invoked, self.returned, self.key, self.now, self.call
        )?;
        match &self.ret {
            Ret::Acquired(Ok(a)) => write!(
                f,
                "{} created {} replayed {}",
                describe(&a.decision),
                a.created,
                a.replayed
            ),
            Ret::AcquiredRacy(Ok(d)) => write!(f, "{}", describe(d)),
            other => write!(f, "{other:?}"),
        }
    }
}

/// A decision in one line: verdict, exact remaining tokens, waits.
pub fn describe(decision: &Decision) -> String {
    let (units, per_token) = decision.remaining().as_ratio();
    format!(
        "{} remaining {units}/{per_token} reset_after {:?} retry_after {:?}",
        if decision.is_allowed() {
            "ALLOWED"
        } else {
            "denied"
        },
        decision.reset_after(),
        decision.retry_after()
    )
}

/// Formats a history one op per line, in invocation order.
pub fn show(ops: &[Op]) -> String {
    let mut sorted: Vec<&Op> = ops.iter().collect();
    sorted.sort_by_key(|op| op.invoked);
    sorted
        .iter()
        .map(|op| format!("  {op}\n"))
        .collect::<String>()
}

/// The limiter settings the checks need to know (they must match the limiter under test).
#[derive(Clone, Copy, Debug)]
pub struct Setup {
    pub default_config: Config,
    pub dedupe_window: u64,
    pub dedupe_per_key: usize,
    /// The policy is `EvictLeastRecent`: the limiter may drop a bucket that is not full.
    pub lossy_eviction: bool,
}

impl Setup {
    /// The limiter's defaults: 60 s dedupe window, 8 records per key, a lossless policy.
    pub fn new(default_config: Config) -> Setup {
        Setup {
            default_config,
            dedupe_window: 60_000_000_000,
            dedupe_per_key: 8,
            lossy_eviction: false,
        }
    }
}

/// One logical clock shared by every thread of an explored execution: it stamps each call's invocation
/// and return, so the checks see the real-time order of calls.
#[derive(Debug, Default)]
pub struct LogicalClock(AtomicU64);

impl LogicalClock {
    /// Runs `call` between two stamps: `(invoked, what it returned, returned)`.
    pub fn around<T>(&self, call: impl FnOnce() -> T) -> (u64, T, u64) {
        let invoked = self.0.fetch_add(1, Ordering::SeqCst);
        let result = call();
        let returned = self.0.fetch_add(1, Ordering::SeqCst);
        (invoked, result, returned)
    }
}

/// Stamps calls with a shared logical clock and turns them into [`Op`]s.
#[derive(Debug, Default)]
pub struct Recorder {
    clock: LogicalClock,
}

impl Recorder {
    pub fn new() -> Recorder {
        Recorder::default()
    }

    fn record(
        &self,
        thread: usize,
        key: u64,
        now: u64,
        call: Call,
        run: impl FnOnce() -> Ret,
    ) -> Op {
        let (invoked, ret, returned) = self.clock.around(run);
        Op {
            thread,
            invoked,
            returned,
            key,
            now,
            call,
            ret,
        }
    }

    pub fn acquire<C: Clock>(
        &self,
        limiter: &Limiter<u64, C>,
        thread: usize,
        key: u64,
        now: u64,
        cost: u64,
        request_id: Option<u64>,
    ) -> Op {
        let call = Call::Acquire { cost, request_id };
        self.record(thread, key, now, call, || {
            let mut request = Request::cost(cost).at(now);
            request.request_id = request_id.map(Into::into);
            Ret::Acquired(limiter.acquire_with(&key, request))
        })
    }

    #[cfg(feature = "racy-variant")]
    pub fn acquire_racy<C: Clock>(
        &self,
        limiter: &Limiter<u64, C>,
        thread: usize,
        key: u64,
        now: u64,
        cost: u64,
    ) -> Op {
        self.record(thread, key, now, Call::AcquireRacy { cost }, || {
            Ret::AcquiredRacy(limiter.acquire_racy_at(&key, cost, now))
        })
    }

    pub fn peek<C: Clock>(
        &self,
        limiter: &Limiter<u64, C>,
        thread: usize,
        key: u64,
        now: u64,
    ) -> Op {
        self.record(thread, key, now, Call::Peek, || {
            Ret::Peeked(limiter.peek_at(&key, now))
        })
    }

    pub fn reconfigure<C: Clock>(
        &self,
        limiter: &Limiter<u64, C>,
        thread: usize,
        key: u64,
        now: u64,
        config: Config,
    ) -> Op {
        self.record(thread, key, now, Call::Reconfigure { config }, || {
            Ret::Reconfigured(limiter.reconfigure_at(&key, config, now))
        })
    }

    pub fn sweep<C: Clock>(&self, limiter: &Limiter<u64, C>, thread: usize, now: u64) -> Op {
        self.record(thread, u64::MAX, now, Call::Sweep, || {
            Ret::Swept(limiter.sweep_at(now))
        })
    }
}

/// `a/b < c/d` for rates.
fn rate_less(a: Rate, b: Rate) -> bool {
    (a.numer() as u128) * (b.denom() as u128) < (b.numer() as u128) * (a.denom() as u128)
}

/// The ops about one key (sweeps excluded), by key.
pub fn by_key(ops: &[Op]) -> BTreeMap<u64, Vec<&Op>> {
    let mut keys: BTreeMap<u64, Vec<&Op>> = BTreeMap::new();
    for op in ops.iter().filter(|op| op.call != Call::Sweep) {
        keys.entry(op.key).or_default().push(op);
    }
    keys
}

/// No overselling, per key: admitted cost `<= lives * (capacity + rate * (t_max - t_min))`, exactly.
///
/// `t_min`/`t_max` are the smallest and largest `now` of the key's ops, `capacity` and `rate` the largest
/// the key had (default config or any reconfigure). `lives` is 1, or the number of times the limiter
/// reported creating the key's bucket when that is more (after an eviction the key comes back full; a
/// lossless eviction of a full bucket keeps the single-life bound as long as no op comes at a `now`
/// before the dropped cursor, which the explorers do not guarantee, so the bound is per life). With one
/// life this is the arrival curve of the token bucket, and the racy double spend breaks it.
pub fn check_no_overselling(setup: &Setup, ops: &[Op]) -> Result<(), String> {
    for (key, key_ops) in by_key(ops) {
        let mut capacity = setup.default_config.capacity();
        let mut rate = setup.default_config.rate();
        for op in &key_ops {
            if let (Call::Reconfigure { config }, Ret::Reconfigured(Ok(_))) = (&op.call, &op.ret) {
                capacity = capacity.max(config.capacity());
                if rate_less(rate, config.rate()) {
                    rate = config.rate();
                }
            }
        }
        let t_min = key_ops.iter().map(|op| op.now).min().unwrap_or(0);
        let t_max = key_ops.iter().map(|op| op.now).max().unwrap_or(0);
        let lives = key_ops
            .iter()
            .filter(|op| op.created() == Some(true) && matches!(op.call, Call::Acquire { .. }))
            .count()
            .max(1);
        let admitted: u64 = key_ops.iter().map(|op| op.admitted_cost()).sum();
        // admitted <= lives * (capacity + (p/q) * dt / 1e9)  <=>  admitted * q * 1e9 <= lives * (capacity * q * 1e9 + p * dt)
        let scale = Integer::from(rate.denom()) * Integer::from(1_000_000_000u64);
        let lhs = Integer::from(admitted) * &scale;
        let rhs = Integer::from(lives)
            * (Integer::from(capacity) * &scale
                + Integer::from(rate.numer()) * Integer::from(t_max - t_min));
        if lhs > rhs {
            return Err(format!(
                "oversold key {key}: admitted {admitted} tokens between t={t_min} and t={t_max}, \
                 but capacity {capacity} + rate {rate} over that span allows less ({lives} life/lives)"
            ));
        }
    }
    Ok(())
}

/// Invariants at the end of an execution: each key's balance (peeked at the latest time) is at most its
/// capacity, live keys stay within the bound, and the counters agree with the returned decisions.
pub fn check_invariants<C: Clock>(limiter: &Limiter<u64, C>, ops: &[Op]) -> Result<(), String> {
    let t_end = ops.iter().map(|op| op.now).max().unwrap_or(0);
    let keys: BTreeSet<u64> = by_key(ops).into_keys().collect();
    for key in keys {
        let peek = limiter.peek_at(&key, t_end);
        if peek.remaining.units() > peek.config.capacity_units() {
            return Err(format!(
                "key {key}: balance {:?} above capacity {} at t={t_end}",
                peek.remaining.as_ratio(),
                peek.config.capacity()
            ));
        }
    }
    let stats = limiter.stats();
    if limiter.len() > limiter.key_bound() || stats.live_keys as usize != limiter.len() {
        return Err(format!(
            "{} live keys (stats say {}), bound {}",
            limiter.len(),
            stats.live_keys,
            limiter.key_bound()
        ));
    }
    if ops
        .iter()
        .any(|op| matches!(op.call, Call::AcquireRacy { .. }))
    {
        return Ok(()); // the racy variant keeps no counters
    }
    let acquired = || {
        ops.iter().filter_map(|op| match &op.ret {
            Ret::Acquired(result) => Some(result),
            _ => None,
        })
    };
    let fresh = |allowed: bool| {
        acquired()
            .filter(|r| matches!(r, Ok(a) if !a.replayed && a.decision.is_allowed() == allowed))
            .count() as u64
    };
    let replayed = acquired()
        .filter(|r| matches!(r, Ok(a) if a.replayed))
        .count() as u64;
    let errors = acquired().filter(|r| r.is_err()).count() as u64;
    let expected = (fresh(true), fresh(false), replayed, errors);
    let counted = (stats.allowed, stats.denied, stats.replayed, stats.errors);
    if expected != counted {
        return Err(format!(
            "counters (allowed, denied, replayed, errors) = {counted:?}, decisions returned say {expected:?}"
        ));
    }
    Ok(())
}

/// All the checks of one explored execution; `Err` lists every failed check and the history.
pub fn check_execution<C: Clock>(
    setup: &Setup,
    limiter: &Limiter<u64, C>,
    ops: &[Op],
) -> Result<(), String> {
    let mut failures = Vec::new();
    if let Err(why) = crate::common::linearizability::check(setup, ops) {
        failures.push(format!("not linearizable: {why}"));
    }
    if let Err(why) = check_no_overselling(setup, ops) {
        failures.push(why);
    }
    if let Err(why) = check_invariants(limiter, ops) {
        failures.push(format!("invariant broken: {why}"));
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!("{}\nhistory:\n{}", failures.join("\n"), show(ops)))
    }
}
