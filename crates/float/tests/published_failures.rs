//! The two published float failures of Go's `x/time/rate`, reproduced with [`GoStyleBucket`].
//! Each test asserts the float behaviour that differs from exact arithmetic: it documents the bug.

// The literals are copied digit for digit from the Go issues.
#![allow(clippy::excessive_precision)]

mod common;

use bucketproof_float::{GoRateVersion, GoStyleBucket};
use common::Exact;

/// golang/go#46579 ("x/time/rate: float64 precision loss with edge cases"): `NewLimiter(
/// 0.00027777777777777778, 1)` (one per hour) with `lim.tokens = 0.54990492004805558` and `last` at
/// the zero time: `Allow()` must succeed (the bucket refills to full) but returns false. `advance`
/// caps the elapsed time at `maxElapsed = durationFromTokens(1 - 0.5499...)`, truncated to
/// 1620342287826 ns, and converting that back gives 0.9999999999997222 tokens; the remaining
/// deficit is worth 1.00000008 ns, truncated to a 1 ns wait, which `Allow` (zero wait budget) refuses.
#[test]
fn go_46579_one_per_hour_bucket_holds_0_99999999999972() {
    let rate = 0.000_277_777_777_777_777_78_f64;
    assert_eq!(rate, 1.0 / 3600.0);
    for version in [GoRateVersion::SecondsCapped, GoRateVersion::SplitCapped] {
        // The Go issue's exact state: last = Go's zero time (None).
        let mut go = GoStyleBucket::from_f64_rate(1, rate)
            .unwrap()
            .with_version(version)
            .with_state(0.549_904_920_048_055_58, None)
            .unwrap();
        let now = 3_600_000_000_000; // an hour after our origin; any time gives the same result
        let peek = go.peek(now);
        assert_eq!(peek.remaining, 0.999_999_999_999_722_2, "{version:?}");
        let d = go.acquire(now, 1).unwrap();
        assert!(!d.allowed, "{version:?}: the float bucket rejects");
        assert_eq!(d.remaining, 0.999_999_999_999_722_2);
        assert_eq!(
            d.retry_after_ns,
            Some(1),
            "a 1 ns wait, truncated from 1.00000008 ns"
        );
        // The same state an hour after `last` (instead of at the zero time): still rejected.
        let mut go = GoStyleBucket::from_f64_rate(1, rate)
            .unwrap()
            .with_version(version)
            .with_state(0.549_904_920_048_055_58, Some(0))
            .unwrap();
        let d = go.acquire(3_600_000_000_000, 1).unwrap();
        assert!(!d.allowed);
        assert_eq!(d.remaining, 0.999_999_999_999_722_2);
    }
    // Exact arithmetic: min(1, 0.5499... + 3600 s * 1/3600 per s) = 1 >= 1 (any positive balance
    // plus a whole hour fills the bucket), so the request passes. Checked on the exact core: a
    // bucket at 0 tokens (less than 0.5499...) admits after exactly one hour.
    let mut exact = Exact::new(1, 1, 3600);
    assert!(exact.acquire(0, 1));
    assert!(exact.acquire(3_600_000_000_000, 1));
    // The uncapped (2021+) arithmetic does not round-trip through durationFromTokens: it passes.
    let mut modern = GoStyleBucket::from_f64_rate(1, rate)
        .unwrap()
        .with_version(GoRateVersion::SecondsUncapped)
        .with_state(0.549_904_920_048_055_58, Some(0))
        .unwrap();
    let d = modern.acquire(3_600_000_000_000, 1).unwrap();
    assert!(d.allowed);
    assert_eq!(d.remaining, 0.0);
}

/// golang/go#34861 ("x/time: when rate is 0.7692307692307693 (10/13), Allow() returns false"):
/// `NewLimiter(0.7692307692307693, 1).Allow()` on a fresh limiter. A fresh Go limiter holds 0
/// tokens at the zero time, so the first `advance` refills through `maxElapsed =
/// durationFromTokens(1) = time.Duration(1e9 * 1.2999999999999998)`, truncated to 1299999999 ns,
/// one ns short of 1.3 s. Before the fix (`d.Seconds() * limit`) that is 0.9999999992307692
/// tokens, a deficit worth 1.0000000272 ns, truncated to a 1 ns wait: denied. The fix (splitting
/// seconds and nanoseconds) gives 0.9999999992307693, a deficit worth 0.99999988 ns, truncated to 0:
/// allowed, but with fewer than 1 token, so the bucket goes to -7.69e-10.
#[test]
fn go_34861_fresh_limiter_at_10_over_13_denies() {
    let rate = 0.769_230_769_230_769_3_f64;
    assert_eq!(rate, 10.0 / 13.0);
    let now = 1_000_000_000;
    let mut exact = Exact::new(1, 10, 13);
    assert!(exact.acquire(now, 1), "exact: a fresh bucket of 1 admits 1");

    // Pre-fix arithmetic: the published failure.
    let mut pre = GoStyleBucket::from_f64_rate(1, rate)
        .unwrap()
        .with_version(GoRateVersion::SecondsCapped);
    assert_eq!(pre.tokens(), 0.0);
    assert_eq!(pre.last_refill(), None);
    assert_eq!(pre.peek(now).remaining, 0.999_999_999_230_769_2);
    let d = pre.acquire(now, 1).unwrap();
    assert!(
        !d.allowed,
        "Go before the fix: Allow() on a fresh limiter is false"
    );
    assert_eq!(d.remaining, 0.999_999_999_230_769_2);
    assert_eq!(d.retry_after_ns, Some(1));
    // `new(1, 10, 13)` is the same f64 rate.
    let mut pre2 = GoStyleBucket::new(1, 10, 13)
        .unwrap()
        .with_version(GoRateVersion::SecondsCapped);
    assert!(!pre2.acquire(now, 1).unwrap().allowed);

    // The fixed arithmetic admits, but only by tolerating a sub-nanosecond deficit: it still holds
    // fewer tokens than exact arithmetic says (exact: 1 before, 0 after).
    let mut split = GoStyleBucket::from_f64_rate(1, rate).unwrap();
    assert_eq!(split.version(), GoRateVersion::SplitCapped);
    assert_eq!(split.peek(now).remaining, 0.999_999_999_230_769_3);
    let d = split.acquire(now, 1).unwrap();
    assert!(d.allowed);
    assert_eq!(d.remaining, -7.692_306_791_540_204e-10);
    assert_eq!(exact.balance().0, 0);
    assert!(
        d.remaining < 0.0,
        "exact remaining is 0; the float one is negative"
    );

    // The uncapped arithmetic refills over (saturated) 292 years and clamps: exactly full.
    let mut modern = GoStyleBucket::from_f64_rate(1, rate)
        .unwrap()
        .with_version(GoRateVersion::SecondsUncapped);
    let d = modern.acquire(now, 1).unwrap();
    assert!(d.allowed);
    assert_eq!(d.remaining, 0.0);
}
