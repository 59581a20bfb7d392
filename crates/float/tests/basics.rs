//! Shape and edge behaviour of the float buckets: errors, time clamping, extreme times, zero rate,
//! the keyed wrapper. None of these may panic.

use bucketproof_float::{
    FloatBucket, FloatError, FloatKeyed, GoRateVersion, GoStyleBucket, TextbookBucket,
};

#[test]
fn invalid_config_is_an_error() {
    assert!(matches!(
        TextbookBucket::new(0, 1, 1),
        Err(FloatError::InvalidConfig(_))
    ));
    assert!(matches!(
        TextbookBucket::new(1, 1, 0),
        Err(FloatError::InvalidConfig(_))
    ));
    for bad in [f64::NAN, f64::INFINITY, -1.0] {
        assert!(TextbookBucket::from_f64_rate(1, bad).is_err());
        assert!(GoStyleBucket::from_f64_rate(1, bad).is_err());
    }
    assert!(GoStyleBucket::new(0, 1, 1).is_err());
    let go = GoStyleBucket::new(2, 1, 1).unwrap();
    assert!(go.clone().with_state(f64::NAN, None).is_err());
    assert!(go.with_state(2.5, None).is_err());
}

#[test]
fn invalid_cost_is_an_error_and_changes_nothing() {
    let mut tb = TextbookBucket::new(3, 1, 1).unwrap();
    let mut go = GoStyleBucket::new(3, 1, 1).unwrap();
    for cost in [0, 4, u64::MAX] {
        let e = FloatError::InvalidCost { cost, capacity: 3 };
        assert_eq!(tb.acquire(5, cost), Err(e));
        assert_eq!(go.acquire(5, cost), Err(e));
    }
    assert_eq!(tb.last_refill(), None);
    assert_eq!(go.last_refill(), None);
    assert_eq!(tb.tokens(), 3.0);
    assert_eq!(
        go.tokens(),
        0.0,
        "a fresh Go limiter holds 0 tokens at the zero time"
    );
}

#[test]
fn textbook_matches_the_spec_on_simple_rates() {
    // 2 tokens, 1 per second.
    let mut b = TextbookBucket::new(2, 1, 1).unwrap();
    let d = b.acquire(1_000, 2).unwrap();
    assert!(d.allowed);
    assert_eq!(d.remaining, 0.0);
    assert_eq!(d.reset_after_ns, Some(2_000_000_000));
    let d = b.acquire(1_000 + 400_000_000, 1).unwrap();
    assert!(!d.allowed);
    assert_eq!(d.retry_after_ns, Some(600_000_000));
    assert!(!b.acquire(1_000 + 999_999_999, 1).unwrap().allowed);
    assert!(b.acquire(1_000 + 1_000_000_000, 1).unwrap().allowed);
    // Time going backwards is clamped: no refill, and the waits count from `now`.
    let d = b.acquire(500, 1).unwrap();
    assert!(!d.allowed);
    assert_eq!(b.last_refill(), Some(1_000_001_000));
    assert_eq!(d.retry_after_ns, Some(2_000_000_500));
}

#[test]
fn go_style_moves_last_back_like_go() {
    let mut g = GoStyleBucket::new(1, 1, 1).unwrap();
    assert!(g.acquire(10_000_000_000, 1).unwrap().allowed);
    // Go's advance: now before last sets last = now; a denial stores it.
    assert!(!g.acquire(9_000_000_000, 1).unwrap().allowed);
    assert_eq!(g.last_refill(), Some(9_000_000_000));
    // So at 10 s it has re-credited the second from 9 s to 10 s and admits again, where the spec's
    // clamp (`t = max(now, last)`) would deny until 11 s.
    assert!(g.acquire(10_000_000_000, 1).unwrap().allowed);
    // The uncapped version's denial writes nothing.
    let mut m = GoStyleBucket::new(1, 1, 1)
        .unwrap()
        .with_version(GoRateVersion::SecondsUncapped);
    assert!(m.acquire(10_000_000_000, 1).unwrap().allowed);
    assert!(!m.acquire(9_000_000_000, 1).unwrap().allowed);
    assert_eq!(m.last_refill(), Some(10_000_000_000));
}

#[test]
fn extreme_times_and_zero_rate_do_not_panic() {
    for now in [0, 1, u64::MAX - 1, u64::MAX] {
        let mut tb = TextbookBucket::new(u64::MAX, u64::MAX, 1).unwrap();
        let mut go = GoStyleBucket::new(u64::MAX, u64::MAX, 1).unwrap();
        let _ = tb.acquire(0, u64::MAX).unwrap();
        let _ = tb.acquire(now, u64::MAX).unwrap();
        let _ = tb.peek(u64::MAX);
        let _ = go.acquire(0, u64::MAX).unwrap();
        let _ = go.acquire(now, u64::MAX).unwrap();
        let _ = go.peek(u64::MAX);
    }
    // Zero rate: no refill, waits are never.
    let mut tb = TextbookBucket::new(1, 0, 1).unwrap();
    assert!(tb.acquire(0, 1).unwrap().allowed);
    let d = tb.acquire(u64::MAX, 1).unwrap();
    assert!(!d.allowed);
    assert_eq!(d.retry_after_ns, None);
    assert_eq!(d.reset_after_ns, None);
    let mut go = GoStyleBucket::new(1, 0, 1)
        .unwrap()
        .with_state(1.0, None)
        .unwrap();
    assert!(go.acquire(0, 1).unwrap().allowed);
    let d = go.acquire(u64::MAX, 1).unwrap();
    assert!(!d.allowed);
    assert_eq!(d.retry_after_ns, None);
    // A wait that would pass u64::MAX is never.
    let mut tb = TextbookBucket::new(1, 1, 1).unwrap();
    assert!(tb.acquire(u64::MAX - 10, 1).unwrap().allowed);
    let d = tb.acquire(u64::MAX - 10, 1).unwrap();
    assert_eq!(d.retry_after_ns, None);
}

#[test]
fn keyed_wrapper_keeps_keys_apart() {
    let mut k = FloatKeyed::new(TextbookBucket::new(1, 1, 1).unwrap());
    assert!(k.acquire(7, 0, 1).unwrap().allowed);
    assert!(!k.acquire(7, 1, 1).unwrap().allowed);
    assert!(k.acquire(8, 1, 1).unwrap().allowed);
    assert_eq!(
        k.acquire(9, 1, 2),
        Err(FloatError::InvalidCost {
            cost: 2,
            capacity: 1
        })
    );
    assert_eq!(k.len(), 2, "an invalid cost creates no bucket");
    assert_eq!(k.peek(9, 5).remaining, 1.0);
    assert!(k.forget(7));
    assert!(k.acquire(7, 2, 1).unwrap().allowed);
    let mut g = FloatKeyed::new(GoStyleBucket::from_f64_rate(1, 0.5).unwrap());
    assert!(g.acquire(1, 0, 1).unwrap().allowed);
    assert_eq!(g.get(1).map(|b| b.capacity()), Some(1));
}
