//! docs/semantics.md, "Expiry and the key bound" and acquire steps 2 and 6, under a clock that runs
//! backwards: everything about a key is judged at its effective time `max(now, last_refill)`. A sweep
//! at `s` judges a bucket at `j = max(s, last_refill)`; a key it dropped continues from `j`. Every
//! expected value is worked out by hand next to it.

use bucketproof_model::{Model, ModelConfig, ModelWait, Rational};

const S: u64 = 1_000_000_000;

fn cfg(capacity: u64, p: u64, q: u64) -> ModelConfig {
    ModelConfig::new(capacity, p, q).expect("valid config in test")
}

/// Capacity 2 at 1/s, emptied at 10 s, swept at 13 s (full by 12 s): a rolled-back acquire at 10 s
/// starts fresh at 13 s, so it gets the 2 tokens the key had by then and nothing before 14 s.
#[test]
fn a_key_swept_while_full_continues_from_the_sweeps_judgment_time() {
    let mut m = Model::new(cfg(2, 1, 1), 0, 0);
    assert!(m.acquire(0, 10 * S, 2, None).unwrap().decision.is_allowed());
    assert_eq!(m.sweep(13 * S), vec![0]);
    let again = m.acquire(0, 10 * S, 2, None).unwrap();
    assert!(again.created && again.decision.is_allowed());
    assert_eq!(m.state(0).map(|(_, last)| last), Some(13 * S));
    // (13 - 10) s of lag + 2 s to refill 2 tokens.
    assert_eq!(again.decision.reset_after(), ModelWait::After(5 * S));
    let later = m.acquire(0, 12 * S, 2, None).unwrap();
    assert!(
        !later.decision.is_allowed(),
        "2 at 10 s and 2 at 13 s, no more"
    );
    assert_eq!(later.decision.retry_after(), Some(ModelWait::After(3 * S)));
}

/// Capacity 5 at 1/s, window 1 s: the record made at 10 s is dead at 11 s, so the sweep at 12 s
/// drops the key (full by 11 s). The retry at 10.5 s continues from 12 s, where the id is dead:
/// charged, at 12 s, and recorded there. Without the sweep the key is at 10 s and the retry replays.
#[test]
fn a_request_id_dead_at_a_sweep_stays_dead_under_a_rollback() {
    let retry_at = 10 * S + S / 2;
    let mut kept = Model::new(cfg(5, 1, 1), S, 4);
    kept.acquire(0, 10 * S, 1, Some(7)).unwrap();
    assert!(kept.acquire(0, retry_at, 1, Some(7)).unwrap().replayed);

    let mut m = Model::new(cfg(5, 1, 1), S, 4);
    m.acquire(0, 10 * S, 1, Some(7)).unwrap();
    assert_eq!(m.sweep(12 * S), vec![0]);
    let charged = m.acquire(0, retry_at, 1, Some(7)).unwrap();
    assert!(!charged.replayed && charged.created);
    assert_eq!(charged.decision.remaining(), &Rational::from(4u64));
    assert_eq!(m.state(0).map(|(_, last)| last), Some(12 * S));
    assert_eq!(m.records(0), vec![(7, 12 * S)]);
}

/// A record is stamped at the acquire's effective time, not the caller's `now`, and judged at the
/// later call's effective time: caller time 7 s is past 5 s + 1 s, but the key is at 20 s.
#[test]
fn a_record_is_stamped_and_judged_at_the_keys_effective_time() {
    let mut m = Model::new(cfg(5, 1, 1), S, 4);
    m.acquire(0, 20 * S, 1, None).unwrap();
    let first = m.acquire(0, 5 * S, 1, Some(7)).unwrap();
    assert_eq!(m.records(0), vec![(7, 20 * S)]);
    let retry = m.acquire(0, 7 * S, 1, Some(7)).unwrap();
    assert!(retry.replayed);
    assert_eq!(retry.decision, first.decision);
    // The key reaches 21 s = 20 s + 1 s: dead.
    assert!(!m.acquire(0, 21 * S, 1, Some(7)).unwrap().replayed);
}

/// A key's records are in time order: a record's stamp is its acquire's effective time, which never
/// moves back, whatever the caller's clock does.
#[test]
fn a_keys_records_are_in_time_order_under_any_clock() {
    let mut m = Model::new(cfg(100, 1, 1), 10 * S, 8);
    for (id, now) in [(1, 5 * S), (2, 3 * S), (3, 9 * S), (4, S)] {
        m.acquire(0, now, 1, Some(id)).unwrap();
    }
    assert_eq!(
        m.records(0),
        vec![(1, 5 * S), (2, 5 * S), (3, 9 * S), (4, 9 * S)]
    );
}

/// "A window of 0 turns request ids off": no replay, under a rollback either, and no record kept.
#[test]
fn a_zero_window_keeps_no_record_and_never_replays() {
    let mut m = Model::new(cfg(5, 1, 1), 0, 4);
    for now in [10 * S, 10 * S, 5 * S, 0] {
        assert!(!m.acquire(0, now, 1, Some(7)).unwrap().replayed, "at {now}");
    }
    assert!(m.records(0).is_empty());
    assert!(m.is_evictable_at(0, 20 * S));
}

/// Evictability is judged at `max(s, last_refill)`: a bucket recreated full at 20 s is evictable
/// at a sweep time before that, and a key dropped there continues from 20 s.
#[test]
fn evictability_is_judged_at_the_keys_effective_time() {
    let mut m = Model::new(cfg(2, 1, 1), S, 4);
    m.recreate(0, 20 * S);
    assert!(m.is_evictable_at(0, 5 * S));
    assert_eq!(m.sweep(5 * S), vec![0]);
    m.acquire(0, 6 * S, 1, None).unwrap();
    assert_eq!(m.state(0).map(|(_, last)| last), Some(20 * S));
}

/// A victim's records go with it (settle step 2): after `lose_records` a settle of its request is
/// `UnknownRequest`, while the bucket (3 of 4 tokens) stays, as what a recreation is judged against.
#[test]
fn a_key_that_lost_its_records_settles_nothing_and_keeps_its_bucket() {
    let mut m = Model::new(cfg(4, 1, 1), 60 * S, 4);
    assert!(m.acquire(0, 0, 1, Some(1)).unwrap().decision.is_allowed());
    assert!(m.lose_records(0));
    assert_eq!(
        m.settle(0, 0, 1, 0).unwrap_err(),
        bucketproof_model::ModelError::UnknownRequest
    );
    assert_eq!(m.state(0), Some((&Rational::from(3u64), 0)));
    assert!(!m.lose_records(0), "nothing left to lose");
}

/// `reconfigured_set` is what `reconfigure` leaves, written nowhere: capacity 4 at 1/s emptied at 0,
/// reconfigured at 1 s to capacity 2 at 3/s holds the 1 token refilled by then (on the new grid).
#[test]
fn reconfigured_set_previews_reconfigure_without_writing() {
    let mut m = Model::new(cfg(4, 1, 1), 0, 0);
    assert!(m.acquire(0, 0, 4, None).unwrap().decision.is_allowed());
    let new = cfg(2, 3, 1);
    let preview = m.reconfigured_set(0, &new.clone().into(), S);
    assert_eq!(m.state(0), Some((&Rational::ZERO, 0)), "nothing written");
    m.reconfigure(0, new, S);
    assert_eq!(preview, vec![Rational::from(1u64)]);
    assert_eq!(
        m.state_set(0).map(|(tokens, _)| tokens.to_vec()),
        Some(preview)
    );
}
