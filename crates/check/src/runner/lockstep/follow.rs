//! Following a subject's legal nondeterminism before the model is asked: a refusal at the key
//! bound, a key it dropped (with its request-id records) and recreated full or owing under
//! `EvictKeepingDeficit`, a reconfigure that recreated a dropped key. Promises: the model follows
//! only what the spec allows the subject to have done, and only from what the subject itself shows;
//! anything else is a violation.

use bucketproof_model::Rational;

use super::Lockstep;
use crate::oracle::eviction::{Creation, Dropped, Refusal};
use crate::oracle::{OracleKind, Violation};
use crate::runner::events::Event;
use bucketproof_trace::subject::{Inspected, Observed};
use bucketproof_trace::trace::{Acquire, PolicySpec};

impl Lockstep<'_> {
    /// A settle the subject answered `UnknownRequest`: legal where the model still holds the record
    /// if the subject may have dropped the key since, with the records its bucket held (settle step 2:
    /// "its key was dropped"): evictable at the latest time seen, or, under a policy that drops
    /// buckets that are not full, any key without an override (a victim making room for another
    /// key), and the subject shows no state for it. The model then forgets the key's records too,
    /// and keeps its bucket: what a later recreation of the key is judged against (under
    /// `EvictKeepingDeficit` it may come back owing, never fuller; `follow_owing`).
    ///
    /// Only the loss of a record the model holds live is evidence of a drop: an id the model never
    /// recorded, or whose record is past its window, is unknown on both sides, and a subject that
    /// cannot show its state (whose key may still be there, holding other ids' live records) has
    /// dropped nothing by saying so.
    pub(super) fn follow_lost_records(&mut self, key: u64, request_id: u64, at: u64) {
        let holds_live = self.model.holds_live_record(key, request_id, at);
        if self.model.state(key).is_none() || !holds_live || !self.subject.may_evict() {
            return;
        }
        let latest = self.events.latest().unwrap_or(at);
        let droppable = self.model.is_evictable_at(key, latest)
            || (self.policy.drops_non_full() && !self.model.is_pinned(key));
        let shown = self.subject.inspect(key);
        if droppable && shown.held().is_none() {
            self.model.lose_records(key);
        }
    }

    /// The subject refused `key` at its key bound (docs/semantics.md, "Expiry and the key bound").
    /// A key the model still holds may have been dropped by the subject: losslessly by its amortized
    /// sweep (it was evictable), or by a lossy policy making room for another key; refusing it is then
    /// legal, and the model drops it too so that a later admission starts fresh on both sides.
    pub(super) fn follow_refusal(&mut self, key: u64, at: u64) -> Option<Violation> {
        self.events.add(Event::KeyLimit);
        // Whatever the subject held for the key is gone; the next use starts it fresh.
        self.replays.forget(key);
        let latest = self.events.latest().unwrap_or(at);
        let refusal = Refusal {
            may_evict: self.subject.may_evict(),
            lossy: self.policy.drops_non_full(),
            held: self.model.state(key).is_some(),
            evictable: self.model.is_evictable_at(key, latest),
            pinned: self.model.is_pinned(key),
            holds_any: self.model.holds_any(),
            holds_pinned: self.model.holds_pinned(),
        };
        // A legal refusal dropped a bucket evictable at the latest time seen: losslessly, so the
        // arrival curve keeps the key's segment (see `check_arrival`).
        if refusal.is_legal() && refusal.held {
            self.model.evict(key);
        }
        refusal.check()
    }

    /// The subject says it created `key`'s bucket at `at` (first sight, or after dropping it):
    /// checks that this was legal ([`Creation::check`]: the fresh cursor in `[at, latest]`, and the
    /// model's old state evictable at that cursor, [`Model::may_recreate_at`]) and makes the model
    /// follow, fresh at that cursor.
    pub(super) fn follow_creation(&mut self, key: u64, at: u64) -> Option<Violation> {
        let latest = self.events.latest().unwrap_or(at);
        let cursor = self.shown_cursor(key).unwrap_or(at);
        let held = self.model.state(key).map(|(_, last_refill)| last_refill);
        if held.is_some() {
            self.events.add(Event::Evicted);
        }
        let creation = Creation {
            may_evict: self.subject.may_evict(),
            at,
            latest,
            cursor,
            dropped: held.map(|held_cursor| Dropped {
                cursor: held_cursor,
                lossy: self.policy.drops_non_full(),
                evictable_at_cursor: self.model.may_recreate_at(key, cursor),
            }),
        };
        if held.is_some() || cursor != at {
            if held.is_none() {
                self.events.add(Event::NewKey);
            }
            self.model.recreate(key, cursor);
        }
        creation.check()
    }

    /// Under `EvictKeepingDeficit`: the first bandwidth's balance the model's held bucket of `key`
    /// would have at the cursor the subject shows (the most a bucket the subject dropped owing may
    /// come back with); `None` when the model holds none or the subject shows no state.
    pub(super) fn dropped_balance(&mut self, key: u64) -> Option<Rational> {
        if self.policy != PolicySpec::EvictKeepingDeficit {
            return None;
        }
        self.model.state(key)?;
        let cursor = self.shown_cursor(key)?;
        let peeks = self.model.peek_set(key, cursor);
        peeks.first().map(|peek| peek.remaining.clone())
    }

    /// Under `EvictKeepingDeficit` a created bucket may start below full (its slot owed): the subject's
    /// fresh balance, recovered from the state it shows after this acquire, must be no more than the
    /// dropped bucket refilled to the fresh cursor (`dropped`; the capacity for a key the model held
    /// nothing for, where only another key's debt can have lowered it), and the model follows it.
    pub(super) fn follow_owing(
        &mut self,
        acquire: Acquire,
        observed: &Observed,
        dropped: Option<Rational>,
    ) -> Option<Violation> {
        let shown = self.subject.inspect(acquire.key).held().cloned()?;
        let after = shown.tokens.to_rational()?;
        let charged = if observed.allowed && !observed.replayed {
            acquire.cost
        } else {
            0
        };
        let fresh = after + Rational::from(charged);
        let capacity = Rational::from(self.model.config_of(acquire.key).capacity());
        let most = dropped.unwrap_or_else(|| capacity.clone());
        self.follow_recreated(acquire.key, &shown, fresh, &most, &capacity)
    }

    /// Under `EvictKeepingDeficit` a reconfigure that created the key may have found its slot owing:
    /// the subject's bucket after it (the fresh bucket converted to the new config) must be no fuller
    /// than the model's held bucket reconfigured would be (`ceiling`; the model's own result for a key
    /// it held nothing for), and the model, which reconfigured a full bucket, follows the lower one.
    /// Like `follow_owing`, the first bandwidth's balance.
    pub(super) fn follow_owing_reconfigure(
        &mut self,
        key: u64,
        ceiling: Option<Rational>,
    ) -> Option<Violation> {
        let shown = self.subject.inspect(key).held().cloned()?;
        let after = shown.tokens.to_rational()?;
        let (full, _) = self.model.state(key)?;
        let full = full.clone();
        let most = ceiling.unwrap_or_else(|| full.clone());
        // On the new config's grid and within its capacity already: the model holds it as is.
        self.follow_recreated(key, &shown, after, &most, &full)
    }

    /// The one judgement of a recreated bucket's first balance (`fresh`, shown at `shown`'s cursor):
    /// no more than `most`, a whole number of the key's units (its first bandwidth's
    /// `1/(q * 10^9)` token: no exact bucket holds another, and the model could not follow it), and,
    /// when below the `full` balance the model holds, followed by the model as an owing bucket.
    fn follow_recreated(
        &mut self,
        key: u64,
        shown: &Inspected,
        fresh: Rational,
        most: &Rational,
        full: &Rational,
    ) -> Option<Violation> {
        if fresh > *most {
            return Some(Violation::new(
                OracleKind::Model,
                "a bucket dropped owing came back fuller than it would be",
                format!("at most {most} tokens at {}", shown.last_refill),
                format!("{fresh} tokens"),
            ));
        }
        let units = fresh.clone() * Rational::from(self.model.config_of(key).units_per_token());
        if !units.is_int() {
            return Some(Violation::new(
                OracleKind::Model,
                "a recreated bucket's balance is off the config's unit grid",
                "a whole number of units",
                format!("{fresh} tokens"),
            ));
        }
        if fresh < *full {
            self.events.add(Event::CreatedOwing);
            self.model.recreate_owing(key, shown.last_refill, &[fresh]);
        }
        None
    }

    /// The key's cursor as the subject shows it (`None`: it holds none, or cannot show it). After a
    /// creation, the fresh bucket's cursor: what eviction legality, the arrival curve and the replay
    /// oracle each judge a recreated key from.
    pub(super) fn shown_cursor(&mut self, key: u64) -> Option<u64> {
        self.subject
            .inspect(key)
            .held()
            .map(|state| state.last_refill)
    }
}
