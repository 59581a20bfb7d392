//! The textbook f64 bucket over-admits: accumulated rounding over many small refills lets it admit
//! a request that exact arithmetic denies. Found by a small deterministic search, kept as a test.

mod common;

use bucketproof_float::TextbookBucket;
use common::Exact;

/// The trace: capacity 1, rate `1/q` per second. At `t = 0` one request drains the bucket; then a
/// client retries (cost 1) every `dt` ns, each denied retry writing its refill back (per the spec);
/// finally a request at `T_full - 1` ns, one ns before exact arithmetic refills a whole token.
/// Returns `(float decision at T_full - 1, number of retries, tokens the float bucket held)`, or
/// `None` if the float bucket already admitted a retry (an earlier over-admission).
fn run(q: u64, dt: u64) -> Option<(bool, u64, f64, TextbookBucket)> {
    let t_full = q * 1_000_000_000;
    let mut float = TextbookBucket::new(1, 1, q).unwrap();
    let mut exact = Exact::new(1, 1, q);
    assert!(float.acquire(0, 1).unwrap().allowed);
    assert!(exact.acquire(0, 1));
    let mut t = 0;
    let mut retries = 0;
    while t + dt < t_full - 1 {
        t += dt;
        retries += 1;
        assert!(!exact.acquire(t, 1));
        if float.acquire(t, 1).unwrap().allowed {
            return None;
        }
    }
    let before = float.clone();
    assert!(
        !exact.acquire(t_full - 1, 1),
        "exact denies 1 ns before the refill"
    );
    let d = float.acquire(t_full - 1, 1).unwrap();
    let held = if d.allowed {
        d.remaining + 1.0
    } else {
        d.remaining
    };
    Some((d.allowed, retries, held, before))
}

#[test]
fn textbook_admits_before_exact_refill_after_many_small_steps() {
    // Deterministic search over a few slow rates and retry periods.
    let mut found = Vec::new();
    for q in [3600u64, 86_400] {
        for dt in [10_000_000u64, 1_000_000_000, 3_000_000_000, 1_000_000_001] {
            if let Some((true, retries, held, _)) = run(q, dt) {
                found.push((q, dt, retries, held));
            }
        }
    }
    // One per hour, retried every 10 ms: 359999 denied retries, then the float bucket holds
    // exactly 1.0 at 3599.999999999 s and admits; exact holds 1 - 1/3.6e12 and denies.
    // One per day, retried every 3 s: 28799 retries, float 1.0 at 86399.999999999 s.
    // One per day, retried every 1.000000001 s: 86399 retries.
    assert!(
        found.contains(&(3600, 10_000_000, 359_999, 1.0)),
        "{found:?}"
    );
    assert!(
        found.contains(&(86_400, 3_000_000_000, 28_799, 1.0)),
        "{found:?}"
    );
    assert!(
        found.contains(&(86_400, 1_000_000_001, 86_399, 1.0)),
        "{found:?}"
    );
}

#[test]
fn textbook_one_per_day_admits_161_ns_early() {
    // After 86399 retries every 1.000000001 s (last at 86399.000086399 s) the float bucket holds
    // 0.9999884269277823 tokens; exact holds 86399000086399 / 86400e9 tokens and reaches a whole
    // token at exactly 86400 s. The float refill reaches 1.0 already at 86399.999999839 s: it admits
    // a request 161 ns before exact arithmetic does.
    let (allowed, _, _, before) = run(86_400, 1_000_000_001).unwrap();
    assert!(allowed);
    assert_eq!(before.last_refill(), Some(86_399_000_086_399));
    assert_eq!(before.tokens(), 0.999_988_426_927_782_3);
    let t_full = 86_400_000_000_000u64;
    let earliest = (t_full - 10_000..t_full)
        .find(|&x| before.peek(x).remaining >= 1.0)
        .unwrap();
    assert_eq!(t_full - earliest, 161);
    // Exact arithmetic, same trace, denies at that instant.
    let mut exact = Exact::new(1, 1, 86_400);
    assert!(exact.acquire(0, 1));
    let mut t = 0;
    while t + 1_000_000_001 < t_full - 1 {
        t += 1_000_000_001;
        assert!(!exact.acquire(t, 1));
    }
    assert!(!exact.acquire(earliest, 1));
    let mut float = before.clone();
    assert!(float.acquire(earliest, 1).unwrap().allowed);
}
