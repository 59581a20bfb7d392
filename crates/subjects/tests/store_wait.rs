//! Waiting until allowed on the shared-state limiters, one suite run on Redis and on PostgreSQL: the
//! limiter crate's retry rule (`bucketproof_limiter::wait`) with each attempt an acquire in the store.
//! In injected time (a `ManualClock` the sleep moves: nothing sleeps on the wall clock), through
//! `wait::pace`, the loop each store's `until_ready` runs on tokio's timer:
//! - a drained key is admitted after exactly one sleep of the denial's retry-after;
//! - a deadline, a rate of zero and an invalid cost end the wait at once, with nothing slept;
//! - a wait dropped while it sleeps has charged nothing: the key admits at the retry-after as if
//!   nobody had waited (a drop during an attempt, a round trip, may not: the crates' docs say so).
//!
//! `until_ready` and `until_ready_set` themselves, on the store's clock, admit a key that covers the
//! cost without sleeping; so does `acquire_blocking`, called from a thread outside the limiter's
//! runtime, which also ends at once on a rate of zero and an invalid cost (its sleeps are the thread's,
//! so this suite gives it nothing to sleep). Needs `REDIS_URL` and `DATABASE_URL`; each store's tests skip loudly
//! without their URL, unless CI's `BUCKETPROOF_REQUIRE_*` makes the skip a failure.
#![cfg(all(feature = "redis", feature = "postgres"))]

// The shared helpers live with the check crate's tests, which own the traces they draw.
#[path = "../../check/tests/common/mod.rs"]
mod common;

use std::cell::Cell;
use std::fmt::Debug;
use std::future::{Future, pending, poll_fn, ready};
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use bucketproof_limiter::wait::{Pacing, Verdict, WaitError, pace};
use bucketproof_limiter::{
    Bandwidth, Bandwidths, Clock, Config, Decisions, ManualClock, NANOS_PER_SECOND, Nanos, Rate,
    Wait,
};
use bucketproof_postgres::PgLimiter;
use bucketproof_redis::RedisLimiter;
use common::{postgres_available, redis_available};
use tokio::runtime::Handle;

const S: Nanos = NANOS_PER_SECOND;

type Waited<O, E> = Result<O, WaitError<O, E>>;

/// What the suite needs of a shared-state limiter: an acquire at an injected time and the three
/// waiting forms on the store's own clock.
trait Store: Sized {
    type Outcome: Verdict + Debug;
    type SetOutcome: Verdict + Debug;
    type Error: Debug;

    /// A limiter of `config` on a namespace of its own, or `None` (a loud skip) without the store.
    async fn open(test: &str, config: Bandwidths) -> Option<Self>;
    async fn acquire_at(
        &self,
        key: &str,
        cost: u64,
        now: Nanos,
    ) -> Result<Self::Outcome, Self::Error>;
    async fn until_ready(&self, key: &str, cost: u64) -> Waited<Self::Outcome, Self::Error>;
    async fn until_ready_set(&self, key: &str, cost: u64) -> Waited<Self::SetOutcome, Self::Error>;
    fn acquire_blocking(
        &self,
        runtime: &Handle,
        key: &str,
        cost: u64,
    ) -> Waited<Self::Outcome, Self::Error>;
    /// The parts of a set's decision.
    fn parts(outcome: &Self::SetOutcome) -> usize;
    /// Removes what the limiter stored.
    async fn close(self);
}

struct Redis(RedisLimiter, String);

impl Store for Redis {
    type Outcome = bucketproof_redis::Outcome;
    type SetOutcome = bucketproof_redis::Outcome<Decisions>;
    type Error = bucketproof_redis::RedisAcquireError;

    async fn open(test: &str, config: Bandwidths) -> Option<Redis> {
        if !redis_available(test) {
            return None;
        }
        let url = std::env::var("REDIS_URL").expect("checked");
        let prefix = format!("bptest:{test}:{}:", std::process::id());
        let limiter = RedisLimiter::builder(config)
            .prefix(prefix.clone())
            .recovery(bucketproof_redis::Recovery::Trusting)
            .connect(&url)
            .await
            .expect("connect to Redis");
        Some(Redis(limiter, prefix))
    }

    async fn acquire_at(
        &self,
        key: &str,
        cost: u64,
        now: Nanos,
    ) -> Result<Self::Outcome, Self::Error> {
        self.0.acquire_at(key, cost, now).await
    }

    async fn until_ready(&self, key: &str, cost: u64) -> Waited<Self::Outcome, Self::Error> {
        self.0.until_ready(key, cost, Pacing::new()).await
    }

    async fn until_ready_set(&self, key: &str, cost: u64) -> Waited<Self::SetOutcome, Self::Error> {
        self.0.until_ready_set(key, cost, Pacing::new()).await
    }

    fn acquire_blocking(
        &self,
        runtime: &Handle,
        key: &str,
        cost: u64,
    ) -> Waited<Self::Outcome, Self::Error> {
        self.0.acquire_blocking(runtime, key, cost, Pacing::new())
    }

    fn parts(outcome: &Self::SetOutcome) -> usize {
        outcome.acquired.decision.bandwidths().len()
    }

    async fn close(self) {
        let url = std::env::var("REDIS_URL").expect("checked");
        let client = redis::Client::open(url).expect("a Redis URL");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect to Redis");
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{}*", self.1))
            .query_async(&mut conn)
            .await
            .expect("KEYS");
        if !keys.is_empty() {
            let _: u64 = redis::cmd("DEL")
                .arg(keys)
                .query_async(&mut conn)
                .await
                .expect("DEL");
        }
    }
}

struct Postgres(PgLimiter);

impl Store for Postgres {
    type Outcome = bucketproof_postgres::Outcome;
    type SetOutcome = bucketproof_postgres::Outcome<Decisions>;
    type Error = bucketproof_postgres::PgAcquireError;

    async fn open(test: &str, config: Bandwidths) -> Option<Postgres> {
        if !postgres_available(test) {
            return None;
        }
        let url = std::env::var("DATABASE_URL").expect("checked");
        let limiter = PgLimiter::builder(config)
            .namespace(format!("bp_wait_{}_{test}", std::process::id()))
            .connect(&url)
            .await
            .expect("connect to PostgreSQL");
        Some(Postgres(limiter))
    }

    async fn acquire_at(
        &self,
        key: &str,
        cost: u64,
        now: Nanos,
    ) -> Result<Self::Outcome, Self::Error> {
        self.0.acquire_at(key, cost, now).await
    }

    async fn until_ready(&self, key: &str, cost: u64) -> Waited<Self::Outcome, Self::Error> {
        self.0.until_ready(key, cost, Pacing::new()).await
    }

    async fn until_ready_set(&self, key: &str, cost: u64) -> Waited<Self::SetOutcome, Self::Error> {
        self.0.until_ready_set(key, cost, Pacing::new()).await
    }

    fn acquire_blocking(
        &self,
        runtime: &Handle,
        key: &str,
        cost: u64,
    ) -> Waited<Self::Outcome, Self::Error> {
        self.0.acquire_blocking(runtime, key, cost, Pacing::new())
    }

    fn parts(outcome: &Self::SetOutcome) -> usize {
        outcome.acquired.decision.bandwidths().len()
    }

    async fn close(self) {
        self.0.drop_namespace().await.expect("drop the namespace");
    }
}

/// Runs one case of the suite on tokio's current-thread runtime.
fn run<F: Future<Output = ()>>(case: F) {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(case)
}

fn config(capacity: u64, rate: Rate) -> Bandwidths {
    Config::new(capacity, rate).expect("a valid config").into()
}

/// Waits for `cost` on `key` in `clock`'s time, moving it by each sleep; the sleeps, in order.
async fn wait_for<S: Store>(
    store: &S,
    clock: &ManualClock,
    key: &str,
    cost: u64,
    pacing: Pacing,
) -> (Waited<S::Outcome, S::Error>, Vec<Duration>) {
    let mut slept = Vec::new();
    let result = pace(
        pacing,
        || store.acquire_at(key, cost, clock.now()),
        |duration| {
            slept.push(duration);
            clock.advance(u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX));
            ready(())
        },
    )
    .await;
    (result, slept)
}

/// Takes the whole of a fresh key's `capacity` at `clock`'s time.
async fn drain<S: Store>(store: &S, clock: &ManualClock, key: &str, capacity: u64) {
    let taken = store.acquire_at(key, capacity, clock.now()).await;
    assert!(
        taken.expect("an acquire").is_allowed(),
        "a fresh key is full"
    );
}

async fn a_drained_key_is_admitted_after_exactly_its_retry_after<S: Store>(test: &str) {
    let Some(store) = S::open(test, config(3, Rate::new(2, 7).unwrap())).await else {
        return;
    };
    let clock = ManualClock::new(10 * S);
    drain(&store, &clock, "k", 3).await;
    let denial = store.acquire_at("k", 2, clock.now()).await.unwrap();
    let Some(Wait::After(wait)) = denial.retry_after() else {
        panic!("a drained key waits: {denial:?}");
    };
    let (result, slept) = wait_for(&store, &clock, "k", 2, Pacing::new()).await;
    assert!(result.expect("admitted").is_allowed());
    assert_eq!(
        slept,
        [Duration::from_nanos(wait)],
        "one sleep of the exact retry-after"
    );
    assert_eq!(clock.now(), 10 * S + wait);
    store.close().await;
}

async fn a_deadline_and_an_invalid_cost_end_the_wait_at_once<S: Store>(test: &str) {
    let Some(store) = S::open(test, config(3, Rate::per_second(1))).await else {
        return;
    };
    let clock = ManualClock::new(S);
    drain(&store, &clock, "k", 3).await;
    let short = Pacing::new().deadline(Duration::from_millis(500));
    let (result, slept) = wait_for(&store, &clock, "k", 1, short).await;
    assert!(
        matches!(result, Err(WaitError::Deadline { waited, .. }) if waited.is_zero()),
        "{result:?}"
    );
    assert!(slept.is_empty(), "nothing is slept in vain");
    let (result, slept) = wait_for(&store, &clock, "k", 4, Pacing::new()).await;
    assert!(matches!(result, Err(WaitError::Acquire(_))), "{result:?}");
    assert!(slept.is_empty());
    store.close().await;
}

async fn a_rate_of_zero_ends_the_wait_at_once<S: Store>(test: &str) {
    let Some(store) = S::open(test, config(2, Rate::new(0, 1).unwrap())).await else {
        return;
    };
    let clock = ManualClock::new(S);
    drain(&store, &clock, "k", 2).await;
    let (result, slept) = wait_for(&store, &clock, "k", 1, Pacing::new()).await;
    assert!(matches!(result, Err(WaitError::Never(_))), "{result:?}");
    assert!(slept.is_empty());
    store.close().await;
}

async fn a_wait_dropped_while_it_sleeps_charges_nothing<S: Store>(test: &str) {
    let Some(store) = S::open(test, config(3, Rate::new(1, 1).unwrap())).await else {
        return;
    };
    let clock = ManualClock::new(S);
    drain(&store, &clock, "k", 3).await;
    // One token back: the denial that puts the wait to sleep has something it could wrongly take.
    clock.advance(S);
    let sleeping = Cell::new(None);
    {
        let waiting = pace(
            Pacing::new(),
            || store.acquire_at("k", 2, clock.now()),
            |duration| {
                sleeping.set(Some(duration));
                pending::<()>()
            },
        );
        let mut waiting = pin!(waiting);
        // Poll until the attempt's denial has put the wait to sleep, then drop it there.
        poll_fn(|cx| match waiting.as_mut().poll(cx) {
            Poll::Ready(result) => panic!("a drained key is not admitted at once: {result:?}"),
            Poll::Pending if sleeping.get().is_some() => Poll::Ready(()),
            Poll::Pending => Poll::Pending,
        })
        .await;
    }
    let wait = sleeping.get().expect("asleep");
    assert_eq!(
        wait,
        Duration::from_secs(1),
        "the second token, at one per second"
    );
    clock.advance(S);
    let after = store.acquire_at("k", 2, clock.now()).await.unwrap();
    assert!(
        after.is_allowed(),
        "the dropped wait took nothing: {after:?}"
    );
    let empty = store.acquire_at("k", 1, clock.now()).await.unwrap();
    assert!(!empty.is_allowed(), "and left nothing extra: {empty:?}");
    store.close().await;
}

async fn until_ready_admits_a_covered_request_without_sleeping<S: Store>(test: &str) {
    if let Some(store) = S::open(test, config(3, Rate::per_second(1))).await {
        assert!(store.until_ready("k", 2).await.unwrap().is_allowed());
        store.close().await;
    }
    let set = Bandwidths::new([
        Bandwidth::named("burst", Config::new(3, Rate::per_second(3)).unwrap()).unwrap(),
        Bandwidth::named("daily", Config::new(100, "100/d".parse().unwrap()).unwrap()).unwrap(),
    ])
    .unwrap();
    if let Some(store) = S::open(&format!("{test}_set"), set).await {
        let admitted = store.until_ready_set("k", 2).await.unwrap();
        assert!(admitted.is_allowed());
        assert_eq!(S::parts(&admitted), 2);
        store.close().await;
    }
}

/// The blocking form from the test's own thread, the limiter on a multi-thread runtime of its own.
fn acquire_blocking_admits_or_ends_at_once<S: Store>(test: &str) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let Some(store) = runtime.block_on(S::open(test, config(3, Rate::new(0, 1).unwrap()))) else {
        return;
    };
    let handle = runtime.handle();
    let admitted = store.acquire_blocking(handle, "k", 3);
    assert!(admitted.expect("admitted").is_allowed());
    let never = store.acquire_blocking(handle, "k", 1);
    assert!(matches!(never, Err(WaitError::Never(_))), "{never:?}");
    let invalid = store.acquire_blocking(handle, "k", 4);
    assert!(matches!(invalid, Err(WaitError::Acquire(_))), "{invalid:?}");
    runtime.block_on(store.close());
}

#[test]
fn redis_a_drained_key_is_admitted_after_exactly_its_retry_after() {
    run(a_drained_key_is_admitted_after_exactly_its_retry_after::<
        Redis,
    >("wait_exact"));
}

#[test]
fn postgres_a_drained_key_is_admitted_after_exactly_its_retry_after() {
    run(a_drained_key_is_admitted_after_exactly_its_retry_after::<
        Postgres,
    >("wait_exact"));
}

#[test]
fn redis_a_deadline_and_an_invalid_cost_end_the_wait_at_once() {
    run(a_deadline_and_an_invalid_cost_end_the_wait_at_once::<Redis>("wait_ends"));
}

#[test]
fn postgres_a_deadline_and_an_invalid_cost_end_the_wait_at_once() {
    run(a_deadline_and_an_invalid_cost_end_the_wait_at_once::<
        Postgres,
    >("wait_ends"));
}

#[test]
fn redis_a_rate_of_zero_ends_the_wait_at_once() {
    run(a_rate_of_zero_ends_the_wait_at_once::<Redis>("wait_never"));
}

#[test]
fn postgres_a_rate_of_zero_ends_the_wait_at_once() {
    run(a_rate_of_zero_ends_the_wait_at_once::<Postgres>(
        "wait_never",
    ));
}

#[test]
fn redis_a_wait_dropped_while_it_sleeps_charges_nothing() {
    run(a_wait_dropped_while_it_sleeps_charges_nothing::<Redis>(
        "wait_dropped",
    ));
}

#[test]
fn postgres_a_wait_dropped_while_it_sleeps_charges_nothing() {
    run(a_wait_dropped_while_it_sleeps_charges_nothing::<Postgres>(
        "wait_dropped",
    ));
}

#[test]
fn redis_until_ready_admits_a_covered_request_without_sleeping() {
    run(until_ready_admits_a_covered_request_without_sleeping::<Redis>("wait_ready"));
}

#[test]
fn postgres_until_ready_admits_a_covered_request_without_sleeping() {
    run(until_ready_admits_a_covered_request_without_sleeping::<
        Postgres,
    >("wait_ready"));
}

#[test]
fn redis_acquire_blocking_admits_or_ends_at_once() {
    acquire_blocking_admits_or_ends_at_once::<Redis>("wait_blocking");
}

#[test]
fn postgres_acquire_blocking_admits_or_ends_at_once() {
    acquire_blocking_admits_or_ends_at_once::<Postgres>("wait_blocking");
}
