//! From the exact limiter to the whole numbers on the wire, and which way each number rounds.
//!
//! The limiter knows its state exactly (a rational balance, a rational rate, waits in nanoseconds);
//! the fields carry Integers and whole seconds. Every conversion here rounds in the direction that
//! makes the advertised picture *no more permissive* than the truth, so a client that believes the
//! fields is never led into a denial the limiter would not have predicted:
//!
//! | field | value | rounding | why |
//! |---|---|---|---|
//! | `RateLimit-Policy` `q` | capacity (burst size) | exact; capped *down* at [`SF_INTEGER_MAX`] | a smaller quota is stricter |
//! | `RateLimit-Policy` `w` | refill time of an empty bucket, `capacity / rate` | *up* to whole seconds; omitted if the rate is 0 or it exceeds [`SF_INTEGER_MAX`] | `q/w` then never exceeds the true rate |
//! | `RateLimit` `r` | whole tokens left after this request | *down* (floor), then capped by the DoS ratio and [`SF_INTEGER_MAX`] | never more than the client may spend |
//! | `RateLimit` `t` | time until one more whole token than `r` is available (plus the refill cursor's lead over `now`, if any) | *up* to whole seconds; omitted if the rate is 0 | within `t` the client can use no more than `r` |
//! | `Retry-After` | exact wait until this request's cost fits (for several bandwidths, the largest of their waits) | *up* to whole seconds, so never `0` for a positive wait; never earlier than the `t` of an item whose `r` is below the cost | retrying then succeeds |
//!
//! `t` needs a word: the draft calls it the *effective window*, "the number of seconds within which
//! the client can use no more than the available quota". For a token bucket holding `b` tokens that is
//! the time until `floor(b) + 1` tokens have accrued: `ceil((floor(b) + 1 - b) / rate)`. It is
//! positive even for a full bucket (a client that spends everything gets its next token after one
//! token's refill time), so a pacing client can always act on it.
//!
//! Draft-11 Section 6 asks that `Retry-After` not "reference a point in time earlier than the end
//! of the effective window". With several items (one per bandwidth, [`crate::set`]) that is read as
//! the window of every item that forbids the retry, the items whose `r` is below the cost: an item
//! whose `r` covers the cost allows the retry inside its window, so its window need not delay it (a
//! daily bandwidth's `t` of 9 s would otherwise hold back a retry the per-minute bandwidth allows in
//! 1 s). A denied one-bandwidth request always has `r` below its cost, so there it is the `t`.
//!
//! Nothing in this module reads a clock; the numbers come from one decision of the limiter.

use crate::field::SF_INTEGER_MAX;

use bucketproof_limiter::NANOS_PER_SECOND;

/// Whole seconds for a wait in nanoseconds, rounded up: `1 ns -> 1 s`, `1 s -> 1 s`, `0 -> 0`.
pub const fn ceil_secs(ns: u64) -> u64 {
    ns.div_ceil(NANOS_PER_SECOND)
}

/// `RateLimit-Policy` `w` for a bucket of `capacity` tokens refilled at `numer/denom` tokens per
/// second: the time to refill it from empty, rounded *up* to whole seconds. `None` when the rate is
/// zero (the bucket never refills, so there is no window) or when the value exceeds what a
/// Structured Field Integer can carry (more than 31 million years).
pub fn policy_window_secs(capacity: u64, numer: u64, denom: u64) -> Option<u64> {
    if numer == 0 {
        return None;
    }
    // capacity * denom < 2^64 * 2^64 fits u128.
    let secs = (capacity as u128 * denom as u128).div_ceil(numer as u128);
    // capacity >= 1 makes secs >= 1, which the draft requires (Section 3.1.3).
    u64::try_from(secs)
        .ok()
        .filter(|s| *s >= 1 && *s <= SF_INTEGER_MAX)
}

/// `RateLimit-Policy` `q`: the capacity, capped down at [`SF_INTEGER_MAX`].
pub fn policy_quota(capacity: u64) -> u64 {
    capacity.min(SF_INTEGER_MAX)
}

/// Nanoseconds until the balance `units / units_per_token` reaches its next whole token, at
/// `numer/denom` tokens per second, rounded up to a whole nanosecond. `None` for a zero rate (or a
/// degenerate `units_per_token == 0`).
pub fn next_token_nanos(units: u128, units_per_token: u128, numer: u64, denom: u64) -> Option<u64> {
    if numer == 0 || units_per_token == 0 || denom == 0 {
        return None;
    }
    // Units still missing to the next whole token: in (0, units_per_token].
    let missing = units_per_token - units % units_per_token;
    // Tokens per ns = numer / (denom * 1e9), so the wait is missing/upt * denom*1e9 / numer ns.
    // Nested ceilings are exact: ceil(ceil(x / a) / b) == ceil(x / (a * b)) for positive integers.
    let scaled = mul_div_ceil(
        missing,
        denom as u128 * NANOS_PER_SECOND as u128,
        units_per_token,
    )?;
    let ns = scaled.div_ceil(numer as u128);
    u64::try_from(ns).ok()
}

/// Options that make the advertised limits stricter than the truth, never looser.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AdvertiseOptions {
    /// Cap on the ratio `r / t` (quota units per second of effective window; a `t` of 0 or absent
    /// counts as 1 s). Draft-11 Section 6: a server "SHOULD implement mechanisms to cap the ratio
    /// between the available quota and the effective window values" so that a large window does not
    /// invite a burst the service cannot absorb. `None` advertises the true `r`.
    pub max_ratio: Option<u64>,
}

/// The `r` and `t` to advertise for one limiter decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Advertised {
    /// `r`: never above the true whole balance.
    pub remaining: u64,
    /// `t`: whole seconds, `None` when the bucket never refills.
    pub reset: Option<u64>,
}

/// `r` and `t` for a balance of `units / units_per_token` tokens (after the decision was applied)
/// refilled at `numer/denom` tokens per second. `lag_ns` is how far the bucket's refill cursor is
/// ahead of the decision's `now` (concurrent callers can read the clock out of order); refill resumes
/// only after it, so it is added to `t`.
pub fn advertise(
    units: u128,
    units_per_token: u128,
    numer: u64,
    denom: u64,
    lag_ns: u64,
    options: AdvertiseOptions,
) -> Advertised {
    let whole = units.checked_div(units_per_token).unwrap_or(0);
    let whole = u64::try_from(whole).unwrap_or(u64::MAX);
    let reset = next_token_nanos(units, units_per_token, numer, denom)
        .and_then(|ns| ns.checked_add(lag_ns))
        .map(ceil_secs);
    let mut remaining = whole.min(SF_INTEGER_MAX);
    if let Some(ratio) = options.max_ratio {
        let window = reset.unwrap_or(1).max(1);
        remaining = remaining.min(ratio.saturating_mul(window));
    }
    Advertised { remaining, reset }
}

/// `Retry-After` delay seconds for an exact wait: rounded up, so a positive wait is never `0`.
pub const fn retry_after_secs(wait_ns: u64) -> u64 {
    ceil_secs(wait_ns)
}

/// `ceil(a * b / c)` with a 256-bit intermediate; `None` if `c == 0` or the result exceeds `u128`.
pub fn mul_div_ceil(a: u128, b: u128, c: u128) -> Option<u128> {
    if c == 0 {
        return None;
    }
    if let Some(p) = a.checked_mul(b) {
        return Some(p.div_ceil(c));
    }
    // Slow path, rare (only for unusual unit grids): schoolbook 128x128 -> 256, then bitwise division.
    let (hi, lo) = widening_mul(a, b);
    let (q_hi, q_lo, rem) = div_256_by_128(hi, lo, c);
    if q_hi != 0 {
        return None;
    }
    if rem == 0 {
        Some(q_lo)
    } else {
        q_lo.checked_add(1)
    }
}

fn widening_mul(a: u128, b: u128) -> (u128, u128) {
    const MASK: u128 = u64::MAX as u128;
    let (a1, a0) = (a >> 64, a & MASK);
    let (b1, b0) = (b >> 64, b & MASK);
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let p11 = a1 * b1;
    let mid = (p00 >> 64) + (p01 & MASK) + (p10 & MASK);
    let lo = (p00 & MASK) | (mid << 64);
    let hi = p11 + (p01 >> 64) + (p10 >> 64) + (mid >> 64);
    (hi, lo)
}

fn div_256_by_128(hi: u128, lo: u128, d: u128) -> (u128, u128, u128) {
    let (mut q_hi, mut q_lo, mut rem) = (0u128, 0u128, 0u128);
    for i in (0..256).rev() {
        let bit = if i >= 128 {
            (hi >> (i - 128)) & 1
        } else {
            (lo >> i) & 1
        };
        // rem < d, so rem*2+bit < 2d; track the bit shifted out of u128 to compare correctly.
        let overflow = rem >> 127 == 1;
        rem = (rem << 1) | bit;
        if overflow || rem >= d {
            rem = rem.wrapping_sub(d);
            if i >= 128 {
                q_hi |= 1 << (i - 128);
            } else {
                q_lo |= 1 << i;
            }
        }
    }
    (q_hi, q_lo, rem)
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u128 = NANOS_PER_SECOND as u128; // units per token for a rate with denominator 1

    #[test]
    fn ceil_secs_never_rounds_a_positive_wait_to_zero() {
        assert_eq!(ceil_secs(0), 0);
        assert_eq!(ceil_secs(1), 1);
        assert_eq!(ceil_secs(1_000_000_000), 1);
        assert_eq!(ceil_secs(1_000_000_001), 2);
        assert_eq!(ceil_secs(u64::MAX), 18_446_744_074);
    }

    #[test]
    fn window_rounds_up_so_the_policy_rate_is_never_higher() {
        // 10 tokens at 3/s refill in 3.33 s: w = 4, q/w = 2.5 <= 3.
        assert_eq!(policy_window_secs(10, 3, 1), Some(4));
        assert_eq!(policy_window_secs(100, 100, 1), Some(1));
        assert_eq!(policy_window_secs(1, 1_000_000, 1), Some(1));
        assert_eq!(policy_window_secs(5, 1, 12), Some(60));
        assert_eq!(policy_window_secs(5, 0, 1), None);
        assert_eq!(policy_window_secs(u64::MAX, 1, 1 << 32), None);
    }

    #[test]
    fn effective_window_is_time_to_the_next_whole_token() {
        // 2.5 tokens at 1/s: next whole token (3) in 0.5 s -> t = 1, r = 2.
        let a = advertise(5 * G / 2, G, 1, 1, 0, AdvertiseOptions::default());
        assert_eq!(
            a,
            Advertised {
                remaining: 2,
                reset: Some(1)
            }
        );
        // Exactly 0 tokens at 1/10 s: next token in 10 s.
        let b = advertise(0, 10 * G, 1, 10, 0, AdvertiseOptions::default());
        assert_eq!(
            b,
            Advertised {
                remaining: 0,
                reset: Some(10)
            }
        );
        // Full bucket of 5 at 100/s: one token takes 10 ms -> t = 1.
        let c = advertise(5 * G, G, 100, 1, 0, AdvertiseOptions::default());
        assert_eq!(
            c,
            Advertised {
                remaining: 5,
                reset: Some(1)
            }
        );
        // No refill: no window.
        let d = advertise(3 * G, G, 0, 1, 0, AdvertiseOptions::default());
        assert_eq!(
            d,
            Advertised {
                remaining: 3,
                reset: None
            }
        );
    }

    #[test]
    fn ratio_cap_only_lowers_r() {
        let opts = AdvertiseOptions {
            max_ratio: Some(10),
        };
        let a = advertise(10_000 * G, G, 10, 1, 0, opts);
        assert_eq!(a.remaining, 10); // t = 1 s -> at most 10
        let b = advertise(3 * G, G, 10, 1, 0, opts);
        assert_eq!(b.remaining, 3);
    }

    #[test]
    fn mul_div_ceil_slow_path_matches_the_definition() {
        let a = u128::MAX / 3;
        let b = 6;
        let c = 4;
        // a * 6 / 4 = a * 1.5
        let expect = (a / 2) * 3 + if a % 2 == 1 { 2 } else { 0 };
        assert_eq!(mul_div_ceil(a, b, c), Some(expect));
        assert_eq!(
            mul_div_ceil(u128::MAX, u128::MAX, u128::MAX),
            Some(u128::MAX)
        );
        assert_eq!(mul_div_ceil(u128::MAX, 2, 1), None);
        assert_eq!(mul_div_ceil(1, 1, 0), None);
    }
}
