//! A tiny exact token bucket for the tests (integer units of `1/(q * 10^9)` token, per
//! docs/semantics.md), so the tests can show where the float buckets decide differently.
//! Test-only: the crate itself depends on no other bucketproof crate.

#![allow(dead_code)]

/// Exact bucket: rate `p/q` tokens per second, balance in units of `1/(q * 10^9)` token.
#[derive(Debug, Clone)]
pub struct Exact {
    unit: u128,
    cap_units: u128,
    p: u128,
    balance: u128,
    last: Option<u64>,
}

impl Exact {
    /// A fresh (full) bucket.
    pub fn new(capacity: u64, p: u64, q: u64) -> Self {
        let unit = u128::from(q) * 1_000_000_000;
        let cap_units = u128::from(capacity) * unit;
        Self {
            unit,
            cap_units,
            p: u128::from(p),
            balance: cap_units,
            last: None,
        }
    }

    /// Refill to `max(now, last)`, decide `balance >= cost`, charge if allowed.
    pub fn acquire(&mut self, now: u64, cost: u64) -> bool {
        let last = self.last.unwrap_or(now);
        let t = now.max(last);
        let add = u128::from(t - last).saturating_mul(self.p);
        self.balance = self.balance.saturating_add(add).min(self.cap_units);
        self.last = Some(t);
        let cost_units = u128::from(cost) * self.unit;
        if self.balance >= cost_units {
            self.balance -= cost_units;
            true
        } else {
            false
        }
    }

    /// The balance in tokens, as `(units, units_per_token)`.
    pub fn balance(&self) -> (u128, u128) {
        (self.balance, self.unit)
    }
}
