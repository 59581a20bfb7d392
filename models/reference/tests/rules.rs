//! Example-based tests of docs/semantics.md, one rule (or one corner of a rule) per test. Every expected value is
//! worked out by hand in the comment next to it, independently of the model's code.

use bucketproof_model::Integer;
use bucketproof_model::Rational;
use bucketproof_model::{
    ConfigError, Model, ModelBucket, ModelConfig, ModelDecision, ModelError, ModelWait,
};

const S: u64 = 1_000_000_000;

fn cfg(capacity: u64, p: u64, q: u64) -> ModelConfig {
    ModelConfig::new(capacity, p, q).expect("valid config in test")
}

fn r(n: i128, d: i128) -> Rational {
    Rational::from_parts_signed(Integer::from(n), Integer::from(d))
}

fn int(n: u64) -> Rational {
    Rational::from(n)
}

fn allowed(model: &mut Model, key: u64, now: u64, cost: u64) -> ModelDecision {
    let out = model.acquire(key, now, cost, None).expect("valid cost");
    assert!(
        out.decision.is_allowed(),
        "expected allowed at {now}: {out:?}"
    );
    out.decision
}

fn denied(model: &mut Model, key: u64, now: u64, cost: u64) -> ModelDecision {
    let out = model.acquire(key, now, cost, None).expect("valid cost");
    assert!(
        !out.decision.is_allowed(),
        "expected denied at {now}: {out:?}"
    );
    out.decision
}

#[test]
fn a_new_key_is_a_full_bucket_created_at_its_first_now() {
    let mut m = Model::new(cfg(5, 1, 1), 0, 0);
    // Peek of an unknown key: full, reset_after 0, and nothing is created.
    let p = m.peek(7, 123);
    assert_eq!(p.remaining, int(5));
    assert_eq!(p.reset_after, ModelWait::After(0));
    assert_eq!(m.state(7), None);
    assert!(m.keys().is_empty());
    // First acquire: created, charged from capacity, last_refill = now.
    let out = m.acquire(7, 123, 2, None).unwrap();
    assert!(out.created && !out.replayed);
    // 3 tokens left, 2 missing at 1 token/s: full again after 2 s.
    assert_eq!(
        out.decision,
        ModelDecision::Allowed {
            remaining: int(3),
            reset_after: ModelWait::After(2 * S)
        }
    );
    assert_eq!(m.state(7), Some((&int(3), 123)));
    assert_eq!(m.keys(), vec![7]);
    assert!(!m.acquire(7, 124, 1, None).unwrap().created);
}

#[test]
fn refill_at_one_third_token_per_second_gives_one_token_at_exactly_3_s_not_1_ns_earlier() {
    let mut m = Model::new(cfg(1, 1, 3), 0, 0);
    let d = allowed(&mut m, 0, 0, 1);
    // Empty; one token takes 3 s at 1/3 token/s.
    assert_eq!(d.reset_after(), ModelWait::After(3 * S));
    let emptied = m.clone();

    // 1 ns early: (3e9 - 1) ns * 1/(3e9) token/ns = (3e9 - 1)/(3e9) token: denied, 1 ns to go.
    let d = denied(&mut m, 0, 3 * S - 1, 1);
    assert_eq!(
        d,
        ModelDecision::Denied {
            remaining: r(3_000_000_000 - 1, 3_000_000_000),
            retry_after: ModelWait::After(1),
            reset_after: ModelWait::After(1),
        }
    );
    // The denial wrote the refill back.
    assert_eq!(
        m.state(0),
        Some((&r(3_000_000_000 - 1, 3_000_000_000), 3 * S - 1))
    );

    // Exactly at 3 s: one whole token.
    let mut m = emptied;
    assert_eq!(m.peek(0, 3 * S).remaining, int(1));
    let d = allowed(&mut m, 0, 3 * S, 1);
    assert_eq!(d.remaining(), &int(0));
}

#[test]
fn cost_equal_to_capacity_is_allowed_on_a_full_bucket_and_empties_it() {
    let mut m = Model::new(cfg(10, 2, 1), 0, 0);
    let d = allowed(&mut m, 1, 50, 10);
    // 10 missing at 2 tokens/s = 5 s.
    assert_eq!(
        d,
        ModelDecision::Allowed {
            remaining: int(0),
            reset_after: ModelWait::After(5 * S)
        }
    );
    // Right after, the same request waits the whole 5 s.
    let d = denied(&mut m, 1, 50, 10);
    assert_eq!(d.retry_after(), Some(ModelWait::After(5 * S)));
}

#[test]
fn cost_zero_and_cost_above_capacity_are_errors_that_change_nothing() {
    let mut m = Model::new(cfg(3, 1, 1), 10 * S, 4);
    // On an unknown key: an error, and the key is still unknown.
    for cost in [0, 4, u64::MAX] {
        assert_eq!(
            m.acquire(9, 100, cost, Some(1)),
            Err(ModelError::InvalidCost { cost, capacity: 3 })
        );
    }
    assert_eq!(m.state(9), None);
    assert!(m.keys().is_empty());
    assert!(m.records(9).is_empty());

    // On a held key: no refill (last_refill stays), no charge, no request-id record.
    m.acquire(9, 100, 2, Some(1)).unwrap();
    let before = (m.state(9).map(|(t, l)| (t.clone(), l)), m.records(9));
    for cost in [0, 4] {
        assert!(m.acquire(9, 100 + 5 * S, cost, Some(2)).is_err());
        assert!(m.acquire(9, 100 + 5 * S, cost, Some(1)).is_err());
    }
    let after = (m.state(9).map(|(t, l)| (t.clone(), l)), m.records(9));
    assert_eq!(before, after);
    assert_eq!(after.0, Some((int(1), 100)));
}

#[test]
fn an_error_is_checked_before_a_replay() {
    // Step 1 comes before step 2: a known request id with an invalid cost is still an error.
    let mut m = Model::new(cfg(3, 1, 1), 10 * S, 4);
    m.acquire(1, 0, 1, Some(42)).unwrap();
    assert_eq!(
        m.acquire(1, 1, 0, Some(42)),
        Err(ModelError::InvalidCost {
            cost: 0,
            capacity: 3
        })
    );
}

#[test]
fn a_denial_writes_back_the_refill_but_charges_nothing() {
    let mut m = Model::new(cfg(4, 1, 1), 0, 0);
    allowed(&mut m, 0, 0, 4);
    // At 1.5 s: 1.5 tokens, cost 2: denied, 0.5 s to go, 2.5 s to full.
    let d = denied(&mut m, 0, 3 * S / 2, 2);
    assert_eq!(
        d,
        ModelDecision::Denied {
            remaining: r(3, 2),
            retry_after: ModelWait::After(S / 2),
            reset_after: ModelWait::After(5 * S / 2),
        }
    );
    assert_eq!(m.state(0), Some((&r(3, 2), 3 * S / 2)));
}

#[test]
fn a_rollback_adds_nothing_and_never_moves_last_refill_back() {
    let mut m = Model::new(cfg(2, 1, 1), 0, 0);
    allowed(&mut m, 0, 10 * S, 2);
    // now = 5 s < last_refill = 10 s: t = 10 s, no refill. Waits count from now: (10 - 5) s + deficit / rate.
    let d = denied(&mut m, 0, 5 * S, 1);
    assert_eq!(
        d,
        ModelDecision::Denied {
            remaining: int(0),
            retry_after: ModelWait::After(6 * S),
            reset_after: ModelWait::After(7 * S),
        }
    );
    assert_eq!(m.state(0), Some((&int(0), 10 * S)));
    assert_eq!(m.peek(0, 0).reset_after, ModelWait::After(12 * S));
    // Retrying at now + retry_after = 11 s succeeds, at 11 s - 1 ns fails.
    let mut early = m.clone();
    denied(&mut early, 0, 11 * S - 1, 1);
    allowed(&mut m, 0, 11 * S, 1);
    // An allowed acquire during a rollback charges but still does not move last_refill back.
    let mut m = Model::new(cfg(2, 1, 1), 0, 0);
    allowed(&mut m, 0, 10 * S, 1);
    let d = allowed(&mut m, 0, 3 * S, 1);
    assert_eq!(d.reset_after(), ModelWait::After(7 * S + 2 * S));
    assert_eq!(m.state(0), Some((&int(0), 10 * S)));
}

#[test]
fn a_full_bucket_reports_reset_after_zero_even_during_a_rollback() {
    let mut m = Model::new(cfg(2, 1, 1), 0, 0);
    allowed(&mut m, 0, 10 * S, 1);
    // At 20 s it is full again (last_refill 20 s); at 5 s the reset is 0, not the 15 s of (t - now).
    assert_eq!(m.peek(0, 20 * S).reset_after, ModelWait::After(0));
    m.reconfigure(0, cfg(2, 1, 1), 20 * S);
    assert_eq!(m.state(0), Some((&int(2), 20 * S)));
    let p = m.peek(0, 5 * S);
    assert_eq!((p.remaining, p.reset_after), (int(2), ModelWait::After(0)));
}

#[test]
fn the_longest_idle_gap_a_u64_clock_can_express_clamps_to_capacity() {
    // u64 nanoseconds span about 584.9 years, so a 1000-year idle cannot be expressed; take the whole range, and
    // 500 years, with a rate that would refill far beyond capacity without the clamp.
    let c = cfg(u64::MAX, u64::MAX, 1);
    let emptied = ModelBucket::fresh(&c, 0).decide(&c, 0, u64::MAX).unwrap().0;
    assert_eq!(emptied.tokens(), &int(0));
    let five_hundred_years = 500 * 365 * 24 * 3600 * S;
    for now in [five_hundred_years, u64::MAX] {
        let b = emptied.refilled(&c, now);
        assert_eq!((b.tokens(), b.last_refill()), (&int(u64::MAX), now));
    }
    let slow = cfg(7, 1, 1 << 32);
    let mut m = Model::new(slow, 0, 0);
    allowed(&mut m, 0, 0, 7);
    // 7 tokens at 2^-32 token/s takes 7 * 2^32 s (about 953 years): after the whole u64 range it is still not
    // full, and the reset is Never because it lies beyond u64::MAX.
    let p = m.peek(0, u64::MAX);
    assert!(p.remaining < int(7) && p.remaining > int(4));
    assert_eq!(p.reset_after, ModelWait::Never);
    let fast = cfg(7, 1, 1);
    let mut m = Model::new(fast, 0, 0);
    allowed(&mut m, 0, 0, 7);
    let out = m.acquire(0, u64::MAX, 7, None).unwrap();
    assert_eq!(
        out.decision,
        ModelDecision::Allowed {
            remaining: int(0),
            reset_after: ModelWait::Never
        }
    );
}

#[test]
fn near_u64_max_a_wait_that_lands_exactly_on_u64_max_is_kept_and_one_past_is_never() {
    let c = cfg(1, 1, 1);
    // Emptied at now = MAX - 1 s: full again at exactly MAX.
    let mut m = Model::new(c.clone(), 0, 0);
    let now = u64::MAX - S;
    assert_eq!(
        allowed(&mut m, 0, now, 1).reset_after(),
        ModelWait::After(S)
    );
    let d = denied(&mut m, 0, now + 1, 1);
    assert_eq!(d.retry_after(), Some(ModelWait::After(S - 1)));
    assert_eq!(d.reset_after(), ModelWait::After(S - 1));
    allowed(&mut m, 0, u64::MAX, 1);
    // Emptied 1 ns later: full at MAX + 1, which the clock cannot reach.
    let mut m = Model::new(c.clone(), 0, 0);
    let now = u64::MAX - S + 1;
    assert_eq!(allowed(&mut m, 0, now, 1).reset_after(), ModelWait::Never);
    let d = denied(&mut m, 0, now, 1);
    assert_eq!(d.retry_after(), Some(ModelWait::Never));
    denied(&mut m, 0, u64::MAX, 1);
    // A rollback near MAX: (t - now) counts too. Emptied at MAX - 1 s; at MAX - 2 s the wait is 2 s, fits exactly.
    let mut m = Model::new(c, 0, 0);
    allowed(&mut m, 0, u64::MAX - S, 1);
    let d = denied(&mut m, 0, u64::MAX - 2 * S, 1);
    assert_eq!(d.retry_after(), Some(ModelWait::After(2 * S)));
}

#[test]
fn retry_after_is_tight_allowed_at_now_plus_retry_after_and_denied_1_ns_earlier() {
    // Rates whose per-ns deficit does not divide evenly, so a floor instead of a ceil would be caught.
    for (capacity, p, q, cost) in [
        (3, 1, 3, 2),
        (5, 7, 1, 5),
        (10, 1_000_000_001, 1, 10),
        (2, 3, 1 << 32, 1),
        (9, 999, 1000, 9),
    ] {
        let c = cfg(capacity, p, q);
        let mut m = Model::new(c, 0, 0);
        allowed(&mut m, 0, 1000, capacity);
        let now = 1000 + 1;
        let ModelWait::After(w) = denied(&mut m, 0, now, cost).retry_after().unwrap() else {
            panic!("finite rate near 0 must give a finite wait");
        };
        let mut early = m.clone();
        denied(&mut early, 0, now + w - 1, cost);
        allowed(&mut m, 0, now + w, cost);
    }
}

#[test]
fn rate_zero_never_refills_and_waits_are_never_unless_full() {
    let mut m = Model::new(cfg(3, 0, 5), 0, 0);
    assert_eq!(
        allowed(&mut m, 0, 0, 3),
        ModelDecision::Allowed {
            remaining: int(0),
            reset_after: ModelWait::Never
        }
    );
    let d = denied(&mut m, 0, u64::MAX / 2, 1);
    assert_eq!(d.retry_after(), Some(ModelWait::Never));
    assert_eq!(d.reset_after(), ModelWait::Never);
    assert_eq!(m.peek(1, 0).reset_after, ModelWait::After(0));
}

#[test]
fn a_replay_inside_the_window_returns_the_recorded_decision_and_charges_nothing() {
    let mut m = Model::new(cfg(3, 1, 1), 10 * S, 4);
    let first = m.acquire(0, 0, 2, Some(7)).unwrap();
    let state = m.state(0).map(|(t, l)| (t.clone(), l));
    // Later, with a different cost even: the first decision, verbatim, and no refill written.
    let again = m.acquire(0, 10 * S - 1, 3, Some(7)).unwrap();
    assert!(again.replayed && !again.created);
    assert_eq!(again.decision, first.decision);
    assert_eq!(m.state(0).map(|(t, l)| (t.clone(), l)), state);
    // A rollback is judged at the key's effective time max(now, last_refill) = 0: inside the window.
    assert!(m.acquire(0, 0, 1, Some(7)).unwrap().replayed);
    // At exactly r + window the record is dead: a fresh decision, charged (1 + 10 tokens, clamped to 3, minus 3).
    let fresh = m.acquire(0, 10 * S, 3, Some(7)).unwrap();
    assert!(!fresh.replayed);
    assert_eq!(fresh.decision.remaining(), &int(0));
    // The new record replaces the dead one of the same id.
    assert_eq!(m.records(0), vec![(7, 10 * S)]);
    let replay = m.acquire(0, 19 * S, 3, Some(7)).unwrap();
    assert!(replay.replayed);
    assert_eq!(replay.decision, fresh.decision);
    // During a rollback to 1 s the key is still at 10 s: the newest record answers.
    assert_eq!(
        m.acquire(0, S, 3, Some(7)).unwrap().decision,
        fresh.decision
    );
}

#[test]
fn a_reused_id_replaces_its_dead_record_so_it_cannot_push_out_a_live_one() {
    // The history the linearizability checker found (window 5 ns, 3 records per key): the key is at
    // 20 from the first call on, so every record is stamped 20 and 200@7 is a replay of 200@1.
    let mut m = Model::new(cfg(100, 1, 1), 5, 3);
    m.acquire(0, 20, 1, Some(100)).unwrap();
    m.acquire(0, 1, 1, Some(200)).unwrap();
    assert!(m.acquire(0, 7, 1, Some(200)).unwrap().replayed);
    m.acquire(0, 8, 1, Some(300)).unwrap();
    assert_eq!(m.records(0), vec![(100, 20), (200, 20), (300, 20)]);
    assert!(
        m.acquire(0, 8, 1, Some(100)).unwrap().replayed,
        "100 is still live: charged once"
    );
    // A reuse after the window: 200@20 is dead at 25, charged, and the new record replaces it.
    assert!(!m.acquire(0, 25, 1, Some(200)).unwrap().replayed);
    assert_eq!(m.records(0), vec![(100, 20), (300, 20), (200, 25)]);
}

#[test]
fn request_ids_are_per_key() {
    let mut m = Model::new(cfg(1, 1, 1), 10 * S, 4);
    m.acquire(0, 0, 1, Some(7)).unwrap();
    let other = m.acquire(1, 0, 1, Some(7)).unwrap();
    assert!(!other.replayed && other.created && other.decision.is_allowed());
}

#[test]
fn only_the_newest_dedupe_per_key_records_are_kept_fifo() {
    let mut m = Model::new(cfg(100, 1, 1), 100 * S, 2);
    for id in 1..=3 {
        m.acquire(0, id, 1, Some(id)).unwrap();
    }
    assert_eq!(m.records(0), vec![(2, 2), (3, 3)]);
    // id 1 fell out: charged again (100 - 3 + refill of 3 ns... = 97 + 3e-9).
    let d = m.acquire(0, 4, 1, Some(1)).unwrap();
    assert!(!d.replayed);
    assert!(m.acquire(0, 5, 1, Some(3)).unwrap().replayed);
    assert_eq!(m.records(0), vec![(3, 3), (1, 4)]);
    // dedupe_per_key = 0 keeps nothing.
    let mut m = Model::new(cfg(100, 1, 1), 100 * S, 0);
    m.acquire(0, 0, 1, Some(1)).unwrap();
    assert!(!m.acquire(0, 0, 1, Some(1)).unwrap().replayed);
    assert!(m.records(0).is_empty());
}

#[test]
fn a_zero_window_turns_request_ids_off() {
    // "A window of 0 turns request ids off: no record is ever live", not even after a rollback (the key's
    // effective time never moves back, so no rollback reaches inside a window of 0).
    let mut m = Model::new(cfg(100, 1, 1), 0, 4);
    m.acquire(0, 50, 1, Some(1)).unwrap();
    assert!(!m.acquire(0, 50, 1, Some(2)).unwrap().replayed);
    assert!(!m.acquire(0, 50, 1, Some(1)).unwrap().replayed);
    assert!(!m.acquire(0, 49, 1, Some(1)).unwrap().replayed);
}

#[test]
fn a_window_reaching_past_u64_max_does_not_overflow() {
    let mut m = Model::new(cfg(2, 1, 1), u64::MAX, 4);
    m.acquire(0, u64::MAX - 1, 1, Some(1)).unwrap();
    assert!(m.acquire(0, u64::MAX, 1, Some(1)).unwrap().replayed);
    assert!(!m.is_evictable_at(0, u64::MAX));
}

#[test]
fn reconfigure_refills_under_the_old_config_then_rounds_down_to_the_new_grid() {
    let mut m = Model::new(cfg(10, 1, 3), 0, 0);
    allowed(&mut m, 0, 0, 10);
    // At 1 ns: 1/(3e9) token. The new grid is 1/(7e9): floor(7e9/3e9) = 2 units = 2/(7e9) < 1/(3e9).
    let v = m.reconfigure(0, cfg(10, 1, 7), 1);
    assert_eq!(v, 1);
    assert_eq!(m.state(0), Some((&r(2, 7_000_000_000), 1)));
    assert_eq!(m.config_of(0), &cfg(10, 1, 7));
    assert_eq!(m.config_version(0), 1);
    // The old rate 1/7 applies up to now: 7 s later it added exactly 1 token; the grid stays 1/(7e9).
    let v = m.reconfigure(0, cfg(10, 2, 7), 7 * S + 1);
    assert_eq!(v, 2);
    assert_eq!(
        m.state(0),
        Some((&(int(1) + r(2, 7_000_000_000)), 7 * S + 1))
    );
    // Grid 1/(1e9) now: 2/(7e9) floors to 0 units.
    let v = m.reconfigure(0, cfg(10, 5, 1), 7 * S + 1);
    assert_eq!(v, 3);
    assert_eq!(m.state(0), Some((&int(1), 7 * S + 1)));
}

#[test]
fn reconfigure_clamps_to_a_smaller_capacity_and_a_fresh_key_starts_full_under_the_old_config() {
    let mut m = Model::new(cfg(10, 1, 1), 0, 0);
    assert_eq!(m.reconfigure(4, cfg(3, 1, 1), 77), 1);
    assert_eq!(m.state(4), Some((&int(3), 77)));
    // Growing capacity does not create tokens.
    m.reconfigure(4, cfg(50, 1, 1), 77);
    assert_eq!(m.state(4), Some((&int(3), 77)));
    // The override now decides the cost bound.
    assert_eq!(
        m.acquire(4, 77, 51, None),
        Err(ModelError::InvalidCost {
            cost: 51,
            capacity: 50
        })
    );
    assert!(m.acquire(4, 77, 11, None).is_ok());
    // During a rollback t = last_refill.
    m.reconfigure(4, cfg(50, 1, 1), 10);
    assert_eq!(m.state(4).map(|(_, l)| l), Some(77));
}

#[test]
fn an_invalid_config_is_a_typed_error_and_touches_no_model() {
    assert_eq!(
        ModelConfig::new(0, 1, 1).map_err(ModelError::from),
        Err(ModelError::InvalidConfig(ConfigError::ZeroCapacity))
    );
    assert_eq!(ModelConfig::new(1, 1, 0), Err(ConfigError::ZeroRateDenom));
    assert!(matches!(
        ModelConfig::new(1, 3, (1 << 32) + 1),
        Err(ConfigError::RateDenomTooLarge { .. })
    ));
}

#[test]
fn forget_drops_bucket_override_version_and_records() {
    let mut m = Model::new(cfg(5, 1, 1), 100 * S, 4);
    m.acquire(0, 0, 5, Some(1)).unwrap();
    m.reconfigure(0, cfg(9, 1, 1), 0);
    assert!(m.forget(0));
    assert!(!m.forget(0));
    assert_eq!(m.state(0), None);
    assert_eq!(m.config_of(0), &cfg(5, 1, 1));
    assert_eq!(m.config_version(0), 0);
    assert!(m.records(0).is_empty());
    // The next access is fresh, and the request id is unknown.
    let out = m.acquire(0, 1, 5, Some(1)).unwrap();
    assert!(out.created && !out.replayed && out.decision.is_allowed());
}

#[test]
fn sweep_drops_exactly_the_full_buckets_without_live_records_or_overrides() {
    let mut m = Model::new(cfg(2, 1, 1), 10 * S, 4);
    allowed(&mut m, 1, 0, 1); // full again at 1 s
    allowed(&mut m, 2, 0, 2); // full again at 2 s
    m.acquire(3, 0, 1, Some(9)).unwrap(); // full at 1 s, record live until 10 s
    m.reconfigure(4, cfg(2, 1, 2), 0); // full, with an override
    assert!(!m.is_evictable_at(1, S - 1));
    assert!(m.is_evictable_at(1, S));
    assert!(
        m.is_evictable_at(99, 0),
        "an absent key is vacuously evictable"
    );
    assert!(!m.is_evictable_at(4, S), "an override pins the key");
    assert_eq!(m.sweep(S), vec![1]);
    assert_eq!(m.keys(), vec![2, 3, 4]);
    assert_eq!(m.config_of(4), &cfg(2, 1, 2));
    assert_eq!(m.config_version(4), 1);
    assert_eq!(m.sweep(10 * S - 1), vec![2]);
    assert_eq!(m.sweep(10 * S), vec![3]);
    assert_eq!(m.keys(), vec![4]);
    // A sweep at a time before last_refill looks at max(s, last_refill).
    let mut m = Model::new(cfg(2, 1, 1), 0, 0);
    allowed(&mut m, 1, 10 * S, 1);
    assert!(m.sweep(0).is_empty());
    m.reconfigure(1, cfg(2, 1, 1), 20 * S);
    assert!(m.sweep(0).is_empty(), "overridden now, so pinned");
    m.forget(1);
    allowed(&mut m, 1, 30 * S, 1);
    assert_eq!(m.sweep(0), Vec::<u64>::new());
    assert_eq!(m.sweep(31 * S), vec![1]);
}

#[test]
fn evict_follows_a_lossy_eviction_and_the_key_comes_back_full() {
    let mut m = Model::new(cfg(4, 1, 1), 10 * S, 4);
    m.acquire(0, 0, 4, Some(1)).unwrap();
    m.reconfigure(0, cfg(4, 1, 2), 0);
    assert!(!m.is_evictable_at(0, 0));
    assert!(m.evict(0));
    assert!(!m.evict(0));
    assert_eq!(m.state(0), None);
    assert!(m.records(0).is_empty());
    assert_eq!(m.config_version(0), 1);
    let out = m.acquire(0, 1, 4, Some(1)).unwrap();
    assert!(out.created && !out.replayed && out.decision.is_allowed());
}

/// The grid check (a denominator dividing `q * 10^9`) agrees with its definition (`tokens * q * 10^9` is
/// whole): one unit of a `q = 3` grid lies on that grid, but not on the grid of `q = 1`.
#[test]
fn the_unit_grid_is_one_over_q_times_a_billion() {
    let thirds = cfg(1, 1, 3);
    let (spent, _) = ModelBucket::fresh(&thirds, 0)
        .decide(&thirds, 0, 1)
        .unwrap();
    let one_unit = spent.refilled(&thirds, 1);
    assert_eq!(*one_unit.tokens(), r(1, 3_000_000_000));
    assert!(one_unit.is_on_grid(&thirds));
    assert!(!one_unit.is_on_grid(&cfg(1, 1, 1)));
    assert!(ModelBucket::fresh(&thirds, 0).is_on_grid(&cfg(1, 1, 1)));
}
