//! `EvictionPolicy::EvictKeepingDeficit` under a flood of fresh ids (docs/semantics.md, "Expiry and
//! the key bound"): a key dropped while not full comes back no fuller than its dropped bucket would be,
//! so no legitimate user is admitted beyond its budget, where `EvictLeastRecent` admits every request.

use bucketproof_limiter::{Config, EvictionPolicy, Limiter, Wait};

const SECOND: u64 = bucketproof_limiter::NANOS_PER_SECOND;

fn limiter(max_keys: usize, policy: EvictionPolicy, shards: usize) -> Limiter<u64> {
    Limiter::builder(Config::new(2, "1/s".parse().unwrap()).unwrap())
        .max_keys(max_keys, policy)
        .sweep_per_op(0)
        .shards(shards)
        .hasher_seed(3)
        .build()
}

/// Key 1 is emptied at 0 and dropped at 0.5 s to make room for key 2: back at 0.5 s it holds half a
/// token (its dropped bucket refilled to then) and is denied for half a second; under
/// `EvictLeastRecent` it comes back full and is admitted twice more.
#[test]
fn a_key_dropped_owing_comes_back_no_fuller_than_it_would_be() {
    let keeping = limiter(1, EvictionPolicy::EvictKeepingDeficit, 1);
    keeping.acquire_at(&1, 2, 0).unwrap();
    assert!(keeping.acquire_at(&2, 1, SECOND / 2).unwrap().is_allowed());
    assert_eq!(keeping.stats().evicted_owing, 1);
    let back = keeping.acquire_at(&1, 1, SECOND / 2).unwrap();
    assert!(!back.is_allowed());
    assert_eq!(back.retry_after(), Some(Wait::After(SECOND / 2)));
    assert_eq!(keeping.stats().created_owing, 1);
    assert!(keeping.acquire_at(&2, 1, SECOND).unwrap().is_allowed());
    // Back once more at 2 s, when it would have been full: nothing is owed any more.
    assert!(keeping.acquire_at(&1, 2, 2 * SECOND).unwrap().is_allowed());

    let lossy = limiter(1, EvictionPolicy::EvictLeastRecent, 1);
    lossy.acquire_at(&1, 2, 0).unwrap();
    lossy.acquire_at(&2, 1, SECOND / 2).unwrap();
    assert!(
        lossy.acquire_at(&1, 2, SECOND / 2).unwrap().is_allowed(),
        "lossy by contract"
    );
}

/// The two traces at which a victim's "full again" instant lies past the end of the clock (so it is
/// saturated at `u64::MAX`): near the clock's end, and mid-clock at a rate so slow that a refill to
/// full takes longer than the clock holds. Either way the dropped key owes every token it spent, and
/// comes back no fuller than its dropped bucket would be: here, empty.
#[test]
fn a_victim_full_only_past_the_end_of_the_clock_comes_back_owing_all_it_spent() {
    let cases = [
        // capacity 4 at 1/s, at the end of the clock: the same trace at 1000 s is denied too.
        (4, "1/s", u64::MAX - SECOND),
        (4, "1/s", 1_000 * SECOND),
        // capacity 8 at 1/2^32 per second, mid-clock: 8 tokens take ~1.1e30 ns to refill.
        (8, "1/4294967296s", 1_000 * SECOND),
    ];
    for (capacity, rate, at) in cases {
        let limiter: Limiter<u64> =
            Limiter::builder(Config::new(capacity, rate.parse().unwrap()).unwrap())
                .max_keys(1, EvictionPolicy::EvictKeepingDeficit)
                .sweep_per_op(0)
                .shards(1)
                .hasher_seed(3)
                .build();
        assert!(limiter.acquire_at(&0, capacity, at).unwrap().is_allowed());
        // Key 3 takes the only slot: key 0 is dropped owing all it spent.
        assert!(limiter.acquire_at(&3, 1, at).unwrap().is_allowed());
        assert_eq!(
            limiter.stats().evicted_owing,
            1,
            "{capacity} at {rate}, {at}"
        );
        let back = limiter.acquire_at(&0, capacity - 1, at).unwrap();
        assert!(
            !back.is_allowed(),
            "{capacity} at {rate}, {at}: came back fuller"
        );
        assert_eq!(back.remaining().whole(), 0, "{capacity} at {rate}, {at}");
    }
}

/// A small flood: 10 users at 10 requests a second on a bucket of 2 refilling 1/s, 30,000 fresh
/// attacker ids at one per 100 µs, a bound of 64 keys over 4 shards. Every user's admissions are
/// checked against its budget over every interval: none exceeds it under `EvictKeepingDeficit` (nor
/// under the two lossless policies), while under `EvictLeastRecent` users are admitted beyond it.
#[test]
fn no_user_is_admitted_beyond_its_budget_under_a_flood() {
    for policy in [
        EvictionPolicy::EvictKeepingDeficit,
        EvictionPolicy::EvictFull,
        EvictionPolicy::RejectNewKeys,
        EvictionPolicy::EvictLeastRecent,
    ] {
        let limiter = limiter(64, policy, 4);
        let mut admitted: Vec<Vec<u64>> = vec![Vec::new(); 10];
        for step in 0..30_000u64 {
            let now = step * 100_000;
            let _ = limiter.acquire_at(&((1 << 40) + step), 1, now);
            if step % 100 == 0 {
                let user = (step / 100) % 10;
                if let Ok(decision) = limiter.acquire_at(&user, 1, now)
                    && decision.is_allowed()
                {
                    admitted[user as usize].push(now);
                }
            }
        }
        let over = over_budget(&admitted, 2, 1);
        let total: usize = admitted.iter().map(Vec::len).sum();
        if policy == EvictionPolicy::EvictLeastRecent {
            assert!(
                over > 0,
                "the lossy policy lifts the limit ({total} admitted)"
            );
        } else {
            assert_eq!(over, 0, "{policy:?}: {total} admitted");
            assert!(total > 0, "{policy:?}: the users were served");
        }
    }
}

/// Admissions of `users` bursting users (12 requests at one instant every 2.5 s, user `u` at `25 u`
/// ms past each period, on a bucket of 10 refilling 5/s) over 10 s, with or without a flood of fresh
/// ids at one per 100 µs against a bound of 1,000 keys over 4 shards: the flood drops about 10,000
/// buckets a second, each still owing a fraction of a token. Returns the users' admissions and the
/// admissions beyond some user's budget `10 + 5 (b - a)` over an interval `[a, b]`.
fn bursty_users(users: u64, flood: bool) -> (usize, u64) {
    let limiter: Limiter<u64> = Limiter::builder(Config::new(10, "5/s".parse().unwrap()).unwrap())
        .max_keys(1_000, EvictionPolicy::EvictKeepingDeficit)
        .shards(4)
        .hasher_seed(11)
        .build();
    let mut admitted: Vec<Vec<u64>> = vec![Vec::new(); users as usize];
    for step in 0..100_000u64 {
        let now = step * 100_000;
        if flood {
            let _ = limiter.acquire_at(&((1 << 40) + step), 1, now);
        }
        let in_period = now % (5 * SECOND / 2);
        if in_period.is_multiple_of(SECOND / 40) && in_period / (SECOND / 40) < users {
            let user = in_period / (SECOND / 40);
            for _ in 0..12 {
                if limiter.acquire_at(&user, 1, now).unwrap().is_allowed() {
                    admitted[user as usize].push(now);
                }
            }
        }
    }
    let over = over_budget(&admitted, 10, 5);
    (admitted.iter().map(Vec::len).sum(), over)
}

/// Bursty users whose buckets are full again between bursts lose under 1% of their admissions to a
/// flood of fresh ids under `EvictKeepingDeficit`, and are never admitted beyond their budget. Each
/// fresh id that spends a token is dropped owing a fifth of a second at most; were a new bucket to
/// pay every debt written on its slot, fresh ids landing on owing slots would write those debts back
/// longer (a debt that feeds on itself), and a user's bucket, recreated between bursts, would start
/// several tokens short.
#[test]
fn bursty_users_lose_under_one_percent_to_a_flood() {
    let (calm, calm_over) = bursty_users(20, false);
    let (flooded, over) = bursty_users(20, true);
    assert_eq!((calm_over, over), (0, 0));
    assert_eq!(
        calm,
        20 * 4 * 10,
        "every burst finds a full bucket when calm"
    );
    assert!(
        flooded * 100 >= calm * 99,
        "{flooded} admitted under the flood against {calm} calm"
    );
}

/// Over every interval `[a, b]` between two of a user's admissions (`admitted[user]`, in ns), the
/// admissions beyond its budget of `capacity + rate_per_s * (b - a)` tokens, summed over users.
fn over_budget(admitted: &[Vec<u64>], capacity: u64, rate_per_s: u64) -> u64 {
    let mut over = 0;
    for times in admitted {
        for (i, &a) in times.iter().enumerate() {
            for (j, &b) in times.iter().enumerate().skip(i) {
                let count = (j - i + 1) as u64;
                if count * SECOND > capacity * SECOND + rate_per_s * (b - a) {
                    over += 1;
                }
            }
        }
    }
    over
}
