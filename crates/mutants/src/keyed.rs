//! The one keyed wrapper every sequential mutant shares, and the exact transition split into the
//! steps a mutant may get wrong.
//!
//! A mutant is a [`Mistake`]: a set of hooks whose defaults are the exact rules of
//! docs/semantics.md, of which each mutant overrides exactly one. [`Keyed`] drives those hooks for
//! every key of a trace (a `BTreeMap`, time injected by the caller), so the only difference between a
//! mutant and the exact limiter is the one overridden hook. The defaults are not a second copy of the
//! limiter's arithmetic where they can avoid it: refill and reconfiguration call the limiter's own
//! [`BucketState::refilled`] and [`BucketState::reconfigured`]; what is spelled out here (cost check,
//! allow test, charge, waits) is the part a mutant must be able to replace, and the control test
//! (`tests/kill.rs`, [`control`]) checks that with no hook overridden the wrapper agrees with the
//! reference model on every generated trace, so a kill is the mistake's doing, not the wrapper's.
//!
//! Expiry is modelled as the limiter does it: a sweep at `s` judges each bucket at its effective time
//! `j = max(s, last_refill)`, drops it if it is full with no live record and no override, and raises
//! one horizon (the wrapper is one shard) to `j`; a fresh bucket starts at `max(now, horizon)`.
//! Request-id records are stamped and judged in the key's effective time. What the wrapper does not
//! model: the key bound and amortized sweeping (the mutants are about the transition; a subject
//! without a bound is always consistent with the model, which has none).

use std::collections::{BTreeMap, VecDeque};

use bucketproof_limiter::internal::state_from_parts;
use bucketproof_limiter::{BucketState, Config, Nanos, Wait};
use bucketproof_trace::subject::one_bandwidth;
use bucketproof_trace::{
    Acquire, Amount, ConfigSpec, Inspected, Inspection, Observed, Settle, Setup, Subject,
    SubjectError,
};

/// The steps of one acquire that a mutant may get wrong. Every default is the exact rule; a mutant
/// overrides one of them.
pub trait Mistake: Send + Sync + 'static {
    /// Step 1: `cost` in units, or `None` for an invalid cost (`0` or above capacity).
    fn cost_units(&self, config: &Config, cost: u64) -> Option<u128> {
        (cost != 0 && cost <= config.capacity()).then(|| cost as u128 * config.units_per_token())
    }

    /// Step 3: the state refilled up to `max(now, last_refill)`, clamped to capacity.
    fn refill(&self, config: &Config, state: BucketState, now: Nanos) -> BucketState {
        state.refilled(config, now)
    }

    /// Step 4: allow iff the refilled balance covers the cost.
    fn allows(&self, balance: u128, cost_units: u128) -> bool {
        balance >= cost_units
    }

    /// Step 4: the balance after the decision; a denial consumes nothing.
    fn charge(&self, balance: u128, cost_units: u128, allowed: bool) -> u128 {
        if allowed {
            balance.saturating_sub(cost_units)
        } else {
            balance
        }
    }

    /// Step 5: a denial's `retry_after`: `lag + ceil(short / rate)`.
    fn retry_after(&self, short_units: u128, units_per_ns: u64, lag: Nanos, now: Nanos) -> Wait {
        exact_wait(short_units, units_per_ns, lag, now)
    }

    /// reconfigure: refill to `now` under the old config, convert rounding down, clamp.
    fn reconfigure(
        &self,
        old: &Config,
        new: &Config,
        state: BucketState,
        now: Nanos,
    ) -> BucketState {
        state.reconfigured(old, new, now)
    }

    /// Buckets idle (no refill) for longer than this are dropped whatever their balance. The exact
    /// rule drops only evictable buckets, so the default is `None`.
    fn idle_ttl(&self) -> Option<Nanos> {
        None
    }

    /// Step 2: a live request-id record is replayed instead of charged.
    fn honours_request_ids(&self) -> bool {
        true
    }

    /// Steps 2 and 6: the clock request-id records are stamped and judged in, given the caller's
    /// `now` and the key's effective time `max(now, last_refill)`: the key's own, which never moves
    /// back.
    fn record_clock(&self, now: Nanos, effective: Nanos) -> Nanos {
        let _ = now;
        effective
    }

    /// settle step 5: the balance after giving back `refund_units`: never above capacity.
    fn refund(&self, config: &Config, balance: u128, refund_units: u128) -> u128 {
        balance
            .saturating_add(refund_units)
            .min(config.capacity_units())
    }

    /// settle step 3: a settled record replays (the same actual) or refuses (another), so a
    /// request is refunded at most once.
    fn settles_once(&self) -> bool {
        true
    }

    /// settle step 2: the record is the settled key's own; a request id is scoped to its key.
    fn settles_any_keys_record(&self) -> bool {
        false
    }

    /// Expiry: the eviction horizon after dropping a bucket whose stored cursor is `stored_cursor`
    /// and which was judged evictable at `judged_at = max(s, stored_cursor)`: the judgment time, so
    /// a fresh bucket never starts before the time the old one was seen full with no live record.
    fn horizon_after_drop(&self, horizon: Nanos, judged_at: Nanos, stored_cursor: Nanos) -> Nanos {
        let _ = stored_cursor;
        horizon.max(judged_at)
    }
}

/// `lag + ceil(short_units / units_per_ns)` ns from `now`: `After(0)` when nothing is short, `Never`
/// with no refill or past the end of the `u64` clock (docs/semantics.md, acquire step 5).
pub fn exact_wait(short_units: u128, units_per_ns: u64, lag: Nanos, now: Nanos) -> Wait {
    if short_units == 0 {
        return Wait::After(0);
    }
    if units_per_ns == 0 {
        return Wait::Never;
    }
    wait_from(short_units.div_ceil(units_per_ns as u128), lag, now)
}

/// `lag + refill_ns` from `now`, or `Never` if that lies past the end of the `u64` clock.
pub fn wait_from(refill_ns: u128, lag: Nanos, now: Nanos) -> Wait {
    let total = refill_ns + lag as u128;
    if total <= (u64::MAX - now) as u128 {
        Wait::After(total as Nanos)
    } else {
        Wait::Never
    }
}

/// No mistake at all: the control every mutant is measured against.
#[derive(Clone, Copy, Debug, Default)]
pub struct Exact;

impl Mistake for Exact {}

/// The control subject (`Keyed<Exact>`), for tests that prove the wrapper itself is right.
pub fn control(setup: &Setup) -> Result<Keyed<Exact>, SubjectError> {
    Keyed::new("mutant-control", Exact, setup)
}

/// Mutant 14: dropping a bucket raises the horizon only to its stored cursor, not to the time it was
/// judged evictable. Emptied at 10 s and swept full at 13 s, it comes back at 10 s under a rollback
/// and hands out the tokens it refilled by 13 s a second time.
#[derive(Clone, Copy, Debug, Default)]
pub struct HorizonAtStoredCursor;

impl Mistake for HorizonAtStoredCursor {
    fn horizon_after_drop(&self, horizon: Nanos, judged_at: Nanos, stored_cursor: Nanos) -> Nanos {
        let _ = judged_at;
        horizon.max(stored_cursor)
    }
}

/// Mutant 15: no eviction horizon at all: a dropped bucket comes back at the caller's `now`, however
/// far back the clock ran.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoHorizon;

impl Mistake for NoHorizon {
    fn horizon_after_drop(&self, horizon: Nanos, judged_at: Nanos, stored_cursor: Nanos) -> Nanos {
        let _ = (judged_at, stored_cursor);
        horizon
    }
}

#[derive(Clone, Debug)]
struct Record {
    request_id: u64,
    observed: Observed,
    /// In the mistake's [`Mistake::record_clock`] (the key's effective time for the exact rule).
    stamped_at: Nanos,
    /// The acquire's cost.
    cost: u64,
    /// `(actual, settlement)` once settled.
    settled: Option<(u64, Observed)>,
}

#[derive(Clone, Debug, Default)]
struct Entry {
    bucket: Option<BucketState>,
    /// Set by `reconfigure`, kept until `forget`.
    config: Option<Config>,
    /// Oldest first, at most `dedupe_per_key`; only while `bucket` is held.
    records: VecDeque<Record>,
}

/// One bucket per `u64` key, driven through a [`Mistake`]'s hooks.
pub struct Keyed<M> {
    name: String,
    mistake: M,
    default: Config,
    dedupe_window: Nanos,
    dedupe_per_key: usize,
    entries: BTreeMap<u64, Entry>,
    /// The latest judgment time of a dropped bucket (as the mistake raises it): fresh buckets start
    /// no earlier.
    horizon: Nanos,
    /// Sweep before every acquire ([`Keyed::sweeping_before_every_acquire`]).
    eager_sweep: bool,
}

/// A record stamped at `stamped_at` is live at `at` while `at < stamped_at + window`, without
/// overflow. In the key's effective time `at >= stamped_at`, so a window of 0 keeps nothing live.
fn is_live(stamped_at: Nanos, window: Nanos, at: Nanos) -> bool {
    (at as u128) < stamped_at as u128 + window as u128
}

impl<M: Mistake> Keyed<M> {
    /// A subject named `name` (e.g. `mutant:no-capacity-clamp`) with `mistake`, configured by `setup`.
    pub fn new(name: impl Into<String>, mistake: M, setup: &Setup) -> Result<Self, SubjectError> {
        Ok(Keyed {
            name: name.into(),
            mistake,
            default: one_bandwidth(&setup.config)?,
            dedupe_window: setup.dedupe_window_ns,
            dedupe_per_key: setup.dedupe_per_key,
            entries: BTreeMap::new(),
            horizon: 0,
            eager_sweep: false,
        })
    }

    /// The same wrapper, sweeping every bucket evictable at an acquire's `now` just before it: the
    /// most eager expiry a lossless implementation may do (docs/semantics.md, "Expiry and the key
    /// bound"), so that a drop followed by a rolled-back call, which an explicit sweep op rarely sets
    /// up, happens on every trace with a rollback. With no hook overridden it still agrees with the
    /// model (`tests/expiry.rs` runs it as a control); the expiry mutants are built this way.
    pub fn sweeping_before_every_acquire(mut self) -> Self {
        self.eager_sweep = true;
        self
    }

    /// A fresh bucket for a key this wrapper does not hold: full, at `now` or the horizon if later.
    fn fresh(&self, config: &Config, now: Nanos) -> BucketState {
        BucketState::full(config, now.max(self.horizon))
    }

    fn config_of(&self, key: u64) -> Config {
        self.entries
            .get(&key)
            .and_then(|entry| entry.config)
            .unwrap_or(self.default)
    }

    /// The key's bucket as the mutant sees it at `now`: `None` if absent or dropped for idling.
    fn bucket_at(&self, key: u64, now: Nanos) -> Option<BucketState> {
        let bucket = self.entries.get(&key)?.bucket?;
        let idle_too_long = self
            .mistake
            .idle_ttl()
            .is_some_and(|ttl| now.saturating_sub(bucket.last_refill()) > ttl);
        (!idle_too_long).then_some(bucket)
    }

    fn drop_bucket(&mut self, key: u64) {
        if let Some(entry) = self.entries.get_mut(&key) {
            entry.bucket = None;
            entry.records.clear();
            if entry.config.is_none() {
                self.entries.remove(&key);
            }
        }
    }

    /// Steps 3-5 on one bucket: the refill, the decision, the charge and the waits.
    fn decide(
        &self,
        config: &Config,
        state: BucketState,
        cost_units: u128,
        now: Nanos,
    ) -> (BucketState, bool, Option<Wait>) {
        let refilled = self.mistake.refill(config, state, now);
        let allowed = self.mistake.allows(refilled.balance(), cost_units);
        let lag = refilled.last_refill().saturating_sub(now);
        let p = config.units_per_nanosecond();
        let retry_after = (!allowed).then(|| {
            let short = cost_units.saturating_sub(refilled.balance());
            self.mistake.retry_after(short, p, lag, now)
        });
        let balance = self.mistake.charge(refilled.balance(), cost_units, allowed);
        let next = state_from_parts(balance, refilled.last_refill());
        (next, allowed, retry_after)
    }
}

impl<M: Mistake> Keyed<M> {
    /// Where the live record of `request_id` a settle of `key` at the effective time `at` finds:
    /// `(key holding it, position)`. Only the key's own, unless the mistake looks across keys.
    fn settled_record(&self, key: u64, request_id: u64, at: Nanos) -> Option<(u64, usize)> {
        let window = self.dedupe_window;
        let find = |holder: u64, entry: &Entry| {
            (entry.records.iter())
                .rposition(|r| r.request_id == request_id && is_live(r.stamped_at, window, at))
                .map(|position| (holder, position))
        };
        let own = self.entries.get(&key).and_then(|entry| find(key, entry));
        if own.is_some() || !self.mistake.settles_any_keys_record() {
            return own;
        }
        (self.entries.iter()).find_map(|(&holder, entry)| find(holder, entry))
    }

    /// What a decision that left `next` reports, under `config`.
    fn observed(
        config: &Config,
        next: BucketState,
        allowed: bool,
        retry_after: Option<Wait>,
        now: Nanos,
    ) -> Observed {
        let lag = next.last_refill().saturating_sub(now);
        let short_of_full = config.capacity_units().saturating_sub(next.balance());
        Observed {
            allowed,
            remaining: Amount::Exact {
                numer: next.balance(),
                denom: config.units_per_token(),
            },
            retry_after,
            bandwidths: Vec::new(),
            reset_after: Some(exact_wait(
                short_of_full,
                config.units_per_nanosecond(),
                lag,
                now,
            )),
            created: Some(false),
            replayed: false,
        }
    }
}

impl<M: Mistake> Subject for Keyed<M> {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn acquire(&mut self, acquire: Acquire) -> Result<Observed, SubjectError> {
        let Acquire { key, cost, now, .. } = acquire;
        let config = self.config_of(key);
        let cost_units = self
            .mistake
            .cost_units(&config, cost)
            .ok_or(SubjectError::InvalidCost)?;
        if self.eager_sweep {
            self.sweep(now)?;
        }
        let held = self.bucket_at(key, now);
        if held.is_none() {
            // Dropped for idling (only a mutant with an idle TTL does this): records go with it.
            self.drop_bucket(key);
        }
        let request_id = acquire
            .request_id
            .filter(|_| self.mistake.honours_request_ids());
        if let (Some(id), Some(entry), Some(bucket)) = (request_id, self.entries.get(&key), held) {
            let window = self.dedupe_window;
            let at = self
                .mistake
                .record_clock(now, now.max(bucket.last_refill()));
            let live = entry
                .records
                .iter()
                .rev()
                .find(|r| r.request_id == id && is_live(r.stamped_at, window, at));
            if let Some(record) = live {
                return Ok(Observed {
                    replayed: true,
                    created: Some(false),
                    ..record.observed.clone()
                });
            }
        }
        let created = held.is_none();
        let state = held.unwrap_or_else(|| self.fresh(&config, now));
        let (next, allowed, retry_after) = self.decide(&config, state, cost_units, now);
        let observed = Observed {
            created: Some(created),
            ..Self::observed(&config, next, allowed, retry_after, now)
        };
        let per_key = self.dedupe_per_key;
        let stamped_at = self.mistake.record_clock(now, next.last_refill());
        let window = self.dedupe_window;
        let entry = self.entries.entry(key).or_default();
        entry.bucket = Some(next);
        // A window of 0 turns ids off: nothing is recorded (docs/semantics.md, step 6).
        if let Some(id) = request_id.filter(|_| window > 0) {
            // As the spec: a new record of an id replaces its older one (docs/semantics.md, step 6).
            entry.records.retain(|record| record.request_id != id);
            entry.records.push_back(Record {
                request_id: id,
                observed: observed.clone(),
                stamped_at,
                cost,
                settled: None,
            });
            while entry.records.len() > per_key {
                entry.records.pop_front();
            }
        }
        Ok(observed)
    }

    /// docs/semantics.md, "settle", through the hooks: the refill, the allow test and the charge
    /// of an extra are the acquire's; the refund, the settled-once rule and the record's key are
    /// the settle's own hooks.
    fn settle(&mut self, settle: Settle) -> Result<Observed, SubjectError> {
        let Settle {
            key,
            request_id,
            actual,
            now,
        } = settle;
        let config = self.config_of(key);
        if actual > config.capacity() {
            return Err(SubjectError::InvalidCost);
        }
        let bucket = self
            .bucket_at(key, now)
            .ok_or(SubjectError::UnknownRequest)?;
        let at = (self.mistake).record_clock(now, now.max(bucket.last_refill()));
        let (holder, position) =
            (self.settled_record(key, request_id, at)).ok_or(SubjectError::UnknownRequest)?;
        let record = &self.entries[&holder].records[position];
        if !record.observed.allowed {
            return Err(SubjectError::NotAdmitted);
        }
        if let (true, Some((settled_actual, settlement))) =
            (self.mistake.settles_once(), &record.settled)
        {
            return if *settled_actual == actual {
                Ok(Observed {
                    replayed: true,
                    ..settlement.clone()
                })
            } else {
                Err(SubjectError::AlreadySettled)
            };
        }
        let charged = record.cost;
        let unit = config.units_per_token();
        let (next, allowed, retry_after) = if actual > charged {
            self.decide(&config, bucket, u128::from(actual - charged) * unit, now)
        } else {
            let refilled = self.mistake.refill(&config, bucket, now);
            let refund = u128::from(charged - actual) * unit;
            let balance = self.mistake.refund(&config, refilled.balance(), refund);
            (
                state_from_parts(balance, refilled.last_refill()),
                true,
                None,
            )
        };
        let observed = Self::observed(&config, next, allowed, retry_after, now);
        if allowed
            && let Some(record) = self
                .entries
                .get_mut(&holder)
                .map(|e| &mut e.records[position])
        {
            record.settled = Some((actual, observed.clone()));
        }
        if let Some(entry) = self.entries.get_mut(&key) {
            entry.bucket = Some(next);
        }
        Ok(observed)
    }

    fn reconfigure(&mut self, key: u64, config: &ConfigSpec, now: u64) -> Result<(), SubjectError> {
        let new = one_bandwidth(config)?;
        let old = self.config_of(key);
        let state = self
            .bucket_at(key, now)
            .unwrap_or_else(|| self.fresh(&old, now));
        let next = self.mistake.reconfigure(&old, &new, state, now);
        let entry = self.entries.entry(key).or_default();
        entry.bucket = Some(next);
        entry.config = Some(new);
        Ok(())
    }

    fn forget(&mut self, key: u64) -> Result<(), SubjectError> {
        self.entries.remove(&key);
        Ok(())
    }

    fn sweep(&mut self, now: u64) -> Result<(), SubjectError> {
        let window = self.dedupe_window;
        // Each bucket is judged at its effective time j = max(now, last_refill).
        let doomed: Vec<(u64, Nanos)> = self
            .entries
            .iter()
            .filter_map(|(key, entry)| {
                let stored = entry.bucket?;
                let judged_at = now.max(stored.last_refill());
                let Some(live) = self.bucket_at(*key, now) else {
                    return Some((*key, judged_at)); // idled past the mutant's TTL
                };
                let config = entry.config.unwrap_or(self.default);
                let at = self.mistake.record_clock(now, judged_at);
                let evictable = entry.config.is_none()
                    && self.mistake.refill(&config, live, now).balance() >= config.capacity_units()
                    && !entry
                        .records
                        .iter()
                        .any(|r| is_live(r.stamped_at, window, at));
                evictable.then_some((*key, judged_at))
            })
            .collect();
        for (key, judged_at) in doomed {
            let stored_cursor = self
                .entries
                .get(&key)
                .and_then(|entry| entry.bucket)
                .map_or(judged_at, |bucket| bucket.last_refill());
            self.horizon = self
                .mistake
                .horizon_after_drop(self.horizon, judged_at, stored_cursor);
            self.drop_bucket(key);
        }
        Ok(())
    }

    fn would_allow(&mut self, acquire: Acquire) -> Option<bool> {
        let Acquire { key, cost, now, .. } = acquire;
        let config = self.config_of(key);
        let Some(cost_units) = self.mistake.cost_units(&config, cost) else {
            return Some(false);
        };
        let state = self
            .bucket_at(key, now)
            .unwrap_or_else(|| self.fresh(&config, now));
        Some(self.decide(&config, state, cost_units, now).1)
    }

    fn inspect(&mut self, key: u64) -> Inspection {
        let config = self.config_of(key);
        let bucket = self.entries.get(&key).and_then(|entry| entry.bucket);
        bucket
            .map(|bucket| Inspected {
                tokens: Amount::Exact {
                    numer: bucket.balance(),
                    denom: config.units_per_token(),
                },
                last_refill: bucket.last_refill(),
                capacity: config.capacity(),
            })
            .into()
    }

    /// The wrapper reports `created` truthfully, so the runner can judge any drop it makes.
    fn may_evict(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bucketproof_limiter::Rate;
    use bucketproof_limiter::internal::{Attempt, transition};

    /// With no hook overridden, one step of the wrapper is the limiter's `transition`, value for
    /// value, over awkward rates, rollbacks, boundaries and the end of the clock.
    #[test]
    fn the_exact_hooks_are_the_limiters_transition() {
        let keyed = Keyed::new("control", Exact, &Setup::new(ConfigSpec::new(3, "7/3s"))).unwrap();
        for rate in ["7/3s", "1/h", "3/2s", "1000/s", "0/s"] {
            let config = Config::new(3, rate.parse::<Rate>().unwrap()).unwrap();
            let mut state = BucketState::full(&config, 1_000);
            for (i, now) in [
                1_000u64,
                1_000,
                1_001,
                500,
                2_000_000_000,
                1_999_999_999,
                u64::MAX - 3,
            ]
            .into_iter()
            .enumerate()
            {
                let cost = 1 + (i as u64 % 3);
                let (next, decision) = transition(&config, state, Attempt { cost, now }).unwrap();
                let cost_units = Exact.cost_units(&config, cost).unwrap();
                let (mine, allowed, retry) = keyed.decide(&config, state, cost_units, now);
                assert_eq!(mine, next, "{rate} step {i}");
                assert_eq!(allowed, decision.is_allowed(), "{rate} step {i}");
                assert_eq!(retry, decision.retry_after(), "{rate} step {i}");
                state = next;
            }
        }
    }
}

/// Mutant 21: request-id records stamped and judged in the caller's `now`, where a rollback counts as
/// inside the window: a retry from a lagging caller replays a record that is dead in the key's own
/// time, and a record made while the caller lagged dies early.
#[derive(Clone, Copy, Debug, Default)]
pub struct CallerTimeRecords;

impl Mistake for CallerTimeRecords {
    fn record_clock(&self, now: Nanos, effective: Nanos) -> Nanos {
        let _ = effective;
        now
    }
}
