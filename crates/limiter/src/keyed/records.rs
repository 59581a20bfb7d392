//! Request-id records: what makes a retried acquire charge once.
//!
//! What it owns: [`RequestId`], and a key's records (oldest first) with the decision each one got.
//! What it promises: a record is live for the dedupe window after the time it was made at (a `now`
//! before it, a rollback, counts as inside the window); a replay returns the recorded decision of
//! the newest live record of that id; a new record of an id replaces the older one, so a dead
//! record never holds a place that could push out another id's live record (docs/semantics.md,
//! acquire step 6); at most `per_key` records are kept, the oldest dropped first.

use std::collections::VecDeque;

use crate::{Decision, Nanos};

/// Identifies one logical request across retries (e.g. the low 128 bits of an idempotency key's hash,
/// or a UUID). Scoped to the key it was used with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u128);

impl From<u64> for RequestId {
    fn from(id: u64) -> Self {
        RequestId(id as u128)
    }
}

/// One key's request-id records, oldest first: `(id, recorded at, decision)`.
#[derive(Default)]
pub(super) struct Records(VecDeque<(RequestId, Nanos, Decision)>);

/// A record made at `recorded_at` is live at `now` within `window`.
fn is_live(recorded_at: Nanos, now: Nanos, window: Nanos) -> bool {
    // A `now` before the record (a rollback) counts as inside the window.
    now.saturating_sub(recorded_at) < window
}

impl Records {
    /// The recorded decision of the newest live record of `request_id`, if any.
    pub(super) fn replay(
        &self,
        request_id: RequestId,
        now: Nanos,
        window: Nanos,
    ) -> Option<Decision> {
        self.0
            .iter()
            .rev()
            .find(|(id, recorded_at, _)| *id == request_id && is_live(*recorded_at, now, window))
            .map(|(_, _, decision)| *decision)
    }

    /// True if any record is live at `now` (which keeps the key's bucket from being evicted).
    pub(super) fn any_live(&self, now: Nanos, window: Nanos) -> bool {
        self.0
            .iter()
            .any(|(_, recorded_at, _)| is_live(*recorded_at, now, window))
    }

    /// Records `decision` for `request_id` at `now`, keeping at most `per_key` records (`per_key > 0`).
    pub(super) fn record(
        &mut self,
        request_id: RequestId,
        now: Nanos,
        decision: Decision,
        per_key: usize,
    ) {
        let requests = &mut self.0;
        // A new record of an id replaces its older (dead) one: a dead record must not hold a
        // slot that could push out another id's live record.
        requests.retain(|(id, _, _)| *id != request_id);
        while requests.len() >= per_key {
            requests.pop_front();
        }
        requests.push_back((request_id, now, decision));
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
