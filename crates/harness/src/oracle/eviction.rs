//! Eviction legality (docs/semantics.md, "Expiry and the key bound"): a subject may drop a bucket on
//! its own only when that changes no later decision, and may refuse a new key at its key bound only
//! when it holds keys it could not drop. These checks judge what a subject that evicts reported
//! against what the model holds; the runner then makes the model follow the subject's choice.

use super::{OracleKind, Violation};

/// What the model knew when the subject refused `key` at its key bound (an acquire or a reconfigure
/// of a key it did not hold: docs/semantics.md, "Expiry and the key bound").
#[derive(Clone, Copy, Debug)]
pub struct Refusal {
    /// The subject may evict on its own (otherwise it has no key bound to hit).
    pub may_evict: bool,
    /// The subject's policy may drop a bucket that is not evictable (`EvictLeastRecent`).
    pub lossy: bool,
    /// The model holds state for the key.
    pub held: bool,
    /// That state is evictable at the latest time seen (so the subject may have dropped it).
    pub evictable: bool,
    /// The key has an override config: explicit state that no policy drops.
    pub pinned: bool,
    /// The model holds any key at all (a bound of zero keys is never reached).
    pub holds_any: bool,
    /// The model holds a key with an override config (one a lossy policy cannot drop).
    pub holds_pinned: bool,
}

impl Refusal {
    /// A refusal is legal for a key the subject may have dropped (losslessly, or under a lossy policy
    /// when it has no override), or never held, while it holds other keys. A lossy policy drops
    /// any key without an override to make room, so it refuses only when the keys it could drop
    /// are all pinned: the model must hold a pinned key.
    pub fn is_legal(&self) -> bool {
        let droppable = !self.held || self.evictable || (self.lossy && !self.pinned);
        let room_was_pinned = !self.lossy || self.holds_pinned;
        self.may_evict && droppable && self.holds_any && room_was_pinned
    }

    /// The violation of an illegal refusal.
    pub fn check(&self) -> Option<Violation> {
        (!self.is_legal()).then(|| {
            Violation::new(
                OracleKind::Model,
                "refused a key at the key bound without cause",
                "a decision (the key is known, no key is held, or a lossy policy had an unpinned \
                 key to drop)",
                "key limit reached",
            )
        })
    }
}

/// The subject reports it created a key's bucket at `at` (first sight, or after dropping it).
#[derive(Clone, Copy, Debug)]
pub struct Creation {
    /// The subject may evict on its own.
    pub may_evict: bool,
    /// The time of the op.
    pub at: u64,
    /// The latest time seen so far.
    pub latest: u64,
    /// The fresh bucket's cursor, as the subject shows it (`at` if it cannot show it).
    pub cursor: u64,
    /// The bucket the model still held for the key, if any.
    pub dropped: Option<Dropped>,
}

/// The model's bucket that a creation replaced.
#[derive(Clone, Copy, Debug)]
pub struct Dropped {
    /// Its cursor.
    pub cursor: u64,
    /// The subject was allowed to drop it (evictable at the latest time seen, or a lossy policy).
    pub evictable: bool,
}

impl Creation {
    /// The dropped bucket must have been droppable, and the fresh cursor must lie in
    /// `[at, latest time seen]` and not before the dropped bucket's cursor (no time credited twice).
    pub fn check(&self) -> Option<Violation> {
        let dropped = self.dropped.and_then(|dropped| {
            if !(self.may_evict && dropped.evictable) {
                Some(Violation::new(
                    OracleKind::Model,
                    "the subject dropped a bucket that was not evictable",
                    "the key's state kept",
                    "a fresh bucket",
                ))
            } else if self.cursor < dropped.cursor {
                Some(Violation::new(
                    OracleKind::Model,
                    "a recreated bucket's cursor is before the dropped one's: time credited twice",
                    format!("cursor >= {}", dropped.cursor),
                    format!("cursor {}", self.cursor),
                ))
            } else {
                None
            }
        });
        let newest = self.latest.max(self.at);
        dropped.or_else(|| {
            (self.cursor < self.at || self.cursor > newest).then(|| {
                Violation::new(
                    OracleKind::Model,
                    "a fresh bucket's cursor is outside [now, latest time seen]",
                    format!("cursor in [{}, {newest}]", self.at),
                    format!("cursor {}", self.cursor),
                )
            })
        })
    }
}
