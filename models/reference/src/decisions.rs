//! The decision of one acquire on a bandwidth set: one [`ModelDecision`] per bandwidth, and how they combine.
//!
//! Owns docs/semantics.md, "Several bandwidths per key", step 5's combination:
//! > Denied only: `wait_i = 0` if `tokens_i >= cost`, else ... and `retry_after = max_i wait_i`: `Never` if any is
//! > `Never`.
//!
//! and the one part that answers where a single decision is asked for ([`ModelDecisions::binding`]).
//!
//! Promise: the parts are all allowed or all denied (the set transition makes them; nothing else can), in the
//! set's order, at least one. The combinations only compare the parts' own numbers: no arithmetic here.

use crate::bandwidths::PerBandwidth;
use crate::bucket::{ModelDecision, ModelWait};

/// One acquire's decision on a bandwidth set: "per bandwidth `i`: `remaining_i = tokens_i` and `reset_after_i`",
/// and for a denial each bandwidth's `wait_i` as its part's `retry_after`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ModelDecisions {
    /// One per bandwidth, in the set's order; all allowed or all denied.
    parts: PerBandwidth<ModelDecision>,
}

impl ModelDecisions {
    /// The parts the set transition made (all allowed or all denied, one per bandwidth).
    pub(crate) fn from_parts(parts: PerBandwidth<ModelDecision>) -> Self {
        debug_assert!(!parts.is_empty(), "a set has at least one bandwidth");
        debug_assert!(
            parts.iter().all(ModelDecision::is_allowed)
                || !parts.iter().any(ModelDecision::is_allowed),
            "allowed iff every bandwidth covers: all parts agree"
        );
        ModelDecisions { parts }
    }

    /// Each bandwidth's part, in the set's order. For a denial a part's `retry_after` is its `wait_i` (`After(0)`
    /// for a bandwidth that covers the cost).
    pub fn bandwidths(&self) -> &[ModelDecision] {
        &self.parts
    }

    /// "allowed iff *every* `tokens_i >= cost`; then each is charged `cost`".
    pub fn is_allowed(&self) -> bool {
        self.parts.iter().all(ModelDecision::is_allowed)
    }

    /// Denied only: "`retry_after = max_i wait_i`: `Never` if any is `Never`" (`ModelWait` orders `Never` above
    /// every `After`). `None` when allowed.
    pub fn retry_after(&self) -> Option<ModelWait> {
        self.parts
            .iter()
            .filter_map(ModelDecision::retry_after)
            .max()
    }

    /// The time until every bandwidth is full again with no traffic: the largest `reset_after_i`.
    pub fn reset_after(&self) -> ModelWait {
        (self.parts.iter().map(ModelDecision::reset_after).max()).unwrap_or(ModelWait::After(0))
    }

    /// The part that answers for the whole decision where one is asked for: for a denial the bandwidth with the
    /// largest wait (`Never` the largest), so its `retry_after` is the decision's; for an allow the bandwidth
    /// with the fewest whole tokens left. The first of equals. For a set of one, its one part.
    pub fn binding(&self) -> &ModelDecision {
        let mut binding = &self.parts[0];
        for part in &self.parts[1..] {
            // Strictly: a later part of an equal rank leaves the earlier one binding.
            let binds_more = match (part.retry_after(), binding.retry_after()) {
                (Some(wait), Some(so_far)) => wait > so_far,
                _ => part.remaining_whole() < binding.remaining_whole(),
            };
            if binds_more {
                binding = part;
            }
        }
        binding
    }
}

/// A decision of one bandwidth is the decision of a set of one.
impl From<ModelDecision> for ModelDecisions {
    fn from(decision: ModelDecision) -> Self {
        ModelDecisions {
            parts: smallvec::smallvec![decision],
        }
    }
}
