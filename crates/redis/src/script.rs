//! The wire side of the Lua script: its source, the arguments it takes, the bucket it stores and the
//! reply it gives.
//!
//! The script (`bucket.lua`) does the whole transition; this module only splits instants into limbs,
//! packs the config the script takes ([`packed_config`]), decodes the stored bucket ([`Packed`], the one
//! Rust reader of that string, for peek, reconfigure and tests) and turns the reply back into the
//! limiter's own [`Decision`]. The limiter's `Decision` has no public constructor, so the reply is
//! replayed through the core's transition (`internal::stored_decision`) on a state that needs no
//! refill (cursor at the script's `t`, balance before the charge): that reproduces the script's
//! decision without duplicating any arithmetic, and a reply whose verdict disagrees with its own
//! balance is an error, never a silent rounding. The waits
//! are the core's, computed from that state (the script sends none: every integer of a reply costs
//! the server instructions).

use bucketproof_limiter::internal::{Attempt, StoredDecision, stored_decision, transition_set};
use bucketproof_limiter::{
    Bandwidths, Config, Decision, Decisions, NANOS_PER_SECOND, Nanos, Rate, Wait,
};
use redis::Script;

/// The Lua source: read, replay check, refill, decide, write, record, TTL.
pub const SOURCE: &str = concat!(include_str!("prelude.lua"), include_str!("bucket.lua"));

/// The loaded-once script object (`EVALSHA`, reloaded by the `redis` crate on `NOSCRIPT`).
pub fn script() -> Script {
    Script::new(SOURCE)
}

/// An instant split into the limbs the script uses: whole seconds and nanoseconds below 10^9.
pub fn limbs(ns: Nanos) -> (u64, u64) {
    (ns / NANOS_PER_SECOND, ns % NANOS_PER_SECOND)
}

/// The instant `seconds * 10^9 + nanos`, or `None` beyond `u64::MAX`.
pub fn join(seconds: i64, nanos: i64) -> Option<Nanos> {
    if seconds < 0 || !(0..NANOS_PER_SECOND as i64).contains(&nanos) {
        return None;
    }
    (seconds as u64)
        .checked_mul(NANOS_PER_SECOND)?
        .checked_add(nanos as u64)
}

/// One bandwidth's fingerprint in text (units per token / capacity units / p), as a key of several
/// bandwidths stores it (`set.rs`); a key of one bandwidth stores [`packed_config`] instead.
pub fn fingerprint(config: &Config) -> String {
    format!(
        "{}/{}/{}",
        config.units_per_token(),
        config.capacity_units(),
        config.units_per_nanosecond()
    )
}

/// The config as `bucket.lua` takes and stores it: units per token, capacity in units and p (units per
/// ns), each a little-endian double (exact: the range check keeps them below 2^53). Stored beside a
/// bucket, so a bucket is never read on another unit grid.
pub fn packed_config(config: &Config) -> Vec<u8> {
    [
        config.units_per_token(),
        config.capacity_units(),
        u128::from(config.units_per_nanosecond()),
    ]
    .iter()
    .flat_map(|&x| (x as f64).to_le_bytes())
    .collect()
}

/// A stored one-bandwidth bucket, decoded from `bucket.lua`'s packed string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packed {
    /// Balance in units.
    pub balance: u128,
    /// The refill cursor.
    pub last_refill: Nanos,
    /// The key's transition counter.
    pub seq: u64,
    /// The expiry of the key's newest request-id record, as stored (`xs = -1`: none).
    pub records_until: (i64, i64),
    /// The config bytes the bucket is on ([`packed_config`]).
    pub config: Vec<u8>,
    /// The per-key override's version, when the key has one (then `config` is the override's).
    pub override_version: Option<u64>,
}

impl Packed {
    /// Decodes a stored value; `Err` names what is unreadable.
    pub fn decode(bytes: &[u8]) -> Result<Packed, &'static str> {
        if bytes.len() != 72 && bytes.len() != 80 {
            return Err("stored bucket of another layout");
        }
        let number = |i: usize| f64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().unwrap());
        let whole = |i: usize| -> Result<i64, &'static str> {
            let v = number(i);
            if v.fract() != 0.0 || v.abs() > crate::EXACT_LIMIT as f64 {
                return Err("stored number not an exact integer");
            }
            Ok(v as i64)
        };
        let unsigned = |i: usize| whole(i).and_then(|v| u64::try_from(v).map_err(|_| "negative"));
        Ok(Packed {
            balance: u128::from(unsigned(0)?),
            last_refill: join(whole(1)?, whole(2)?).ok_or("cursor outside u64 ns")?,
            seq: unsigned(3)?,
            records_until: (whole(4)?, whole(5)?),
            config: bytes[48..72].to_vec(),
            override_version: if bytes.len() == 80 {
                Some(unsigned(9)?)
            } else {
                None
            },
        })
    }

    /// The packed string for this bucket.
    pub fn encode(&self) -> Vec<u8> {
        let (s, n) = limbs(self.last_refill);
        let mut out: Vec<u8> = [
            self.balance as f64,
            s as f64,
            n as f64,
            self.seq as f64,
            self.records_until.0 as f64,
            self.records_until.1 as f64,
        ]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
        out.extend_from_slice(&self.config);
        if let Some(version) = self.override_version {
            out.extend_from_slice(&(version as f64).to_le_bytes());
        }
        out
    }

    /// The override's config, read back from its packed bytes: `Err` when they are no valid config.
    pub fn override_config(&self) -> Result<Option<(u64, Config)>, &'static str> {
        let Some(version) = self.override_version else {
            return Ok(None);
        };
        let number =
            |i: usize| f64::from_le_bytes(self.config[8 * i..8 * i + 8].try_into().unwrap());
        let (unit, capacity_units, p) = (number(0), number(1), number(2));
        let whole = |v: f64| {
            (v.fract() == 0.0 && v >= 0.0 && v <= crate::EXACT_LIMIT as f64).then_some(v as u64)
        };
        let (Some(unit), Some(capacity_units), Some(p)) =
            (whole(unit), whole(capacity_units), whole(p))
        else {
            return Err("stored override unreadable");
        };
        if unit == 0 || unit % NANOS_PER_SECOND != 0 || capacity_units % unit != 0 {
            return Err("stored override unreadable");
        }
        let config = Rate::new(p, unit / NANOS_PER_SECOND)
            .and_then(|rate| Config::new(capacity_units / unit, rate))
            .map_err(|_| "stored override unreadable")?;
        if packed_config(&config) != self.config {
            return Err("stored override unreadable");
        }
        Ok(Some((version, config)))
    }
}

/// One call of the transition script as plain words ([`crate::RedisLimiter::script_call`]): send it
/// as `EVALSHA sha 2 keys... args...` after `SCRIPT LOAD` of [`SOURCE`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScriptCall {
    /// SHA1 of [`SOURCE`].
    pub sha: String,
    /// The user's bucket, its slot's epoch marker and, with a request id, its request-id records.
    pub keys: Vec<String>,
    /// `ARGV`, in the order `bucket.lua`'s header lists.
    pub args: Vec<Vec<u8>>,
}

/// The script's reply, as numbers (all integers below 2^53, sent as Redis integers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply {
    /// A live request-id record answered; nothing was charged.
    pub replayed: bool,
    /// The bucket did not exist (fresh, full at `now`).
    pub created: bool,
    /// The bucket was created within one refill period of its slot's detected state loss
    /// ([`crate::epoch`]); under [`crate::Recovery::Conservative`] it started below full.
    pub recovering: bool,
    /// This call found its slot's epoch marker missing and wrote it: a state loss detected.
    pub loss_detected: bool,
    /// Admitted and charged.
    pub allowed: bool,
    /// Balance in units after the decision.
    pub balance: u64,
    /// The refill cursor `max(now, last)` after the transition.
    pub t: Nanos,
    /// The `now` the decision was made at (server time or injected).
    pub now: Nanos,
    /// The key's transition counter after this transition (the recorded one for a replay).
    pub seq: u64,
    /// A replay's cost in units (the recorded request's); `None`: the caller's cost, on the decision's
    /// config.
    pub cost_units: Option<u64>,
    /// The key's override config `(version, capacity, p, q)` the decision was made under, if any.
    pub override_config: Option<(u64, u64, u64, u64)>,
}

/// Why a reply could not be turned into a decision.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed script reply {reply:?}: {reason}")]
pub struct ReplyError {
    /// The raw reply.
    pub reply: Vec<i64>,
    /// What was wrong.
    pub reason: &'static str,
}

/// The reply's code bits (`bucket.lua`'s header).
const ALLOWED: i64 = 1;
const CREATED_SHIFT: i64 = 1;
const REPLAYED: i64 = 8;
const HAS_NOW: i64 = 16;
const HAS_COST: i64 = 32;
const HAS_OVERRIDE: i64 = 64;

impl Reply {
    /// Parses the script's reply: `{code, balance, t_s, t_n, seq}` and what the code says follows.
    pub fn parse(raw: Vec<i64>) -> Result<Reply, ReplyError> {
        let bad = |reason| ReplyError {
            reply: raw.clone(),
            reason,
        };
        let [code, balance, t_s, t_n, seq, ref rest @ ..] = raw[..] else {
            return Err(bad("expected at least 5 integers"));
        };
        if !(0..128).contains(&code) {
            return Err(bad("unknown code bits"));
        }
        let mut rest = rest.iter().copied();
        let mut next = || {
            rest.next()
                .ok_or_else(|| bad("reply shorter than its code says"))
        };
        let t = join(t_s, t_n).ok_or_else(|| bad("cursor outside u64 ns"))?;
        let now = if code & HAS_NOW != 0 {
            let (s, n) = (next()?, next()?);
            join(s, n).ok_or_else(|| bad("now outside u64 ns"))?
        } else {
            t
        };
        let cost_units = if code & HAS_COST != 0 {
            Some(u64::try_from(next()?).map_err(|_| bad("negative cost"))?)
        } else {
            None
        };
        let override_config = if code & HAS_OVERRIDE != 0 {
            let (v, c, p, q) = (next()?, next()?, next()?, next()?);
            if !(v > 0 && c > 0 && p >= 0 && q > 0) {
                return Err(bad("malformed override config"));
            }
            Some((v as u64, c as u64, p as u64, q as u64))
        } else {
            None
        };
        if next().is_ok() {
            return Err(bad("reply longer than its code says"));
        }
        let created = (code >> CREATED_SHIFT) & 3;
        Ok(Reply {
            replayed: code & REPLAYED != 0,
            created: created != 0,
            recovering: created >= 2,
            loss_detected: created == 3,
            allowed: code & ALLOWED != 0,
            balance: u64::try_from(balance).map_err(|_| bad("negative balance"))?,
            t,
            now,
            seq: u64::try_from(seq).map_err(|_| bad("negative seq"))?,
            cost_units,
            override_config,
        })
    }

    /// The config the script decided under: the key's override, else `default`.
    pub fn config(&self, default: &Config) -> Result<Config, ReplyError> {
        match self.override_config {
            None => Ok(*default),
            Some((_, capacity, p, q)) => Rate::new(p, q)
                .and_then(|rate| Config::new(capacity, rate))
                .map_err(|_| ReplyError {
                    reply: self.raw(),
                    reason: "stored override is not a valid config",
                }),
        }
    }

    /// The cost in units the decision was made for: a replay's recorded one, else the caller's `cost`
    /// (whole tokens) on `config`.
    fn cost_on(&self, config: &Config, cost: u64) -> Result<u128, ReplyError> {
        match self.cost_units {
            Some(units) => Ok(u128::from(units)),
            None if cost != 0 && cost <= config.capacity() => {
                Ok(u128::from(cost) * config.units_per_token())
            }
            None => Err(ReplyError {
                reply: self.raw(),
                reason: "cost invalid for the decision's config",
            }),
        }
    }

    /// The limiter's [`Decision`] for this reply to a request of `cost` whole tokens (under the key's
    /// override config if it has one, else `default`), rebuilt by the core (`stored_decision`) from
    /// the script's verdict, balance and cursor: waits and remaining tokens are the core's, exactly.
    pub fn decision(&self, default: &Config, cost: u64) -> Result<Decision, ReplyError> {
        let config = &self.config(default)?;
        stored_decision(
            config,
            StoredDecision {
                allowed: self.allowed,
                balance_after: u128::from(self.balance),
                cursor: self.t,
                now: self.now,
                cost_units: self.cost_on(config, cost)?,
            },
        )
        .ok_or_else(|| ReplyError {
            reply: self.raw(),
            reason: "no decision the transition could make",
        })
    }

    /// The same decision as a set's (one part): what `acquire_set_with` answers for a key of one
    /// bandwidth. Built by the core's set transition from the same state and checked equal to
    /// [`Reply::decision`].
    pub fn decisions(&self, default: &Config, cost: u64) -> Result<Decisions, ReplyError> {
        let decision = self.decision(default, cost)?;
        let set = Bandwidths::from(decision.config());
        let bad = |reason| ReplyError {
            reply: self.raw(),
            reason,
        };
        let cost_units = self.cost_on(set.first(), cost)?;
        let before = u128::from(self.balance) + if self.allowed { cost_units } else { 0 };
        let cost = u64::try_from(cost_units / set.first().units_per_token())
            .map_err(|_| bad("cost above u64"))?;
        let state = crate::set::set_state(&set, &[before], self.t)
            .ok_or_else(|| bad("not a state at this cursor"))?;
        let (_, decisions) = transition_set(
            &set,
            &state,
            Attempt {
                cost,
                now: self.now,
            },
        )
        .map_err(|_| bad("cost invalid for config"))?;
        if decisions.bandwidths() != [decision] {
            return Err(bad("set decision differs from the one-bandwidth decision"));
        }
        Ok(decisions)
    }

    /// The reply as the script sent it (for error messages).
    fn raw(&self) -> Vec<i64> {
        let (t_s, t_n) = limbs(self.t);
        let created = match (self.created, self.recovering, self.loss_detected) {
            (false, _, _) => 0,
            (true, false, _) => 1,
            (true, true, false) => 2,
            (true, true, true) => 3,
        };
        let mut code = i64::from(self.allowed) + (created << CREATED_SHIFT);
        if self.replayed {
            code += REPLAYED;
        }
        let mut raw = vec![
            0,
            self.balance as i64,
            t_s as i64,
            t_n as i64,
            self.seq as i64,
        ];
        if self.now != self.t {
            code += HAS_NOW;
            let (n_s, n_n) = limbs(self.now);
            raw.extend([n_s as i64, n_n as i64]);
        }
        if let Some(cost) = self.cost_units {
            code += HAS_COST;
            raw.push(cost as i64);
        }
        if let Some((v, c, p, q)) = self.override_config {
            code += HAS_OVERRIDE;
            raw.extend([v as i64, c as i64, p as i64, q as i64]);
        }
        raw[0] = code;
        raw
    }
}

/// Does the exact wait agree with the script's quotient `q` (ns from `t`; 0 = nothing missing;
/// -1 = never)? A full bucket waits 0 whatever the lag (semantics: `0` if full).
pub(crate) fn wait_matches(exact: Wait, q: i64, lag: Nanos, now: Nanos) -> bool {
    let expected = match q {
        -1 => Wait::Never,
        0 => Wait::After(0),
        q if q > 0 => {
            let total = q as u128 + lag as u128;
            if total <= (u64::MAX - now) as u128 {
                Wait::After(total as Nanos)
            } else {
                Wait::Never
            }
        }
        _ => return false,
    };
    expected == exact
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limbs_round_trip_at_the_ends_of_the_clock() {
        for ns in [
            0,
            1,
            NANOS_PER_SECOND - 1,
            NANOS_PER_SECOND,
            1 << 53,
            u64::MAX - 1,
            u64::MAX,
        ] {
            let (s, n) = limbs(ns);
            assert_eq!(join(s as i64, n as i64), Some(ns));
        }
        assert_eq!(join(18_446_744_073, 709_551_616), None, "one past u64::MAX");
        assert_eq!(join(-1, 0), None);
        assert_eq!(join(0, NANOS_PER_SECOND as i64), None);
    }

    #[test]
    fn a_malformed_reply_is_an_error_not_a_decision() {
        assert!(Reply::parse(vec![0; 4]).is_err(), "too short");
        assert!(
            Reply::parse(vec![128, 0, 0, 0, 0]).is_err(),
            "unknown code bit"
        );
        assert!(
            Reply::parse(vec![0, -5, 0, 0, 0]).is_err(),
            "negative balance"
        );
        assert!(
            Reply::parse(vec![16, 0, 0, 0, 0, 1]).is_err(),
            "now announced, half sent"
        );
        assert!(
            Reply::parse(vec![0, 0, 0, 0, 0, 1]).is_err(),
            "longer than announced"
        );
        assert!(
            Reply::parse(vec![64, 0, 0, 0, 0, 1, 0, 1, 1]).is_err(),
            "override of capacity 0"
        );
        let config = Config::new(2, bucketproof_limiter::Rate::per_second(1)).unwrap();
        // Allowed, fresh, balance 1 token left at t = 5 s.
        let ok = Reply::parse(vec![1 + 2, 1_000_000_000, 5, 0, 1]).unwrap();
        assert!(ok.created && ok.allowed && !ok.replayed && ok.now == ok.t);
        assert!(ok.decision(&config, 1).unwrap().is_allowed());
        // The same balance claimed after a cost of 2 would need 3 tokens before: above capacity.
        assert!(ok.decision(&config, 2).is_err());
        // A replay carries now and its recorded cost.
        let replay = Reply::parse(vec![1 + 8 + 16 + 32, 0, 5, 0, 4, 4, 0, 2_000_000_000]).unwrap();
        assert!(replay.replayed && replay.now + NANOS_PER_SECOND == replay.t);
        assert_eq!(replay.cost_units, Some(2_000_000_000));
        assert!(replay.decision(&config, 1).unwrap().is_allowed());
        // Denied, yet the balance covers the cost: refused, never trusted.
        let off = Reply::parse(vec![0, 1_000_000_000, 5, 0, 1]).unwrap();
        assert!(off.decision(&config, 1).is_err());
    }

    #[test]
    fn a_packed_bucket_round_trips_and_refuses_other_layouts() {
        let config = Config::new(5, bucketproof_limiter::Rate::new(2, 3).unwrap()).unwrap();
        let bucket = Packed {
            balance: config.capacity_units() - 7,
            last_refill: 3 * NANOS_PER_SECOND + 9,
            seq: 12,
            records_until: (-1, 0),
            config: packed_config(&config),
            override_version: None,
        };
        assert_eq!(Packed::decode(&bucket.encode()), Ok(bucket.clone()));
        assert_eq!(bucket.override_config(), Ok(None));
        let overridden = Packed {
            override_version: Some(4),
            ..bucket.clone()
        };
        assert_eq!(
            Packed::decode(&overridden.encode())
                .unwrap()
                .override_config(),
            Ok(Some((4, config)))
        );
        assert!(Packed::decode(&bucket.encode()[..71]).is_err());
        let mut fractional = bucket.encode();
        fractional[..8].copy_from_slice(&0.5f64.to_le_bytes());
        assert!(Packed::decode(&fractional).is_err());
    }
}
