//! A transcription of the arithmetic of Go's `golang.org/x/time/rate` `Limiter` (`AllowN`), in f64.

use crate::{
    FloatBucket, FloatDecision, FloatError, check_cost, checked_f64_rate, checked_ratio_rate,
    offset_from,
};

/// Go's `InfDuration` (`time.Duration(1<<63 - 1)`).
const INF_DURATION: i64 = i64::MAX;
/// Go's `time.Second` in ns.
const SECOND: i64 = 1_000_000_000;

/// Which historical `x/time/rate` arithmetic a [`GoStyleBucket`] transcribes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GoRateVersion {
    /// Before the golang/go#34861 fix (2019): `advance` caps `elapsed` at
    /// `maxElapsed = durationFromTokens(burst - tokens)`, and
    /// `tokensFromDuration(d) = d.Seconds() * limit` with
    /// `d.Seconds() = float64(d/1s) + float64(d%1s)/1e9`.
    SecondsCapped,
    /// From the golang/go#34861 fix until the 2021 simplification (the code golang/go#46579 was filed
    /// against): same `maxElapsed` cap, but `tokensFromDuration(d) =
    /// float64(d/1s)*limit + float64(d%1s)*limit/1e9` ("split the integer and fractional parts").
    #[default]
    SplitCapped,
    /// After the 2021 simplification: no `maxElapsed` cap (the refill is clamped to `burst` only),
    /// `tokensFromDuration(d) = d.Seconds() * limit`, and a denial writes nothing.
    SecondsUncapped,
}

/// An f64 bucket doing what Go's `x/time/rate` `Limiter.AllowN(now, n)` does.
///
/// State and time follow Go, not the spec:
/// - a fresh bucket is Go's `NewLimiter(r, b)`: `tokens = 0` at the zero `time.Time` (`last_refill()
///   == None`, infinitely long ago); the first operation refills it through `advance`, whose
///   duration/token round trip is where golang/go#34861 bites;
/// - `advance`: `last = min(last, now)`; `elapsed = now - last` saturating at `i64::MAX` ns (Go's
///   `Time.Sub`); the capped versions then cap `elapsed` at `maxElapsed`; `tokens = min(burst,
///   tokens + tokensFromDuration(elapsed))`;
/// - the decision is `reserveN` with a zero wait budget: `tokens -= n`; `wait =
///   durationFromTokens(-tokens)` if `tokens < 0`; allowed iff `wait <= 0`. So a deficit worth less
///   than 1 ns is **admitted** (the bucket goes slightly negative);
/// - allowed: `last = now`, `tokens` stored. Denied: the capped versions store `last = min(last,
///   now)` and keep the old tokens; the uncapped one writes nothing. Time going backwards moves
///   `last` back (Go's behaviour), so an earlier `now` re-credits time later.
///
/// Where it rounds:
/// 1. the rate (`p as f64 / q as f64`, or the `f64` given);
/// 2. `durationFromTokens(x) = time.Duration(1e9 * (x / limit))`: a division and a product in f64,
///    then **truncation toward zero** to whole ns (Rust's saturating `as i64`; Go's out-of-range
///    conversion is implementation-defined). `limit <= 0` gives `InfDuration` (as current Go does);
/// 3. `tokensFromDuration` as in [`GoRateVersion`]: int-to-float conversions, products, a division
///    by `1e9`, a sum, all rounded to nearest;
/// 4. `tokens + delta`, `tokens - n`: rounded sums;
/// 5. `retry_after = wait` and `reset_after = durationFromTokens(burst - tokens)`: truncated, as
///    Go's `Reservation.Delay()` would report them (not ceilings: retrying at `now + retry_after`
///    may still be denied). `InfDuration` is reported as `None`.
#[derive(Debug, Clone, PartialEq)]
pub struct GoStyleBucket {
    burst: u64,
    limit: f64,
    tokens: f64,
    last: Option<u64>,
    version: GoRateVersion,
}

impl GoStyleBucket {
    /// Go's `NewLimiter(Limit(p as f64 / q as f64), capacity)`, [`GoRateVersion::SplitCapped`].
    pub fn new(capacity: u64, rate_numer: u64, rate_denom: u64) -> Result<Self, FloatError> {
        let limit = checked_ratio_rate(capacity, rate_numer, rate_denom)?;
        Ok(Self::with_limit(capacity, limit))
    }

    /// Go's `NewLimiter(rate, capacity)` with the `rate.Limit` given as an `f64` (e.g.
    /// `0.7692307692307693`), [`GoRateVersion::SplitCapped`].
    pub fn from_f64_rate(capacity: u64, rate: f64) -> Result<Self, FloatError> {
        let limit = checked_f64_rate(capacity, rate)?;
        Ok(Self::with_limit(capacity, limit))
    }

    fn with_limit(burst: u64, limit: f64) -> Self {
        Self {
            burst,
            limit,
            tokens: 0.0,
            last: None,
            version: GoRateVersion::default(),
        }
    }

    /// The same bucket transcribing another version of `x/time/rate`.
    pub fn with_version(mut self, version: GoRateVersion) -> Self {
        self.version = version;
        self
    }

    /// Sets the stored state directly, as Go's own tests do (`lim.tokens = ...`, `lim.last = ...`);
    /// `last = None` is Go's zero `time.Time`. `tokens` must be finite and `<= capacity`.
    pub fn with_state(mut self, tokens: f64, last: Option<u64>) -> Result<Self, FloatError> {
        if !tokens.is_finite() || tokens > self.burst as f64 {
            return Err(FloatError::InvalidConfig(
                "tokens must be finite and <= capacity",
            ));
        }
        self.tokens = tokens;
        self.last = last;
        Ok(self)
    }

    /// The transcribed version.
    pub fn version(&self) -> GoRateVersion {
        self.version
    }

    /// The `rate.Limit` (tokens per second) as the bucket holds it.
    pub fn rate(&self) -> f64 {
        self.limit
    }

    /// Go's `AllowN(now, cost)`, with the decision details of `ReserveN`.
    pub fn acquire(&mut self, now_ns: u64, cost: u64) -> Result<FloatDecision, FloatError> {
        check_cost(cost, self.burst)?;
        let (last, tokens) = self.advance(now_ns);
        let after = tokens - cost as f64;
        let wait = if after < 0.0 {
            self.duration_from_tokens(-after)
        } else {
            0
        };
        if wait <= 0 {
            self.last = Some(now_ns);
            self.tokens = after;
            return Ok(FloatDecision {
                allowed: true,
                remaining: after,
                retry_after_ns: None,
                reset_after_ns: self.reset_after(now_ns, after),
            });
        }
        if self.version != GoRateVersion::SecondsUncapped {
            self.last = last;
        }
        Ok(FloatDecision {
            allowed: false,
            remaining: tokens,
            retry_after_ns: offset_from(now_ns, inf_to_none(wait)),
            reset_after_ns: self.reset_after(now_ns, tokens),
        })
    }

    /// What `advance(now)` computes (Go's `TokensAt`), writing nothing.
    pub fn peek(&self, now_ns: u64) -> FloatDecision {
        let (_, tokens) = self.advance(now_ns);
        FloatDecision {
            allowed: true,
            remaining: tokens,
            retry_after_ns: None,
            reset_after_ns: self.reset_after(now_ns, tokens),
        }
    }

    /// The stored token count (`0` for a fresh bucket, as in Go).
    pub fn tokens(&self) -> f64 {
        self.tokens
    }

    /// The stored `last`; `None` is Go's zero `time.Time` (a fresh bucket).
    pub fn last_refill(&self) -> Option<u64> {
        self.last
    }

    /// Go's `advance`: returns `(newLast, newTokens)`.
    fn advance(&self, now_ns: u64) -> (Option<u64>, f64) {
        let last = match self.last {
            Some(l) if now_ns < l => Some(now_ns),
            other => other,
        };
        let mut elapsed = match last {
            None => INF_DURATION,
            Some(l) => i64::try_from(now_ns - l).unwrap_or(INF_DURATION),
        };
        let burst = self.burst as f64;
        if self.version != GoRateVersion::SecondsUncapped {
            let max_elapsed = self.duration_from_tokens(burst - self.tokens);
            if elapsed > max_elapsed {
                elapsed = max_elapsed;
            }
        }
        let mut tokens = self.tokens + self.tokens_from_duration(elapsed);
        if tokens > burst {
            tokens = burst;
        }
        (last, tokens)
    }

    /// Go's `durationFromTokens`: `time.Duration(1e9 * (tokens / limit))`, truncating.
    fn duration_from_tokens(&self, tokens: f64) -> i64 {
        if self.limit <= 0.0 {
            return INF_DURATION;
        }
        let seconds = tokens / self.limit;
        (1e9 * seconds) as i64
    }

    /// Go's `tokensFromDuration`, per version.
    fn tokens_from_duration(&self, d: i64) -> f64 {
        let sec = d / SECOND;
        let nsec = d % SECOND;
        match self.version {
            GoRateVersion::SplitCapped => {
                let s = sec as f64 * self.limit;
                let n = nsec as f64 * self.limit;
                s + n / 1e9
            }
            GoRateVersion::SecondsCapped | GoRateVersion::SecondsUncapped => {
                let seconds = sec as f64 + nsec as f64 / 1e9;
                seconds * self.limit
            }
        }
    }

    fn reset_after(&self, now_ns: u64, tokens: f64) -> Option<u64> {
        let deficit = self.burst as f64 - tokens;
        if deficit <= 0.0 {
            return Some(0);
        }
        offset_from(now_ns, inf_to_none(self.duration_from_tokens(deficit)))
    }
}

/// A Go duration as a wait: `InfDuration` is never, negatives are 0.
fn inf_to_none(d: i64) -> Option<u64> {
    if d == INF_DURATION {
        None
    } else {
        Some(d.max(0) as u64)
    }
}

impl FloatBucket for GoStyleBucket {
    fn acquire(&mut self, now_ns: u64, cost: u64) -> Result<FloatDecision, FloatError> {
        GoStyleBucket::acquire(self, now_ns, cost)
    }
    fn peek(&self, now_ns: u64) -> FloatDecision {
        GoStyleBucket::peek(self, now_ns)
    }
    fn tokens(&self) -> f64 {
        self.tokens
    }
    fn last_refill(&self) -> Option<u64> {
        self.last
    }
    fn capacity(&self) -> u64 {
        self.burst
    }
}
