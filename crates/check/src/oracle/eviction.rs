//! Eviction legality (docs/semantics.md, "Expiry and the key bound"): a subject may drop a bucket on
//! its own only when that changes no later decision, and may refuse a new key at its key bound only
//! when it holds keys it could not drop. These checks judge what a subject that evicts reported
//! against what the model holds; the runner then makes the model follow the subject's choice.
//!
//! A recreation is judged exactly: a bucket the model still holds may come back fresh at cursor `c`
//! iff `c` is within `[now, latest time seen]` and the old state, refilled to `c`, is what a fresh
//! bucket at `c` is (full, no request-id record live at `c`, no override). Then dropping it was
//! "refill to `c`, forget the redundant state", and no later call, under any clock, can tell.

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
    /// The subject's policy is lossy by contract (`EvictLeastRecent`): it may drop a bucket that is
    /// not evictable, and the victim comes back full.
    pub lossy: bool,
    /// The model's state, refilled to the fresh cursor, is what a fresh bucket there is: full, no
    /// request-id record live there, no override, and the fresh cursor not before its own
    /// (`Model::may_recreate_at`).
    pub evictable_at_cursor: bool,
}

impl Creation {
    /// The fresh cursor `c` must lie in `[at, latest time seen]`, and a bucket the model still held
    /// must have been evictable *at `c`*: refilled to `c` (so `c` is not before its cursor) it is
    /// full, holds no record live at `c`, and has no override. Then dropping it and starting fresh at
    /// `c` changes nothing, whatever the clock does later, and this is exact: any other recreation
    /// either credits time the old bucket had not refilled by `c` or revives a record dead at `c`
    /// for a later call before it. A lossy policy may drop any bucket, but a fresh cursor before the
    /// dropped one would still credit the time between twice.
    pub fn check(&self) -> Option<Violation> {
        let dropped = self.dropped.and_then(|dropped| {
            if !self.may_evict {
                Some(Violation::new(
                    OracleKind::Model,
                    "the subject dropped a bucket but does not evict",
                    "the key's state kept",
                    "a fresh bucket",
                ))
            } else if dropped.lossy {
                (self.cursor < dropped.cursor).then(|| {
                    Violation::new(
                        OracleKind::Model,
                        "a recreated bucket's cursor is before the dropped one's: time credited twice",
                        format!("cursor >= {}", dropped.cursor),
                        format!("cursor {}", self.cursor),
                    )
                })
            } else {
                (!dropped.evictable_at_cursor).then(|| {
                    Violation::new(
                        OracleKind::Model,
                        "the subject recreated a bucket that was not evictable at its fresh cursor",
                        format!(
                            "the key's state (cursor {}) kept, or a fresh cursor at which that \
                             state is full with no live request id",
                            dropped.cursor
                        ),
                        format!("a fresh bucket at cursor {}", self.cursor),
                    )
                })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn creation(cursor: u64, dropped: Option<Dropped>) -> Creation {
        Creation {
            may_evict: true,
            at: 10,
            latest: 13,
            cursor,
            dropped,
        }
    }

    fn dropped(evictable_at_cursor: bool, lossy: bool) -> Option<Dropped> {
        Some(Dropped {
            cursor: 10,
            lossy,
            evictable_at_cursor,
        })
    }

    #[test]
    fn a_recreation_is_legal_only_where_the_dropped_state_was_evictable() {
        // Emptied at 10, full by 12: a fresh cursor of 13 is legal, 10 is not, however the old
        // state looked at the latest time seen.
        assert!(creation(13, dropped(true, false)).check().is_none());
        let illegal = creation(10, dropped(false, false)).check().unwrap();
        assert_eq!(
            illegal.what,
            "the subject recreated a bucket that was not evictable at its fresh cursor"
        );
        // A subject that does not evict may not drop anything.
        let mut keeps = creation(13, dropped(true, false));
        keeps.may_evict = false;
        assert!(keeps.check().is_some());
    }

    #[test]
    fn a_lossy_policy_may_drop_anything_but_not_rewind_the_cursor() {
        assert!(creation(10, dropped(false, true)).check().is_none());
        let mut rewound = creation(10, dropped(false, true));
        rewound.at = 5;
        rewound.cursor = 5;
        assert_eq!(
            rewound.check().unwrap().what,
            "a recreated bucket's cursor is before the dropped one's: time credited twice"
        );
    }

    #[test]
    fn a_fresh_cursor_lies_between_now_and_the_latest_time_seen() {
        assert!(creation(10, None).check().is_none());
        assert!(creation(13, None).check().is_none());
        for cursor in [9, 14] {
            assert_eq!(
                creation(cursor, None).check().unwrap().what,
                "a fresh bucket's cursor is outside [now, latest time seen]"
            );
        }
    }
}
