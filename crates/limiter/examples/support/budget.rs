//! The exact arrival-curve check the flood examples share: a user's budget over any interval
//! `[a, b]` is `capacity + rate * (b - a)` tokens, and an over-admission is an admitted request that
//! takes some interval ending at it beyond that budget.
//!
//! Owns: [`Budget`], one user's streaming check, in microseconds and millionths of a token (exact:
//! integers only, every interval considered, in O(1) per admission).
//!
//! Used by both flood examples (`flood.rs` here and `crates/postgres/examples/flood.rs`) through
//! `#[path]`: examples cannot share a crate module otherwise.

/// One user's budget: admitted in `[a, b]` must be at most `capacity + rate_per_s * (b - a)`.
pub struct Budget {
    capacity: i128,
    rate_per_s: i128,
    /// Tokens admitted so far, in millionths.
    admitted: i128,
    /// max over admitted requests j of `rate * t_j - admitted_before_j` (µs x tokens/s = millionths).
    best: Option<i128>,
}

impl Budget {
    /// The budget of a bucket of `capacity` tokens refilling `rate_per_s` tokens a second.
    pub fn new(capacity: u64, rate_per_s: u64) -> Budget {
        Budget {
            capacity: i128::from(capacity),
            rate_per_s: i128::from(rate_per_s),
            admitted: 0,
            best: None,
        }
    }

    /// Admits one token at `t_us`; false if some interval ending here exceeds the budget.
    pub fn admit(&mut self, t_us: u64) -> bool {
        let rate_t = self.rate_per_s * i128::from(t_us);
        let candidate = rate_t - self.admitted;
        let best = self.best.map_or(candidate, |best| best.max(candidate));
        self.best = Some(best);
        self.admitted += 1_000_000;
        // Over [a, t]: admitted since a = admitted - admitted_before_a; bound = C + rate (t - a).
        self.admitted - rate_t + best <= self.capacity * 1_000_000
    }
}
