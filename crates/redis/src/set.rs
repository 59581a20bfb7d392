//! The wire side of a key with several bandwidths: the set script's source (`set.lua`), its fingerprint,
//! its reply, and the rebuilding of the in-memory [`Decisions`] from that reply.
//!
//! Owns: [`SET_SOURCE`], [`set_fingerprint`], [`SetReply`] and [`set_state`].
//!
//! Promises: a reply becomes a [`Decisions`] only through the core's own [`transition_set`], replayed on
//! a state that needs no refill (every bandwidth at its balance before the charge, the cursor at the
//! script's `t`), and every bandwidth's balance, reset and wait is then compared with the script's: a
//! disagreement between Lua and Rust is an error, never a silent rounding. A set of one bandwidth never
//! comes here for its script (it runs `bucket.lua` as before); only its [`Decisions`] is built here.

use bucketproof_limiter::internal::{Attempt, transition_set};
use bucketproof_limiter::{Bandwidth, Bandwidths, Config, Decisions, Nanos, Rate, SetState};
use redis::Script;

use crate::script::{ReplyError, fingerprint, join, wait_matches};

/// The Lua source of a key with several bandwidths: read, replay check, refill each bandwidth from the
/// one cursor, decide all or none, write, record, TTL.
pub const SET_SOURCE: &str = concat!(include_str!("prelude.lua"), include_str!("set.lua"));

/// The loaded-once set script (`EVALSHA`, reloaded by the `redis` crate on `NOSCRIPT`).
pub fn set_script() -> Script {
    Script::new(SET_SOURCE)
}

/// The fingerprint stored with a key of several bandwidths: each bandwidth's grid, capacity and speed
/// ([`fingerprint`]), `;`-joined in the set's order. It never equals a one-bandwidth fingerprint, so a
/// key is never read by a limiter of another shape.
pub fn set_fingerprint(set: &Bandwidths) -> String {
    set.as_slice()
        .iter()
        .map(|b| fingerprint(b.config()))
        .collect::<Vec<_>>()
        .join(";")
}

/// One bandwidth's part of the set script's reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartReply {
    /// Balance in units of this bandwidth's grid after the decision.
    pub balance: u64,
    /// `ceil(missing / p)` ns from `t` until full; 0 = full; -1 = never.
    pub reset: i64,
    /// Denied only: 0 if this bandwidth covers the cost, else `ceil(short / p)` ns from `t`; -1 = never.
    pub retry: i64,
}

/// The set script's reply, as numbers (all integers below 2^53).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetReply {
    /// A live request-id record answered; nothing was charged.
    pub replayed: bool,
    /// The key did not exist (fresh, every bandwidth full at `now`).
    pub created: bool,
    /// The bucket was created within one refill period of its slot's detected state loss
    /// ([`crate::epoch`]); under [`crate::Recovery::Conservative`] it started below full.
    pub recovering: bool,
    /// This call found its slot's epoch marker missing and wrote it: a state loss detected.
    pub loss_detected: bool,
    /// Admitted, and every bandwidth charged.
    pub allowed: bool,
    /// The one refill cursor `max(now, last)` after the transition.
    pub t: Nanos,
    /// The `now` the decision was made at.
    pub now: Nanos,
    /// The key's transition counter after this transition (the recorded one for a replay).
    pub seq: u64,
    /// The cost in whole tokens the decision was made for (a replay's: the recorded request's).
    pub cost: u64,
    /// Every bandwidth's part, in the set's order.
    pub parts: Vec<PartReply>,
}

impl SetReply {
    /// Parses `{replayed, created, allowed, t_s, t_n, now_s, now_n, seq, cost, n, (balance, reset,
    /// retry) * n}`.
    pub fn parse(raw: Vec<i64>) -> Result<SetReply, ReplyError> {
        let bad = |reason| ReplyError {
            reply: raw.clone(),
            reason,
        };
        let [
            replayed,
            created,
            allowed,
            t_s,
            t_n,
            now_s,
            now_n,
            seq,
            cost,
            n,
            ref rest @ ..,
        ] = raw[..]
        else {
            return Err(bad("expected at least 10 integers"));
        };
        if n < 1 || rest.len() as i64 != 3 * n {
            return Err(bad("expected 3 integers per bandwidth"));
        }
        let flag = |x: i64| match x {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(bad("flag not 0 or 1")),
        };
        let parts = rest
            .chunks_exact(3)
            .map(|part| {
                Ok(PartReply {
                    balance: u64::try_from(part[0]).map_err(|_| bad("negative balance"))?,
                    reset: part[1],
                    retry: part[2],
                })
            })
            .collect::<Result<Vec<_>, ReplyError>>()?;
        if !(0..=3).contains(&created) {
            return Err(bad("created not 0 to 3"));
        }
        Ok(SetReply {
            replayed: flag(replayed)?,
            created: created != 0,
            recovering: created >= 2,
            loss_detected: created == 3,
            allowed: flag(allowed)?,
            t: join(t_s, t_n).ok_or_else(|| bad("cursor outside u64 ns"))?,
            now: join(now_s, now_n).ok_or_else(|| bad("now outside u64 ns"))?,
            seq: u64::try_from(seq).map_err(|_| bad("negative seq"))?,
            cost: u64::try_from(cost).map_err(|_| bad("negative cost"))?,
            parts,
        })
    }

    /// The in-memory [`Decisions`] for this reply under `set`, checked part by part against the
    /// script's own balances and quotients.
    pub fn decisions(&self, set: &Bandwidths) -> Result<Decisions, ReplyError> {
        let bad = |reason| ReplyError {
            reply: self.raw(),
            reason,
        };
        if self.parts.len() != set.len() {
            return Err(bad("not one part per bandwidth"));
        }
        if self.t < self.now {
            return Err(bad("cursor behind now"));
        }
        let mut before = Vec::with_capacity(set.len());
        for (part, bandwidth) in self.parts.iter().zip(set.as_slice()) {
            let charge = if self.allowed {
                self.cost as u128 * bandwidth.config().units_per_token()
            } else {
                0
            };
            before.push(part.balance as u128 + charge);
        }
        let state = set_state(set, &before, self.t)
            .ok_or_else(|| bad("balance above capacity, or not a state at this cursor"))?;
        let (_, decisions) = transition_set(
            set,
            &state,
            Attempt {
                cost: self.cost,
                now: self.now,
            },
        )
        .map_err(|_| bad("cost invalid for the set"))?;
        if decisions.is_allowed() != self.allowed {
            return Err(bad("script decision inconsistent with its balances"));
        }
        let lag = self.t - self.now;
        for (part, decision) in self.parts.iter().zip(decisions.bandwidths()) {
            if decision.remaining().units() != part.balance as u128 {
                return Err(bad("script balance differs from the exact one"));
            }
            if !wait_matches(decision.reset_after(), part.reset, lag, self.now) {
                return Err(bad("script reset_after differs from the exact one"));
            }
            let retry_ok = match decision.retry_after() {
                Some(wait) => wait_matches(wait, part.retry, lag, self.now),
                None => part.retry == 0,
            };
            if !retry_ok {
                return Err(bad("script retry_after differs from the exact one"));
            }
        }
        Ok(decisions)
    }

    fn raw(&self) -> Vec<i64> {
        let (t_s, t_n) = crate::script::limbs(self.t);
        let (n_s, n_n) = crate::script::limbs(self.now);
        let mut raw = vec![
            self.replayed as i64,
            match (self.created, self.recovering, self.loss_detected) {
                (false, _, _) => 0,
                (true, false, _) => 1,
                (true, true, false) => 2,
                (true, true, true) => 3,
            },
            self.allowed as i64,
            t_s as i64,
            t_n as i64,
            n_s as i64,
            n_n as i64,
            self.seq as i64,
            self.cost as i64,
            self.parts.len() as i64,
        ];
        for part in &self.parts {
            raw.extend([part.balance as i64, part.reset, part.retry]);
        }
        raw
    }
}

/// The state of `set` with bandwidth `i` at `balances[i]` units and the one cursor at `t`, or `None` if
/// a balance is above its capacity (or fractional at `t = 0`, where no key can be).
///
/// The core builds a [`SetState`] only from its own transitions, so this reaches it through them: a set
/// `old` of the same identities in which bandwidth `i` has capacity `whole_i + 1` and rate `frac_i /
/// q_i` (`balances[i] = whole_i * q_i * 10^9 + frac_i`; that rate's grid divides bandwidth `i`'s, so
/// converting back is exact), full at `t - 1`, charged 1 token (`whole_i` left), refilled for 1 ns
/// (`+frac_i`) and reconfigured to `set` at `t`. The result is checked balance by balance.
pub fn set_state(set: &Bandwidths, balances: &[u128], t: Nanos) -> Option<SetState> {
    if balances.len() != set.len() {
        return None;
    }
    let mut fractional = false;
    let mut old = Vec::with_capacity(set.len());
    for (bandwidth, &balance) in set.as_slice().iter().zip(balances) {
        let config = bandwidth.config();
        if balance > config.capacity_units() {
            return None;
        }
        let unit = config.units_per_token();
        let whole = u64::try_from(balance / unit).ok()?;
        let frac = u64::try_from(balance % unit).ok()?;
        fractional |= frac > 0;
        let carrier = Config::new(
            whole.checked_add(1)?,
            Rate::new(frac, config.rate().denom()).ok()?,
        )
        .ok()?;
        old.push(match bandwidth.name() {
            Some(name) => Bandwidth::named(name.as_str(), carrier).ok()?,
            None => Bandwidth::new(carrier),
        });
    }
    let old = Bandwidths::new(old).ok()?;
    let start = if fractional { t.checked_sub(1)? } else { t };
    let charge = Attempt {
        cost: 1,
        now: start,
    };
    let (charged, _) = transition_set(&old, &SetState::full(&old, start), charge).ok()?;
    let state = charged.reconfigured(&old, set, t);
    let exact = state.last_refill() == t
        && (0..set.len()).all(|i| state.bandwidth(i).map(|b| b.balance()) == Some(balances[i]));
    exact.then_some(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bucketproof_limiter::{NANOS_PER_SECOND, Wait};
    use rand::{RngCore, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn three() -> Bandwidths {
        let config = |c, p, q| Config::new(c, Rate::new(p, q).unwrap()).unwrap();
        Bandwidths::new([
            Bandwidth::named("burst", config(5, 5, 1)).unwrap(),
            Bandwidth::new(config(20, 20, 60)),
            Bandwidth::named("day", config(100, 100, 86_400)).unwrap(),
        ])
        .unwrap()
    }

    #[test]
    fn every_state_is_reached_exactly() {
        let set = three();
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for _ in 0..2000 {
            let balances: Vec<u128> = set
                .as_slice()
                .iter()
                .map(|b| match rng.next_u64() % 4 {
                    0 => 0,
                    1 => b.config().capacity_units(),
                    2 => {
                        (rng.next_u64() as u128 % b.config().capacity() as u128)
                            * b.config().units_per_token()
                    }
                    _ => rng.next_u64() as u128 % (b.config().capacity_units() + 1),
                })
                .collect();
            let t = 1 + rng.next_u64() % (1 << 62);
            let state = set_state(&set, &balances, t).expect("a valid state");
            assert_eq!(state.last_refill(), t);
            for (i, &balance) in balances.iter().enumerate() {
                assert_eq!(state.bandwidth(i).unwrap().balance(), balance);
            }
        }
        // Whole balances at cursor 0; a fractional one there is no state; above capacity is none.
        assert!(set_state(&set, &[0, 3_000_000_000, 0], 0).is_some());
        assert!(set_state(&set, &[1, 0, 0], 0).is_none());
        assert!(set_state(&set, &[5_000_000_001, 0, 0], 9).is_none());
        assert!(set_state(&set, &[0, 0], 9).is_none());
    }

    #[test]
    fn a_reply_becomes_the_core_decisions_or_an_error() {
        let set = three();
        // A fresh key at 10 s, cost 5, allowed: the burst is empty and waits 1 s to be full.
        let t = 10 * NANOS_PER_SECOND;
        let mut raw = vec![0, 1, 1, 10, 0, 10, 0, 1, 5, 3];
        raw.extend([0, 1_000_000_000, 0]);
        raw.extend([15 * 3_000_000_000, 15 * 1_000_000_000, 0]);
        raw.extend([95 * 864_000_000_000, 5 * 864_000_000_000, 0]);
        let reply = SetReply::parse(raw.clone()).unwrap();
        let decisions = reply.decisions(&set).unwrap();
        assert!(decisions.is_allowed());
        assert_eq!(decisions.bandwidths()[0].remaining().units(), 0);
        assert_eq!(decisions.reset_after(), Wait::After(5 * 864_000_000_000));
        let expected = transition_set(&set, &SetState::full(&set, t), Attempt { cost: 5, now: t })
            .unwrap()
            .1;
        assert_eq!(decisions, expected);
        // One quotient off by one: refused, not rounded over.
        let mut off = raw.clone();
        off[11] -= 1;
        assert!(SetReply::parse(off).unwrap().decisions(&set).is_err());
        // A part missing, or a wait claimed on an allow.
        assert!(SetReply::parse(raw[..raw.len() - 3].to_vec()).is_err());
        let mut retry = raw;
        retry[12] = 7;
        assert!(SetReply::parse(retry).unwrap().decisions(&set).is_err());
    }
}
