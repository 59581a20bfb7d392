//! The transition over a bandwidth set (docs/semantics.md, "Several bandwidths per key").
//!
//! What it owns: [`SetState`] (one balance per bandwidth, one cursor), [`Decisions`] (one
//! [`Decision`] per bandwidth) and [`transition_set`]. It holds no arithmetic of its own: every
//! refill, charge, conversion and wait is `bucket`'s single-bucket step, applied to each bandwidth.
//! What it promises, beyond each bandwidth's own promises: all bandwidths are allowed and charged, or
//! none is; the combined wait is the largest of the bandwidths' waits; the cursor is one for all.

use arrayvec::ArrayVec;

use crate::bucket::{
    Attempt, BucketState, Decision, SettleAttempt, StoredSettlement, settle, stored_settlement,
};
use crate::{AcquireError, Bandwidths, MAX_BANDWIDTHS, Nanos, Wait};

/// The state of a key with a bandwidth set: one balance per bandwidth (in units of that bandwidth's
/// grid) and one cursor, which every operation moves for all bandwidths at once.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SetState {
    balances: ArrayVec<u128, MAX_BANDWIDTHS>,
    last_refill: Nanos,
}

impl SetState {
    /// A key seen for the first time: every bandwidth full, the cursor at `now`.
    pub fn full(set: &Bandwidths, now: Nanos) -> SetState {
        SetState {
            balances: set
                .as_slice()
                .iter()
                .map(|b| b.config().capacity_units())
                .collect(),
            last_refill: now,
        }
    }

    /// A stored state: one balance per bandwidth of `set` (each in its units, at most its capacity)
    /// and the one cursor. `None` if a balance is missing, extra or above its capacity.
    pub fn new(set: &Bandwidths, balances: &[u128], last_refill: Nanos) -> Option<SetState> {
        let fits = balances.len() == set.len()
            && (set.as_slice().iter().zip(balances))
                .all(|(bandwidth, &balance)| balance <= bandwidth.config().capacity_units());
        fits.then(|| SetState::from_balances(balances.iter().copied(), last_refill))
    }

    /// The state of bandwidth `position` as a single bucket, if there is one.
    pub fn bandwidth(&self, position: usize) -> Option<BucketState> {
        let balance = *self.balances.get(position)?;
        Some(BucketState::from_parts(balance, self.last_refill))
    }

    /// The time up to which every bandwidth has been refilled.
    pub const fn last_refill(&self) -> Nanos {
        self.last_refill
    }

    /// A state from the bandwidths' states, which share `last_refill`; for the front ends, which
    /// store bandwidths apart.
    pub(crate) fn from_balances(
        balances: impl IntoIterator<Item = u128>,
        last_refill: Nanos,
    ) -> SetState {
        SetState {
            balances: balances.into_iter().collect(),
            last_refill,
        }
    }

    /// The balances, in the set's order.
    pub(crate) fn balances(&self) -> &[u128] {
        &self.balances
    }

    /// The state refilled up to `max(now, last_refill)`, each bandwidth by its own rate.
    pub fn refilled(&self, set: &Bandwidths, now: Nanos) -> SetState {
        let mut next = self.clone();
        for (position, bandwidth) in set.as_slice().iter().enumerate() {
            let part = self.part(position).refilled(bandwidth.config(), now);
            next.balances[position] = part.balance();
            next.last_refill = part.last_refill();
        }
        next
    }

    /// True when every bandwidth is full: indistinguishable from a fresh key.
    pub fn is_full(&self, set: &Bandwidths) -> bool {
        set.as_slice()
            .iter()
            .enumerate()
            .all(|(position, b)| self.part(position).is_full(b.config()))
    }

    /// Moves this key from `old` to `new` at `now` (docs/semantics.md, "Several bandwidths per key"):
    /// every old bandwidth refilled to `t = max(now, last_refill)`; a new bandwidth continues the old
    /// one of its identity, converted and clamped; one with no old counterpart starts full.
    pub fn reconfigured(&self, old: &Bandwidths, new: &Bandwidths, now: Nanos) -> SetState {
        let refill_to = now.max(self.last_refill);
        let balances = new
            .as_slice()
            .iter()
            .enumerate()
            .map(|(position, bandwidth)| {
                let config = bandwidth.config();
                match old.position_of(new.identity(position)) {
                    Some(was) => {
                        let old_config = old.as_slice()[was].config();
                        self.part(was)
                            .reconfigured(old_config, config, now)
                            .balance()
                    }
                    None => config.capacity_units(),
                }
            })
            .collect();
        SetState {
            balances,
            last_refill: refill_to,
        }
    }

    fn part(&self, position: usize) -> BucketState {
        BucketState::from_parts(self.balances[position], self.last_refill)
    }
}

/// The decision on an acquire of a key with a bandwidth set: one [`Decision`] per bandwidth, in the
/// set's order, all allowed or all denied.
///
/// A denied bandwidth's part says its own wait (`After(0)` if that bandwidth covered the cost);
/// [`Decisions::retry_after`] is the largest, after which every bandwidth covers it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Decisions {
    parts: ArrayVec<Decision, MAX_BANDWIDTHS>,
}

impl Decisions {
    /// True if the request was admitted and every bandwidth charged.
    pub fn is_allowed(&self) -> bool {
        self.parts[0].is_allowed()
    }

    /// Each bandwidth's part, in the set's order.
    pub fn bandwidths(&self) -> &[Decision] {
        &self.parts
    }

    /// For a denial: the largest of the bandwidths' waits (`Never` if any is), so that retrying at
    /// `now + retry_after` succeeds with no other traffic and 1 ns earlier fails. `None` when allowed.
    pub fn retry_after(&self) -> Option<Wait> {
        self.parts.iter().filter_map(Decision::retry_after).max()
    }

    /// How long until every bandwidth is full again with no traffic.
    pub fn reset_after(&self) -> Wait {
        self.parts
            .iter()
            .map(Decision::reset_after)
            .max()
            .unwrap_or(Wait::After(0))
    }

    /// The one part that answers for the whole decision where a single number is asked for (a
    /// [`crate::Limiter::acquire_at`] on such a key): for a denial the bandwidth with the largest
    /// wait, so its `retry_after` is the whole decision's; for an allow the one with the fewest whole
    /// tokens left. The first of equals.
    pub fn binding(&self) -> &Decision {
        let key = |part: &&Decision| match part.retry_after() {
            Some(wait) => (wait, 0),
            None => (Wait::After(0), u64::MAX - part.remaining().whole()),
        };
        // `max_by_key` keeps the last of equals; walk backwards to keep the first.
        self.parts
            .iter()
            .rev()
            .max_by_key(key)
            .unwrap_or(&self.parts[0])
    }

    /// A decision of one bandwidth as a set's.
    pub(crate) fn one(decision: Decision) -> Decisions {
        let mut parts = ArrayVec::new();
        parts.push(decision);
        Decisions { parts }
    }
}

/// One acquire on a key with a bandwidth set: every bandwidth refilled by its own rate, allowed iff
/// every one covers `cost`, then every one charged; otherwise none is. The same steps as
/// [`transition`](crate::bucket::transition), which is this function for a set of one, kept apart so that the single-bucket path
/// stays as small as it is (no set, no loop).
pub fn transition_set(
    set: &Bandwidths,
    state: &SetState,
    attempt: Attempt,
) -> Result<(SetState, Decisions), AcquireError> {
    let Attempt { cost, now } = attempt;
    if cost == 0 || cost > set.cost_bound() {
        return Err(AcquireError::InvalidCost {
            cost,
            capacity: set.cost_bound(),
        });
    }
    debug_assert_eq!(state.balances.len(), set.len(), "one balance per bandwidth");
    let mut next = state.refilled(set, now);
    let allowed = set
        .as_slice()
        .iter()
        .zip(&next.balances)
        .all(|(b, &balance)| balance >= cost as u128 * b.config().units_per_token());
    let mut parts = ArrayVec::new();
    for (position, bandwidth) in set.as_slice().iter().enumerate() {
        let config = bandwidth.config();
        if allowed {
            next.balances[position] -= cost as u128 * config.units_per_token();
        }
        let part = next.part(position);
        part.assert_valid(config, state.last_refill);
        parts.push(Decision::made(config, &part, attempt, allowed));
    }
    Ok((next, Decisions { parts }))
}

/// One settle on a key with a bandwidth set (docs/semantics.md, "settle"): a refund is each
/// bandwidth's own [`settle`] (each capped at its capacity); an extra is [`transition_set`] of the
/// extra, so it is charged to every bandwidth or to none. An `actual` above the smallest capacity is
/// an error.
pub fn settle_set(
    set: &Bandwidths,
    state: &SetState,
    attempt: SettleAttempt,
) -> Result<(SetState, Decisions), AcquireError> {
    if attempt.actual > set.cost_bound() {
        return Err(AcquireError::InvalidCost {
            cost: attempt.actual,
            capacity: set.cost_bound(),
        });
    }
    if let Some(extra) = attempt.extra() {
        return transition_set(set, state, extra);
    }
    let mut next = state.clone();
    let mut parts = ArrayVec::new();
    for (position, bandwidth) in set.as_slice().iter().enumerate() {
        let (part, decision) = settle(bandwidth.config(), state.part(position), attempt)?;
        next.balances[position] = part.balance();
        next.last_refill = part.last_refill();
        parts.push(decision);
    }
    Ok((next, Decisions { parts }))
}

/// What a store reports of one settle on a key of a bandwidth set, rebuilt by
/// [`stored_settlements`] (not public API: see [`crate::internal`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoredSettlements<'a> {
    /// The store's verdict (a refund is always allowed).
    pub allowed: bool,
    /// Each bandwidth's balance after the settle, in its units, in the set's order.
    pub balances_after: &'a [u128],
    /// The cursor after the settle.
    pub cursor: Nanos,
    /// What was asked.
    pub settle: SettleAttempt,
}

/// The decisions a store made on a settle of a key of `set`, rebuilt exactly (an extra through
/// [`stored_decisions`], a refund bandwidth by bandwidth through the single-bucket rebuild); `None`
/// when the report is no settle [`settle_set`] could have made.
pub fn stored_settlements(set: &Bandwidths, report: StoredSettlements<'_>) -> Option<Decisions> {
    if report.balances_after.len() != set.len() || report.settle.actual > set.cost_bound() {
        return None;
    }
    if let Some(extra) = report.settle.extra() {
        return stored_decisions(
            set,
            StoredDecisions {
                allowed: report.allowed,
                balances_after: report.balances_after,
                cursor: report.cursor,
                now: extra.now,
                cost: extra.cost,
            },
        );
    }
    let mut parts = ArrayVec::new();
    for (bandwidth, &balance_after) in set.as_slice().iter().zip(report.balances_after) {
        parts.push(stored_settlement(
            bandwidth.config(),
            StoredSettlement {
                allowed: report.allowed,
                balance_after,
                cursor: report.cursor,
                settle: report.settle,
            },
        )?);
    }
    Some(Decisions { parts })
}

/// What a store reports of a decision it made on a key of a bandwidth set, rebuilt into the exact
/// [`Decisions`] by [`stored_decisions`] (not public API: see [`crate::internal`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoredDecisions<'a> {
    /// The store's verdict (every bandwidth's).
    pub allowed: bool,
    /// Each bandwidth's balance after the decision, in its units, in the set's order.
    pub balances_after: &'a [u128],
    /// The cursor after the decision: `max(now, last_refill)`.
    pub cursor: Nanos,
    /// The time the decision was made at.
    pub now: Nanos,
    /// The cost, in whole tokens.
    pub cost: u64,
}

/// The decision a store made on a key of `set`, rebuilt exactly: [`transition_set`] on the state
/// before the charge at the store's cursor (nothing to refill, since `cursor >= now`) gives every
/// part without a second copy of the arithmetic. `None` when the report is no decision the
/// transition could have made (a balance per bandwidth missing or above its capacity, a cursor
/// behind `now`, an invalid cost, or a verdict or balance the transition contradicts).
pub fn stored_decisions(set: &Bandwidths, report: StoredDecisions<'_>) -> Option<Decisions> {
    if report.balances_after.len() != set.len() || report.cursor < report.now {
        return None;
    }
    let mut before = ArrayVec::<u128, MAX_BANDWIDTHS>::new();
    for (bandwidth, &after) in set.as_slice().iter().zip(report.balances_after) {
        let config = bandwidth.config();
        let charged = if report.allowed {
            u128::from(report.cost).checked_mul(config.units_per_token())?
        } else {
            0
        };
        let balance = after.checked_add(charged)?;
        if balance > config.capacity_units() {
            return None;
        }
        before.push(balance);
    }
    let state = SetState::from_balances(before, report.cursor);
    let attempt = Attempt {
        cost: report.cost,
        now: report.now,
    };
    let (_, decisions) = transition_set(set, &state, attempt).ok()?;
    let same_balances = (decisions.parts.iter().zip(report.balances_after))
        .all(|(part, &after)| part.remaining().units() == after);
    (decisions.is_allowed() == report.allowed && same_balances).then_some(decisions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Config, Rate};

    fn two() -> Bandwidths {
        Bandwidths::new([
            Config::new(3, Rate::per_second(1)).unwrap().into(),
            Config::new(5, Rate::new(2, 7).unwrap()).unwrap().into(),
        ])
        .unwrap()
    }

    #[test]
    fn a_stored_decision_is_rebuilt_exactly_and_a_contradicting_one_refused() {
        let set = two();
        let state = SetState::from_balances([2_000_000_000, 7_000_000_001], 10);
        for cost in [1, 2, 3] {
            let attempt = Attempt { cost, now: 4 };
            let (next, decisions) = transition_set(&set, &state, attempt).unwrap();
            let report = StoredDecisions {
                allowed: decisions.is_allowed(),
                balances_after: next.balances(),
                cursor: next.last_refill(),
                now: 4,
                cost,
            };
            assert_eq!(stored_decisions(&set, report), Some(decisions.clone()));
            let short = StoredDecisions {
                balances_after: &next.balances()[..1],
                ..report
            };
            assert_eq!(stored_decisions(&set, short), None);
            let behind = StoredDecisions { now: 11, ..report };
            assert_eq!(stored_decisions(&set, behind), None);
        }
        // A denial whose every balance covers the cost: the transition would have allowed it.
        let covered = StoredDecisions {
            allowed: false,
            balances_after: state.balances(),
            cursor: 10,
            now: 4,
            cost: 1,
        };
        assert_eq!(stored_decisions(&set, covered), None);
    }
}
