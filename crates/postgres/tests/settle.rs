//! Reserve, then settle, on PostgreSQL (docs/semantics.md, "settle"): each rule on its own (a refund
//! once and capped, an extra all or none and a denied one left open, every error changing nothing,
//! no row ever created, the cleanup keeping a row whose record is live, a settle retried after its
//! backend died refunding once), then seeded traces of acquires with request ids, settles, retries,
//! rollbacks and reconfigures decided by the schema's functions and by the core's `Limiter`, decision
//! by decision and state by state, for one bandwidth and for a set of three.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bucketproof_limiter::{
    Bandwidth, Bandwidths, Config, Limiter, NANOS_PER_SECOND, Nanos, Rate, Request, RequestId,
    Settle, SettleError, Wait,
};
use bucketproof_postgres::{PgAcquireError, PgLimiter};
use common::{
    client, database_url, drop_namespace, hold_row, namespace, terminate_the_waiter,
    with_application_name,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const S: Nanos = NANOS_PER_SECOND;

/// 10 tokens, one a second; request ids live 60 s, 8 per key.
async fn limiter(url: &str, ns: &str) -> PgLimiter {
    PgLimiter::builder(Config::new(10, Rate::per_second(1)).unwrap())
        .namespace(ns)
        .dedupe(Duration::from_secs(60), 8)
        .connect(url)
        .await
        .unwrap()
}

/// An admitted reserve of `cost` with request id `id` at `now`.
async fn reserve(limiter: &PgLimiter, key: &str, id: u64, cost: u64, now: Nanos) {
    let request = Request::cost(cost).at(now).id(id);
    let reserved = limiter.acquire_with(key, request).await.unwrap();
    assert!(reserved.decision().is_allowed(), "the reserve is admitted");
}

/// Whole tokens the key would have at `now`.
async fn remaining(limiter: &PgLimiter, key: &str, now: Nanos) -> u64 {
    limiter
        .peek(key, Some(now))
        .await
        .unwrap()
        .remaining
        .whole()
}

/// The key's whole row as text, read behind the limiter's back (`None`: no row).
async fn row(url: &str, ns: &str, key: &str) -> Option<String> {
    client(url)
        .await
        .query_opt(
            &format!("SELECT b::text FROM {ns}.buckets AS b WHERE key = $1"),
            &[&key],
        )
        .await
        .unwrap()
        .map(|row| row.get(0))
}

fn settle_error(result: Result<impl std::fmt::Debug, PgAcquireError>) -> SettleError {
    match result {
        Err(PgAcquireError::Settle(error)) => error,
        other => panic!("expected a settle error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_lower_actual_gives_back_the_difference_once() {
    let Some(url) = database_url("a_lower_actual_gives_back_the_difference_once") else {
        return;
    };
    let ns = namespace("settle_once");
    let limiter = limiter(&url, &ns).await;
    reserve(&limiter, "a", 1, 6, 0).await;
    let settled = limiter
        .settle("a", Settle::new(1u64, 2).at(0))
        .await
        .unwrap();
    assert!(settled.decision.is_allowed() && !settled.replayed);
    assert_eq!(settled.decision.remaining().whole(), 8);
    let after = row(&url, &ns, "a").await;
    // Retried, at a later time too: replayed, nothing more given back, nothing written.
    for now in [0, S / 2] {
        let again = limiter
            .settle("a", Settle::new(1u64, 2).at(now))
            .await
            .unwrap();
        assert!(again.replayed);
        assert_eq!(again.decision, settled.decision);
        assert_eq!(row(&url, &ns, "a").await, after);
    }
    assert_eq!(remaining(&limiter, "a", 0).await, 8);
    // Another actual for a settled request is an error and changes nothing.
    assert_eq!(
        settle_error(limiter.settle("a", Settle::new(1u64, 0).at(0)).await),
        SettleError::AlreadySettled { actual: 2 }
    );
    assert_eq!(row(&url, &ns, "a").await, after);
    // The acquire's own retry still answers the acquire's decision.
    let replay = (limiter.acquire_with("a", Request::cost(6).at(0).id(1u64)))
        .await
        .unwrap();
    assert!(replay.acquired.replayed);
    assert_eq!(replay.decision().remaining().whole(), 4);
    drop_namespace(&url, &ns).await;
}

#[tokio::test]
async fn a_refund_never_lifts_a_bucket_above_capacity() {
    let Some(url) = database_url("a_refund_never_lifts_a_bucket_above_capacity") else {
        return;
    };
    let ns = namespace("settle_capped");
    let limiter = limiter(&url, &ns).await;
    let capacity_units = limiter.config().capacity_units();
    reserve(&limiter, "a", 1, 6, 0).await;
    // Refilled to full by 6 s: the refund of 6 has nowhere to go.
    let settled = (limiter.settle("a", Settle::new(1u64, 0).at(6 * S)))
        .await
        .unwrap();
    assert_eq!(settled.decision.remaining().units(), capacity_units);
    // Half-way: 4 + 3 refilled + 6 refunded is capped at 10.
    reserve(&limiter, "b", 2, 6, 0).await;
    let settled = (limiter.settle("b", Settle::new(2u64, 0).at(3 * S)))
        .await
        .unwrap();
    assert_eq!(settled.decision.remaining().units(), capacity_units);
    let (state, _) = limiter.inspect("b").await.unwrap().unwrap();
    assert_eq!(state.bandwidth(0).unwrap().balance(), capacity_units);
    drop_namespace(&url, &ns).await;
}

#[tokio::test]
async fn an_extra_is_charged_when_covered_and_a_denied_one_leaves_the_request_open() {
    let Some(url) = database_url("an_extra_is_charged_when_covered") else {
        return;
    };
    let ns = namespace("settle_extra");
    let limiter = limiter(&url, &ns).await;
    reserve(&limiter, "a", 1, 2, 0).await;
    let settled = limiter
        .settle("a", Settle::new(1u64, 5).at(0))
        .await
        .unwrap();
    assert!(settled.decision.is_allowed());
    assert_eq!(settled.decision.remaining().whole(), 5);
    // Another reserve takes 5: an extra of 4 is not covered, charges nothing, leaves it open.
    reserve(&limiter, "a", 2, 5, 0).await;
    let denied = limiter
        .settle("a", Settle::new(2u64, 9).at(0))
        .await
        .unwrap();
    assert!(!denied.decision.is_allowed() && !denied.replayed);
    assert_eq!(remaining(&limiter, "a", 0).await, 0);
    let wait = denied.decision.retry_after().and_then(Wait::nanos).unwrap();
    assert_eq!(wait, 4 * S);
    // At now + retry_after the same settle is allowed, then replayed.
    let allowed = limiter
        .settle("a", Settle::new(2u64, 9).at(wait))
        .await
        .unwrap();
    assert!(allowed.decision.is_allowed() && !allowed.replayed);
    assert_eq!(allowed.decision.remaining().whole(), 0);
    let again = limiter
        .settle("a", Settle::new(2u64, 9).at(wait))
        .await
        .unwrap();
    assert!(again.replayed && again.decision == allowed.decision);
    drop_namespace(&url, &ns).await;
}

#[tokio::test]
async fn every_settle_error_changes_nothing_and_no_row_is_ever_created() {
    let Some(url) = database_url("every_settle_error_changes_nothing") else {
        return;
    };
    let ns = namespace("settle_errors");
    let limiter = limiter(&url, &ns).await;
    // No row: unknown, and none is made; an actual above the capacity is refused first (step 1).
    for actual in [0, 3] {
        assert_eq!(
            settle_error(
                limiter
                    .settle("none", Settle::new(1u64, actual).at(0))
                    .await
            ),
            SettleError::UnknownRequest
        );
    }
    assert!(matches!(
        settle_error(limiter.settle("none", Settle::new(1u64, 11).at(0)).await),
        SettleError::InvalidActual { actual: 11, .. }
    ));
    assert_eq!(row(&url, &ns, "none").await, None);
    reserve(&limiter, "a", 1, 4, 0).await;
    reserve(&limiter, "b", 9, 4, 0).await;
    // "a" denies id 2 (cost 7 > 6 left).
    let denied = (limiter.acquire_with("a", Request::cost(7).at(0).id(2u64)))
        .await
        .unwrap();
    assert!(!denied.decision().is_allowed());
    let before = row(&url, &ns, "a").await;
    let cases = [
        (
            Settle::new(1u64, 11).at(0),
            SettleError::InvalidActual {
                actual: 11,
                capacity: 10,
            },
        ),
        (Settle::new(3u64, 1).at(0), SettleError::UnknownRequest),
        // Another key's request.
        (Settle::new(9u64, 1).at(0), SettleError::UnknownRequest),
        (Settle::new(2u64, 1).at(0), SettleError::NotAdmitted),
        // Out of the window (60 s after the stamp).
        (Settle::new(1u64, 1).at(60 * S), SettleError::UnknownRequest),
    ];
    for (settle, expected) in cases {
        assert_eq!(
            settle_error(limiter.settle("a", settle).await),
            expected,
            "{settle:?}"
        );
        assert_eq!(
            row(&url, &ns, "a").await,
            before,
            "{settle:?} changed the row"
        );
    }
    // A record pushed out of the FIFO (8 per key) is unknown.
    for id in 100..108u64 {
        reserve(&limiter, "b", id, 1, 10 * S).await;
    }
    assert_eq!(
        settle_error(limiter.settle("b", Settle::new(9u64, 0).at(10 * S)).await),
        SettleError::UnknownRequest
    );
    // The key's own override bounds the actual.
    limiter
        .reconfigure("a", Config::new(3, Rate::per_second(1)).unwrap(), Some(S))
        .await
        .unwrap();
    assert_eq!(
        settle_error(limiter.settle("a", Settle::new(1u64, 4).at(S)).await),
        SettleError::InvalidActual {
            actual: 4,
            capacity: 3
        }
    );
    // A forgotten key: unknown, and not recreated.
    limiter.forget("a").await.unwrap();
    assert_eq!(
        settle_error(limiter.settle("a", Settle::new(1u64, 0).at(S)).await),
        SettleError::UnknownRequest
    );
    assert_eq!(row(&url, &ns, "a").await, None);
    drop_namespace(&url, &ns).await;
}

#[tokio::test]
async fn a_set_refunds_each_bandwidth_capped_and_charges_an_extra_to_all_or_none() {
    let Some(url) = database_url("a_set_refunds_each_bandwidth_capped") else {
        return;
    };
    let ns = namespace("settle_set");
    // A burst of 8 refilling 1/s and a quota of 100 that never refills.
    let set = Bandwidths::new([
        Bandwidth::named("burst", Config::new(8, Rate::per_second(1)).unwrap()).unwrap(),
        Bandwidth::named("quota", Config::new(100, Rate::new(0, 1).unwrap()).unwrap()).unwrap(),
    ])
    .unwrap();
    let limiter = PgLimiter::builder(set)
        .namespace(&ns)
        .connect(&url)
        .await
        .unwrap();
    let parts = |decisions: &bucketproof_limiter::Decisions| -> Vec<u64> {
        (decisions.bandwidths().iter())
            .map(|d| d.remaining().whole())
            .collect()
    };
    let reserved = (limiter.acquire_set_with("k", Request::cost(4).at(0).id(1u64)))
        .await
        .unwrap();
    assert_eq!(parts(reserved.decisions()), [4, 96]);
    // At 2 s the burst has 6: its refund of 3 is capped at 8, the quota's is not.
    let settled = (limiter.settle_set("k", Settle::new(1u64, 1).at(2 * S)))
        .await
        .unwrap();
    assert_eq!(parts(&settled.decision), [8, 99]);
    // An extra of 3 the burst (1 left) cannot cover is charged to neither.
    let request = Request::cost(5).at(2 * S).id(2u64);
    limiter.acquire_set_with("k", request).await.unwrap();
    limiter.acquire_set_at("k", 2, 2 * S).await.unwrap();
    let denied = (limiter.settle_set("k", Settle::new(2u64, 8).at(2 * S)))
        .await
        .unwrap();
    assert!(!denied.decision.is_allowed());
    assert_eq!(parts(&denied.decision), [1, 92]);
    assert_eq!(
        limiter
            .peek("k", Some(2 * S))
            .await
            .unwrap()
            .remaining
            .whole(),
        1
    );
    // The one-decision form answers the binding part.
    let binding = limiter
        .settle("k", Settle::new(2u64, 8).at(2 * S))
        .await
        .unwrap();
    assert_eq!(&binding.decision, denied.decision.binding());
    drop_namespace(&url, &ns).await;
}

/// A refund that fills the bucket does not make the row removable while its record is live: a
/// settle after the cleanup still finds the request (and replays rather than refunding again).
#[tokio::test]
async fn the_cleanup_keeps_a_row_whose_record_is_live() {
    let Some(url) = database_url("the_cleanup_keeps_a_row_whose_record_is_live") else {
        return;
    };
    let ns = namespace("settle_cleanup");
    let limiter = limiter(&url, &ns).await;
    reserve(&limiter, "a", 1, 3, 0).await;
    limiter
        .settle("a", Settle::new(1u64, 0).at(0))
        .await
        .unwrap();
    assert_eq!(remaining(&limiter, "a", 0).await, 10, "full again");
    let step = limiter.cleanup_at(100, 59 * S).await.unwrap();
    assert_eq!(step.removed, 0, "the record is live until 60 s");
    let again = limiter
        .settle("a", Settle::new(1u64, 0).at(59 * S))
        .await
        .unwrap();
    assert!(again.replayed);
    let step = limiter.cleanup_at(100, 60 * S).await.unwrap();
    assert_eq!(step.removed, 1, "removable once the record is dead");
    drop_namespace(&url, &ns).await;
}

/// A settle whose backend is terminated while it waits for the row lock is run again by the limiter
/// (it is idempotent): refunded once; the caller's own retry then replays.
#[tokio::test]
async fn a_settle_retried_after_its_backend_died_refunds_once() {
    let Some(url) = database_url("a_settle_retried_after_its_backend_died") else {
        return;
    };
    let ns = namespace("settle_terminated");
    let application = ns.clone();
    let named = with_application_name(&url, &application);
    // No refill: every token shows for good.
    let limiter = Arc::new(
        PgLimiter::builder(Config::new(10, Rate::new(0, 1).unwrap()).unwrap())
            .namespace(&ns)
            .connect(&named)
            .await
            .unwrap(),
    );
    // The server's clock throughout, so the record is live.
    let reserved = limiter
        .acquire_with("k", Request::cost(6).id(7u64))
        .await
        .unwrap();
    assert!(reserved.decision().is_allowed());
    let holder = hold_row(&url, &ns, "k").await;
    let call = tokio::spawn({
        let limiter = limiter.clone();
        async move { limiter.settle("k", Settle::new(7u64, 1)).await }
    });
    terminate_the_waiter(&url, &application).await;
    drop(holder);
    let settled = call.await.unwrap().unwrap();
    assert!(settled.decision.is_allowed() && !settled.replayed);
    assert_eq!(settled.decision.remaining().whole(), 9);
    let again = limiter.settle("k", Settle::new(7u64, 1)).await.unwrap();
    assert!(again.replayed && again.decision == settled.decision);
    let view = limiter.peek("k", None).await.unwrap();
    assert_eq!(view.remaining.whole(), 9, "refunded once");
    drop_namespace(&url, &ns).await;
}

/// Settle has no fallback: a server that refuses every connection is an error after `attempts`
/// tries, even under a fail-open policy (which would flag an acquire as allowed).
#[tokio::test]
async fn an_unreachable_server_is_an_error_never_a_settlement() {
    let Some(url) = database_url("an_unreachable_server_is_an_error") else {
        return;
    };
    let ns = namespace("settle_unreachable");
    // A role of the test's own, later refused at login: only its connections are cut.
    let admin = client(&url).await;
    admin
        .batch_execute(&format!("CREATE ROLE {ns} LOGIN SUPERUSER"))
        .await
        .unwrap();
    let as_role = url.replacen("postgres@", &format!("{ns}@"), 1);
    assert_ne!(as_role, url, "DATABASE_URL names the user postgres");
    let limiter = PgLimiter::builder(Config::new(10, Rate::per_second(1)).unwrap())
        .namespace(&ns)
        .on_unavailable(bucketproof_limiter::outage::Unavailable::FailOpen)
        .attempts(2)
        .connect(&as_role)
        .await
        .unwrap();
    reserve(&limiter, "k", 1, 3, 0).await;
    let before = row(&url, &ns, "k").await;
    admin
        .batch_execute(&format!(
            "ALTER ROLE {ns} NOLOGIN; \
             SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{ns}'"
        ))
        .await
        .unwrap();
    let seen = limiter.settle("k", Settle::new(1u64, 0).at(0)).await;
    assert!(
        matches!(seen, Err(PgAcquireError::Unavailable(_))),
        "{seen:?}"
    );
    assert_eq!(row(&url, &ns, "k").await, before, "nothing settled");
    // Back: the same settle refunds (once).
    admin
        .batch_execute(&format!("ALTER ROLE {ns} LOGIN"))
        .await
        .unwrap();
    let settled = limiter
        .settle("k", Settle::new(1u64, 0).at(0))
        .await
        .unwrap();
    assert!(!settled.replayed && settled.decision.remaining().whole() == 10);
    drop(limiter);
    drop_namespace(&url, &ns).await;
    admin
        .batch_execute(&format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{ns}'; \
             DROP ROLE {ns}"
        ))
        .await
        .unwrap();
}

/// One step of a trace.
#[derive(Clone, Copy, Debug)]
enum Op {
    Acquire { key: usize, id: u64, cost: u64 },
    Settle { key: usize, id: u64, actual: u64 },
    Reconfigure { key: usize, config: usize },
}

/// The configs a one-bandwidth key is moved between: other capacities and unit grids (rates of
/// another denominator).
fn reconfigs() -> Vec<Config> {
    vec![
        Config::new(4, Rate::new(2, 3).unwrap()).unwrap(),
        Config::new(10, Rate::per_second(1)).unwrap(),
        Config::new(20, Rate::new(5, 7).unwrap()).unwrap(),
        Config::new(6, Rate::new(0, 1).unwrap()).unwrap(),
    ]
}

/// Runs a seeded trace on PostgreSQL and on the core with the same settings: every answer equal
/// (decisions to the unit and the nanosecond, every bandwidth's part, errors by case), and after
/// each step the touched key's stored state and peek equal.
async fn trace(url: &str, ns: &str, set: Bandwidths, seed: u64, reconfigure: bool) -> [usize; 6] {
    let window = Duration::from_secs(20);
    let per_key = 3;
    let pg = PgLimiter::builder(set.clone())
        .namespace(ns)
        .dedupe(window, per_key)
        .connect(url)
        .await
        .unwrap();
    let core: Limiter<String> = Limiter::builder(set.clone())
        .dedupe(window, per_key)
        .build();
    let bound = set.cost_bound();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut now: Nanos = 100 * S;
    // (key, id, cost) of past acquires, to settle.
    let mut acquired: Vec<(usize, u64, u64)> = Vec::new();
    let mut last_settle: Option<Op> = None;
    let mut next_id = 1u64;
    // Refunds, extras allowed, extras denied, replays, errors, reconfigures.
    let mut seen = [0usize; 6];
    let mut errors = std::collections::BTreeMap::new();
    for step in 0..400 {
        // Mostly forward; sometimes back (a rollback of the caller's clock), rarely past the window.
        now = match rng.gen_range(0..40) {
            0..=2 => now.saturating_sub(rng.gen_range(0..3 * S)),
            3 => now + rng.gen_range(5 * S..25 * S),
            _ => now + rng.gen_range(0..S / 2),
        };
        let op = match rng.gen_range(0..20) {
            0..=6 => {
                // Mostly new ids; sometimes a retry of an old one, on its key or another.
                let id = if rng.gen_range(0..5) == 0 && next_id > 1 {
                    rng.gen_range(1..next_id)
                } else {
                    next_id += 1;
                    next_id - 1
                };
                let cost = match rng.gen_range(0..10) {
                    0 => bound + 1,
                    1 => bound,
                    _ => rng.gen_range(1..=bound.min(4)),
                };
                Op::Acquire {
                    key: rng.gen_range(0..3),
                    id,
                    cost,
                }
            }
            7..=8 if last_settle.is_some() => last_settle.unwrap(),
            9 if reconfigure => Op::Reconfigure {
                key: rng.gen_range(0..3),
                config: rng.gen_range(0..reconfigs().len()),
            },
            _ if !acquired.is_empty() => {
                let (mut key, id, charged) =
                    acquired[acquired.len() - 1 - rng.gen_range(0..acquired.len().min(6))];
                if rng.gen_range(0..8) == 0 {
                    key = (key + 1) % 3; // another key's request
                }
                let id = if rng.gen_range(0..12) == 0 {
                    999_999
                } else {
                    id
                };
                let actual = match rng.gen_range(0..8) {
                    0 => 0,
                    1 => charged,
                    2 => charged + 1,
                    3 => bound + 1,
                    4 => bound,
                    _ => rng.gen_range(0..=bound.min(6)),
                };
                let op = Op::Settle { key, id, actual };
                last_settle = Some(op);
                op
            }
            _ => continue,
        };
        let ctx = format!("seed {seed}, step {step}, {op:?}, now {now}");
        let touched = match op {
            Op::Acquire { key, id, cost } => {
                let request = Request::cost(cost).at(now).id(RequestId::from(id));
                let name = format!("k{key}");
                let expected = core.acquire_set_with(&name, request);
                let got = pg.acquire_set_with(&name, request).await;
                match (expected, got) {
                    (Ok(e), Ok(g)) => {
                        assert_eq!(g.acquired.decision, e.decision, "{ctx}");
                        assert_eq!(g.acquired.replayed, e.replayed, "{ctx}");
                        // Denied ones too, to settle (NotAdmitted).
                        if !e.replayed {
                            acquired.push((key, id, cost));
                        }
                    }
                    (Err(e), Err(PgAcquireError::Invalid(g))) => assert_eq!(e, g, "{ctx}"),
                    (e, g) => panic!("{ctx}: expected {e:?}, got {g:?}"),
                }
                name
            }
            Op::Settle { key, id, actual } => {
                let settle = Settle::new(id, actual).at(now);
                let name = format!("k{key}");
                let expected = core.settle_set(&name, settle);
                let got = pg.settle_set(&name, settle).await;
                match (expected, got) {
                    (Ok(e), Ok(g)) => {
                        assert_eq!(g, e, "{ctx}");
                        let charged = (acquired.iter().rev())
                            .find(|a| a.0 == key && a.1 == id)
                            .map_or(0, |a| a.2);
                        seen[match () {
                            _ if e.replayed => 3,
                            _ if actual <= charged => 0,
                            _ if e.decision.is_allowed() => 1,
                            _ => 2,
                        }] += 1;
                    }
                    (Err(e), Err(PgAcquireError::Settle(g))) => {
                        assert_eq!(e, g, "{ctx}");
                        seen[4] += 1;
                        *errors
                            .entry(
                                format!("{e:?}")
                                    .split([' ', '{'])
                                    .next()
                                    .unwrap()
                                    .to_owned(),
                            )
                            .or_insert(0) += 1;
                    }
                    (e, g) => panic!("{ctx}: expected {e:?}, got {g:?}"),
                }
                name
            }
            Op::Reconfigure { key, config } => {
                let name = format!("k{key}");
                let config = reconfigs()[config];
                let expected = core.reconfigure_at(&name, config, now).unwrap();
                let got = pg.reconfigure(&name, config, Some(now)).await.unwrap();
                assert_eq!(u64::from(got), expected, "{ctx}");
                seen[5] += 1;
                name
            }
        };
        // The stored state (not refilled) and the view at now, equal.
        assert_eq!(
            pg.inspect(&touched).await.unwrap(),
            core.inspect_set(&touched),
            "{ctx}: stored state"
        );
        let view = pg.peek(&touched, Some(now)).await.unwrap();
        let parts = core.peek_set_at(&touched, now);
        let fewest = (parts.iter()).min_by_key(|p| p.remaining.whole()).unwrap();
        assert_eq!(&view, fewest, "{ctx}: peek");
    }
    eprintln!("seed {seed}: errors {errors:?}");
    assert_eq!(
        errors.len(),
        4,
        "seed {seed}: every kind of error happened: {errors:?}"
    );
    seen
}

#[tokio::test]
async fn traces_of_one_bandwidth_with_reconfigures_equal_the_cores() {
    let Some(url) = database_url("traces_of_one_bandwidth_equal_the_cores") else {
        return;
    };
    let mut total = [0usize; 6];
    for seed in 0..4 {
        let ns = namespace(&format!("settle_trace1_{seed}"));
        let set = Bandwidths::from(Config::new(8, Rate::new(3, 2).unwrap()).unwrap());
        let seen = trace(&url, &ns, set, seed, true).await;
        drop_namespace(&url, &ns).await;
        for (t, s) in total.iter_mut().zip(seen) {
            *t += s;
        }
    }
    eprintln!(
        "one bandwidth: refunds, extras allowed, extras denied, replays, errors, reconfigures: {total:?}"
    );
    assert!(
        total.iter().all(|&n| n >= 10),
        "every kind of step happened: {total:?}"
    );
}

#[tokio::test]
async fn traces_of_a_set_of_three_bandwidths_equal_the_cores() {
    let Some(url) = database_url("traces_of_a_set_equal_the_cores") else {
        return;
    };
    let mut total = [0usize; 6];
    for seed in 10..14 {
        let ns = namespace(&format!("settle_trace3_{seed}"));
        let set = Bandwidths::new([
            Bandwidth::named("burst", Config::new(6, Rate::per_second(2)).unwrap()).unwrap(),
            Bandwidth::named("minute", Config::new(12, Rate::new(1, 3).unwrap()).unwrap()).unwrap(),
            Bandwidth::named(
                "day",
                Config::new(40, Rate::new(1, 86_400).unwrap()).unwrap(),
            )
            .unwrap(),
        ])
        .unwrap();
        let seen = trace(&url, &ns, set, seed, false).await;
        drop_namespace(&url, &ns).await;
        for (t, s) in total.iter_mut().zip(seen) {
            *t += s;
        }
    }
    eprintln!(
        "three bandwidths: refunds, extras allowed, extras denied, replays, errors: {total:?}"
    );
    assert!(
        total[..5].iter().all(|&n| n >= 10),
        "every kind of step happened: {total:?}"
    );
}

/// A namespace of the schema before settle (version 6: records without settlements, no settle
/// function) is refused by name and left as it is, never upgraded in place.
#[tokio::test]
async fn a_namespace_of_the_version_before_settle_is_refused() {
    let Some(url) = database_url("a_namespace_of_the_version_before_settle_is_refused") else {
        return;
    };
    let ns = namespace("settle_version");
    let config = Config::new(10, Rate::per_second(1)).unwrap();
    drop(PgLimiter::connect(&url, &ns, config).await.unwrap());
    let db = client(&url).await;
    db.batch_execute(&format!("UPDATE {ns}.bucketproof_schema SET version = 6"))
        .await
        .unwrap();
    match PgLimiter::connect(&url, &ns, config).await {
        Err(bucketproof_postgres::BuildError::SchemaVersion {
            found, expected, ..
        }) => assert_eq!(
            (found, expected),
            (Some(6), bucketproof_postgres::SCHEMA_VERSION)
        ),
        other => panic!("expected a version error, got {other:?}"),
    }
    drop_namespace(&url, &ns).await;
}
