//! Waiting until allowed on PostgreSQL: the limiter crate's retry rule with each attempt an acquire in
//! the store. In injected time (a `ManualClock` the sleep moves: nothing sleeps on the wall clock),
//! through `bucketproof_limiter::wait::pace`, the loop `until_ready` runs on tokio's timer: a drained
//! key is admitted after exactly one sleep of the denial's retry-after; a deadline, a rate of zero and an invalid cost end the wait at once. `until_ready` itself, on the
//! store's clock, admits a key that covers the cost without sleeping.

mod common;

use std::future::ready;
use std::time::Duration;

use bucketproof_limiter::wait::{Pacing, WaitError, pace};
use bucketproof_limiter::{
    Bandwidth, Bandwidths, Clock, Config, ManualClock, NANOS_PER_SECOND, Nanos, Rate, Wait,
};
use bucketproof_postgres::{Outcome, PgAcquireError, PgLimiter};
use common::{database_url, drop_namespace, namespace};

const S: Nanos = NANOS_PER_SECOND;

/// Waits for `cost` on `key` in `clock`'s time, moving it by each sleep; the sleeps, in order.
async fn wait_for(
    limiter: &PgLimiter,
    clock: &ManualClock,
    key: &str,
    cost: u64,
    pacing: Pacing,
) -> (
    Result<Outcome, WaitError<Outcome, PgAcquireError>>,
    Vec<Duration>,
) {
    let mut slept = Vec::new();
    let result = pace(
        pacing,
        || limiter.acquire_at(key, cost, clock.now()),
        |duration| {
            slept.push(duration);
            clock.advance(u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX));
            ready(())
        },
    )
    .await;
    (result, slept)
}

#[tokio::test]
async fn a_drained_key_is_admitted_after_exactly_its_retry_after() {
    let Some(url) = database_url("wait_exact") else {
        return;
    };
    let ns = namespace("wait_exact");
    let limiter = PgLimiter::builder(Config::new(3, Rate::new(2, 7).unwrap()).unwrap())
        .namespace(&ns)
        .connect(&url)
        .await
        .expect("connect");
    let clock = ManualClock::new(10 * S);
    assert!(
        limiter
            .acquire_at("k", 3, clock.now())
            .await
            .unwrap()
            .decision()
            .is_allowed()
    );
    let denial = limiter.acquire_at("k", 2, clock.now()).await.unwrap();
    let Some(Wait::After(wait)) = denial.decision().retry_after() else {
        panic!("a drained key waits: {denial:?}");
    };
    let (result, slept) = wait_for(&limiter, &clock, "k", 2, Pacing::new()).await;
    let admitted = result.expect("admitted");
    assert!(admitted.decision().is_allowed());
    assert_eq!(
        slept,
        [Duration::from_nanos(wait)],
        "one sleep of the exact retry-after"
    );
    assert_eq!(clock.now(), 10 * S + wait);
    drop_namespace(&url, &ns).await;
}

#[tokio::test]
async fn a_deadline_a_rate_of_zero_and_an_invalid_cost_end_the_wait_at_once() {
    let Some(url) = database_url("wait_ends") else {
        return;
    };
    let ns = namespace("wait_ends");
    let limiter = PgLimiter::builder(Config::new(3, Rate::per_second(1)).unwrap())
        .namespace(&ns)
        .connect(&url)
        .await
        .expect("connect");
    let clock = ManualClock::new(S);
    assert!(
        limiter
            .acquire_at("k", 3, clock.now())
            .await
            .unwrap()
            .decision()
            .is_allowed()
    );
    let short = Pacing::new().deadline(Duration::from_millis(500));
    let (result, slept) = wait_for(&limiter, &clock, "k", 1, short).await;
    assert!(matches!(result, Err(WaitError::Deadline { waited, .. }) if waited.is_zero()));
    assert!(slept.is_empty(), "nothing is slept in vain");
    let (result, slept) = wait_for(&limiter, &clock, "k", 4, Pacing::new()).await;
    assert!(matches!(result, Err(WaitError::Acquire(_))), "{result:?}");
    assert!(slept.is_empty());
    drop_namespace(&url, &ns).await;
    let Some(url) = database_url("wait_never") else {
        return;
    };
    let ns = namespace("wait_never");
    let limiter = PgLimiter::builder(Config::new(2, Rate::new(0, 1).unwrap()).unwrap())
        .namespace(&ns)
        .connect(&url)
        .await
        .expect("connect");
    assert!(
        limiter
            .acquire_at("k", 2, clock.now())
            .await
            .unwrap()
            .decision()
            .is_allowed()
    );
    let (result, slept) = wait_for(&limiter, &clock, "k", 1, Pacing::new()).await;
    assert!(matches!(result, Err(WaitError::Never(_))), "{result:?}");
    assert!(slept.is_empty());
    drop_namespace(&url, &ns).await;
}

#[tokio::test]
async fn until_ready_admits_a_covered_request_without_sleeping() {
    let Some(url) = database_url("wait_ready") else {
        return;
    };
    let ns = namespace("wait_ready");
    let limiter = PgLimiter::builder(Config::new(3, Rate::per_second(1)).unwrap())
        .namespace(&ns)
        .connect(&url)
        .await
        .expect("connect");
    let admitted = limiter.until_ready("k", 2, Pacing::new()).await.unwrap();
    assert!(admitted.decision().is_allowed());
    drop_namespace(&url, &ns).await;
    let set = Bandwidths::new([
        Bandwidth::named("burst", Config::new(3, Rate::per_second(3)).unwrap()).unwrap(),
        Bandwidth::named("daily", Config::new(100, "100/d".parse().unwrap()).unwrap()).unwrap(),
    ])
    .unwrap();
    let Some(url) = database_url("wait_ready_set") else {
        return;
    };
    let ns = namespace("wait_ready_set");
    let limiter = PgLimiter::builder(set)
        .namespace(&ns)
        .connect(&url)
        .await
        .expect("connect");
    let admitted = limiter
        .until_ready_set("k", 2, Pacing::new())
        .await
        .unwrap();
    assert!(admitted.acquired.decision.is_allowed());
    assert_eq!(admitted.acquired.decision.bandwidths().len(), 2);
    drop_namespace(&url, &ns).await;
}
