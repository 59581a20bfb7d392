//! Faults, and what a caller sees in each: a backend terminated mid-statement (while it waits for the
//! key's row lock), under each outage policy, with and without a request id; retries of the same
//! request ids from many connections at once; the cleanup skipping a row a decision holds; and a
//! decision that saw a row the cleanup drops before the decision can lock it. In
//! every case: no decision is charged twice, nothing is charged for a call that failed, and an outage
//! is an error or a flagged fallback, never a denial.
//!
//! The server restart is `tests/restart.rs` (it restarts the server, so it runs alone).

mod common;

use std::sync::Arc;
use std::time::Duration;

use bucketproof_limiter::outage::{Source, Unavailable};
use bucketproof_limiter::{Config, Rate, Request, RequestId};
use bucketproof_postgres::{PgAcquireError, PgLimiter};
use common::{
    client, database_url, drop_namespace, hold_row, namespace, terminate_the_waiter,
    with_application_name,
};

/// No refill: every admission shows in the balance for good, so charges can be counted exactly.
fn counting(capacity: u64) -> Config {
    Config::new(capacity, Rate::new(0, 1).unwrap()).unwrap()
}

/// The key's transition counter and balance in whole tokens, read behind the limiter's back.
async fn row(url: &str, ns: &str, key: &str, config: &Config) -> (i64, u128) {
    let row = client(url)
        .await
        .query_one(
            &format!("SELECT seq, balances[1]::text FROM {ns}.buckets WHERE key = $1"),
            &[&key],
        )
        .await
        .unwrap();
    let balance: u128 = row.get::<_, &str>(1).parse().unwrap();
    (row.get(0), balance / config.units_per_token())
}

#[tokio::test]
async fn a_backend_terminated_mid_statement_charges_nothing_and_is_never_a_denial() {
    let Some(url) = database_url("a_backend_terminated_mid_statement") else {
        return;
    };
    let ns = namespace("terminated");
    let config = counting(10);
    // The limiters' connections carry a name of their own, so only their backends are terminated.
    let application = ns.clone();
    let named = with_application_name(&url, &application);
    let build = |policy| {
        PgLimiter::builder(config)
            .namespace(&ns)
            .on_unavailable(policy)
            .connect(&named)
    };
    let closed = Arc::new(build(Unavailable::FailClosed).await.unwrap());
    let budget = Config::new(2, Rate::new(0, 1).unwrap()).unwrap();
    let local = Arc::new(build(Unavailable::LocalBudget { budget }).await.unwrap());
    assert!(
        closed
            .acquire("k", 1)
            .await
            .unwrap()
            .decision()
            .is_allowed()
    );
    let before = row(&url, &ns, "k", &config).await;

    // Without a request id the call may have run, so it is not retried: fail closed is an error.
    let holder = hold_row(&url, &ns, "k").await;
    let call = tokio::spawn({
        let closed = closed.clone();
        async move { closed.acquire("k", 1).await }
    });
    terminate_the_waiter(&url, &application).await;
    let seen = call.await.unwrap();
    assert!(
        matches!(seen, Err(PgAcquireError::Unavailable(_))),
        "{seen:?}"
    );
    // ... and the local budget decides, flagged.
    let call = tokio::spawn({
        let local = local.clone();
        async move { local.acquire("k", 1).await }
    });
    terminate_the_waiter(&url, &application).await;
    let seen = call.await.unwrap().unwrap();
    assert_eq!(seen.source, Source::LocalBudget);
    drop(holder);
    assert_eq!(
        row(&url, &ns, "k", &config).await,
        before,
        "nothing charged"
    );

    // With a request id the limiter retries (the function answers a recorded id with its
    // decision): the call is decided once, when the lock is released.
    let holder = hold_row(&url, &ns, "k").await;
    let request = Request::cost(2).id(RequestId(41));
    let call = tokio::spawn({
        let closed = closed.clone();
        async move { closed.acquire_with("k", request).await }
    });
    terminate_the_waiter(&url, &application).await;
    drop(holder);
    let decided = call.await.unwrap().unwrap();
    assert!(decided.decision().is_allowed() && !decided.acquired.replayed);
    let again = closed.acquire_with("k", request).await.unwrap();
    assert!(again.acquired.replayed);
    assert_eq!(again.decision(), decided.decision());
    let (seq, tokens) = row(&url, &ns, "k", &config).await;
    assert_eq!((seq, tokens), (before.0 + 1, before.1 - 2), "charged once");
    drop_namespace(&url, &ns).await;
}

#[tokio::test]
async fn the_same_request_ids_from_eight_connections_charge_once_each() {
    let Some(url) = database_url("the_same_request_ids_from_eight_connections") else {
        return;
    };
    let ns = namespace("retries");
    let config = counting(1_000);
    let limiter = Arc::new(
        PgLimiter::builder(config)
            .namespace(&ns)
            .dedupe(Duration::from_secs(3_600), 128)
            .pool_size(8)
            .connect(&url)
            .await
            .unwrap(),
    );
    // 8 tasks each send all 200 ids (costs 1..=3) on two keys, in their own order: every id is
    // sent 8 times, mostly at the same moment as its copies.
    let ids: Vec<(u128, u64, &str)> = (0..200u128)
        .map(|id| (id, 1 + (id % 3) as u64, ["a", "b"][(id % 2) as usize]))
        .collect();
    let tasks: Vec<_> = (0..8)
        .map(|task| {
            let limiter = limiter.clone();
            let mut order = ids.clone();
            order.rotate_left(task * 25);
            tokio::spawn(async move {
                let mut seen = Vec::new();
                for (id, cost, key) in order {
                    let request = Request::cost(cost).id(RequestId(id));
                    let outcome = limiter.acquire_with(key, request).await.unwrap();
                    seen.push((id, outcome));
                }
                seen
            })
        })
        .collect();
    let mut first: std::collections::HashMap<u128, _> = Default::default();
    let mut replays = 0;
    for task in tasks {
        for (id, outcome) in task.await.unwrap() {
            replays += usize::from(outcome.acquired.replayed);
            let decision = *outcome.decision();
            // Every copy of an id answers the same decision.
            assert_eq!(*first.entry(id).or_insert(decision), decision, "id {id}");
        }
    }
    assert_eq!(
        replays,
        200 * 7,
        "each id decided once and replayed 7 times"
    );
    for key in ["a", "b"] {
        let charged: u64 = ids
            .iter()
            .filter(|(id, _, k)| *k == key && first[id].is_allowed())
            .map(|(_, cost, _)| cost)
            .sum();
        let (seq, tokens) = row(&url, &ns, key, &config).await;
        assert_eq!(seq, 100, "{key}: one transition per id");
        assert_eq!(
            u128::from(1_000 - charged),
            tokens,
            "{key}: charged once per id"
        );
    }
    drop_namespace(&url, &ns).await;
}

#[tokio::test]
async fn the_cleanup_skips_a_row_a_decision_holds_and_never_waits() {
    let Some(url) = database_url("the_cleanup_skips_a_row_a_decision_holds") else {
        return;
    };
    let ns = namespace("cleanup_skips");
    // Full again 1 s after a charge of one token.
    let config = Config::new(5, Rate::per_second(1)).unwrap();
    let limiter = PgLimiter::connect(&url, &ns, config).await.unwrap();
    for key in ["held", "free"] {
        limiter.acquire_at(key, 1, 1_000).await.unwrap();
    }
    let holder = hold_row(&url, &ns, "held").await;
    let step = tokio::time::timeout(
        Duration::from_secs(5),
        limiter.cleanup_at(100, 10_000_000_000),
    )
    .await
    .expect("the cleanup waited for a held row")
    .unwrap();
    assert_eq!((step.examined, step.removed, step.wrapped), (2, 1, true));
    drop(holder);
    assert!(limiter.inspect("held").await.unwrap().is_some());
    assert!(limiter.inspect("free").await.unwrap().is_none());
    drop_namespace(&url, &ns).await;
}

/// The race the cleanup's horizon exists for, made to happen: a decision's snapshot sees a row, the
/// cleanup (holding the row) drops it and raises the horizon, and only then does the decision get the
/// row lock. It must not create the key from its stale snapshot (where the horizon is older than the
/// drop): it runs again and starts the fresh bucket at the drop's judgment time, not at its own
/// rolled-back `now`, so the second decision credits nothing the first had seen.
#[tokio::test]
async fn a_decision_racing_the_cleanup_starts_fresh_at_the_horizon() {
    let Some(url) = database_url("a_decision_racing_the_cleanup") else {
        return;
    };
    let ns = namespace("race_cleanup");
    let application = ns.clone();
    let named = with_application_name(&url, &application);
    let config = Config::new(5, Rate::per_second(1)).unwrap();
    let limiter = Arc::new(PgLimiter::connect(&named, &ns, config).await.unwrap());
    let second = 1_000_000_000u64;
    // Charged at 1 s, full again at 2 s; the cleanup judges it at 10 s.
    limiter.acquire_at("k", 1, second).await.unwrap();
    let cleanup = client(&url).await;
    cleanup.batch_execute("BEGIN").await.unwrap();
    let statement = include_str!("../src/cleanup.sql").replace("__NS__", &ns);
    let judged = (10 * second).to_string();
    let step = cleanup
        .query_one(&statement, &[&Some(judged), &"", &"100"])
        .await
        .unwrap();
    assert_eq!(step.get::<_, i64>(2), 1, "the cleanup dropped the row");
    // A decision at 3 s (a clock behind the cleanup's) sees the row and waits for its lock.
    let call = tokio::spawn({
        let limiter = limiter.clone();
        async move { limiter.acquire_at("k", 1, 3 * second).await }
    });
    let admin = client(&url).await;
    let mut waited = false;
    for _ in 0..500 {
        let rows = admin
            .query(
                "SELECT 1 FROM pg_stat_activity \
                 WHERE wait_event_type = 'Lock' AND application_name = $1",
                &[&application],
            )
            .await
            .unwrap();
        if !rows.is_empty() {
            waited = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        waited,
        "the decision never waited for the cleanup's row lock"
    );
    cleanup.batch_execute("COMMIT").await.unwrap();
    let outcome = call.await.unwrap().unwrap();
    assert!(outcome.decision().is_allowed() && outcome.acquired.created);
    let (fresh, _) = limiter.inspect("k").await.unwrap().unwrap();
    assert_eq!(
        fresh.last_refill(),
        10 * second,
        "the fresh bucket starts at the horizon, not at the stale snapshot's"
    );
    drop_namespace(&url, &ns).await;
}
