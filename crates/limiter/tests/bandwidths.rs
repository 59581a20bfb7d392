//! Keys of several bandwidths on the keyed limiter (docs/semantics.md, "Several bandwidths per key").
//!
//! Hand-computed cases for each clause of the rule (all or none charged, the cost bound, the largest
//! wait and its tightness, Never, reconfiguration by identity, request ids, expiry), and a seeded
//! comparison: a set of one unnamed bandwidth decides exactly as the same [`Config`], and a set key's
//! decision equals the one-bandwidth decisions of its bandwidths taken together.
#![cfg(not(any(loom, feature = "shuttle")))]

use bucketproof_limiter::{
    AcquireError, Bandwidth, Bandwidths, Config, EvictionPolicy, Limiter, ManualClock, Rate,
    Request, Wait,
};

const SECOND: u64 = bucketproof_limiter::NANOS_PER_SECOND;

fn config(capacity: u64, rate: &str) -> Config {
    Config::new(capacity, rate.parse().unwrap()).unwrap()
}

/// A burst of 2 refilled 1/s, and a sustained 5 refilled 1 per 10 s.
fn burst_and_sustained() -> Bandwidths {
    Bandwidths::new([
        Bandwidth::named("burst", config(2, "1/s")).unwrap(),
        Bandwidth::named("sustained", config(5, "1/10s")).unwrap(),
    ])
    .unwrap()
}

fn limiter(set: Bandwidths) -> Limiter<u64, ManualClock> {
    Limiter::builder(set)
        .clock(ManualClock::new(0))
        .hasher_seed(1)
        .build()
}

fn remaining(limiter: &Limiter<u64, ManualClock>, key: u64, now: u64) -> Vec<(u128, u128)> {
    limiter
        .peek_set_at(&key, now)
        .iter()
        .map(|peek| peek.remaining.as_ratio())
        .collect()
}

#[test]
fn a_denial_by_one_bandwidth_charges_none() {
    let limiter = limiter(burst_and_sustained());
    // Five 1-token acquires a second apart: the burst refills, the sustained bandwidth runs dry.
    for i in 0..5 {
        assert!(limiter.acquire_at(&1, 1, i * SECOND).unwrap().is_allowed());
    }
    let before = remaining(&limiter, 1, 5 * SECOND);
    let denied = limiter.acquire_set_at(&1, 1, 5 * SECOND).unwrap();
    assert!(!denied.is_allowed());
    assert_eq!(
        remaining(&limiter, 1, 5 * SECOND),
        before,
        "nothing charged"
    );
    // The burst covered the cost (its own wait is 0); the sustained one is short.
    let parts = denied.bandwidths();
    assert_eq!(parts[0].retry_after(), Some(Wait::After(0)));
    assert_eq!(parts[0].remaining().whole(), 2);
    assert!(parts[1].remaining().whole() < 1);
}

#[test]
fn retry_after_is_the_largest_wait_and_tight() {
    let limiter = limiter(burst_and_sustained());
    assert!(limiter.acquire_at(&1, 2, 0).unwrap().is_allowed());
    assert!(limiter.acquire_at(&1, 2, 2 * SECOND).unwrap().is_allowed());
    // Burst: 0 at 2 s, needs 2 s for 2 tokens. Sustained: 1 + 0.2 at 2 s, needs 8 s for 0.8 more.
    let denied = limiter.acquire_set_at(&1, 2, 2 * SECOND).unwrap();
    assert_eq!(
        denied.bandwidths()[0].retry_after(),
        Some(Wait::After(2 * SECOND))
    );
    assert_eq!(
        denied.bandwidths()[1].retry_after(),
        Some(Wait::After(8 * SECOND))
    );
    assert_eq!(denied.retry_after(), Some(Wait::After(8 * SECOND)));
    assert_eq!(denied.binding().retry_after(), denied.retry_after());
    let single = limiter.acquire_at(&1, 2, 2 * SECOND).unwrap();
    assert_eq!(
        single.retry_after(),
        Some(Wait::After(8 * SECOND)),
        "binding part"
    );
    assert!(
        !limiter
            .acquire_at(&1, 2, 10 * SECOND - 1)
            .unwrap()
            .is_allowed()
    );
    assert!(limiter.acquire_at(&1, 2, 10 * SECOND).unwrap().is_allowed());
}

#[test]
fn a_short_bandwidth_that_never_refills_says_never() {
    let set = Bandwidths::new([
        Bandwidth::new(config(3, "1/s")),
        Bandwidth::new(config(4, "0/s")),
    ])
    .unwrap();
    let limiter = limiter(set);
    assert!(limiter.acquire_at(&1, 3, 0).unwrap().is_allowed());
    let denied = limiter.acquire_set_at(&1, 3, 0).unwrap();
    assert_eq!(denied.retry_after(), Some(Wait::Never));
    // Short only in the refilling bandwidth: a finite wait, not Never.
    let denied = limiter.acquire_set_at(&1, 1, 0).unwrap();
    assert_eq!(denied.retry_after(), Some(Wait::After(SECOND)));
}

#[test]
fn a_cost_above_the_smallest_capacity_is_an_error_that_changes_nothing() {
    let limiter = limiter(burst_and_sustained());
    assert!(limiter.acquire_at(&1, 1, 0).unwrap().is_allowed());
    let before = limiter.inspect_set(&1);
    assert_eq!(
        limiter.acquire_at(&1, 3, SECOND),
        Err(AcquireError::InvalidCost {
            cost: 3,
            capacity: 2
        })
    );
    assert!(limiter.acquire_set_at(&1, 0, SECOND).is_err());
    assert_eq!(limiter.inspect_set(&1), before);
    assert!(limiter.acquire_at(&2, 3, 0).is_err());
    assert!(
        limiter.is_empty() || limiter.len() == 1,
        "no key created by an error"
    );
}

#[test]
fn reconfiguration_continues_each_bandwidth_by_identity() {
    let limiter = limiter(burst_and_sustained());
    assert!(limiter.acquire_at(&1, 2, 0).unwrap().is_allowed());
    // Drop the burst, keep `sustained` (3 left), add a daily quota (starts full).
    let new = Bandwidths::new([
        Bandwidth::named("daily", config(100, "100/d")).unwrap(),
        Bandwidth::named("sustained", config(5, "1/10s")).unwrap(),
    ])
    .unwrap();
    assert_eq!(limiter.reconfigure_at(&1, new.clone(), 0), Ok(1));
    assert_eq!(limiter.bandwidths_for(&1), new);
    let left: Vec<u64> = limiter
        .peek_set_at(&1, 0)
        .iter()
        .map(|p| p.remaining.whole())
        .collect();
    assert_eq!(left, [100, 3]);
    // Back to one unnamed config: it continues position 0 (`daily` is named, so nothing does):
    // a new bandwidth starts full.
    assert_eq!(limiter.reconfigure_at(&1, config(7, "1/s"), 0), Ok(2));
    assert_eq!(
        remaining(&limiter, 1, 0),
        [(7 * SECOND as u128, SECOND as u128)]
    );
    assert_eq!(
        limiter.acquire_set_at(&1, 1, 0).unwrap().bandwidths().len(),
        1
    );
}

#[test]
fn a_retried_request_id_replays_every_bandwidth() {
    let limiter = limiter(burst_and_sustained());
    let request = Request::cost(2).at(0).id(9u64);
    let first = limiter.acquire_set_with(&1, request).unwrap();
    let again = limiter
        .acquire_set_with(&1, request.at(SECOND / 2))
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.decision, first.decision);
    assert_eq!(limiter.peek_at(&1, 0).remaining.whole(), 0, "charged once");
}

#[test]
fn a_set_key_expires_only_when_every_bandwidth_is_full() {
    let limiter = Limiter::builder(burst_and_sustained())
        .clock(ManualClock::new(0))
        .max_keys(1, EvictionPolicy::EvictFull)
        .shards(1)
        .build();
    assert!(limiter.acquire_at(&1, 1, 0).unwrap().is_allowed());
    // At 1 s the burst is full again, the sustained bandwidth is not (full at 10 s).
    assert_eq!(limiter.sweep_at(SECOND), 0);
    assert!(matches!(
        limiter.acquire_at(&2, 1, SECOND),
        Err(AcquireError::KeyLimitReached { .. })
    ));
    assert_eq!(limiter.sweep_at(10 * SECOND), 1);
    assert!(limiter.acquire_at(&2, 1, 10 * SECOND).unwrap().is_allowed());
}

/// splitmix64, so a failing seed replays.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[test]
fn a_set_decides_as_its_bandwidths_taken_together() {
    // Three bandwidths, and each alone as a single-config limiter charged only when all three allow.
    let parts = [config(3, "2/s"), config(5, "7/3s"), config(9, "1/s")];
    let set = Bandwidths::new(parts.map(Bandwidth::new)).unwrap();
    let together = limiter(set);
    let one_of_one = limiter(Bandwidths::from(parts[0]));
    let plain: Limiter<u64, ManualClock> = Limiter::builder(parts[0])
        .hasher_seed(1)
        .clock(ManualClock::new(0))
        .build();
    let alone: Vec<Limiter<u64, ManualClock>> = parts
        .iter()
        .map(|c| {
            Limiter::builder(*c)
                .hasher_seed(1)
                .clock(ManualClock::new(0))
                .build()
        })
        .collect();
    let mut rng = 7;
    let mut now = SECOND;
    for step in 0..3000 {
        // Mostly forward, sometimes back (rollbacks credit nothing).
        now = match next(&mut rng) % 10 {
            0 => now.saturating_sub(next(&mut rng) % SECOND),
            _ => now + next(&mut rng) % (SECOND / 2),
        };
        let key = next(&mut rng) % 3;
        let cost = 1 + next(&mut rng) % 4;
        let whole = together.acquire_set_at(&key, cost, now);
        // A set of one unnamed bandwidth is the config itself.
        assert_eq!(
            one_of_one.acquire_at(&key, cost.min(3), now),
            plain.acquire_at(&key, cost.min(3), now),
            "step {step}"
        );
        let Ok(whole) = whole else {
            assert!(cost > 3, "step {step}: only a cost above 3 is an error");
            continue;
        };
        let cover = alone.iter().all(|l| l.would_allow_at(&key, cost, now));
        assert_eq!(whole.is_allowed(), cover, "step {step}");
        for (position, l) in alone.iter().enumerate() {
            // Charge a bandwidth alone only when all allowed; otherwise the denial only refills
            // (and moves the cursor, which matters under the next rollback): a reconfiguration to
            // the same config does exactly that.
            let decision = if cover {
                l.acquire_at(&key, cost, now).unwrap()
            } else {
                l.reconfigure_at(&key, parts[position], now).unwrap();
                let peek = l.peek_at(&key, now);
                assert_eq!(
                    whole.bandwidths()[position].remaining(),
                    peek.remaining,
                    "step {step}"
                );
                continue;
            };
            assert_eq!(
                whole.bandwidths()[position].remaining(),
                decision.remaining(),
                "step {step}"
            );
        }
        if let Some(Wait::After(wait)) = whole.retry_after() {
            // Tight, judged read-only on the set key itself: every bandwidth covers at `now + wait`,
            // one does not 1 ns earlier.
            assert!(
                together.would_allow_at(&key, cost, now + wait),
                "step {step}"
            );
            assert!(
                !together.would_allow_at(&key, cost, now + wait - 1),
                "step {step}"
            );
        }
    }
}

#[test]
fn rate_zero_and_names_round_trip_through_the_public_types() {
    let set =
        Bandwidths::new([
            Bandwidth::named("q", Config::new(1, Rate::per_second(0)).unwrap()).unwrap(),
        ])
        .unwrap();
    assert_eq!(
        set.single(),
        None,
        "a named bandwidth is a set, not a bare config"
    );
    let limiter = limiter(set);
    assert!(limiter.acquire_at(&1, 1, 0).unwrap().is_allowed());
    assert_eq!(
        limiter.acquire_at(&1, 1, 0).unwrap().retry_after(),
        Some(Wait::Never)
    );
}

/// A peek of a set key reports the bandwidth with the fewest whole tokens, the first of equals.
#[test]
fn a_peek_reports_the_first_of_the_bandwidths_with_fewest_tokens() {
    let set = Bandwidths::new([
        Bandwidth::named("fast", config(3, "1/s")).unwrap(),
        Bandwidth::named("slow", config(3, "1/10s")).unwrap(),
    ])
    .unwrap();
    let limiter = limiter(set);
    assert!(limiter.acquire_set_at(&1, 2, 0).unwrap().is_allowed());
    // Both hold 1 whole token; the first (fast) is full again after 2 s, the slow one after 20 s.
    let peek = limiter.peek_at(&1, 0);
    assert_eq!(peek.remaining.whole(), 1);
    assert_eq!(peek.config, config(3, "1/s"));
}

/// The token distribution counts a set key by its emptiest bandwidth, refilled to the instant asked,
/// and changes nothing.
#[test]
fn fill_levels_count_a_set_key_by_its_emptiest_bandwidth() {
    let limiter = limiter(burst_and_sustained());
    assert_eq!(limiter.fill_levels_at(0).keys(), 0);
    // Key 1: burst 2 → 1 (half), sustained 5 → 4 (eight tenths): counted at half.
    limiter.acquire_at(&1, 1, 0).unwrap();
    // Key 2: untouched since its creation by a cost of 2: burst empty.
    limiter.acquire_at(&2, 2, 0).unwrap();
    let levels = limiter.fill_levels_at(0);
    assert_eq!(levels.keys(), 2);
    assert_eq!(levels.tenths[5], 1, "{levels:?}");
    assert_eq!(levels.tenths[0], 1, "{levels:?}");
    // Read-only: asking again later does not refill the stored state.
    let before = remaining(&limiter, 1, 0);
    // Half a second later the burst of key 2 holds 0.5 of 2: a quarter; key 1's burst 1.5 of 2.
    let later = limiter.fill_levels_at(SECOND / 2);
    assert_eq!(later.tenths[2], 1, "{later:?}");
    assert_eq!(later.tenths[7], 1, "{later:?}");
    assert_eq!(remaining(&limiter, 1, 0), before);
}

/// One-bandwidth keys: full, partly drained and empty buckets in their tenths.
#[test]
fn fill_levels_count_one_bandwidth_keys_in_tenths() {
    let limiter: Limiter<u64, ManualClock> = Limiter::builder(config(10, "1/s"))
        .clock(ManualClock::new(0))
        .hasher_seed(1)
        .build();
    for (key, cost) in [(1, 10), (2, 1), (3, 5), (4, 9)] {
        limiter.acquire_at(&key, cost, 0).unwrap();
    }
    let levels = limiter.fill_levels_at(0);
    assert_eq!(levels.tenths, [1, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0]);
    // Ten seconds later all are full again.
    assert_eq!(limiter.fill_levels_at(10 * SECOND).tenths[10], 4);
}
