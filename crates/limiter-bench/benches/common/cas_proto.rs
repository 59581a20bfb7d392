//! Evidence, not the product: the direct limiter's exact state in one 128-bit word, decided by a
//! compare-and-swap loop instead of a spin lock. What a lock-free [`DirectLimiter`] would reach,
//! measured beside the real one and governor.
//!
//! The word holds the balance (units, below 2^64: the config must be that narrow) and the cursor;
//! each call loads it, runs the one transition, and swaps the result in if nobody wrote between.
//! No reconfigure, no wide balances: the product would need both.
//!
//! [`DirectLimiter`]: bucketproof_limiter::DirectLimiter

use std::sync::atomic::Ordering;

use bucketproof_limiter::internal::{Attempt, state_from_parts, transition};
use bucketproof_limiter::{Clock, Config, Decision};
use portable_atomic::AtomicU128;

pub struct CasDirectProto<C> {
    config: Config,
    word: AtomicU128,
    clock: C,
}

fn pack(balance: u128, cursor: u64) -> u128 {
    balance << 64 | cursor as u128
}

impl<C: Clock> CasDirectProto<C> {
    pub fn new(config: Config, clock: C) -> CasDirectProto<C> {
        assert!(config.capacity_units() < 1 << 64, "a narrow config only");
        CasDirectProto {
            config,
            word: AtomicU128::new(pack(config.capacity_units(), 0)),
            clock,
        }
    }

    #[inline]
    pub fn acquire(&self, cost: u64) -> Option<Decision> {
        let now = self.clock.now();
        let mut seen = self.word.load(Ordering::Acquire);
        loop {
            let state = state_from_parts(seen >> 64, seen as u64);
            let (next, decision) = transition(&self.config, state, Attempt { cost, now }).ok()?;
            let packed = pack(next.balance(), next.last_refill());
            if packed == seen {
                return Some(decision);
            }
            match self
                .word
                .compare_exchange_weak(seen, packed, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Some(decision),
                Err(actual) => seen = actual,
            }
        }
    }
}
