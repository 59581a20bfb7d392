//! State loss: each Redis Cluster slot's epoch marker, and the recovery policy applied after a loss.
//!
//! Owns: [`Recovery`] (the policy), the slot of a key (Redis's own rule: CRC16 of the hash tag, modulo
//! 16384) and the name of the marker that lives in the same slot as a user's hash, so the transition
//! script can read both in one call, in Cluster too.
//!
//! Promises: a marker key is in its user key's slot (checked by a test against Redis's own rule);
//! the names are the same on every machine and every run.
//!
//! The marker holds the instant from which its slot's state is whole and has no TTL, so it is missing
//! only if the server lost its data (restarted without persistence, flushed, failed over to a replica
//! that never had it) or evicted it. The scripts read it only when they are about to create a bucket:
//! a decision on an existing key pays nothing for it. See docs/semantics.md, "State loss in a shared
//! store", for what each policy does with it.

use std::sync::OnceLock;

use bucketproof_limiter::internal::state_from_parts;
use bucketproof_limiter::{BucketState, Config, Nanos};

/// Redis Cluster's number of hash slots.
const SLOTS: usize = 16384;

/// What a bucket created after its slot's state was lost starts with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Recovery {
    /// A bucket created within one full refill period of the loss starts as the bucket that was
    /// empty at the loss instant and has refilled since. Whatever the lost bucket held, it held at
    /// least that, so no window across the loss admits more than capacity plus rate times its span.
    /// The cost: every key of the slot (new users too) starts below full until the refill period has
    /// passed, and a fresh Redis looks like a loss until [`crate::RedisLimiter::provision`] marks it
    /// (once, when the Redis is new). The default: the one policy under which no overselling holds
    /// across a loss.
    #[default]
    Conservative,
    /// A bucket created after a loss starts full, as if the key were new: it can admit a second burst
    /// to a user whose bucket was lost. The loss is still detected and such decisions are still
    /// flagged ([`crate::Outcome::recovering`]) and counted. For a limiter whose users must never be
    /// throttled by a loss and that accepts the second burst; it needs no provisioning.
    Trusting,
}

impl Recovery {
    /// The scripts' first argument: the time source's letter (`i` injected, `s` the server's),
    /// then the policy's (`c`, `t`).
    pub(crate) fn mode(self, injected: bool) -> &'static str {
        match (injected, self) {
            (true, Recovery::Conservative) => "ic",
            (true, Recovery::Trusting) => "it",
            (false, Recovery::Conservative) => "sc",
            (false, Recovery::Trusting) => "st",
        }
    }
}

/// What a slot's epoch marker says, as the scripts read it (prelude.lua, `recovery_start`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Marker {
    /// `whole`, written by [`crate::RedisLimiter::provision`]: no loss since before any instant.
    Whole,
    /// `s:n`: the slot's state is whole from this instant (the loss was detected there).
    Since(Nanos),
    /// No marker (or one that does not parse, which the scripts overwrite): the next bucket created
    /// in the slot detects a loss now.
    Missing,
}

impl Marker {
    /// The marker key's value, as `GET` returned it.
    pub(crate) fn parse(value: Option<&str>) -> Marker {
        let Some(value) = value else {
            return Marker::Missing;
        };
        if value == "whole" {
            return Marker::Whole;
        }
        let since = value.split_once(':').and_then(|(s, n)| {
            let (s, n) = (s.parse::<i64>().ok()?, n.parse::<i64>().ok()?);
            crate::script::join(s, n)
        });
        since.map_or(Marker::Missing, Marker::Since)
    }
}

/// How a bucket created at `now` starts: the Rust side of the scripts' creation rule, for the calls
/// that create or show a bucket without a script of their own (peek, reconfigure).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Start {
    /// `None`: full at `now`. `Some(loss)`: the conservative policy's bucket, empty at the loss
    /// instant (refilled since by the caller's own refill step).
    pub(crate) emptied_at: Option<Nanos>,
    /// Within one full refill period of a loss (of any bandwidth): such a decision is flagged.
    pub(crate) recovering: bool,
}

impl Start {
    /// The state of a bandwidth of `config` that starts as `self` at `now`.
    pub(crate) fn state(self, config: &Config, now: Nanos) -> BucketState {
        match self.emptied_at {
            Some(loss) => state_from_parts(0, loss),
            None => BucketState::full(config, now),
        }
    }
}

impl Recovery {
    /// How a bucket of `configs` (its bandwidths) created at `now` starts in a slot whose marker is
    /// `marker`: as the scripts decide (bucket.lua, set.lua), so that a peek shows what an acquire
    /// would create and a reconfigure of a new key starts where an acquire would.
    pub(crate) fn start<'a>(
        self,
        configs: impl IntoIterator<Item = &'a Config>,
        marker: Marker,
        now: Nanos,
    ) -> Start {
        let loss = match marker {
            Marker::Whole => None,
            Marker::Since(loss) => Some(loss),
            Marker::Missing => Some(now),
        };
        let recovering = loss.is_some_and(|loss| {
            configs.into_iter().any(|config| {
                let emptied = state_from_parts(0, loss).refilled(config, now);
                emptied.balance() < config.capacity_units()
            })
        });
        Start {
            emptied_at: loss.filter(|_| recovering && self == Recovery::Conservative),
            recovering,
        }
    }
}

/// The Cluster slot of `key` by Redis's rule: the CRC16 (XMODEM) of the first non-empty `{...}` tag,
/// or of the whole key when it has none.
pub fn slot_of(key: &[u8]) -> u16 {
    let hashed = key
        .iter()
        .position(|&c| c == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&c| c == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    (crc16::State::<crc16::XMODEM>::calculate(hashed) as usize % SLOTS) as u16
}

/// Per slot, the smallest number whose decimal text hashes to it: the marker's hash tag. Built once
/// (about 170,000 CRCs); every slot is reached well below `u32::MAX`.
fn tags() -> &'static [u32] {
    static TAGS: OnceLock<Box<[u32]>> = OnceLock::new();
    TAGS.get_or_init(|| {
        let mut tags = vec![u32::MAX; SLOTS];
        let mut missing = SLOTS;
        let mut n: u32 = 0;
        while missing > 0 {
            let slot = slot_of(n.to_string().as_bytes()) as usize;
            if tags[slot] == u32::MAX {
                tags[slot] = n;
                missing -= 1;
            }
            n += 1;
        }
        tags.into_boxed_slice()
    })
}

/// The epoch marker of `user_key`'s slot: `PREFIX~epoch{tag}`, `tag` chosen so that it hashes to the
/// same slot. One marker per slot that holds keys of this prefix.
pub fn marker_key(prefix: &str, user_key: &str) -> String {
    let slot = slot_of(user_key.as_bytes()) as usize;
    format!("{prefix}~epoch{{{}}}", tags()[slot])
}

/// Every marker of `prefix`, one per slot: what [`crate::RedisLimiter::provision`] writes.
pub(crate) fn all_markers(prefix: &str) -> impl Iterator<Item = String> + '_ {
    tags()
        .iter()
        .map(move |tag| format!("{prefix}~epoch{{{tag}}}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Redis's documented examples of its slot rule, and the marker in its user's slot.
    #[test]
    fn a_marker_lives_in_its_users_slot() {
        // From the Redis Cluster specification: CRC16 of "123456789" is 0x31C3.
        assert_eq!(slot_of(b"123456789"), 0x31C3);
        assert_eq!(slot_of(b"{user1000}.following"), slot_of(b"user1000"));
        // An empty first tag: the whole key is hashed, not "bar".
        let whole = crc16::State::<crc16::XMODEM>::calculate(b"foo{}{bar}") % 16384;
        assert_eq!(slot_of(b"foo{}{bar}"), whole);
        assert_ne!(slot_of(b"foo{}{bar}"), slot_of(b"bar"));
        assert_eq!(slot_of(b"foo{{bar}}zap"), slot_of(b"{bar"));
        for user in ["alice", "", "}", "{x}", "bob}tail", "日本"] {
            let key = format!("bp:{{{user}}}");
            let marker = marker_key("bp:", &key);
            assert_eq!(
                slot_of(marker.as_bytes()),
                slot_of(key.as_bytes()),
                "{user:?}"
            );
        }
        let distinct: std::collections::HashSet<u32> = tags().iter().copied().collect();
        assert_eq!(distinct.len(), SLOTS);
    }

    /// The creation rule by policy and marker, hand-computed: a bucket of 10 refilling 1/s.
    #[test]
    fn a_bucket_starts_by_its_policy_and_its_slots_marker() {
        let config = Config::new(10, "1/s".parse().unwrap()).unwrap();
        let second = bucketproof_limiter::NANOS_PER_SECOND;
        let now = 100 * second;
        let start = |recovery: Recovery, marker| recovery.start([&config], marker, now);
        let full = Start {
            emptied_at: None,
            recovering: false,
        };
        assert_eq!(start(Recovery::Conservative, Marker::Whole), full);
        // Lost 4 s ago: not full again yet; lost 10 s ago: full again, an ordinary new bucket.
        let lost = Marker::Since(now - 4 * second);
        let emptied = Start {
            emptied_at: Some(now - 4 * second),
            recovering: true,
        };
        assert_eq!(start(Recovery::Conservative, lost), emptied);
        assert_eq!(
            start(Recovery::Trusting, lost),
            Start {
                emptied_at: None,
                recovering: true
            }
        );
        assert_eq!(
            start(Recovery::Conservative, Marker::Since(now - 10 * second)),
            full
        );
        // No marker: the loss is detected now.
        let now_lost = Start {
            emptied_at: Some(now),
            recovering: true,
        };
        assert_eq!(start(Recovery::Conservative, Marker::Missing), now_lost);
        assert_eq!(
            emptied.state(&config, now).refilled(&config, now).balance(),
            4 * config.capacity_units() / 10
        );
        assert_eq!(Marker::parse(Some("whole")), Marker::Whole);
        assert_eq!(Marker::parse(Some("3:5")), Marker::Since(3 * second + 5));
        assert_eq!(Marker::parse(Some("x")), Marker::Missing);
        assert_eq!(Marker::parse(None), Marker::Missing);
    }
}
