//! The replay oracle: a retried request id charges once, checked without the reference model.
//!
//! It keeps, per key, the request-id records the rules say a subject holds (docs/semantics.md,
//! acquire steps 2 and 6): a record is made by every acquire with an id that is not a replay and not
//! an error, stamped with the key's effective time `max(now, cursor)`; a new record of an id replaces
//! the older one; at most `dedupe_per_key` are kept, oldest dropped first; a record is live at a later
//! acquire while that acquire's effective time is `< stamp + window`. Then each acquire with an id
//! must be a replay exactly when a live record of that id exists, and a replay must repeat the
//! recorded decision (allowed or denied).
//!
//! What it does not judge, stated: a key whose records may have been lost by contract (a recreation,
//! which is legal only when every record is dead, or a lossy policy's eviction; a refusal at the key
//! bound; `forget`) starts with no records; a recreated key whose fresh cursor the subject cannot
//! show is not judged again until it is forgotten (its effective time is unknown).

use std::collections::{BTreeMap, VecDeque};

use super::{OracleKind, Violation};

/// One key's records and effective time.
#[derive(Clone, Debug, Default)]
struct KeyRecords {
    /// `max` of the key's op times so far (and of a recreated bucket's cursor).
    effective_now: u64,
    /// `(id, stamp, allowed)`, oldest first.
    records: VecDeque<(u64, u64, bool)>,
    /// The effective time is unknown: the key is not judged.
    unknown: bool,
}

/// Per-key streaming state of the replay check.
#[derive(Clone, Debug)]
pub struct Replays {
    window: u64,
    per_key: usize,
    keys: BTreeMap<u64, KeyRecords>,
}

/// One acquire as the replay oracle sees it.
#[derive(Clone, Copy, Debug)]
pub struct Retry {
    /// The key.
    pub key: u64,
    /// The caller's time.
    pub now: u64,
    /// The request id, if any.
    pub request_id: Option<u64>,
    /// The subject answered from a record.
    pub replayed: bool,
    /// The subject's decision.
    pub allowed: bool,
}

impl Replays {
    /// Records live for `window` ns, at most `per_key` per key.
    pub fn new(window: u64, per_key: usize) -> Replays {
        Replays {
            window,
            per_key,
            keys: BTreeMap::new(),
        }
    }

    /// The key's records are gone by contract (recreated, refused, forgotten). `cursor`: the fresh
    /// bucket's cursor if the subject showed one; `None` leaves the key unjudged.
    pub fn reset(&mut self, key: u64, cursor: Option<u64>) {
        let effective_now = cursor.unwrap_or(0);
        self.keys.insert(
            key,
            KeyRecords {
                effective_now,
                records: VecDeque::new(),
                unknown: cursor.is_none(),
            },
        );
    }

    /// True once the key has been seen (and not forgotten since).
    pub fn knows(&self, key: u64) -> bool {
        self.keys.contains_key(&key)
    }

    /// The key is forgotten: it starts over, known, at its next op.
    pub fn forget(&mut self, key: u64) {
        self.keys.remove(&key);
    }

    /// A reconfigure refilled the key to `max(now, cursor)` (records kept).
    pub fn reconfigured(&mut self, key: u64, now: u64) {
        let entry = self.keys.entry(key).or_default();
        entry.effective_now = entry.effective_now.max(now);
    }

    /// Judges one acquire the subject answered (not an error), then follows it.
    pub fn observe(&mut self, retry: Retry) -> Option<Violation> {
        let window = self.window;
        let per_key = self.per_key;
        let entry = self.keys.entry(retry.key).or_insert_with(|| KeyRecords {
            effective_now: retry.now,
            ..KeyRecords::default()
        });
        let effective = entry.effective_now.max(retry.now);
        let live = retry.request_id.and_then(|id| {
            entry
                .records
                .iter()
                .rev()
                .find(|(rid, stamp, _)| {
                    *rid == id && u128::from(effective) < u128::from(*stamp) + u128::from(window)
                })
                .map(|&(_, _, allowed)| allowed)
        });
        let violation = if entry.unknown || retry.request_id.is_none() {
            None
        } else {
            match (live, retry.replayed) {
                (Some(_), false) => Some(Violation::new(
                    OracleKind::Replay,
                    "a retried request id was charged again",
                    "a replay of the live record",
                    "a fresh decision",
                )),
                (None, true) => Some(Violation::new(
                    OracleKind::Replay,
                    "replayed a request id with no live record",
                    "a fresh decision",
                    "a replay",
                )),
                (Some(recorded), true) if recorded != retry.allowed => Some(Violation::new(
                    OracleKind::Replay,
                    "a replay differs from the recorded decision",
                    if recorded { "allowed" } else { "denied" },
                    if retry.allowed { "allowed" } else { "denied" },
                )),
                _ => None,
            }
        };
        if !retry.replayed {
            entry.effective_now = effective;
            if let Some(id) = retry.request_id
                && window > 0
                && per_key > 0
            {
                entry.records.retain(|(rid, _, _)| *rid != id);
                while entry.records.len() >= per_key {
                    entry.records.pop_front();
                }
                entry.records.push_back((id, effective, retry.allowed));
            }
        }
        violation
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retry(now: u64, id: u64, replayed: bool) -> Retry {
        Retry {
            key: 0,
            now,
            request_id: Some(id),
            replayed,
            allowed: true,
        }
    }

    #[test]
    fn a_retry_inside_the_window_must_replay_and_one_after_it_must_not() {
        let mut replays = Replays::new(10, 2);
        assert_eq!(replays.observe(retry(100, 7, false)), None);
        assert!(replays.observe(retry(105, 7, false)).is_some());
        // That fresh decision made a new record, at 105.
        assert_eq!(replays.observe(retry(114, 7, true)), None);
        assert!(replays.observe(retry(115, 7, true)).is_some());
    }

    #[test]
    fn a_rollback_does_not_revive_a_record_dead_in_the_keys_own_time() {
        let mut replays = Replays::new(10, 2);
        assert_eq!(replays.observe(retry(100, 7, false)), None);
        assert_eq!(replays.observe(retry(120, 8, false)), None);
        // The caller's clock reads 105, inside the window in its own time; the key is at 120.
        assert!(replays.observe(retry(105, 7, true)).is_some());
    }

    #[test]
    fn the_oldest_record_is_dropped_beyond_the_per_key_bound() {
        let mut replays = Replays::new(100, 2);
        for id in [1, 2, 3] {
            assert_eq!(replays.observe(retry(10, id, false)), None);
        }
        assert_eq!(replays.observe(retry(11, 1, false)), None);
        assert_eq!(replays.observe(retry(11, 3, true)), None);
    }

    #[test]
    fn a_zero_window_turns_ids_off() {
        let mut replays = Replays::new(0, 2);
        assert_eq!(replays.observe(retry(10, 1, false)), None);
        assert_eq!(replays.observe(retry(10, 1, false)), None);
        assert!(replays.observe(retry(10, 1, true)).is_some());
    }
}
