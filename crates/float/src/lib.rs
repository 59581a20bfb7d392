//! f64 token buckets: the comparison baselines of bucketproof, **not** products.
//!
//! Two buckets with the same observable shape as the exact limiter, so the harness can drive them
//! side by side with it and show where binary floating point decides differently:
//!
//! - [`TextbookBucket`]: the token bucket as it is usually written, tokens and seconds in `f64`.
//! - [`GoStyleBucket`]: a transcription of the arithmetic of Go's `golang.org/x/time/rate`
//!   (`advance`, `durationFromTokens`, `tokensFromDuration`, `reserveN` with a zero wait budget),
//!   in the historical variants listed by [`GoRateVersion`].
//!
//! Both implement [`FloatBucket`]; [`FloatKeyed`] keys any of them by `u64` for the harness.
//! Every public operation reports bad input as a [`FloatError`]; nothing here panics.

mod decision;
mod go;
mod keyed;
mod textbook;

pub use decision::{FloatDecision, FloatError};
pub use go::{GoRateVersion, GoStyleBucket};
pub use keyed::FloatKeyed;
pub use textbook::TextbookBucket;

/// The interface the harness drives: one float bucket, time given explicitly in nanoseconds.
pub trait FloatBucket: Clone {
    /// Charges `cost` tokens at `now_ns` if the bucket allows it; see each type for the rounding.
    fn acquire(&mut self, now_ns: u64, cost: u64) -> Result<FloatDecision, FloatError>;
    /// What `acquire` would see at `now_ns` (refilled tokens, `reset_after`), writing nothing.
    /// `allowed` is `true` and `retry_after_ns` is `None` in a peek.
    fn peek(&self, now_ns: u64) -> FloatDecision;
    /// The stored token count (not refilled to any time).
    fn tokens(&self) -> f64;
    /// The stored refill cursor; `None` before the first operation.
    fn last_refill(&self) -> Option<u64>;
    /// The capacity (burst) in whole tokens.
    fn capacity(&self) -> u64;
}

/// Checks a `p/q` rate and a capacity, and returns the rate as `p as f64 / q as f64`.
pub(crate) fn checked_ratio_rate(capacity: u64, numer: u64, denom: u64) -> Result<f64, FloatError> {
    if capacity == 0 {
        return Err(FloatError::InvalidConfig("capacity must be at least 1"));
    }
    if denom == 0 {
        return Err(FloatError::InvalidConfig(
            "rate denominator must be at least 1",
        ));
    }
    Ok(numer as f64 / denom as f64)
}

/// Checks an `f64` rate (finite, `>= 0`) and a capacity.
pub(crate) fn checked_f64_rate(capacity: u64, rate: f64) -> Result<f64, FloatError> {
    if capacity == 0 {
        return Err(FloatError::InvalidConfig("capacity must be at least 1"));
    }
    if !rate.is_finite() || rate < 0.0 {
        return Err(FloatError::InvalidConfig("rate must be finite and >= 0"));
    }
    Ok(rate)
}

/// Rejects `cost == 0` and `cost > capacity`, like the exact core.
pub(crate) fn check_cost(cost: u64, capacity: u64) -> Result<(), FloatError> {
    if cost == 0 || cost > capacity {
        Err(FloatError::InvalidCost { cost, capacity })
    } else {
        Ok(())
    }
}

/// An offset from `now_ns`, or `None` (never) when `now_ns + offset` would pass `u64::MAX`.
pub(crate) fn offset_from(now_ns: u64, offset: Option<u64>) -> Option<u64> {
    let off = offset?;
    now_ns.checked_add(off).map(|_| off)
}

/// The README's example runs as a doctest, so the crate's front page cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
