//! The key bound as docs/semantics.md states it ("Expiry and the key bound", reconfigure step 5): a
//! reconfigure of a new key meets the bound exactly as an acquire of a new key does; a refusal
//! drops nothing; a key with an override (pinned) is never dropped, not even by the lossy
//! `EvictLeastRecent`, which therefore refuses once the keys it could drop are gone.
//!
//! Every limiter here has one shard and no amortized sweep, so which key a policy drops is
//! determined by the test alone.

use bucketproof_limiter::{AcquireError, Config, EvictionPolicy, Limiter};

const SECOND: u64 = bucketproof_limiter::NANOS_PER_SECOND;

const POLICIES: [EvictionPolicy; 3] = [
    EvictionPolicy::RejectNewKeys,
    EvictionPolicy::EvictFull,
    EvictionPolicy::EvictLeastRecent,
];

fn config(capacity: u64, rate: &str) -> Config {
    Config::new(capacity, rate.parse().unwrap()).unwrap()
}

/// The default config of every limiter here, and the override the tests pin keys with.
fn default_config() -> Config {
    config(2, "1/s")
}

fn pinned_config() -> Config {
    config(5, "1/3s")
}

fn limiter(max_keys: usize, policy: EvictionPolicy) -> Limiter<u64> {
    Limiter::builder(default_config())
        .max_keys(max_keys, policy)
        .sweep_per_op(0)
        .shards(1)
        .build()
}

fn refused<T>(result: &Result<T, AcquireError>) -> bool {
    matches!(result, Err(AcquireError::KeyLimitReached { .. }))
}

/// What a refusal must leave as it was: every key's state and config, the live keys, the drops.
fn everything(
    limiter: &Limiter<u64>,
    keys: std::ops::Range<u64>,
) -> impl PartialEq + std::fmt::Debug {
    let held: Vec<_> = keys.map(|key| (key, limiter.inspect(&key))).collect();
    let stats = limiter.stats();
    (
        held,
        limiter.len(),
        stats.evicted_lossless,
        stats.evicted_lossy,
    )
}

/// A bound of one key, held by key 1, emptied at 0 (not evictable until it has refilled, at 2 s).
fn with_key_1(policy: EvictionPolicy) -> Limiter<u64> {
    let limiter = limiter(1, policy);
    limiter.acquire_at(&1, 2, 0).unwrap();
    limiter
}

/// For each policy and for a held key that is evictable (refilled) or not, a reconfigure of a new key
/// and an acquire of a new key on a twin limiter either both make room, dropping the same key, or
/// both are refused, and the refused one changes nothing.
#[test]
fn a_reconfigure_of_a_new_key_meets_the_bound_as_an_acquire_does() {
    for policy in POLICIES {
        // At 0 key 1 is empty (not evictable); at 2 s it is full again (evictable).
        for now in [0, 2 * SECOND] {
            let by_reconfigure = with_key_1(policy);
            let by_acquire = with_key_1(policy);
            let before = everything(&by_reconfigure, 0..3);
            let reconfigured = by_reconfigure.reconfigure_at(&2, pinned_config(), now);
            let acquired = by_acquire.acquire_at(&2, 1, now);
            let label = format!("{policy:?} at {now}");
            assert_eq!(refused(&reconfigured), refused(&acquired), "{label}");
            let expect_room = match policy {
                EvictionPolicy::RejectNewKeys => false,
                EvictionPolicy::EvictFull => now > 0,
                _ => true,
            };
            assert_eq!(
                reconfigured.is_ok(),
                expect_room,
                "{label}: {reconfigured:?}"
            );
            if expect_room {
                assert_eq!(reconfigured, Ok(1), "{label}: the first version");
                assert_eq!(by_reconfigure.config_for(&2), pinned_config(), "{label}");
                for twin in [&by_reconfigure, &by_acquire] {
                    assert_eq!(twin.inspect(&1), None, "{label}: key 1 made room");
                    assert_eq!(twin.len(), 1, "{label}");
                }
                assert_eq!(
                    by_reconfigure.stats().evicted_lossy,
                    by_acquire.stats().evicted_lossy,
                    "{label}: the same kind of drop"
                );
            } else {
                assert_eq!(everything(&by_reconfigure, 0..3), before, "{label}");
                assert_eq!(by_reconfigure.config_for(&2), default_config(), "{label}");
                // Key 1 kept its place: a held key is never refused.
                assert_eq!(
                    by_reconfigure.reconfigure_at(&1, pinned_config(), now),
                    Ok(1)
                );
            }
        }
    }
}

/// A bound filled with pinned keys refuses every new key, by acquire or by reconfigure, under every
/// policy, and the refusal drops nothing: no key is evicted to make room for a key then refused.
#[test]
fn a_refusal_at_the_bound_drops_nothing() {
    for policy in POLICIES {
        let limiter = limiter(2, policy);
        for key in [1, 2] {
            assert_eq!(limiter.reconfigure_at(&key, pinned_config(), 0), Ok(1));
        }
        limiter.acquire_at(&1, 5, SECOND).unwrap();
        let before = everything(&limiter, 0..5);
        for now in [SECOND, 1_000 * SECOND] {
            let label = format!("{policy:?} at {now}");
            assert!(refused(&limiter.acquire_at(&3, 1, now)), "{label}");
            assert!(
                refused(&limiter.reconfigure_at(&4, pinned_config(), now)),
                "{label}"
            );
            assert_eq!(everything(&limiter, 0..5), before, "{label}");
        }
        assert_eq!(limiter.stats().rejected_keys, 4, "{policy:?}: counted");
        // A held key is never refused, pinned or not.
        assert_eq!(
            limiter.reconfigure_at(&1, default_config(), 2 * SECOND),
            Ok(2)
        );
        assert!(limiter.acquire_at(&2, 1, 2 * SECOND).is_ok());
    }
}

/// `EvictLeastRecent` drops the oldest key without an override, never a pinned one, and refuses a
/// new key once every key it holds is pinned: also the key it dropped earlier to make room for a
/// pinned one, until a pinned key is forgotten.
#[test]
fn least_recent_never_drops_a_pinned_key_and_refuses_when_only_pinned_keys_are_left() {
    let limiter = limiter(2, EvictionPolicy::EvictLeastRecent);
    // Key 1 is pinned and the least recent; key 2 is not full, so neither is evictable.
    assert_eq!(limiter.reconfigure_at(&1, pinned_config(), 0), Ok(1));
    limiter.acquire_at(&1, 5, 0).unwrap();
    limiter.acquire_at(&2, 2, SECOND / 2).unwrap();
    // A new pinned key makes room by dropping key 2 (lossy), not the older pinned key 1.
    assert_eq!(limiter.reconfigure_at(&3, pinned_config(), SECOND), Ok(1));
    assert_eq!(limiter.inspect(&2), None, "the unpinned key made room");
    assert!(limiter.inspect(&1).is_some(), "the pinned key stays");
    assert_eq!(limiter.stats().evicted_lossy, 1);
    // Only pinned keys are left: the dropped key 2 and a fresh key 4 are refused, key 1 and key 3
    // keep their state.
    let before = everything(&limiter, 0..5);
    assert!(refused(&limiter.acquire_at(&2, 1, 2 * SECOND)));
    assert!(refused(&limiter.acquire_at(&4, 1, 2 * SECOND)));
    assert_eq!(everything(&limiter, 0..5), before);
    // Forgetting a pinned key frees its place.
    assert!(limiter.forget(&1));
    assert!(limiter.acquire_at(&2, 1, 2 * SECOND).unwrap().is_allowed());
}
