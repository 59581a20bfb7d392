//! Request-id records: what makes a retried acquire charge once.
//!
//! What it owns: [`RequestId`], and a key's records (oldest first) with the decision each one got.
//! What it promises: every time here is the key's *effective time* `max(now, last_refill)`, which
//! never moves back (docs/semantics.md, acquire steps 2 and 6): a record is stamped with the
//! effective time of the acquire that made it and is live at a later effective time `t` while
//! `t < stamp + window`, so a rollback of the caller's clock is not special, a window of 0 keeps
//! nothing live, and a key's records are in time order. A replay returns the recorded decision of
//! the newest live record of that id; a new record of an id replaces the older one, so a dead
//! record never holds a place that could push out another id's live record (acquire step 6); at
//! most `per_key` records are kept, the oldest dropped first. A record also holds what its acquire
//! charged and, once settled, the actual cost and the settlement (docs/semantics.md, "settle"), so a
//! settle refunds at most once and a retried settle replays.

use std::collections::VecDeque;

use crate::{Decision, Decisions, Nanos};

/// Identifies one logical request across retries (e.g. the low 128 bits of an idempotency key's hash,
/// or a UUID). Scoped to the key it was used with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u128);

impl From<u64> for RequestId {
    fn from(id: u64) -> Self {
        RequestId(id as u128)
    }
}

/// The decision a record holds: a one-bandwidth key's, or (boxed, as it is large and rare) a
/// bandwidth set's, every bandwidth's part.
#[derive(Clone, Debug)]
pub(super) enum Recorded {
    One(Decision),
    Set(Box<Decisions>),
}

impl Recorded {
    /// The one decision that answers for it (a set's binding part).
    pub(super) fn decision(&self) -> Decision {
        match self {
            Recorded::One(decision) => *decision,
            Recorded::Set(decisions) => *decisions.binding(),
        }
    }

    /// True if the recorded acquire was admitted (and charged).
    pub(super) fn is_allowed(&self) -> bool {
        match self {
            Recorded::One(decision) => decision.is_allowed(),
            Recorded::Set(decisions) => decisions.is_allowed(),
        }
    }

    /// A settlement as its key holds it: a one-bandwidth key's as its one decision.
    pub(super) fn of(decisions: Decisions) -> Recorded {
        match decisions.bandwidths() {
            [one] => Recorded::One(*one),
            _ => Recorded::Set(Box::new(decisions)),
        }
    }

    /// Every bandwidth's part.
    pub(super) fn decisions(&self) -> Decisions {
        match self {
            Recorded::One(decision) => Decisions::one(*decision),
            Recorded::Set(decisions) => (**decisions).clone(),
        }
    }
}

/// One request-id record: the decision its acquire got, what that acquire charged, and its
/// settlement once settled.
pub(super) struct Record {
    pub(super) id: RequestId,
    /// The effective time of the acquire that made it.
    pub(super) stamped_at: Nanos,
    pub(super) decision: Recorded,
    /// The acquire's cost (charged if the decision allowed it).
    pub(super) cost: u64,
    /// `(actual, settlement)` once an allowed settle reconciled it (boxed: rare, and large).
    pub(super) settled: Option<Box<(u64, Recorded)>>,
}

/// One key's request-id records, oldest first, stamped with the effective time of the acquire that
/// made them.
#[derive(Default)]
pub(super) struct Records(VecDeque<Record>);

/// A record stamped at `stamped_at` is live at the key's effective time `at` within `window`:
/// `at < stamped_at + window`, exactly (no overflow). `at >= stamped_at` always holds for a key's own
/// records, so nothing is live at a window of 0.
fn is_live(stamped_at: Nanos, at: Nanos, window: Nanos) -> bool {
    (at as u128) < stamped_at as u128 + window as u128
}

impl Records {
    /// The recorded decision of the newest record of `request_id` live at the effective time `at`.
    pub(super) fn replay(
        &self,
        request_id: RequestId,
        at: Nanos,
        window: Nanos,
    ) -> Option<&Recorded> {
        self.0
            .iter()
            .rev()
            .find(|record| record.id == request_id && is_live(record.stamped_at, at, window))
            .map(|record| &record.decision)
    }

    /// The newest record of `request_id` live at the effective time `at`, and its position.
    pub(super) fn live(
        &self,
        request_id: RequestId,
        at: Nanos,
        window: Nanos,
    ) -> Option<(usize, &Record)> {
        (self.0.iter().enumerate().rev())
            .find(|(_, record)| record.id == request_id && is_live(record.stamped_at, at, window))
    }

    /// Settles the record at `position` (from [`Records::live`] under the same lock) with
    /// `(actual, settlement)`.
    pub(super) fn settle(&mut self, position: usize, actual: u64, settlement: Recorded) {
        if let Some(record) = self.0.get_mut(position) {
            record.settled = Some(Box::new((actual, settlement)));
        }
    }

    /// True if any record is live at the effective time `at` (which keeps the key's bucket from
    /// being evicted).
    pub(super) fn any_live(&self, at: Nanos, window: Nanos) -> bool {
        self.0
            .iter()
            .any(|record| is_live(record.stamped_at, at, window))
    }

    /// Records `decision` on a request of `cost` for `request_id` stamped at the effective time
    /// `at`, keeping at most `per_key` records (`per_key > 0`).
    pub(super) fn record(
        &mut self,
        request_id: RequestId,
        at: Nanos,
        (decision, cost): (Recorded, u64),
        per_key: usize,
    ) {
        let requests = &mut self.0;
        // A new record of an id replaces its older (dead) one: a dead record must not hold a
        // slot that could push out another id's live record.
        requests.retain(|record| record.id != request_id);
        while requests.len() >= per_key {
            requests.pop_front();
        }
        requests.push_back(Record {
            id: request_id,
            stamped_at: at,
            decision,
            cost,
            settled: None,
        });
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
