//! Waiting until allowed (the `wait` module): the retry rule on hand-computed cases, blocking on a
//! manual clock and async on tokio's paused clock (no test sleeps on the wall clock), cancellation,
//! the deadline, jitter replayed from its seed, and the spread among waiters of one key.
#![cfg(not(any(loom, feature = "shuttle")))]

use std::cell::RefCell;
use std::time::Duration;

use bucketproof_limiter::wait::{self, TokioClock, WaitError};
use bucketproof_limiter::{
    AcquireError, Config, DirectLimiter, Limiter, ManualClock, Pacing, Rate, Wait,
};

const SECOND: u64 = bucketproof_limiter::NANOS_PER_SECOND;

fn config(capacity: u64, rate: &str) -> Config {
    Config::new(capacity, rate.parse().unwrap()).unwrap()
}

/// Drives the blocking loop on a manual clock: each sleep moves the clock and is recorded.
fn blocking_on<D: wait::Verdict, E>(
    clock: &ManualClock,
    pacing: Pacing,
    attempt: impl FnMut() -> Result<D, E>,
) -> (Result<D, WaitError<D, E>>, Vec<Duration>) {
    let slept = RefCell::new(Vec::new());
    let result = wait::blocking(pacing, attempt, |d| {
        slept.borrow_mut().push(d);
        clock.advance(d.as_nanos() as u64);
    });
    (result, slept.into_inner())
}

/// A drained bucket of 2 refilling 3 per second: the next token is 1/3 s away, rounded up to the
/// nanosecond, and the wait is exactly that: one sleep, then allowed.
#[test]
fn a_blocking_acquire_sleeps_exactly_the_retry_after() {
    let clock = ManualClock::new(10 * SECOND);
    let limiter = DirectLimiter::with_clock(config(2, "3/s"), clock.clone());
    assert!(limiter.acquire(2).unwrap().is_allowed());
    let (result, slept) = blocking_on(&clock, Pacing::new(), || limiter.acquire(1));
    assert!(result.unwrap().is_allowed());
    assert_eq!(slept, [Duration::from_nanos(333_333_334)]);
    // Two tokens, with the 2 units (of 10^9 a token) the rounded-up wait left over: (2 * 10^9 - 2) / 3
    // ns, exactly.
    let (result, slept) = blocking_on(&clock, Pacing::new(), || limiter.acquire(2));
    assert!(result.unwrap().is_allowed());
    assert_eq!(slept, [Duration::from_nanos(666_666_666)]);
}

/// A wait that would pass the deadline returns the denial at once, sleeping nothing; one within it
/// is slept.
#[test]
fn a_deadline_returns_the_denial_without_sleeping() {
    let clock = ManualClock::new(0);
    let limiter = DirectLimiter::with_clock(config(1, "1/s"), clock.clone());
    assert!(limiter.acquire(1).unwrap().is_allowed());
    let pacing = Pacing::new().deadline(Duration::from_millis(999));
    let (result, slept) = blocking_on(&clock, pacing, || limiter.acquire(1));
    match result {
        Err(WaitError::Deadline { denial, waited }) => {
            assert_eq!(denial.retry_after(), Some(Wait::After(SECOND)));
            assert_eq!(waited, Duration::ZERO);
        }
        other => panic!("{other:?}"),
    }
    assert!(slept.is_empty());
    let pacing = Pacing::new().deadline(Duration::from_secs(1));
    let (result, slept) = blocking_on(&clock, pacing, || limiter.acquire(1));
    assert!(result.unwrap().is_allowed());
    assert_eq!(slept, [Duration::from_secs(1)]);
}

/// A rate of zero never refills: an error at once, never a wait forever. An invalid cost is the
/// limiter's own error.
#[test]
fn never_and_invalid_costs_return_at_once() {
    let clock = ManualClock::new(0);
    let limiter = DirectLimiter::with_clock(Config::new(1, Rate::ZERO).unwrap(), clock.clone());
    assert!(limiter.acquire(1).unwrap().is_allowed());
    let (result, slept) = blocking_on(&clock, Pacing::new(), || limiter.acquire(1));
    assert!(matches!(result, Err(WaitError::Never(_))), "{result:?}");
    assert!(slept.is_empty());
    let (result, _) = blocking_on(&clock, Pacing::new(), || limiter.acquire(2));
    assert!(matches!(
        result,
        Err(WaitError::Acquire(AcquireError::InvalidCost {
            cost: 2,
            ..
        }))
    ));
    assert!(matches!(
        limiter.acquire_blocking(0, Pacing::new()),
        Err(WaitError::Acquire(AcquireError::InvalidCost {
            cost: 0,
            ..
        }))
    ));
}

/// Jitter adds at most its maximum to each exact wait, and the same seed replays the same waits.
#[test]
fn jitter_is_bounded_and_replays_from_its_seed() {
    let run = |seed| {
        let clock = ManualClock::new(0);
        let limiter: Limiter<u32, ManualClock> = Limiter::builder(config(1, "10/s"))
            .clock(clock.clone())
            .build();
        let pacing = Pacing::new().jitter(Duration::from_millis(50), seed);
        (0..20)
            .flat_map(|_| blocking_on(&clock, pacing, || limiter.acquire(&7, 1)).1)
            .collect::<Vec<_>>()
    };
    let slept = run(1);
    assert_eq!(slept, run(1));
    assert_ne!(slept, run(2));
    // The first acquire finds the bucket full; every later one waits 100 ms plus at most 50 ms, less
    // whatever the previous jitter over-slept.
    assert_eq!(slept.len(), 19, "{slept:?}");
    for d in &slept {
        assert!(*d <= Duration::from_millis(150), "{d:?}");
    }
}

/// On tokio's paused clock: the async wait takes exactly the retry-after of tokio time.
#[tokio::test(start_paused = true)]
async fn until_ready_waits_the_exact_retry_after_on_tokios_clock() {
    let limiter = DirectLimiter::with_clock(config(2, "4/s"), TokioClock::new());
    assert!(limiter.acquire(2).unwrap().is_allowed());
    let started = tokio::time::Instant::now();
    let decision = limiter.until_ready(1, Pacing::new()).await.unwrap();
    assert!(decision.is_allowed());
    assert_eq!(started.elapsed(), Duration::from_millis(250));
}

/// Dropping the future while it sleeps charges nothing: the bucket is as the denial left it.
#[tokio::test(start_paused = true)]
async fn a_cancelled_wait_charges_nothing() {
    let limiter: Limiter<u8, TokioClock> = Limiter::builder(config(3, "1/s"))
        .clock(TokioClock::new())
        .build();
    assert!(limiter.acquire(&1, 3).unwrap().is_allowed());
    let waiting = limiter.until_ready(&1, 2, Pacing::new());
    let timed_out = tokio::time::timeout(Duration::from_millis(1500), waiting).await;
    assert!(timed_out.is_err(), "cancelled before the 2 s wait ended");
    // 1.5 s after the drain: 1.5 tokens, nothing taken by the cancelled wait.
    let peek = limiter.peek_at(&1, bucketproof_limiter::Clock::now(limiter.clock()));
    assert_eq!(peek.remaining.as_ratio(), (1_500_000_000, 1_000_000_000));
}

/// Many waiters on one key: every one is admitted (a refill of 10 per second, 20 waiters of one
/// token each, a burst of 1), but in no promised order. The spread measured: the first, median and
/// last admissions (every waiter starts at once, so an admission's time is that waiter's wait).
#[tokio::test(start_paused = true)]
async fn waiters_of_one_key_are_all_admitted_without_an_order() {
    let limiter = std::sync::Arc::new(DirectLimiter::with_clock(
        config(1, "10/s"),
        TokioClock::new(),
    ));
    assert!(limiter.acquire(1).unwrap().is_allowed());
    let started = tokio::time::Instant::now();
    let waiters: Vec<_> = (0..20u64)
        .map(|i| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let pacing = Pacing::new().jitter(Duration::from_millis(20), i);
                limiter.until_ready(1, pacing).await.unwrap();
                started.elapsed()
            })
        })
        .collect();
    let mut admitted = Vec::new();
    for waiter in waiters {
        admitted.push(waiter.await.unwrap());
    }
    admitted.sort();
    // One token per 100 ms: the k-th admission cannot come before k * 100 ms.
    for (k, at) in admitted.iter().enumerate() {
        assert!(
            *at >= Duration::from_millis(100 * (k as u64 + 1)),
            "{k}: {at:?}"
        );
    }
    let last = *admitted.last().unwrap();
    eprintln!(
        "20 waiters, 10 tokens/s: first admitted after {:?}, median after {:?}, last after {last:?} (ideal 2 s)",
        admitted[0],
        admitted[admitted.len() / 2]
    );
    assert!(last < Duration::from_secs(4), "{last:?}");
}
