//! The textbook f64 token bucket: tokens and elapsed seconds in `f64`, as most code writes it.

use crate::{
    FloatBucket, FloatDecision, FloatError, check_cost, checked_f64_rate, checked_ratio_rate,
    offset_from,
};

/// The textbook f64 token bucket. Time is clamped like the spec (`t = max(now, last)`), so only the
/// arithmetic differs from the exact limiter.
///
/// Where it rounds (each `f64` operation rounds to nearest, ties to even):
/// 1. the rate: `rate = p as f64 / q as f64` (rounds `p`, `q` above 2^53, and the quotient);
/// 2. the elapsed time: `elapsed_s = (t - last) as f64 / 1e9` (the `u64 -> f64` conversion rounds
///    above 2^53 ns, about 104 days; the division rounds almost always);
/// 3. the refill: `tokens = min(cap, tokens + elapsed_s * rate)` (the product and the sum round;
///    errors **accumulate** over many small steps, in either direction, so it can over-admit);
/// 4. the charge: `tokens -= cost` (rounds when `tokens` has bits below `cost`'s ulp);
/// 5. the waits: `retry_after = (t - now) + ceil((cost - tokens) / rate * 1e9)` and
///    `reset_after = (t - now) + ceil((cap - tokens) / rate * 1e9)`, subtraction, division and
///    product in `f64`, then `ceil`; a value at or beyond 2^64 is `None` (never).
///
/// The decision is `tokens >= cost` on the rounded `f64` values. A fresh bucket is full and takes
/// `last_refill = now` of its first operation, like the spec.
#[derive(Debug, Clone, PartialEq)]
pub struct TextbookBucket {
    capacity: u64,
    rate: f64,
    tokens: f64,
    last: Option<u64>,
}

impl TextbookBucket {
    /// A full bucket of `capacity` tokens refilling at `rate_numer / rate_denom` tokens per second.
    pub fn new(capacity: u64, rate_numer: u64, rate_denom: u64) -> Result<Self, FloatError> {
        let rate = checked_ratio_rate(capacity, rate_numer, rate_denom)?;
        Ok(Self::with_rate(capacity, rate))
    }

    /// A full bucket with the rate given directly in tokens per second (finite, `>= 0`).
    pub fn from_f64_rate(capacity: u64, rate: f64) -> Result<Self, FloatError> {
        let rate = checked_f64_rate(capacity, rate)?;
        Ok(Self::with_rate(capacity, rate))
    }

    fn with_rate(capacity: u64, rate: f64) -> Self {
        Self {
            capacity,
            rate,
            tokens: capacity as f64,
            last: None,
        }
    }

    /// The rate in tokens per second, as the bucket holds it.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// Charges `cost` tokens at `now_ns` if `tokens >= cost` after the refill.
    pub fn acquire(&mut self, now_ns: u64, cost: u64) -> Result<FloatDecision, FloatError> {
        check_cost(cost, self.capacity)?;
        let (t, tokens) = self.refilled(now_ns);
        self.last = Some(t);
        let cost_f = cost as f64;
        if tokens >= cost_f {
            self.tokens = tokens - cost_f;
            Ok(FloatDecision {
                allowed: true,
                remaining: self.tokens,
                retry_after_ns: None,
                reset_after_ns: self.reset_after(now_ns, t, self.tokens),
            })
        } else {
            self.tokens = tokens;
            Ok(FloatDecision {
                allowed: false,
                remaining: tokens,
                retry_after_ns: self.wait_for(now_ns, t, cost_f, tokens),
                reset_after_ns: self.reset_after(now_ns, t, tokens),
            })
        }
    }

    /// What an acquire at `now_ns` would see, writing nothing.
    pub fn peek(&self, now_ns: u64) -> FloatDecision {
        let (t, tokens) = self.refilled(now_ns);
        FloatDecision {
            allowed: true,
            remaining: tokens,
            retry_after_ns: None,
            reset_after_ns: self.reset_after(now_ns, t, tokens),
        }
    }

    /// The stored token count.
    pub fn tokens(&self) -> f64 {
        self.tokens
    }

    /// The stored refill cursor; `None` before the first operation.
    pub fn last_refill(&self) -> Option<u64> {
        self.last
    }

    /// `(t, tokens)` refilled to `t = max(now, last)`.
    fn refilled(&self, now_ns: u64) -> (u64, f64) {
        let Some(last) = self.last else {
            return (now_ns, self.tokens);
        };
        let t = now_ns.max(last);
        let elapsed_s = (t - last) as f64 / 1e9;
        let cap = self.capacity as f64;
        (t, cap.min(self.tokens + elapsed_s * self.rate))
    }

    fn reset_after(&self, now_ns: u64, t: u64, tokens: f64) -> Option<u64> {
        let cap = self.capacity as f64;
        if tokens >= cap {
            return offset_from(now_ns, Some(t - now_ns));
        }
        self.wait_for(now_ns, t, cap, tokens)
    }

    /// `(t - now) + ceil((target - tokens) / rate * 1e9)`, in f64 then ceil.
    fn wait_for(&self, now_ns: u64, t: u64, target: f64, tokens: f64) -> Option<u64> {
        if self.rate <= 0.0 {
            return None;
        }
        let ns = ((target - tokens) / self.rate * 1e9).ceil();
        // 2^64 as f64 is exact; anything at or above it (or NaN) is "never".
        if ns.is_nan() || ns >= 18_446_744_073_709_551_616.0 {
            return None;
        }
        let ns = if ns < 0.0 { 0 } else { ns as u64 };
        offset_from(now_ns, (t - now_ns).checked_add(ns))
    }
}

impl FloatBucket for TextbookBucket {
    fn acquire(&mut self, now_ns: u64, cost: u64) -> Result<FloatDecision, FloatError> {
        TextbookBucket::acquire(self, now_ns, cost)
    }
    fn peek(&self, now_ns: u64) -> FloatDecision {
        TextbookBucket::peek(self, now_ns)
    }
    fn tokens(&self) -> f64 {
        self.tokens
    }
    fn last_refill(&self) -> Option<u64> {
        self.last
    }
    fn capacity(&self) -> u64 {
        self.capacity
    }
}
