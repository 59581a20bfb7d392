//! The wire side of settle: the settle script's source (`settle.lua`, one script for both layouts of
//! a key), its reply, and the rebuilding of the in-memory settlement from that reply.
//!
//! Owns: [`SETTLE_SOURCE`], [`settle_script`] and [`SettleReply`].
//!
//! Promises: a reply becomes a [`Decisions`] only through the core's own rebuild of a settle
//! (`internal::stored_settlements`), which refuses a report no settle could have made (a refund that
//! gave back less than it had to, a verdict that disagrees with the balances): a disagreement between
//! Lua and Rust is an error, never a silent rounding.

use bucketproof_limiter::internal::{SettleAttempt, StoredSettlements, stored_settlements};
use bucketproof_limiter::{Bandwidths, Config, Decisions, Nanos, Rate};
use redis::Script;

use crate::script::{ReplyError, join, limbs};

/// The Lua source of settle: find the live record, check it, refill, refund or decide the extra,
/// write, close the record, TTL; for a key of one bandwidth or of several.
pub const SETTLE_SOURCE: &str = concat!(include_str!("prelude.lua"), include_str!("settle.lua"));

/// The loaded-once settle script (`EVALSHA`, reloaded by the `redis` crate on `NOSCRIPT`).
pub fn settle_script() -> Script {
    Script::new(SETTLE_SOURCE)
}

/// The settle script's reply, as numbers (all integers below 2^53).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettleReply {
    /// The request was settled already with the same actual: the recorded settlement, nothing changed.
    pub replayed: bool,
    /// The settlement was allowed (a refund always is; an extra when every bandwidth covered it).
    pub allowed: bool,
    /// The cursor `max(now, last)` after the settle.
    pub t: Nanos,
    /// The `now` the settle was made at (server time or injected).
    pub now: Nanos,
    /// The key's transition counter after the settle (the recorded one for a replay).
    pub seq: u64,
    /// What the request's acquire charged, in whole tokens.
    pub charged: u64,
    /// Each bandwidth's balance after the settle, in units of its grid, in the set's order.
    pub balances: Vec<u128>,
    /// The key's override config `(version, capacity, p, q)` the settle was made under (a key of one
    /// bandwidth only), if any.
    pub override_config: Option<(u64, u64, u64, u64)>,
}

impl SettleReply {
    /// Parses `{code, t_s, t_n, now_s, now_n, seq, charged, n, b_1..b_n, o_version, o_capacity, o_p,
    /// o_q}` (`settle.lua`'s header).
    pub fn parse(raw: Vec<i64>) -> Result<SettleReply, ReplyError> {
        let bad = |reason| ReplyError {
            reply: raw.clone(),
            reason,
        };
        let [code, t_s, t_n, now_s, now_n, seq, charged, n, ref rest @ ..] = raw[..] else {
            return Err(bad("expected at least 8 integers"));
        };
        if !(0..4).contains(&code) {
            return Err(bad("unknown code bits"));
        }
        if n < 1 || rest.len() as i64 != n + 4 {
            return Err(bad("expected n balances and 4 override fields"));
        }
        let (balances, over) = rest.split_at(n as usize);
        let balances = balances
            .iter()
            .map(|&b| u128::try_from(b).map_err(|_| bad("negative balance")))
            .collect::<Result<Vec<_>, _>>()?;
        let override_config = match *over {
            [0, 0, 0, 0] => None,
            [v, c, p, q] if v > 0 && c > 0 && p >= 0 && q > 0 => {
                Some((v as u64, c as u64, p as u64, q as u64))
            }
            _ => return Err(bad("malformed override config")),
        };
        Ok(SettleReply {
            replayed: code & 2 != 0,
            allowed: code & 1 != 0,
            t: join(t_s, t_n).ok_or_else(|| bad("cursor outside u64 ns"))?,
            now: join(now_s, now_n).ok_or_else(|| bad("now outside u64 ns"))?,
            seq: u64::try_from(seq).map_err(|_| bad("negative seq"))?,
            charged: u64::try_from(charged).map_err(|_| bad("negative charge"))?,
            balances,
            override_config,
        })
    }

    /// The bandwidths the settle was decided under: the key's override (one bandwidth), else `set`.
    fn set_under(&self, set: &Bandwidths) -> Result<Bandwidths, ReplyError> {
        match self.override_config {
            None => Ok(set.clone()),
            Some(_) if set.len() != 1 => {
                Err(self.bad("an override on a key of several bandwidths"))
            }
            Some((_, capacity, p, q)) => Rate::new(p, q)
                .and_then(|rate| Config::new(capacity, rate))
                .map(Bandwidths::from)
                .map_err(|_| self.bad("stored override is not a valid config")),
        }
    }

    /// The settlement for this reply to a settle of `actual` under `set` (the limiter's bandwidths;
    /// a key's override replaces a set of one), every bandwidth's part, rebuilt by the core.
    pub fn decisions(&self, set: &Bandwidths, actual: u64) -> Result<Decisions, ReplyError> {
        let set = self.set_under(set)?;
        if self.t < self.now {
            return Err(self.bad("cursor behind now"));
        }
        if !self.allowed && actual <= self.charged {
            return Err(self.bad("a refund denied"));
        }
        if self.replayed && !self.allowed {
            return Err(self.bad("a denied settlement recorded"));
        }
        stored_settlements(
            &set,
            StoredSettlements {
                allowed: self.allowed,
                balances_after: &self.balances,
                cursor: self.t,
                settle: SettleAttempt {
                    charged: self.charged,
                    actual,
                    now: self.now,
                },
            },
        )
        .ok_or_else(|| self.bad("no settlement the transition could make"))
    }

    fn bad(&self, reason: &'static str) -> ReplyError {
        ReplyError {
            reply: self.raw(),
            reason,
        }
    }

    /// The reply as the script sent it (for error messages).
    fn raw(&self) -> Vec<i64> {
        let (t_s, t_n) = limbs(self.t);
        let (n_s, n_n) = limbs(self.now);
        let mut raw = vec![
            i64::from(self.allowed) + 2 * i64::from(self.replayed),
            t_s as i64,
            t_n as i64,
            n_s as i64,
            n_n as i64,
            self.seq as i64,
            self.charged as i64,
            self.balances.len() as i64,
        ];
        raw.extend(self.balances.iter().map(|&b| b as i64));
        let (v, c, p, q) = self.override_config.unwrap_or_default();
        raw.extend([v as i64, c as i64, p as i64, q as i64]);
        raw
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bucketproof_limiter::NANOS_PER_SECOND;

    #[test]
    fn a_reply_becomes_the_core_settlement_or_an_error() {
        let config = Config::new(10, Rate::per_second(1)).unwrap();
        let set = Bandwidths::from(config);
        let unit = config.units_per_token() as i64;
        // Charged 6 at 5 s, 4 left; settled at 1: 3 back, 7 left.
        let raw = vec![1, 5, 0, 5, 0, 2, 6, 1, 7 * unit, 0, 0, 0, 0];
        let reply = SettleReply::parse(raw.clone()).unwrap();
        let decisions = reply.decisions(&set, 1).unwrap();
        assert!(decisions.is_allowed());
        assert_eq!(decisions.bandwidths()[0].remaining().whole(), 7);
        assert_eq!(reply.t, 5 * NANOS_PER_SECOND);
        // A refund claimed denied; a balance of 2 after a refund of 6 (it gives back 6, so at least
        // 6 is left): refused, never trusted.
        let mut denied = raw.clone();
        denied[0] = 0;
        assert!(
            SettleReply::parse(denied)
                .unwrap()
                .decisions(&set, 1)
                .is_err()
        );
        let mut short = raw.clone();
        short[8] = 2 * unit;
        assert!(
            SettleReply::parse(short)
                .unwrap()
                .decisions(&set, 0)
                .is_err()
        );
        // Malformed: a part missing, an override half sent, an unknown code.
        assert!(SettleReply::parse(raw[..raw.len() - 1].to_vec()).is_err());
        let mut over = raw.clone();
        over[9] = 1;
        assert!(SettleReply::parse(over).is_err());
        let mut code = raw;
        code[0] = 4;
        assert!(SettleReply::parse(code).is_err());
    }
}
