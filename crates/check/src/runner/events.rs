//! The runner's event counters: what a run reached ("rollback", "saturated", "denied_at_boundary",
//! ...), the things a scenario declares it must reach, so that no scenario passes vacuously.
//!
//! Promises: each event is counted under its own stable name ([`EVENTS`]); counting reads the model's
//! decision and a few comparisons taken before it, never a second refill or a copy of a balance.

use std::collections::{BTreeMap, VecDeque};

use bucketproof_model::{ModelError, ModelWait, Outcome, cmp_whole};
use bucketproof_trace::duration::YEAR;
use bucketproof_trace::events::EVENTS;

/// What a run counts; `EVENTS[event as usize]` is its name. Counted in a plain array, since a step
/// counts several of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Event {
    /// `allowed`.
    Allowed,
    /// `denied`.
    Denied,
    /// `invalid_cost`.
    InvalidCost,
    /// `replayed`.
    Replayed,
    /// `rollback`.
    Rollback,
    /// `frozen_clock`.
    FrozenClock,
    /// `saturated`.
    Saturated,
    /// `denied_at_boundary`.
    DeniedAtBoundary,
    /// `allowed_at_boundary`.
    AllowedAtBoundary,
    /// `long_idle`.
    LongIdle,
    /// `near_clock_end`.
    NearClockEnd,
    /// `retry_never`.
    RetryNever,
    /// `evicted`.
    Evicted,
    /// `key_limit`.
    KeyLimit,
    /// `reconfigured_up`.
    ReconfiguredUp,
    /// `reconfigured_down`.
    ReconfiguredDown,
    /// `forgotten`.
    Forgotten,
    /// `swept`.
    Swept,
    /// `new_key`.
    NewKey,
    /// `shared_request_id`.
    SharedRequestId,
    /// `wide_credit`.
    WideCredit,
    /// `partial_denial`.
    PartialDenial,
    /// `created_owing`.
    CreatedOwing,
    /// `refunded`: a settle gave back part or all of a charge.
    Refunded,
    /// `extra_charged`: a settle charged an extra above the charge.
    ExtraCharged,
    /// `extra_denied`: a settle's extra was not covered (the request stays open).
    ExtraDenied,
    /// `settle_refused`: a settle was an error (unknown, denied or settled request; bad actual).
    SettleRefused,
}

/// What the counters need of a key's model state before an acquire: the key's capacity, two
/// comparisons and the cursor, taken instead of a copy of the exact balance (a clone and drop of a big
/// rational per step). An acquire does not change the config, so `capacity` holds after it too.
pub(super) struct Before {
    pub capacity: u64,
    pub below_cost: bool,
    pub below_capacity: bool,
    pub last_refill: u64,
    /// The key's rate numerator `p`: units one nanosecond of refill adds (one token is `q * 10^9`).
    pub units_per_ns: u64,
}

/// How many request ids [`Events`] remembers the last sender of: the `shared_request_id` count is
/// exact while a trace uses at most this many distinct ids (a shared space of that size or less), and a
/// lower bound beyond, so memory stays flat in the trace length.
const SENDERS_KEPT: usize = 4096;

/// The counters, the times seen so far (which the time events are judged against), and the last
/// key that sent each recent request id.
pub(super) struct Events {
    counts: [u64; EVENTS.len()],
    latest: Option<u64>,
    previous: Option<u64>,
    /// Request id -> the key that sent it last.
    senders: BTreeMap<u64, u64>,
    /// The ids of `senders`, oldest first, for dropping the oldest past [`SENDERS_KEPT`].
    sender_order: VecDeque<u64>,
}

impl Events {
    pub fn new() -> Events {
        Events {
            counts: [0; EVENTS.len()],
            latest: None,
            previous: None,
            senders: BTreeMap::new(),
            sender_order: VecDeque::new(),
        }
    }

    pub fn add(&mut self, event: Event) {
        self.counts[event as usize] += 1;
    }

    /// The latest time seen so far.
    pub fn latest(&self) -> Option<u64> {
        self.latest
    }

    /// An op at `at`: counts rollbacks, frozen clocks and the clock's last year.
    pub fn note_time(&mut self, at: u64) {
        if self.latest.is_some_and(|latest| at < latest) {
            self.add(Event::Rollback);
        }
        if self.previous == Some(at) {
            self.add(Event::FrozenClock);
        }
        if at > u64::MAX - YEAR {
            self.add(Event::NearClockEnd);
        }
        self.previous = Some(at);
        self.latest = Some(self.latest.map_or(at, |latest| latest.max(at)));
    }

    /// An acquire by `key` carrying `request_id`: counts `shared_request_id` when another key sent
    /// the same id last (where a limiter whose records are not scoped per key would replay the other
    /// key's decision).
    pub fn request_id(&mut self, key: u64, request_id: Option<u64>) {
        let Some(id) = request_id else {
            return;
        };
        match self.senders.insert(id, key) {
            Some(sender) if sender != key => self.add(Event::SharedRequestId),
            Some(_) => {}
            None => {
                self.sender_order.push_back(id);
                if self.sender_order.len() > SENDERS_KEPT
                    && let Some(oldest) = self.sender_order.pop_front()
                {
                    self.senders.remove(&oldest);
                }
            }
        }
    }

    /// An acquire of `cost` at `at` that the model answered with `expected`, from the state `before`.
    pub fn acquire(
        &mut self,
        expected: &Result<Outcome, ModelError>,
        before: Option<Before>,
        cost: u64,
        at: u64,
    ) {
        let outcome = match expected {
            Ok(outcome) => outcome,
            Err(_) => {
                self.add(Event::InvalidCost);
                return;
            }
        };
        if outcome.replayed {
            self.add(Event::Replayed);
            return;
        }
        if outcome.created {
            self.add(Event::NewKey);
        }
        let decision = &outcome.decision;
        self.add(if decision.is_allowed() {
            Event::Allowed
        } else {
            Event::Denied
        });
        if decision.retry_after() == Some(ModelWait::Never) {
            self.add(Event::RetryNever);
        }
        // A key of several bandwidths denied while one of them covered the cost: where charging the
        // bandwidths one after another charges the covering ones for nothing.
        let parts = outcome.decisions.bandwidths();
        if !decision.is_allowed()
            && parts.len() > 1
            && parts
                .iter()
                .any(|part| part.retry_after() == Some(ModelWait::After(0)))
        {
            self.add(Event::PartialDenial);
        }
        if decision.retry_after() == Some(ModelWait::After(1)) {
            self.add(Event::DeniedAtBoundary);
        }
        if let Some(before) = before {
            // The refilled balance (step 3 of the acquire) is the decision's remaining plus the cost
            // for an admission, the remaining itself for a denial. Comparing against it this way
            // avoids a second refill in the model (a `peek`), which cost over a third of the run.
            let allowed = decision.is_allowed();
            let remaining = decision.remaining();
            let refilled_is = |target: u64| -> bool {
                let charged = if allowed { cost } else { 0 };
                target >= charged && cmp_whole(remaining, target - charged).is_eq()
            };
            if allowed && before.below_cost && refilled_is(cost) {
                self.add(Event::AllowedAtBoundary);
            }
            if at >= before.last_refill.saturating_add(YEAR) {
                self.add(Event::LongIdle);
            }
            if before.below_capacity && refilled_is(before.capacity) {
                self.add(Event::Saturated);
            }
            // The refill credit `elapsed * p` in units does not fit a u64: a bucket below capacity
            // idle this long is where a 64-bit product would wrap or saturate.
            let elapsed = at.saturating_sub(before.last_refill);
            if before.below_capacity && elapsed.checked_mul(before.units_per_ns).is_none() {
                self.add(Event::WideCredit);
            }
        }
    }

    /// Counts one settle by the model's answer: a refund (an actual at most the charge), an extra
    /// charged or denied, or a refusal. A replay counts as nothing.
    pub fn settle(&mut self, expected: &Result<Outcome, ModelError>, charged: u64, actual: u64) {
        match expected {
            Err(_) => self.add(Event::SettleRefused),
            Ok(outcome) if outcome.replayed => {}
            Ok(outcome) if !outcome.decision.is_allowed() => self.add(Event::ExtraDenied),
            Ok(_) if actual <= charged => self.add(Event::Refunded),
            Ok(_) => self.add(Event::ExtraCharged),
        }
    }

    /// The nonzero counts by name.
    pub fn into_map(self) -> BTreeMap<String, u64> {
        (EVENTS.iter().zip(self.counts))
            .filter(|&(_, count)| count > 0)
            .map(|(name, count)| (name.to_string(), count))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only another key's use of an id counts; a key's own retries do not, nor do acquires without
    /// an id.
    #[test]
    fn an_id_counts_as_shared_when_another_key_sent_it_last() {
        let mut events = Events::new();
        for (key, id) in [
            (0, Some(7)),
            (0, Some(7)),
            (1, None),
            (1, Some(8)),
            (1, Some(7)),
        ] {
            events.request_id(key, id);
        }
        assert_eq!(events.counts[Event::SharedRequestId as usize], 1);
        events.request_id(0, Some(7)); // key 1 sent 7 last
        events.request_id(0, Some(8));
        assert_eq!(events.counts[Event::SharedRequestId as usize], 3);
    }

    /// Past the bound the oldest ids are forgotten, so memory stays flat under fresh ids.
    #[test]
    fn the_senders_kept_are_bounded() {
        let mut events = Events::new();
        for id in 0..(SENDERS_KEPT as u64 * 3) {
            events.request_id(id % 5, Some(id));
        }
        assert_eq!(events.senders.len(), SENDERS_KEPT);
        assert_eq!(events.sender_order.len(), SENDERS_KEPT);
        assert_eq!(events.counts[Event::SharedRequestId as usize], 0);
    }

    /// The counters are indexed by discriminant and reported under `EVENTS[i]`: each variant must sit at its
    /// own name's position, or a scenario's `reach` would be judged on another event's count.
    #[test]
    fn every_event_is_counted_under_its_own_name() {
        let all = [
            Event::Allowed,
            Event::Denied,
            Event::InvalidCost,
            Event::Replayed,
            Event::Rollback,
            Event::FrozenClock,
            Event::Saturated,
            Event::DeniedAtBoundary,
            Event::AllowedAtBoundary,
            Event::LongIdle,
            Event::NearClockEnd,
            Event::RetryNever,
            Event::Evicted,
            Event::KeyLimit,
            Event::ReconfiguredUp,
            Event::ReconfiguredDown,
            Event::Forgotten,
            Event::Swept,
            Event::NewKey,
            Event::SharedRequestId,
            Event::WideCredit,
            Event::PartialDenial,
            Event::CreatedOwing,
            Event::Refunded,
            Event::ExtraCharged,
            Event::ExtraDenied,
            Event::SettleRefused,
        ];
        assert_eq!(all.len(), EVENTS.len());
        for (index, event) in all.into_iter().enumerate() {
            let snake: String = format!("{event:?}")
                .chars()
                .enumerate()
                .flat_map(|(i, c)| {
                    let lower = c.to_ascii_lowercase();
                    (c.is_ascii_uppercase() && i > 0)
                        .then_some('_')
                        .into_iter()
                        .chain([lower])
                })
                .collect();
            assert_eq!(event as usize, index);
            assert_eq!(EVENTS[index], snake);
        }
    }
}
