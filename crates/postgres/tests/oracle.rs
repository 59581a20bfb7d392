//! PostgreSQL against the core: seeded traces decided by the schema's function and by the core's
//! transition on the same states, decision by decision (verdicts, remaining balances, waits, to the
//! unit and the nanosecond), with rollbacks, long idles and invalid costs; the stored row unit for
//! unit; a config or schema version that is not this limiter's refused; and eight connections on one
//! key keeping the arrival-curve bound with no lost update.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use bucketproof_limiter::internal::{Attempt, transition};
use bucketproof_limiter::{AcquireError, BucketState, Config, NANOS_PER_SECOND, Nanos, Rate};
use bucketproof_postgres::{BuildError, PgAcquireError, PgLimiter, SCHEMA_VERSION};
use common::{client, database_url, drop_namespace, namespace};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const SECOND: Nanos = NANOS_PER_SECOND;

/// Configs at the edges: whole and fractional rates, a tiny and a huge capacity, no refill at all.
fn configs() -> Vec<Config> {
    vec![
        Config::new(5, Rate::per_second(2)).unwrap(),
        Config::new(3, Rate::new(2, 7).unwrap()).unwrap(),
        Config::new(1, Rate::new(1, 86_400).unwrap()).unwrap(),
        Config::new(u64::MAX / 2, Rate::per_second(1_000_000_007)).unwrap(),
        Config::new(4, Rate::new(0, 1).unwrap()).unwrap(),
    ]
}

#[tokio::test]
async fn decisions_equal_the_cores_decision_by_decision() {
    let Some(url) = database_url("decisions_equal_the_cores_decision_by_decision") else {
        return;
    };
    let ns = namespace("oracle");
    let mut checked = 0;
    let mut denied = 0;
    let mut rollbacks = 0;
    for (index, config) in configs().into_iter().enumerate() {
        let limiter = PgLimiter::connect(&url, &ns, config).await.unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(index as u64);
        let mut states: HashMap<String, BucketState> = HashMap::new();
        let mut now: Nanos = 1_000 * SECOND;
        for op in 0..300 {
            // Mostly forward, sometimes a long idle, sometimes back (a rollback of the caller's clock).
            now = match rng.gen_range(0..20) {
                0 => now.saturating_sub(rng.gen_range(0..5 * SECOND)),
                1 => now.saturating_add(rng.gen_range(0..100 * 365 * 86_400 * SECOND)),
                _ => now.saturating_add(rng.gen_range(0..SECOND)),
            };
            let key = format!("c{index}k{}", rng.gen_range(0..3));
            let cost = match rng.gen_range(0..10) {
                0 => 0,
                1 => config.capacity().saturating_add(1),
                2 => config.capacity(),
                _ => rng.gen_range(1..=config.capacity().min(3)),
            };
            let ctx = || format!("config {index}, op {op}, key {key}, cost {cost}, now {now}");
            let state = states
                .get(&key)
                .copied()
                .unwrap_or_else(|| BucketState::full(&config, now));
            let expected = transition(&config, state, Attempt { cost, now });
            let got = limiter.acquire_at(&key, cost, now).await;
            match (expected, got) {
                (Ok((next, decision)), Ok(outcome)) => {
                    assert_eq!(outcome.decision(), &decision, "{}", ctx());
                    assert_eq!(
                        outcome.acquired.created,
                        !states.contains_key(&key),
                        "{}",
                        ctx()
                    );
                    if next.last_refill() > now {
                        rollbacks += 1;
                    }
                    denied += usize::from(!decision.is_allowed());
                    states.insert(key.clone(), next);
                    checked += 1;
                }
                (Err(e), Err(PgAcquireError::Invalid(got))) => {
                    assert_eq!(e, got, "{}", ctx())
                }
                (e, g) => panic!("{}: expected {e:?}, got {g:?}", ctx()),
            }
        }
        // The stored rows are the core's states, unit for unit.
        let db = client(&url).await;
        for (key, state) in &states {
            let row = db
                .query_one(
                    &format!(
                        "SELECT balances[1]::text, last_refill::text FROM {ns}.buckets WHERE key = $1"
                    ),
                    &[key],
                )
                .await
                .unwrap();
            let balance: u128 = row.get::<_, &str>(0).parse().unwrap();
            let last: u64 = row.get::<_, &str>(1).parse().unwrap();
            assert_eq!(
                (balance, last),
                (state.balance(), state.last_refill()),
                "{key}"
            );
        }
        db.batch_execute(&format!("TRUNCATE {ns}.buckets"))
            .await
            .unwrap();
    }
    drop_namespace(&url, &ns).await;
    assert!(checked > 1000, "too few valid ops: {checked}");
    assert!(
        denied > 100 && rollbacks > 10,
        "{denied} denials, {rollbacks} rollbacks"
    );
}

/// Another limiter's config on the same row, a schema of another version and a namespace that
/// needs quoting are refused by name; the refused acquire changed nothing.
#[tokio::test]
async fn what_is_not_this_limiters_is_refused_and_untouched() {
    let Some(url) = database_url("what_is_not_this_limiters_is_refused_and_untouched") else {
        return;
    };
    let ns = namespace("refused");
    let a = Config::new(2, Rate::per_second(1)).unwrap();
    let b = Config::new(2, Rate::new(1, 3).unwrap()).unwrap();
    let la = PgLimiter::connect(&url, &ns, a).await.unwrap();
    let lb = PgLimiter::connect(&url, &ns, b).await.unwrap();
    assert!(
        la.acquire_at("k", 1, SECOND)
            .await
            .unwrap()
            .decision()
            .is_allowed()
    );
    let err = lb.acquire_at("k", 1, SECOND).await.unwrap_err();
    assert!(matches!(err, PgAcquireError::ConfigMismatch(_)), "{err:?}");
    let again = la.acquire_at("k", 1, SECOND).await.unwrap();
    assert_eq!(
        again.decision().remaining().whole(),
        0,
        "the refused call charged nothing"
    );
    assert_eq!(again.seq, 2);
    // Invalid costs never reach a decision, on either side of the check.
    assert!(matches!(
        la.acquire_at("k", 0, SECOND).await,
        Err(PgAcquireError::Invalid(AcquireError::InvalidCost { .. }))
    ));
    assert!(matches!(
        la.acquire_at("k", 3, SECOND).await,
        Err(PgAcquireError::Invalid(AcquireError::InvalidCost {
            capacity: 2,
            ..
        }))
    ));
    // A schema of another version: refused, and left as it was.
    let db = client(&url).await;
    db.batch_execute(&format!(
        "UPDATE {ns}.bucketproof_schema SET version = version + 1"
    ))
    .await
    .unwrap();
    match PgLimiter::connect(&url, &ns, a).await {
        Err(BuildError::SchemaVersion {
            found, expected, ..
        }) => {
            assert_eq!(
                (found, expected),
                (Some(SCHEMA_VERSION + 1), SCHEMA_VERSION)
            )
        }
        other => panic!("expected a version error, got {other:?}"),
    }
    let version: i32 = db
        .query_one(&format!("SELECT version FROM {ns}.bucketproof_schema"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, SCHEMA_VERSION + 1);
    for bad in ["Upper", "a-b", "a;drop", ""] {
        assert!(matches!(
            PgLimiter::connect(&url, bad, a).await,
            Err(BuildError::Namespace(_))
        ));
    }
    drop_namespace(&url, &ns).await;
}

/// Eight connections on one key, server time: the decisions, put in the order the key's counter
/// gives them (1..=n, each once: no lost update), are exactly what the core decides when it replays
/// them one after another at their own instants. That is atomicity and exactness at once: a lost
/// update, a torn read or a rounding would make some decision differ. (Under a linearizable core
/// the arrival-curve bound follows.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_connections_on_one_key_replay_through_the_core() {
    let Some(url) = database_url("eight_connections_on_one_key_replay_through_the_core") else {
        return;
    };
    let ns = namespace("eight");
    // 20 tokens, 200 per second: hundreds of calls a second both admit and deny.
    let config = Config::new(20, Rate::per_second(200)).unwrap();
    let limiter = Arc::new(PgLimiter::connect(&url, &ns, config).await.unwrap());
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let mut seen = Vec::new();
                for _ in 0..150 {
                    let outcome = limiter.acquire("hot", 1).await.unwrap();
                    seen.push((outcome.seq, outcome.acquired.created, *outcome.decision()));
                }
                seen
            })
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    all.sort_by_key(|s| s.0);
    let n = all.len() as u64;
    assert_eq!(
        all.iter().map(|s| s.0).collect::<Vec<_>>(),
        (1..=n).collect::<Vec<_>>(),
        "every counter once: no lost update"
    );
    assert!(
        all[0].1 && all[1..].iter().all(|s| !s.1),
        "created once, by the first"
    );
    let mut state = BucketState::full(&config, all[0].2.decided_at());
    let (mut admitted, mut concurrent) = (0, 0);
    for (seq, _, decision) in &all {
        let now = decision.decided_at();
        if now < state.last_refill() {
            concurrent += 1; // read the clock before an earlier-serialized call wrote
        }
        let (next, expected) = transition(&config, state, Attempt { cost: 1, now }).unwrap();
        assert_eq!(decision, &expected, "decision {seq}");
        admitted += usize::from(expected.is_allowed());
        state = next;
    }
    assert!(
        admitted > 20 && admitted < all.len(),
        "{admitted} of {n} admitted: the run must both admit and deny"
    );
    eprintln!(
        "eight connections: {n} decisions, {admitted} admitted, {concurrent} judged at a later cursor"
    );
    drop_namespace(&url, &ns).await;
}
