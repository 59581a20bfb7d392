//! The single-bucket transition: the only place where the refill and decision arithmetic lives.
//!
//! Every front end (the keyed [`crate::Limiter`], the [`crate::DirectLimiter`], the Redis script's
//! tests, the harness) goes through [`transition`], [`BucketState::refilled`] and
//! [`BucketState::reconfigured`]. They are pure functions of `(config, state, attempt)`: no clock, no
//! lock, no allocation. [`transition`] and [`snapshot`] are not public API: they reach other crates
//! only through [`crate::internal`], for the project's own oracles, mutants and Redis tests.
//!
//! Promises, checked by assertions here and by the harness against the reference model:
//! - `0 <= balance <= capacity_units` after every step, and `last_refill` never moves back;
//! - refill over `dt` ns adds exactly `dt * p` units (no division, no rounding, saturating so that
//!   `u64::MAX` times and centuries of idling clamp to capacity instead of overflowing);
//! - allow iff the refilled balance covers the cost; a denial consumes nothing;
//! - an invalid cost is an error that leaves the state untouched.

use std::fmt;

use crate::{AcquireError, Config, NANOS_PER_SECOND, Nanos, Rate, Tokens, Wait};

/// The whole per-key state: the balance in units and the refill cursor.
///
/// The fields are private because they carry invariants: a state built by this crate (or by
/// [`BucketState::new`]) has a balance of at most its config's capacity, and every operation here
/// keeps it so and never moves the cursor back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BucketState {
    /// Balance in units of `1 / config.units_per_token()` token, `<= config.capacity_units()`.
    balance: u128,
    /// The time up to which refill has been credited. Never moves back.
    last_refill: Nanos,
}

impl BucketState {
    /// A state holding `balance` units with its cursor at `last_refill`, or `None` if the balance is
    /// above `config`'s capacity (a state no operation of this crate produces).
    pub fn new(config: &Config, balance: u128, last_refill: Nanos) -> Option<BucketState> {
        (balance <= config.capacity_units()).then_some(BucketState {
            balance,
            last_refill,
        })
    }

    /// Any balance and cursor, unchecked: for [`crate::internal::state_from_parts`] only.
    pub(crate) const fn from_parts(balance: u128, last_refill: Nanos) -> BucketState {
        BucketState {
            balance,
            last_refill,
        }
    }

    /// The balance in units of `1 / config.units_per_token()` token.
    #[inline]
    pub const fn balance(&self) -> u128 {
        self.balance
    }

    /// The time up to which refill has been credited.
    #[inline]
    pub const fn last_refill(&self) -> Nanos {
        self.last_refill
    }

    /// A bucket seen for the first time: full, with its cursor at `now`.
    pub fn full(config: &Config, now: Nanos) -> BucketState {
        BucketState {
            balance: config.capacity_units(),
            last_refill: now,
        }
    }

    /// The state refilled up to `max(now, last_refill)`.
    ///
    /// `elapsed = max(now, last_refill) - last_refill`, so a clock that runs backwards (or two threads
    /// that read the clock and then lock in the other order) credits nothing and moves nothing back.
    #[inline]
    pub fn refilled(self, config: &Config, now: Nanos) -> BucketState {
        let refill_to = now.max(self.last_refill);
        let elapsed = refill_to - self.last_refill;
        // u64 * u64 always fits u128; the sum saturates, and the clamp makes saturation exact.
        let credit = elapsed as u128 * config.units_per_nanosecond() as u128;
        let balance = self
            .balance
            .saturating_add(credit)
            .min(config.capacity_units());
        BucketState {
            balance,
            last_refill: refill_to,
        }
    }

    /// True when the balance equals the capacity: such a bucket is indistinguishable from a fresh one
    /// for every later operation at `now >= last_refill`.
    pub fn is_full(&self, config: &Config) -> bool {
        self.balance >= config.capacity_units()
    }

    /// The balance as exact tokens.
    pub fn tokens(&self, config: &Config) -> Tokens {
        Tokens::from_units(self.balance, config.units_per_token())
    }

    /// Moves this bucket from `old` to `new` config at `now` (design.md section 2): refill up to `now`
    /// under the old config, convert to the new unit grid rounding **down** (never creates tokens), clamp
    /// to the new capacity. The cursor stays at the refill time.
    pub fn reconfigured(self, old: &Config, new: &Config, now: Nanos) -> BucketState {
        let refilled = self.refilled(old, now);
        let converted = mul_div_floor(
            refilled.balance,
            new.units_per_token(),
            old.units_per_token(),
        );
        let next = BucketState {
            balance: converted.min(new.capacity_units()),
            last_refill: refilled.last_refill,
        };
        next.assert_valid(new, self.last_refill);
        next
    }

    #[inline]
    pub(crate) fn assert_valid(&self, config: &Config, previous_last_refill: Nanos) {
        debug_assert!(
            self.balance <= config.capacity_units(),
            "balance above capacity"
        );
        debug_assert!(
            self.last_refill >= previous_last_refill,
            "cursor moved back"
        );
    }
}

/// The result of an acquire: allowed or denied, with the exact remaining balance and the waits.
///
/// The waits are derived on demand from what the transition knew, so the allow path never divides.
/// Stored compactly (72 bytes, 8-byte aligned; every `u128` is rebuilt on demand): the transition and
/// the keyed limiter hand one out per call, so its size is on the hot path. Two decisions are equal
/// exactly when their allow bit, remaining units, unit grid, capacity, missing units, refill speed,
/// lag and `now` are equal (the missing units follow from the denied cost and the grid).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Decision {
    /// The balance after the decision, in units, as `[low, high]` 64-bit halves.
    remaining_units: [u64; 2],
    /// `q * 10^9 < 2^62`.
    units_per_token: u64,
    /// Capacity in whole tokens.
    capacity: u64,
    /// Denied only: the cost asked for (0 when allowed). Missing units = `cost * units_per_token -
    /// remaining`.
    denied_cost: u64,
    units_per_ns: u64,
    /// `last_refill - now` after the refill: how far the cursor is ahead of this caller's clock.
    lag: Nanos,
    now: Nanos,
    allowed: bool,
}

// The size promised above: a decision is returned by value from every acquire.
const _: () = assert!(size_of::<Decision>() == 72 && align_of::<Decision>() == 8);

impl Decision {
    /// True if the request was admitted and charged.
    #[inline]
    pub const fn is_allowed(&self) -> bool {
        self.allowed
    }

    /// The exact balance after the decision (after the charge if allowed).
    pub fn remaining(&self) -> Tokens {
        Tokens::from_units(self.remaining_units(), self.units_per_token as u128)
    }

    /// For a denial: how long from `now` until this same request would be allowed with no other
    /// traffic, rounded up to the nanosecond (so retrying 1 ns earlier fails). `None` when allowed.
    pub fn retry_after(&self) -> Option<Wait> {
        (!self.allowed)
            .then(|| Wait::until(self.short_units(), self.units_per_ns, self.lag, self.now))
    }

    /// How long from `now` until the bucket is full again with no traffic (`After(0)` if full now).
    pub fn reset_after(&self) -> Wait {
        let short = self.capacity_units() - self.remaining_units();
        Wait::until(short, self.units_per_ns, self.lag, self.now)
    }

    /// The config the decision was made under: the key's capacity and rate at that moment, even if
    /// the key was reconfigured right after (what a response should advertise).
    pub fn config(&self) -> Config {
        // Copied out of a valid config by `transition`: the rate is reduced and in bounds, the
        // capacity >= 1, and `units_per_token = q * 10^9` exactly.
        let denom = self.units_per_token / NANOS_PER_SECOND;
        Config::from_valid(self.capacity, Rate::from_reduced(self.units_per_ns, denom))
    }

    /// The `now` the decision was made at.
    pub const fn decided_at(&self) -> Nanos {
        self.now
    }

    #[inline]
    fn remaining_units(&self) -> u128 {
        self.remaining_units[0] as u128 | (self.remaining_units[1] as u128) << 64
    }

    fn capacity_units(&self) -> u128 {
        self.capacity as u128 * self.units_per_token as u128
    }

    /// Units missing to cover the cost (denied only; 0 when allowed).
    fn short_units(&self) -> u128 {
        (self.denied_cost as u128 * self.units_per_token as u128)
            .saturating_sub(self.remaining_units())
    }
}

/// Prints the same fields as before the compact layout, so logs and reports do not change.
impl fmt::Debug for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Decision")
            .field("allowed", &self.allowed)
            .field("remaining", &self.remaining())
            .field("capacity_units", &self.capacity_units())
            .field("short_units", &self.short_units())
            .field("units_per_ns", &self.units_per_ns)
            .field("lag", &self.lag)
            .field("now", &self.now)
            .finish()
    }
}

/// What one acquire asks for: `cost` whole tokens at `now`.
///
/// A struct rather than two `u64` arguments, so that a call cannot swap the cost and the time and
/// still type-check: every call site names both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// Whole tokens to take, `1..=capacity` to be valid.
    pub cost: u64,
    /// The time to decide at.
    pub now: Nanos,
}

/// One acquire of `attempt.cost` whole tokens at `attempt.now` on `state`: the spec's transition,
/// and the only copy.
///
/// Returns the next state (refilled, and charged if allowed) and the decision. An invalid cost is an
/// error and the caller must keep its old state.
#[inline]
pub fn transition(
    config: &Config,
    state: BucketState,
    attempt: Attempt,
) -> Result<(BucketState, Decision), AcquireError> {
    let Attempt { cost, now } = attempt;
    let cost_units = config.cost_units(cost).ok_or(AcquireError::InvalidCost {
        cost,
        capacity: config.capacity(),
    })?;
    let mut next = state.refilled(config, now);
    let allowed = next.balance >= cost_units;
    if allowed {
        next.balance -= cost_units;
    }
    next.assert_valid(config, state.last_refill);
    Ok((next, Decision::made(config, &next, attempt, allowed)))
}

/// What one settle asks of a bucket: a request that was charged `charged` whole tokens really cost
/// `actual`, reconciled at `now` (docs/semantics.md, "settle"). A struct for the same reason as
/// [`Attempt`]: three `u64`s that must not be swapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SettleAttempt {
    /// What the request's acquire charged, `1..=capacity` when it was made.
    pub charged: u64,
    /// What the work really cost, `0..=capacity` to be valid.
    pub actual: u64,
    /// The time to settle at.
    pub now: Nanos,
}

impl SettleAttempt {
    /// The extra to charge when the actual cost is above the charge, `None` for a refund.
    pub(crate) fn extra(&self) -> Option<Attempt> {
        (self.actual > self.charged).then(|| Attempt {
            cost: self.actual - self.charged,
            now: self.now,
        })
    }

    /// The units to give back when the actual cost is at most the charge.
    pub(crate) fn refund_units(&self, config: &Config) -> u128 {
        u128::from(self.charged.saturating_sub(self.actual)) * config.units_per_token()
    }
}

/// One settle on `state`: refill, then either give back `charged - actual` (never above capacity)
/// or decide the extra `actual - charged` exactly as [`transition`] decides a cost. An `actual`
/// above the capacity is an error and the caller must keep its old state.
pub fn settle(
    config: &Config,
    state: BucketState,
    settle: SettleAttempt,
) -> Result<(BucketState, Decision), AcquireError> {
    if settle.actual > config.capacity() {
        return Err(AcquireError::InvalidCost {
            cost: settle.actual,
            capacity: config.capacity(),
        });
    }
    if let Some(extra) = settle.extra() {
        return transition(config, state, extra);
    }
    let mut next = state.refilled(config, settle.now);
    next.balance = (next.balance)
        .saturating_add(settle.refund_units(config))
        .min(config.capacity_units());
    next.assert_valid(config, state.last_refill);
    let attempt = Attempt {
        cost: settle.actual,
        now: settle.now,
    };
    Ok((next, Decision::made(config, &next, attempt, true)))
}

/// What a store reports of one settle it ran: rebuilt into the exact [`Decision`] by
/// [`stored_settlement`] (not public API: see [`crate::internal`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoredSettlement {
    /// The store's verdict (a refund is always allowed).
    pub allowed: bool,
    /// The balance after the settle, in units.
    pub balance_after: u128,
    /// The cursor after the settle: `max(now, last_refill)`.
    pub cursor: Nanos,
    /// What was asked.
    pub settle: SettleAttempt,
}

/// The decision a store made on a settle, rebuilt exactly: an extra through [`stored_decision`], a
/// refund as the allowed decision that left `balance_after`. `None` when the report is no settle
/// the transition could have made.
pub fn stored_settlement(config: &Config, report: StoredSettlement) -> Option<Decision> {
    let SettleAttempt { actual, now, .. } = report.settle;
    if actual > config.capacity() {
        return None;
    }
    if let Some(extra) = report.settle.extra() {
        return stored_decision(
            config,
            StoredDecision {
                allowed: report.allowed,
                balance_after: report.balance_after,
                cursor: report.cursor,
                now,
                cost_units: u128::from(extra.cost) * config.units_per_token(),
            },
        );
    }
    let after = BucketState::new(config, report.balance_after, report.cursor)?;
    let refunded_at_least = report
        .settle
        .refund_units(config)
        .min(config.capacity_units());
    (report.allowed && report.cursor >= now && after.balance >= refunded_at_least)
        .then(|| Decision::made(config, &after, Attempt { cost: actual, now }, true))
}

/// What a shared store (Redis, PostgreSQL) reports of one transition it ran: enough to rebuild the
/// exact [`Decision`] with [`stored_decision`] (not public API: see [`crate::internal`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoredDecision {
    /// The store's verdict.
    pub allowed: bool,
    /// The balance after the decision, in units.
    pub balance_after: u128,
    /// The cursor after the decision: `max(now, last_refill)`.
    pub cursor: Nanos,
    /// The time the decision was made at.
    pub now: Nanos,
    /// The cost the decision was made for, in units.
    pub cost_units: u128,
}

/// The decision a store made, rebuilt exactly: the core's [`transition`] on the state before the
/// charge at the store's cursor (nothing to refill, since `cursor >= now`) gives the same verdict and
/// every derived number (remaining, waits) without a second copy of the arithmetic. `None` when the
/// report is no decision the transition could have made: a cost that is not a valid whole number of
/// tokens, a balance above capacity, a cursor behind `now`, or a verdict its own balance contradicts.
pub fn stored_decision(config: &Config, report: StoredDecision) -> Option<Decision> {
    let unit = config.units_per_token();
    if report.cost_units == 0
        || !report.cost_units.is_multiple_of(unit)
        || report.cursor < report.now
        || report.balance_after > config.capacity_units()
    {
        return None;
    }
    let cost = u64::try_from(report.cost_units / unit).ok()?;
    let before = if report.allowed {
        report.balance_after.checked_add(report.cost_units)?
    } else {
        report.balance_after
    };
    let state = BucketState::new(config, before, report.cursor)?;
    let (_, decision) = transition(
        config,
        state,
        Attempt {
            cost,
            now: report.now,
        },
    )
    .ok()?;
    // The verdict check is implied by the balance check (a denial whose balance covers the cost
    // would be re-decided as an admission and leave less), kept as the contract in plain words.
    (decision.is_allowed() == report.allowed
        && decision.remaining().units() == report.balance_after)
        .then_some(decision)
}

impl Decision {
    /// The decision on `attempt` whose bucket (refilled, and charged if `allowed`) is now `next`.
    #[inline(always)]
    pub(crate) fn made(
        config: &Config,
        next: &BucketState,
        attempt: Attempt,
        allowed: bool,
    ) -> Decision {
        debug_assert!(config.units_per_token() <= u64::MAX as u128);
        let Attempt { cost, now } = attempt;
        Decision {
            remaining_units: [next.balance as u64, (next.balance >> 64) as u64],
            units_per_token: config.units_per_token() as u64,
            capacity: config.capacity(),
            denied_cost: if allowed { 0 } else { cost },
            units_per_ns: config.units_per_nanosecond(),
            lag: next.last_refill - now.min(next.last_refill),
            now,
            allowed,
        }
    }
}

/// What [`transition`] would see at `now`, without charging or writing anything (what a peek
/// returns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The refilled balance.
    pub remaining: Tokens,
    /// Time from `now` until full.
    pub reset_after: Wait,
}

/// Read-only view of `state` at `now` (not public API: see [`crate::internal`]).
pub fn snapshot(config: &Config, state: BucketState, now: Nanos) -> Snapshot {
    let refilled = state.refilled(config, now);
    Snapshot {
        remaining: refilled.tokens(config),
        reset_after: Wait::until(
            config.capacity_units() - refilled.balance,
            config.units_per_nanosecond(),
            refilled.last_refill - now.min(refilled.last_refill),
            now,
        ),
    }
}

/// `floor(a * b / c)` for `b, c <= 2^62`, saturating at `u128::MAX` (callers clamp anyway).
fn mul_div_floor(a: u128, b: u128, c: u128) -> u128 {
    // a = whole * c + rest with rest < c, so a*b/c = whole*b + rest*b/c and rest*b < 2^124.
    let (whole, rest) = (a / c, a % c);
    whole.saturating_mul(b).saturating_add(rest * b / c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Rate;

    const SECOND: Nanos = NANOS_PER_SECOND;

    fn config(capacity: u64, rate: &str) -> Config {
        Config::new(capacity, rate.parse().unwrap()).unwrap()
    }

    fn take(config: &Config, state: &mut BucketState, cost: u64, now: Nanos) -> Decision {
        let (next, decision) = transition(config, *state, Attempt { cost, now }).unwrap();
        *state = next;
        decision
    }

    /// A store's report of a real transition rebuilds that very decision (waits included, under a
    /// lag); a report the transition could not have made is refused, never rounded over.
    #[test]
    fn a_stored_decision_is_the_transitions_or_none() {
        let config = config(3, "2/7s");
        let unit = config.units_per_token();
        let mut state = BucketState::full(&config, 10 * SECOND);
        for (cost, now) in [
            (2, 10 * SECOND),
            (2, 11 * SECOND),
            (1, 9 * SECOND),
            (3, 40 * SECOND),
        ] {
            let (next, decision) = transition(&config, state, Attempt { cost, now }).unwrap();
            let report = StoredDecision {
                allowed: decision.is_allowed(),
                balance_after: next.balance,
                cursor: next.last_refill,
                now,
                cost_units: u128::from(cost) * unit,
            };
            assert_eq!(
                stored_decision(&config, report),
                Some(decision),
                "{cost} at {now}"
            );
            for wrong in [
                // Denied though the balance covers the cost.
                StoredDecision {
                    allowed: false,
                    balance_after: report.cost_units,
                    ..report
                },
                StoredDecision {
                    cost_units: report.cost_units + 1,
                    ..report
                },
                StoredDecision {
                    cost_units: 0,
                    ..report
                },
                StoredDecision {
                    now: report.cursor + 1,
                    ..report
                },
                StoredDecision {
                    balance_after: config.capacity_units() + 1,
                    ..report
                },
            ] {
                assert_eq!(stored_decision(&config, wrong), None, "{wrong:?}");
            }
            state = next;
        }
    }

    #[test]
    fn a_new_bucket_is_full_and_allows_a_burst_up_to_capacity() {
        let config = config(5, "1/s");
        let mut state = BucketState::full(&config, 0);
        for expected_left in (0..5).rev() {
            let decision = take(&config, &mut state, 1, 0);
            assert!(decision.is_allowed());
            assert_eq!(decision.remaining().whole(), expected_left);
        }
        assert!(!take(&config, &mut state, 1, 0).is_allowed());
    }

    #[test]
    fn a_decision_names_the_config_it_was_made_under() {
        for (capacity, rate) in [
            (1, "0/s"),
            (5, "3/2s"),
            (u64::MAX, "1/h"),
            (7, "18446744073709551615/s"),
        ] {
            let config = config(capacity, rate);
            let mut state = BucketState::full(&config, 0);
            assert_eq!(take(&config, &mut state, 1, 0).config(), config);
            assert_eq!(take(&config, &mut state, capacity, 0).config(), config);
        }
    }

    #[test]
    fn cost_equal_to_capacity_is_allowed_once() {
        let config = config(10, "1/s");
        let mut state = BucketState::full(&config, 0);
        assert!(take(&config, &mut state, 10, 0).is_allowed());
        let denied = take(&config, &mut state, 10, 0);
        assert!(!denied.is_allowed());
        assert_eq!(denied.retry_after(), Some(Wait::After(10 * SECOND)));
    }

    #[test]
    fn repeated_denials_consume_nothing_and_report_the_same_balance() {
        let config = config(2, "1/s");
        let mut state = BucketState::full(&config, 0);
        take(&config, &mut state, 2, 0);
        for _ in 0..3 {
            let denied = take(&config, &mut state, 1, SECOND / 2);
            assert!(!denied.is_allowed());
            assert_eq!(
                denied.remaining().as_ratio(),
                (SECOND as u128 / 2, SECOND as u128)
            );
            assert_eq!(denied.retry_after(), Some(Wait::After(SECOND / 2)));
        }
    }

    #[test]
    fn refill_is_exact_at_a_third_of_a_token_per_second() {
        let config = config(1, "1/3s");
        let mut state = BucketState::full(&config, 0);
        assert!(take(&config, &mut state, 1, 0).is_allowed());
        let mut early = state;
        let denied = take(&config, &mut early, 1, 3 * SECOND - 1);
        assert!(
            !denied.is_allowed(),
            "1 ns before the boundary is too early"
        );
        assert_eq!(denied.retry_after(), Some(Wait::After(1)));
        assert!(take(&config, &mut state, 1, 3 * SECOND).is_allowed());
    }

    #[test]
    fn retry_after_is_tight_for_awkward_rates() {
        for rate in ["7/3s", "1/h", "3000000/s", "7000000/s", "5/min"] {
            let config = config(3, rate);
            let mut state = BucketState::full(&config, 100);
            take(&config, &mut state, 3, 100);
            let denied = take(&config, &mut state, 2, 101);
            let wait = denied.retry_after().unwrap().nanos().unwrap();
            assert!(
                !transition(
                    &config,
                    state,
                    Attempt {
                        cost: 2,
                        now: 101 + wait - 1
                    }
                )
                .unwrap()
                .1
                .is_allowed(),
                "{rate}"
            );
            assert!(
                transition(
                    &config,
                    state,
                    Attempt {
                        cost: 2,
                        now: 101 + wait
                    }
                )
                .unwrap()
                .1
                .is_allowed(),
                "{rate}"
            );
        }
    }

    #[test]
    fn no_time_progress_means_no_refill() {
        let config = config(3, "1000/s");
        let mut state = BucketState::full(&config, 42);
        for _ in 0..3 {
            assert!(take(&config, &mut state, 1, 42).is_allowed());
        }
        assert!(!take(&config, &mut state, 1, 42).is_allowed());
    }

    #[test]
    fn a_clock_rollback_credits_nothing_and_never_moves_the_cursor_back() {
        let config = config(4, "1/s");
        let mut state = BucketState::full(&config, 10 * SECOND);
        take(&config, &mut state, 4, 10 * SECOND);
        let denied = take(&config, &mut state, 1, 5 * SECOND);
        assert!(!denied.is_allowed());
        assert_eq!(state.last_refill, 10 * SECOND);
        assert_eq!(state.balance, 0);
        // Retry-after is measured from the caller's (lagging) clock: lag plus the refill time.
        assert_eq!(denied.retry_after(), Some(Wait::After(6 * SECOND)));
        // Back at the cursor: still nothing; one second later: one token.
        assert!(!take(&config, &mut state, 1, 10 * SECOND).is_allowed());
        assert!(take(&config, &mut state, 1, 11 * SECOND).is_allowed());
    }

    #[test]
    /// A `u64` nanosecond clock spans 584 years, so "1000 years idle" is the whole clock range.
    fn the_longest_idle_gap_clamps_to_capacity_without_overflow() {
        let config = config(u64::MAX, &format!("{}/{}s", u64::MAX, 1u64 << 32));
        let mut state = BucketState::full(&config, 0);
        take(&config, &mut state, u64::MAX, 0);
        let five_hundred_years = 500 * 365 * 86_400 * SECOND;
        state = state.refilled(&config, five_hundred_years);
        assert!(state.is_full(&config));
        let at_end = state.refilled(&config, u64::MAX);
        assert_eq!(at_end.last_refill, u64::MAX);
        assert!(at_end.is_full(&config));
    }

    #[test]
    fn waits_past_the_end_of_the_clock_are_never() {
        let config = config(1, "1/h");
        let mut state = BucketState::full(&config, u64::MAX - 10);
        take(&config, &mut state, 1, u64::MAX - 10);
        let denied = take(&config, &mut state, 1, u64::MAX - 5);
        assert_eq!(denied.retry_after(), Some(Wait::Never));
        assert_eq!(denied.reset_after(), Wait::Never);
    }

    #[test]
    fn zero_rate_never_refills_and_says_never() {
        let config = Config::new(2, Rate::ZERO).unwrap();
        let mut state = BucketState::full(&config, 0);
        let allowed = take(&config, &mut state, 1, 0);
        assert_eq!(allowed.reset_after(), Wait::Never);
        take(&config, &mut state, 1, 0);
        let denied = take(&config, &mut state, 1, u64::MAX);
        assert_eq!(denied.retry_after(), Some(Wait::Never));
    }

    #[test]
    fn invalid_costs_are_errors_not_denials() {
        let config = config(3, "1/s");
        let state = BucketState::full(&config, 0);
        for cost in [0, 4, u64::MAX] {
            assert_eq!(
                transition(&config, state, Attempt { cost, now: 5 }).unwrap_err(),
                AcquireError::InvalidCost { cost, capacity: 3 }
            );
        }
    }

    #[test]
    fn reconfiguration_rounds_down_and_clamps() {
        let old = config(10, "1/3s"); // grid 1/(3e9)
        let new = config(4, "1/2s"); // grid 1/(2e9)
        let mut state = BucketState::full(&old, 0);
        take(&old, &mut state, 9, 0);
        // 1 token + 1 ns of 1/3 token/s = 1 + 1/(3e9) tokens; on the 1/(2e9) grid that floors to 1 token.
        let moved = state.reconfigured(&old, &new, 1);
        assert_eq!(moved.balance, new.units_per_token());
        assert_eq!(moved.last_refill, 1);
        let full = BucketState::full(&old, 0).reconfigured(&old, &new, 0);
        assert_eq!(
            full.balance,
            new.capacity_units(),
            "clamped to the new capacity"
        );
    }

    #[test]
    fn the_compact_decision_keeps_its_equality_and_debug_output() {
        let config = config(4, "1/s");
        // Equal outcomes from different costs compare equal, as with the former field-per-value layout.
        let three = BucketState {
            balance: 3 * config.units_per_token(),
            last_refill: 0,
        };
        let four = BucketState::full(&config, 0);
        let (_, one_of_three) = transition(&config, three, Attempt { cost: 1, now: 0 }).unwrap();
        let (_, two_of_four) = transition(&config, four, Attempt { cost: 2, now: 0 }).unwrap();
        assert_eq!(one_of_three, two_of_four);
        // A denial keeps its missing units; Debug prints the same fields as before.
        let mut state = BucketState::full(&config, 0);
        take(&config, &mut state, 4, 0);
        let denied = take(&config, &mut state, 1, SECOND / 2);
        assert_eq!(denied.retry_after(), Some(Wait::After(SECOND / 2)));
        assert_eq!(denied.reset_after(), Wait::After(3 * SECOND + SECOND / 2));
        assert_eq!(
            format!("{denied:?}"),
            "Decision { allowed: false, remaining: Tokens { units: 500000000, units_per_token: \
             1000000000 }, capacity_units: 4000000000, short_units: 500000000, units_per_ns: 1, \
             lag: 0, now: 500000000 }"
        );
        assert_ne!(denied, take(&config, &mut state, 2, SECOND / 2));
    }

    #[test]
    fn a_checked_state_holds_at_most_the_capacity() {
        let config = config(2, "1/s");
        let full = BucketState::new(&config, config.capacity_units(), 7).unwrap();
        assert_eq!(full, BucketState::full(&config, 7));
        assert_eq!(
            BucketState::new(&config, config.capacity_units() + 1, 7),
            None
        );
    }

    #[test]
    fn snapshot_matches_what_a_transition_would_see() {
        let config = config(5, "2/s");
        let mut state = BucketState::full(&config, 0);
        take(&config, &mut state, 5, 0);
        let view = snapshot(&config, state, SECOND);
        assert_eq!(view.remaining.whole(), 2);
        assert_eq!(view.reset_after, Wait::After(SECOND + SECOND / 2));
        assert_eq!(state.balance, 0, "snapshot writes nothing");
    }
}
