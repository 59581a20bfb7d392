//! The wire side of the Lua script: its source, the arguments it takes and the reply it gives.
//!
//! The script (`bucket.lua`) does the whole transition; this module only splits instants into limbs,
//! and turns the reply back into the limiter's own [`Decision`]. The limiter's `Decision` has no public
//! constructor, so the reply is replayed through [`transition`] on a state that needs no refill (cursor
//! at the script's `t`, balance before the charge): that reproduces the script's decision field for field
//! without duplicating any arithmetic. The script's own `reset`/`retry` quotients are then compared with
//! the rebuilt decision, so a disagreement between Lua and Rust is an error, never a silent rounding.

use bucketproof_limiter::internal::{Attempt, transition, transition_set};
use bucketproof_limiter::{
    Bandwidths, BucketState, Config, Decision, Decisions, NANOS_PER_SECOND, Nanos, Rate, Wait,
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

/// The fingerprint stored with a bucket: a stored bucket is never read on another unit grid.
pub fn fingerprint(config: &Config) -> String {
    format!(
        "{}/{}/{}",
        config.units_per_token(),
        config.capacity_units(),
        config.units_per_nanosecond()
    )
}

/// One call of the transition script as plain words ([`crate::RedisLimiter::script_call`]): send it
/// as `EVALSHA sha 2 keys... args...` after `SCRIPT LOAD` of [`SOURCE`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScriptCall {
    /// SHA1 of [`SOURCE`].
    pub sha: String,
    /// The user's hash, then its slot's epoch marker.
    pub keys: [String; 2],
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
    /// `ceil(missing / p)` ns from `t` until full; 0 = full; -1 = never.
    pub reset: i64,
    /// Denied only: `ceil(short / p)` ns from `t` until the cost is covered; -1 = never.
    pub retry: i64,
    /// The refill cursor `max(now, last)` after the transition.
    pub t: Nanos,
    /// The `now` the decision was made at (server time or injected).
    pub now: Nanos,
    /// The key's transition counter after this transition (the recorded one for a replay).
    pub seq: u64,
    /// The cost in units this decision was made for (for a replay: the recorded request's cost).
    pub cost_units: u64,
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

impl Reply {
    /// Parses the script's 16-element array.
    pub fn parse(raw: Vec<i64>) -> Result<Reply, ReplyError> {
        let bad = |reason| ReplyError {
            reply: raw.clone(),
            reason,
        };
        let [
            replayed,
            created,
            allowed,
            balance,
            reset,
            retry,
            t_s,
            t_n,
            now_s,
            now_n,
            seq,
            cost_units,
            o_version,
            o_capacity,
            o_p,
            o_q,
        ] = raw[..]
        else {
            return Err(bad("expected 16 integers"));
        };
        let flag = |x: i64| match x {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(bad("flag not 0 or 1")),
        };
        if !(0..=3).contains(&created) {
            return Err(bad("created not 0 to 3"));
        }
        Ok(Reply {
            replayed: flag(replayed)?,
            created: created != 0,
            recovering: created >= 2,
            loss_detected: created == 3,
            allowed: flag(allowed)?,
            balance: u64::try_from(balance).map_err(|_| bad("negative balance"))?,
            reset,
            retry,
            t: join(t_s, t_n).ok_or_else(|| bad("cursor outside u64 ns"))?,
            now: join(now_s, now_n).ok_or_else(|| bad("now outside u64 ns"))?,
            seq: u64::try_from(seq).map_err(|_| bad("negative seq"))?,
            cost_units: u64::try_from(cost_units).map_err(|_| bad("negative cost"))?,
            override_config: match (o_version, o_capacity, o_p, o_q) {
                (0, _, _, _) => None,
                (v, c, p, q) if v > 0 && c > 0 && p >= 0 && q > 0 => {
                    Some((v as u64, c as u64, p as u64, q as u64))
                }
                _ => return Err(bad("malformed override config")),
            },
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

    /// The limiter's [`Decision`] for this reply (under the key's override config if it has one, else
    /// `default`), checked against the script's own quotients.
    pub fn decision(&self, default: &Config) -> Result<Decision, ReplyError> {
        let config = &self.config(default)?;
        let bad = |reason| ReplyError {
            reply: self.raw(),
            reason,
        };
        let cost_units = self.cost_units as u128;
        let unit = config.units_per_token();
        if cost_units == 0 || !cost_units.is_multiple_of(unit) {
            return Err(bad("cost not a whole number of tokens"));
        }
        let cost = u64::try_from(cost_units / unit).map_err(|_| bad("cost above u64"))?;
        let balance = self.balance as u128;
        if balance > config.capacity_units() || self.t < self.now {
            return Err(bad("balance above capacity or cursor behind now"));
        }
        let before = if self.allowed {
            balance + cost_units
        } else {
            balance
        };
        // Cursor at t >= now: the transition refills nothing and decides on `before` exactly.
        let state = BucketState::new(config, before, self.t)
            .ok_or_else(|| bad("balance plus cost above capacity"))?;
        let (_, decision) = transition(
            config,
            state,
            Attempt {
                cost,
                now: self.now,
            },
        )
        .map_err(|_| bad("cost invalid for config"))?;
        if decision.is_allowed() != self.allowed || decision.remaining().units() != balance {
            return Err(bad("script decision inconsistent with its balance"));
        }
        let lag = self.t - self.now;
        if !wait_matches(decision.reset_after(), self.reset, lag, self.now) {
            return Err(bad("script reset_after differs from the exact one"));
        }
        if let Some(retry) = decision.retry_after()
            && !wait_matches(retry, self.retry, lag, self.now)
        {
            return Err(bad("script retry_after differs from the exact one"));
        }
        Ok(decision)
    }

    /// The same decision as a set's (one part): what `acquire_set_with` answers for a key of one
    /// bandwidth. Built by the core's set transition from the same state and checked equal to
    /// [`Reply::decision`].
    pub fn decisions(&self, default: &Config) -> Result<Decisions, ReplyError> {
        let decision = self.decision(default)?;
        let set = Bandwidths::from(decision.config());
        let bad = |reason| ReplyError {
            reply: self.raw(),
            reason,
        };
        // `decision` checked that the cost is a whole number of tokens.
        let before = self.balance as u128
            + if self.allowed {
                self.cost_units as u128
            } else {
                0
            };
        let cost = u64::try_from(self.cost_units as u128 / set.first().units_per_token())
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

    fn raw(&self) -> Vec<i64> {
        let (t_s, t_n) = limbs(self.t);
        let (n_s, n_n) = limbs(self.now);
        [
            self.replayed as i64,
            match (self.created, self.recovering, self.loss_detected) {
                (false, _, _) => 0,
                (true, false, _) => 1,
                (true, true, false) => 2,
                (true, true, true) => 3,
            },
            self.allowed as i64,
            self.balance as i64,
            self.reset,
            self.retry,
            t_s as i64,
            t_n as i64,
            n_s as i64,
            n_n as i64,
            self.seq as i64,
            self.cost_units as i64,
        ]
        .into_iter()
        .chain(match self.override_config {
            None => [0; 4],
            Some((v, c, p, q)) => [v as i64, c as i64, p as i64, q as i64],
        })
        .collect()
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
        assert!(Reply::parse(vec![0; 15]).is_err());
        assert!(Reply::parse(vec![2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]).is_err());
        assert!(Reply::parse(vec![0, 0, 0, -5, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]).is_err());
        assert!(Reply::parse(vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 1, 1]).is_err());
        let config = Config::new(2, bucketproof_limiter::Rate::per_second(1)).unwrap();
        let ok = Reply::parse(vec![
            0,
            1,
            1,
            1_000_000_000,
            1_000_000_000,
            0,
            5,
            0,
            5,
            0,
            1,
            1_000_000_000,
            0,
            0,
            0,
            0,
        ]);
        assert!(ok.unwrap().decision(&config).unwrap().is_allowed());
        // Claims "allowed" with a quotient that is off by one: refused, not rounded over.
        let off = Reply::parse(vec![
            0,
            1,
            1,
            1_000_000_000,
            999_999_999,
            0,
            5,
            0,
            5,
            0,
            1,
            1_000_000_000,
            0,
            0,
            0,
            0,
        ]);
        assert!(off.unwrap().decision(&config).is_err());
    }
}
