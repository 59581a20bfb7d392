//! Keys of several bandwidths on Redis (docs/semantics.md, "Several bandwidths per key"): one hash and one
//! script call per acquire.
//!
//! Oracle: the reference model's set rule (`bucketproof_model::Model` with a `ModelBandwidths` set), decision
//! by decision over seeded traces in injected time, request-id replays included; and hand-computed cases for
//! the clauses that a wrong script could get wrong quietly: a denial by the second bandwidth charges none, the
//! wait is the largest, the cost bound is the smallest capacity, the range is checked per bandwidth, and a set
//! of one is today's bucket.

mod common;

use std::time::Duration;

use bucketproof_limiter::{
    AcquireError, Bandwidth, Bandwidths, Config, Decision, NANOS_PER_SECOND, Nanos, Rate, Request,
    Tokens, Wait,
};
use bucketproof_model::{Integer, Model, ModelBandwidths, ModelConfig, ModelDecision, ModelWait};
use bucketproof_model::{ModelPeek, Rational};
use bucketproof_redis::{
    BuildError, ReconfigureError, RedisAcquireError, RedisLimiter, Source, max_capacity,
};
use common::{below, chance, cleanup, redis_url, unique_prefix};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

const SECOND: Nanos = NANOS_PER_SECOND;

fn config(capacity: u64, p: u64, q: u64) -> Config {
    Config::new(capacity, Rate::new(p, q).unwrap()).unwrap()
}

/// A burst of 5 at 5/s, 20 a minute, 100 a day.
fn three() -> Bandwidths {
    Bandwidths::new([
        Bandwidth::named("burst", config(5, 5, 1)).unwrap(),
        Bandwidth::named("minute", config(20, 20, 60)).unwrap(),
        Bandwidth::named("day", config(100, 100, 86_400)).unwrap(),
    ])
    .unwrap()
}

fn model_three() -> ModelBandwidths {
    ModelBandwidths::new([
        (Some("burst"), ModelConfig::new(5, 5, 1).unwrap()),
        (Some("minute"), ModelConfig::new(20, 20, 60).unwrap()),
        (Some("day"), ModelConfig::new(100, 100, 86_400).unwrap()),
    ])
    .unwrap()
}

fn rational(tokens: Tokens) -> Rational {
    let (units, per_token) = tokens.as_ratio();
    Rational::from_parts_signed(Integer::from(units), Integer::from(per_token))
}

fn model_wait(wait: Wait) -> ModelWait {
    match wait {
        Wait::After(ns) => ModelWait::After(ns),
        Wait::Never => ModelWait::Never,
    }
}

/// One bandwidth's part (or a binding decision) against the model's.
fn assert_same(got: &Decision, want: &ModelDecision, ctx: &str) {
    assert_eq!(got.is_allowed(), want.is_allowed(), "allowed: {ctx}");
    assert_eq!(
        &rational(got.remaining()),
        want.remaining(),
        "remaining: {ctx}"
    );
    assert_eq!(
        model_wait(got.reset_after()),
        want.reset_after(),
        "reset_after: {ctx}"
    );
    assert_eq!(
        got.retry_after().map(model_wait),
        want.retry_after(),
        "retry_after: {ctx}"
    );
}

fn assert_same_peeks(got: &[bucketproof_limiter::Peek], want: &[ModelPeek], ctx: &str) {
    assert_eq!(got.len(), want.len(), "{ctx}");
    for (g, w) in got.iter().zip(want) {
        assert_eq!(rational(g.remaining), w.remaining, "peek remaining: {ctx}");
        assert_eq!(
            model_wait(g.reset_after),
            w.reset_after,
            "peek reset_after: {ctx}"
        );
    }
}

/// Mostly small steps (so the minute and the day run dry), the retry boundary and 1 ns before it,
/// rollbacks, and rare long idle gaps (a day refills everything).
fn next_now(rng: &mut ChaCha8Rng, now: Nanos, retry: Option<Nanos>) -> Nanos {
    match below(rng, 64) {
        0..=7 => now,
        8..=31 => now.saturating_add(below(rng, 400_000_000)),
        32..=39 => now.saturating_add(below(rng, 5 * SECOND)),
        40..=43 => now.saturating_sub(below(rng, 3 * SECOND)), // rollback
        44..=51 => match retry {
            Some(r) => now.saturating_add(r),
            None => now.saturating_add(below(rng, SECOND)),
        },
        52..=59 => match retry {
            Some(r) => now.saturating_add(r.saturating_sub(1)),
            None => now.saturating_add(below(rng, 1000)),
        },
        60 if chance(rng, 1, 4) => now.saturating_add(86_400 * SECOND),
        _ => now.saturating_add(below(rng, 60 * SECOND)),
    }
}

#[tokio::test]
async fn a_set_decides_as_the_model_decision_by_decision() {
    let Some(url) = redis_url("a_set_decides_as_the_model_decision_by_decision") else {
        return;
    };
    let window = Duration::from_secs(30);
    let per_key = 3;
    let (mut replays, mut denied_later, mut allowed, mut denied) = (0, 0, 0, 0);
    let (mut peeks, mut by_day) = (0, 0);
    for seed in 0..3u64 {
        let prefix = unique_prefix("sets-model");
        let limiter = RedisLimiter::builder(three())
            .prefix(&prefix)
            .dedupe(window, per_key)
            .recovery(bucketproof_redis::Recovery::Trusting)
            .connect(&url)
            .await
            .expect("connect");
        let mut model = Model::new(model_three(), window.as_nanos() as u64, per_key);
        let mut rng = ChaCha8Rng::seed_from_u64(0x5E75 + seed);
        let keys = ["alice", "bob", "carol"];
        let mut now: Nanos = below(&mut rng, 1 << 40);
        let mut retry = None;
        for op in 0..900 {
            now = next_now(&mut rng, now, retry);
            let k = below(&mut rng, 3);
            let key = keys[k as usize];
            let cost = match below(&mut rng, 14) {
                0 => 0,
                1 => 6, // above the smallest capacity, below the others
                2 => 5,
                3..=8 => 1,
                _ => 1 + below(&mut rng, 5),
            };
            let id = chance(&mut rng, 2, 5).then(|| below(&mut rng, 6));
            let ctx = format!("seed {seed} op {op} key {key} now {now} cost {cost} id {id:?}");
            if op % 7 == 0 {
                let got = limiter.peek_set(key, Some(now)).await.expect("peek_set");
                assert_same_peeks(&got, &model.peek_set(k, now), &ctx);
                peeks += 1;
            }
            let mut request = Request::cost(cost).at(now);
            if let Some(id) = id {
                request = request.id(id);
            }
            let expected = model.acquire(k, now, cost, id);
            let expected_copy = expected.clone();
            // Half the calls ask for every part, half for the one binding decision.
            let whole = chance(&mut rng, 1, 2);
            let got = if whole {
                limiter.acquire_set_with(key, request).await.map(Ok)
            } else {
                limiter.acquire_with(key, request).await.map(Err)
            };
            match (expected, got) {
                (
                    Err(_),
                    Err(RedisAcquireError::Invalid(AcquireError::InvalidCost { capacity, .. })),
                ) => {
                    assert_eq!(capacity, 5, "{ctx}");
                    assert!(cost == 0 || cost > 5, "{ctx}");
                }
                (Ok(want), Ok(Ok(set))) => {
                    assert_eq!(set.source, Source::Store);
                    assert_eq!(set.acquired.replayed, want.replayed, "replayed: {ctx}");
                    assert_eq!(set.acquired.created, want.created, "created: {ctx}");
                    let decisions = set.decisions();
                    assert_eq!(decisions.is_allowed(), want.decisions.is_allowed(), "{ctx}");
                    for (i, (g, w)) in decisions
                        .bandwidths()
                        .iter()
                        .zip(want.decisions.bandwidths())
                        .enumerate()
                    {
                        assert_same(g, w, &format!("{ctx} bandwidth {i}"));
                    }
                    assert_eq!(decisions.bandwidths().len(), 3);
                    assert_eq!(
                        decisions.retry_after().map(model_wait),
                        want.decisions.retry_after(),
                        "whole retry_after: {ctx}"
                    );
                    assert_eq!(
                        model_wait(decisions.reset_after()),
                        want.decisions.reset_after()
                    );
                    assert_same(
                        decisions.binding(),
                        &want.decision,
                        &format!("{ctx} binding"),
                    );
                    retry = decisions.retry_after().and_then(Wait::nanos);
                }
                (Ok(want), Ok(Err(one))) => {
                    assert_eq!(one.source, Source::Store);
                    assert_eq!(one.acquired.replayed, want.replayed, "replayed: {ctx}");
                    assert_eq!(one.acquired.created, want.created, "created: {ctx}");
                    assert_same(&one.decision(), &want.decision, &format!("{ctx} binding"));
                    retry = one.decision().retry_after().and_then(Wait::nanos);
                }
                (expected, got) => panic!("{ctx}: model {expected:?}, Redis {got:?}"),
            }
            if let Ok(want) = &expected_copy {
                let parts = want.decisions.bandwidths();
                replays += want.replayed as u32;
                allowed += want.decisions.is_allowed() as u32;
                denied += !want.decisions.is_allowed() as u32;
                // Denied while the burst covered: by the minute or the day alone.
                denied_later += (!want.decisions.is_allowed()
                    && parts[0].retry_after() == Some(ModelWait::After(0)))
                    as u32;
                by_day += (!want.decisions.is_allowed()
                    && parts[2].retry_after() != Some(ModelWait::After(0)))
                    as u32;
            }
        }
        cleanup(&url, &prefix).await;
    }
    eprintln!(
        "sets vs model: {allowed} allowed, {denied} denied, {replays} replays, {denied_later} denied with the burst \
         covering, {by_day} with the day short, {peeks} peeks"
    );
    // The traces did reach what they are for.
    assert!(replays >= 20, "replays {replays}");
    assert!(
        denied_later >= 10,
        "denials the burst covered {denied_later}"
    );
    assert!(
        allowed >= 300 && denied >= 300,
        "allowed {allowed} denied {denied}"
    );
    assert!(peeks >= 150, "peeks {peeks}");
    assert!(by_day >= 5, "denials the day was short for {by_day}");
}

/// Five tokens a second apart for four seconds: the burst refills every second, the minute does not.
async fn drained(limiter: &RedisLimiter, key: &str) {
    for i in 0..4 {
        let outcome = limiter.acquire_set_at(key, 5, i * SECOND).await.unwrap();
        assert!(outcome.decisions().is_allowed(), "acquire {i}");
    }
}

#[tokio::test]
async fn a_denial_by_the_second_bandwidth_charges_none() {
    let Some(url) = redis_url("a_denial_by_the_second_bandwidth_charges_none") else {
        return;
    };
    let prefix = unique_prefix("sets-denial");
    let limiter = RedisLimiter::builder(three())
        .prefix(&prefix)
        .recovery(bucketproof_redis::Recovery::Trusting)
        .connect(&url)
        .await
        .unwrap();
    drained(&limiter, "k").await;
    // At 4 s: the burst is full again (5), the minute holds 1 + 4/3, the day 80 + 4/864.
    let now = 4 * SECOND;
    let before: Vec<_> = limiter.peek_set("k", Some(now)).await.unwrap();
    assert_eq!(before[0].remaining.whole(), 5);
    assert_eq!(
        before[1].remaining.as_ratio(),
        (4 * 1_000_000_000, 3_000_000_000)
    );
    let denied = limiter.acquire_set_at("k", 5, now).await.unwrap();
    let decisions = denied.decisions();
    assert!(!decisions.is_allowed());
    let after = limiter.peek_set("k", Some(now)).await.unwrap();
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        assert_eq!(
            b.remaining, a.remaining,
            "bandwidth {i} was charged on a denial"
        );
    }
    let parts = decisions.bandwidths();
    assert_eq!(
        parts[0].remaining().whole(),
        5,
        "the burst covered and was not charged"
    );
    assert_eq!(parts[0].retry_after(), Some(Wait::After(0)));
    assert_eq!(parts[2].retry_after(), Some(Wait::After(0)));
    // The minute is short 11/3 tokens at 1/3 a second: 11 s.
    assert_eq!(parts[1].retry_after(), Some(Wait::After(11 * SECOND)));
    assert_eq!(decisions.retry_after(), Some(Wait::After(11 * SECOND)));
    // A second denial changes nothing either, and the wait is tight.
    assert!(
        !limiter
            .acquire_set_at("k", 5, 15 * SECOND - 1)
            .await
            .unwrap()
            .decisions()
            .is_allowed()
    );
    assert!(
        limiter
            .acquire_set_at("k", 5, 15 * SECOND)
            .await
            .unwrap()
            .decisions()
            .is_allowed()
    );
    cleanup(&url, &prefix).await;
}

#[tokio::test]
async fn the_wait_is_the_largest_and_acquire_answers_with_the_binding_part() {
    let Some(url) = redis_url("the_wait_is_the_largest_and_acquire_answers_with_the_binding_part")
    else {
        return;
    };
    let prefix = unique_prefix("sets-wait");
    let limiter = RedisLimiter::builder(three())
        .prefix(&prefix)
        .recovery(bucketproof_redis::Recovery::Trusting)
        .connect(&url)
        .await
        .unwrap();
    drained(&limiter, "k").await;
    // At 3.1 s both the burst (1/2 token, short 9/2 at 5/s: 0.9 s) and the minute (31/30, short 119/30
    // at 1/3 a second: 11.9 s) are short; the day covers.
    let now = 3 * SECOND + 100_000_000;
    let denied = limiter.acquire_set_at("k", 5, now).await.unwrap();
    let parts = denied.decisions().bandwidths();
    assert_eq!(parts[0].retry_after(), Some(Wait::After(900_000_000)));
    assert_eq!(parts[1].retry_after(), Some(Wait::After(11_900_000_000)));
    assert_eq!(parts[2].retry_after(), Some(Wait::After(0)));
    assert_eq!(
        denied.decisions().retry_after(),
        Some(Wait::After(11_900_000_000))
    );
    // `acquire_at` answers with the binding part: the minute's, so its wait is the whole decision's.
    let one = limiter.acquire_at("k", 5, now).await.unwrap().decision();
    assert!(!one.is_allowed());
    assert_eq!(one.retry_after(), Some(Wait::After(11_900_000_000)));
    assert_eq!(one.config(), config(20, 20, 60));
    // The single peek is the bandwidth with the fewest whole tokens: the burst (0).
    let peek = limiter.peek("k", Some(now)).await.unwrap();
    assert_eq!(peek.config, config(5, 5, 1));
    assert_eq!(peek.remaining.as_ratio(), (500_000_000, 1_000_000_000));
    // Retrying at the burst's wait is still denied (by the minute); at the largest wait it is allowed.
    assert!(
        !limiter
            .acquire_at("k", 5, now + 900_000_000)
            .await
            .unwrap()
            .decision()
            .is_allowed()
    );
    assert!(
        !limiter
            .acquire_at("k", 5, now + 11_900_000_000 - 1)
            .await
            .unwrap()
            .decision()
            .is_allowed()
    );
    assert!(
        limiter
            .acquire_at("k", 5, now + 11_900_000_000)
            .await
            .unwrap()
            .decision()
            .is_allowed()
    );
    cleanup(&url, &prefix).await;
}

#[tokio::test]
async fn the_cost_bound_is_the_smallest_capacity_and_never_reaches_redis() {
    let Some(url) = redis_url("the_cost_bound_is_the_smallest_capacity_and_never_reaches_redis")
    else {
        return;
    };
    let prefix = unique_prefix("sets-cost");
    // The smallest capacity is not the first bandwidth's.
    let set = Bandwidths::new([
        Bandwidth::new(config(20, 20, 60)),
        Bandwidth::new(config(5, 5, 1)),
    ])
    .unwrap();
    let limiter = RedisLimiter::builder(set)
        .prefix(&prefix)
        .recovery(bucketproof_redis::Recovery::Trusting)
        .connect(&url)
        .await
        .unwrap();
    for cost in [0, 6, 20] {
        match limiter.acquire_set_at("k", cost, SECOND).await {
            Err(RedisAcquireError::Invalid(AcquireError::InvalidCost { cost: c, capacity })) => {
                assert_eq!((c, capacity), (cost, 5));
            }
            other => panic!("cost {cost}: {other:?}"),
        }
        assert!(limiter.acquire_at("k", cost, SECOND).await.is_err());
    }
    assert!(
        !limiter.peek_set("k", Some(SECOND)).await.unwrap()[0].present,
        "nothing written"
    );
    assert!(
        limiter
            .acquire_set_at("k", 5, SECOND)
            .await
            .unwrap()
            .decisions()
            .is_allowed()
    );
    // Reconfigure of a set key is a typed error and changes nothing.
    let refused = limiter
        .reconfigure("k", config(3, 1, 1), Some(SECOND))
        .await;
    assert!(
        matches!(
            refused,
            Err(ReconfigureError::SeveralBandwidths { bandwidths: 2 })
        ),
        "{refused:?}"
    );
    cleanup(&url, &prefix).await;
}

#[tokio::test]
async fn the_exact_range_is_checked_per_bandwidth() {
    let Some(url) = redis_url("the_exact_range_is_checked_per_bandwidth") else {
        return;
    };
    let rate = Rate::per_second(1);
    let edge = max_capacity(rate).unwrap();
    for (second, ok) in [(edge, true), (edge + 1, false)] {
        let set = Bandwidths::new([
            Bandwidth::new(config(5, 5, 1)),
            Bandwidth::new(Config::new(second, rate).unwrap()),
        ])
        .unwrap();
        let built = RedisLimiter::builder(set)
            .prefix(unique_prefix("sets-range"))
            .recovery(bucketproof_redis::Recovery::Trusting)
            .connect(&url)
            .await;
        match (ok, built) {
            (true, Ok(_)) => {}
            (false, Err(BuildError::Range(e))) => assert!(e.to_string().contains("2^53"), "{e}"),
            (ok, built) => panic!("capacity {second}: expected ok={ok}, got {built:?}"),
        }
    }
}

#[tokio::test]
async fn a_set_of_one_is_todays_bucket() {
    let Some(url) = redis_url("a_set_of_one_is_todays_bucket") else {
        return;
    };
    let config = config(5, 7, 3);
    let plain_prefix = unique_prefix("sets-one-plain");
    let named_prefix = unique_prefix("sets-one-named");
    let plain = RedisLimiter::builder(config)
        .prefix(&plain_prefix)
        .recovery(bucketproof_redis::Recovery::Trusting)
        .connect(&url)
        .await
        .unwrap();
    let named = RedisLimiter::builder(
        Bandwidths::new([Bandwidth::named("only", config).unwrap()]).unwrap(),
    )
    .prefix(&named_prefix)
    .recovery(bucketproof_redis::Recovery::Trusting)
    .connect(&url)
    .await
    .unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let mut now = SECOND;
    for op in 0..60 {
        now += below(&mut rng, SECOND);
        let cost = 1 + below(&mut rng, 5);
        let request = Request::cost(cost).at(now).id(below(&mut rng, 4));
        let a = plain.acquire_with("k", request).await.unwrap();
        let b = named.acquire_set_with("k", request).await.unwrap();
        assert_eq!(b.decisions().bandwidths(), [a.decision()], "op {op}");
        assert_eq!(
            (a.acquired.replayed, a.acquired.created, a.seq),
            (b.acquired.replayed, b.acquired.created, b.seq)
        );
    }
    // The same stored bucket, byte for byte: the one-bandwidth script ran for both.
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let plain_bucket = common::stored_bucket(&mut conn, &plain.redis_key("k")).await;
    assert!(plain_bucket.is_some());
    assert_eq!(
        plain_bucket,
        common::stored_bucket(&mut conn, &named.redis_key("k")).await
    );
    cleanup(&url, &plain_prefix).await;
    cleanup(&url, &named_prefix).await;
}

#[tokio::test]
async fn server_time_and_replays_of_a_set() {
    let Some(url) = redis_url("server_time_and_replays_of_a_set") else {
        return;
    };
    let prefix = unique_prefix("sets-server");
    let limiter = RedisLimiter::builder(three())
        .prefix(&prefix)
        .recovery(bucketproof_redis::Recovery::Trusting)
        .connect(&url)
        .await
        .unwrap();
    let first = limiter
        .acquire_set_with("k", Request::cost(2).id(9u64))
        .await
        .unwrap();
    assert!(first.decisions().is_allowed() && first.acquired.created);
    let again = limiter
        .acquire_set_with("k", Request::cost(2).id(9u64))
        .await
        .unwrap();
    assert!(again.acquired.replayed);
    assert_eq!(
        again.decisions(),
        first.decisions(),
        "the whole recorded decision"
    );
    assert_eq!(again.seq, first.seq);
    let other = limiter.acquire_set("k", 1).await.unwrap();
    assert_eq!(other.seq, first.seq + 1);
    assert_eq!(other.decisions().bandwidths()[2].remaining().whole(), 97);
    let peeks = limiter.peek_set("k", None).await.unwrap();
    assert!(peeks.iter().all(|p| p.present));
    cleanup(&url, &prefix).await;
}

/// A limiter of one bandwidth and one of several on one prefix: each key's layout is its own (a packed
/// string, a hash), and each limiter refuses the other's key with a typed error, changing nothing.
#[tokio::test]
async fn a_key_of_the_other_layout_is_refused_and_untouched() {
    let Some(url) = redis_url("a_key_of_the_other_layout_is_refused_and_untouched") else {
        return;
    };
    let prefix = unique_prefix("sets-layout");
    let one = RedisLimiter::builder(*three().first())
        .prefix(&prefix)
        .recovery(bucketproof_redis::Recovery::Trusting)
        .connect(&url)
        .await
        .unwrap();
    let set = RedisLimiter::builder(three())
        .prefix(&prefix)
        .recovery(bucketproof_redis::Recovery::Trusting)
        .connect(&url)
        .await
        .unwrap();
    one.acquire_at("single", 1, SECOND).await.unwrap();
    set.acquire_set_at("multi", 1, SECOND).await.unwrap();
    let mismatch = |e: RedisAcquireError| matches!(e, RedisAcquireError::ConfigMismatch(_));
    assert!(mismatch(
        one.acquire_at("multi", 1, SECOND).await.unwrap_err()
    ));
    assert!(mismatch(one.peek("multi", Some(SECOND)).await.unwrap_err()));
    assert!(mismatch(
        set.acquire_set_at("single", 1, SECOND).await.unwrap_err()
    ));
    assert!(mismatch(
        set.peek("single", Some(SECOND)).await.unwrap_err()
    ));
    assert!(matches!(
        one.reconfigure("multi", *three().first(), Some(SECOND))
            .await,
        Err(ReconfigureError::ConfigMismatch(_))
    ));
    // Nothing changed: each key decides on as before (one token spent at 1 s, nothing refilled).
    let single = one.acquire_at("single", 1, SECOND).await.unwrap();
    let multi = set.acquire_set_at("multi", 1, SECOND).await.unwrap();
    assert_eq!(single.seq, 2);
    assert_eq!(multi.seq, 2);
    assert_eq!(
        single.decision().remaining().whole() + 2,
        three().first().capacity()
    );
    cleanup(&url, &prefix).await;
}
