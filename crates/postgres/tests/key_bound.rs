//! The key bound on PostgreSQL (`PgBuilder::max_keys`): the table never holds more rows than the
//! bound, even under a flood of fresh ids from several connections at once; every part's counter
//! equals the rows of that part after any mix of creations, replacements, cleanups and forgets; a
//! refusal changes nothing; and under `EvictFull` no legitimate user is ever admitted beyond its
//! budget over any interval, however often its row is replaced (the exact interval check of the
//! flood examples).

mod common;

#[path = "../../limiter/examples/support/budget.rs"]
mod budget;

use std::collections::BTreeMap;

use bucketproof_limiter::{Config, EvictionPolicy, Rate};
use bucketproof_postgres::{KEY_PARTS, PgAcquireError, PgLimiter};
use budget::Budget;
use futures_util::future::join_all;

const MS: u64 = 1_000_000;

async fn limiter(url: &str, ns: &str, max_keys: usize, policy: EvictionPolicy) -> PgLimiter {
    common::drop_namespace(url, ns).await;
    PgLimiter::builder(Config::new(10, Rate::per_second(5)).unwrap())
        .namespace(ns)
        .max_keys(max_keys, policy)
        .pool_size(4)
        .connect(url)
        .await
        .unwrap()
}

/// Rows in the table, and whether every part's counter equals its rows.
async fn rows_and_counters(client: &tokio_postgres::Client, ns: &str) -> (i64, bool) {
    let rows: i64 = client
        .query_one(&format!("SELECT count(*) FROM {ns}.buckets"), &[])
        .await
        .unwrap()
        .get(0);
    let wrong: i64 = client
        .query_one(
            &format!(
                "SELECT count(*) FROM {ns}.key_counts AS c \
                 WHERE c.used <> (SELECT count(*) FROM {ns}.buckets AS b WHERE b.part = c.part)"
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    (rows, wrong == 0)
}

/// Everything a decision could read, but the EvictFull sample's position: every row as text in key
/// order, the horizon and the counters.
async fn state(client: &tokio_postgres::Client, ns: &str) -> Vec<String> {
    let mut seen = Vec::new();
    for query in [
        format!("SELECT b::text FROM {ns}.buckets AS b ORDER BY key"),
        format!("SELECT at::text FROM {ns}.horizon"),
        format!("SELECT part || ':' || used FROM {ns}.key_counts ORDER BY part"),
    ] {
        for row in client.query(&query, &[]).await.unwrap() {
            seen.push(row.get(0));
        }
    }
    seen
}

fn is_refusal(result: &Result<bucketproof_postgres::Outcome, PgAcquireError>) -> bool {
    matches!(result, Err(PgAcquireError::KeyLimitReached { .. }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bound_holds_under_a_flood_of_fresh_ids_from_four_connections() {
    let Some(url) = common::database_url("the_bound_holds_under_a_flood") else {
        return;
    };
    for (name, policy) in [
        ("reject", EvictionPolicy::RejectNewKeys),
        ("evict", EvictionPolicy::EvictFull),
    ] {
        let ns = common::namespace(&format!("bound_flood_{name}"));
        let limiter = limiter(&url, &ns, 64, policy).await;
        let bound = limiter.key_bound().unwrap();
        assert_eq!(bound, 64, "64 over {KEY_PARTS} parts");
        let client = common::client(&url).await;
        let (mut refused, mut created) = (0, 0);
        // 4 connections, each a stream of fresh ids one per ms; a cleanup step every 100 ms.
        for round in 0..100u64 {
            let now = round * 10 * MS;
            let calls = (0..40u64).map(|i| {
                let limiter = &limiter;
                async move { limiter.acquire_at(&format!("a{round}-{i}"), 1, now).await }
            });
            for result in join_all(calls).await {
                match result {
                    Ok(outcome) => created += u64::from(outcome.acquired.created),
                    Err(PgAcquireError::KeyLimitReached { .. }) => refused += 1,
                    Err(other) => panic!("{name}: {other}"),
                }
            }
            if round % 10 == 9 {
                limiter.cleanup_at(16, now).await.unwrap();
                limiter.forget(&format!("a{round}-0")).await.unwrap();
            }
            let (rows, counted) = rows_and_counters(&client, &ns).await;
            assert!(
                rows as u64 <= bound,
                "{name}: {rows} rows over the bound {bound}"
            );
            assert!(
                counted,
                "{name}: a part's counter is not its rows ({rows} rows)"
            );
        }
        assert!(refused > 0, "{name}: the flood never met the bound");
        if policy == EvictionPolicy::EvictFull {
            assert!(created > bound, "{name}: no row was ever replaced");
        }
        limiter.drop_namespace().await.unwrap();
    }
}

#[tokio::test]
async fn a_refusal_changes_nothing() {
    let Some(url) = common::database_url("a_refusal_changes_nothing") else {
        return;
    };
    for (name, policy) in [
        ("reject", EvictionPolicy::RejectNewKeys),
        ("evict", EvictionPolicy::EvictFull),
    ] {
        let ns = common::namespace(&format!("bound_refusal_{name}"));
        let limiter = limiter(&url, &ns, 16, policy).await;
        let client = common::client(&url).await;
        // Fill the table with rows that are not removable (each charged, and judged at once).
        let mut key = 0;
        let refused = loop {
            key += 1;
            assert!(
                key <= 160,
                "{name}: 160 new keys against a bound of 16, none refused"
            );
            let result = limiter.acquire_at(&format!("k{key}"), 1, 5 * MS).await;
            if is_refusal(&result) {
                break format!("k{key}");
            }
            result.unwrap();
        };
        let before = state(&client, &ns).await;
        for _ in 0..3 {
            assert!(
                is_refusal(&limiter.acquire_at(&refused, 1, 5 * MS).await),
                "{name}"
            );
            assert!(
                matches!(
                    limiter
                        .reconfigure(
                            &refused,
                            Config::new(3, Rate::per_second(1)).unwrap(),
                            Some(5 * MS)
                        )
                        .await,
                    Err(PgAcquireError::KeyLimitReached { .. })
                ),
                "{name}: a reconfigure creating a key meets the bound too"
            );
        }
        assert_eq!(
            state(&client, &ns).await,
            before,
            "{name}: a refusal changed something"
        );
        // A key that holds state is never refused, and an invalid cost is judged before the bound.
        assert!(limiter.acquire_at("k1", 1, 5 * MS).await.is_ok(), "{name}");
        assert!(
            matches!(
                limiter.acquire_at(&refused, 11, 5 * MS).await,
                Err(PgAcquireError::Invalid(_))
            ),
            "{name}"
        );
        limiter.drop_namespace().await.unwrap();
    }
}

#[tokio::test]
async fn evict_full_never_over_admits_a_user_across_replacements() {
    let Some(url) = common::database_url("evict_full_never_over_admits") else {
        return;
    };
    let ns = common::namespace("bound_no_over_admission");
    // Two rows per part, and a fresh id every 5 ms (one per part every 80 ms, each row full again
    // 200 ms later): parts are full, and often hold a removable row.
    let limiter = limiter(&url, &ns, 32, EvictionPolicy::EvictFull).await;
    let users = 8u64;
    let mut budgets: BTreeMap<u64, Budget> = BTreeMap::new();
    let (mut over, mut admitted, mut recreated, mut refused) = (0, 0, 0, 0);
    let mut seen: BTreeMap<u64, u32> = BTreeMap::new();
    // 6 s. Users 0-3 burst 12 requests every 1.5 s (never full again before
    // the next burst, so never removable: replacing one would hand it a second full bucket); users
    // 4-7 burst 6 every 3 s (full again 1.2 s after each burst: replaced by fresh ids, and back).
    for t_ms in 0..6_000u64 {
        let now = t_ms * MS;
        if t_ms % 5 == 0 {
            match limiter.acquire_at(&format!("a{t_ms}"), 1, now).await {
                Ok(_) => {}
                Err(PgAcquireError::KeyLimitReached { .. }) => refused += 1,
                Err(other) => panic!("{other}"),
            }
        }
        let user = t_ms % 100;
        let (period, burst) = if user < 4 { (1_500, 12) } else { (3_000, 6) };
        if user >= users || t_ms % period != user {
            continue;
        }
        for _ in 0..burst {
            let outcome = match limiter.acquire_at(&format!("u{user}"), 1, now).await {
                Ok(outcome) => outcome,
                // A user whose row was replaced may find its part full on its return.
                Err(PgAcquireError::KeyLimitReached { .. }) => continue,
                Err(other) => panic!("{other}"),
            };
            if outcome.acquired.created {
                *seen.entry(user).or_default() += 1;
                recreated += u64::from(seen[&user] > 1);
            }
            if outcome.decision().is_allowed() {
                admitted += 1;
                let budget = budgets.entry(user).or_insert_with(|| Budget::new(10, 5));
                over += u64::from(!budget.admit(t_ms * 1_000));
            }
        }
    }
    assert_eq!(
        over, 0,
        "over-admissions among {admitted} admitted ({recreated} recreations)"
    );
    assert!(
        recreated > 0,
        "no user's row was ever replaced: nothing was checked"
    );
    assert!(refused > 0, "the bound was never met");
    limiter.drop_namespace().await.unwrap();
}
