//! White-box tests of the keyed limiter: the packing of balances across `2^62`, the spread of keys
//! over each shard's table, and the full sweep's walk over a wrapped probe run. Behaviour seen only
//! through the public API is tested in `tests/keyed.rs`.

use super::shard::PackedBucket;
use super::*;
use crate::hashing::KeyHasher;
use crate::sync::lock;
use crate::table::FlatMap;
use crate::{NANOS_PER_SECOND, Nanos, Rate};
use std::ops::ControlFlow;

/// The side-map entry of `key` and its bucket's two flags: what a test of the packing can see.
fn packing(limiter: &Limiter<u64>, key: u64) -> (bool, bool, Option<u128>) {
    let hash = limiter.hasher.hash_one(key);
    let shard = lock(limiter.shard(hash));
    let (bucket, _) = shard.find(hash, &key).expect("the key is live");
    let wide_balance = shard.extra(&key).and_then(|extra| extra.wide_balance);
    (bucket.has_extra(), bucket.is_wide(), wide_balance)
}

/// The shard a key goes to and its home slot inside that shard's table are independent: the
/// keys of each shard spread over its whole table, so a lookup reads no more slots than linear
/// probing predicts at that load, `(1 + 1 / (1 - load)) / 2` (Knuth), with both hashers.
#[test]
fn keys_spread_over_each_shard_table_as_linear_probing_predicts() {
    let config = Config::new(4, Rate::per_second(1)).unwrap();
    for seed in [None, Some(3)] {
        let mut builder = Limiter::builder(config).shards(8);
        if let Some(seed) = seed {
            builder = builder.hasher_seed(seed);
        }
        let limiter: Limiter<u64> = builder.build();
        for key in 0..400_000u64 {
            limiter.acquire_at(&key, 1, 0).unwrap();
        }
        for shard in limiter.shards.iter() {
            let shard = lock(&shard.0);
            let load = shard.entries.load();
            let predicted = (1.0 + 1.0 / (1.0 - load)) / 2.0;
            let measured = shard.entries.mean_probe_length();
            assert!(
                measured <= 1.2 * predicted,
                "seed {seed:?}: {measured:.2} slots per lookup at load {load:.3}, \
                 predicted {predicted:.2}"
            );
        }
    }
}

/// A full sweep drops every evictable bucket even when it must look at one entry twice: here a
/// probe run wraps from the table's last slots to slot 0, the sweep (which starts at slot 0)
/// keeps the wrapped entry there, then evicts a bucket near the end, which moves that entry back
/// into the freed slot, where the walk looks at it again. The last slot holds an evictable
/// bucket; a sweep that allowed only one visit per live entry would stop before it.
#[test]
fn a_full_sweep_reaches_the_last_slot_after_looking_at_a_wrapped_entry_twice() {
    const SECOND: Nanos = NANOS_PER_SECOND;
    let config = Config::new(2, Rate::per_second(1)).unwrap();
    let limiter: Limiter<u64> = Limiter::builder(config)
        .shards(1)
        .sweep_per_op(0)
        .hasher_seed(5)
        .build();
    let pinned = |key: u64| {
        limiter.acquire_at(&key, 1, SECOND).unwrap();
        limiter.reconfigure_at(&key, config, SECOND).unwrap();
    };
    for filler in 0..40 {
        pinned(filler);
    }
    let slots = lock(&limiter.shards[0].0).entries.slots();
    let home = |key: u64| {
        FlatMap::<u64, PackedBucket, KeyHasher>::home(limiter.hasher.hash_one(key), slots)
    };
    let position = |key: u64| {
        let shard = lock(&limiter.shards[0].0);
        shard
            .find(limiter.hasher.hash_one(key), &key)
            .map(|(_, pos)| pos)
    };
    // Clear the wrap region (the last three slots and slot 0) of fillers.
    let region = [slots - 3, slots - 2, slots - 1, 0];
    while let Some(filler) = (0..40).find(|&key| position(key).is_some_and(|p| region.contains(&p)))
    {
        assert!(limiter.forget(&filler));
    }
    let fillers = limiter.len();
    let with_home = |wanted: usize, skip: usize| {
        (1_000..)
            .filter(|&key| home(key) == wanted)
            .nth(skip)
            .unwrap()
    };
    let (evicted_early, kept, evicted_last) = (
        with_home(slots - 3, 0),
        with_home(slots - 2, 0),
        with_home(slots - 1, 0),
    );
    let wrapped = with_home(slots - 3, 1);
    limiter.acquire_at(&evicted_early, 1, SECOND).unwrap();
    pinned(kept);
    limiter.acquire_at(&evicted_last, 1, SECOND).unwrap();
    pinned(wrapped);
    assert_eq!(
        lock(&limiter.shards[0].0).entries.slots(),
        slots,
        "the four keys grew the table: the homes above are stale"
    );
    assert_eq!(
        [evicted_early, kept, evicted_last, wrapped].map(position),
        [Some(slots - 3), Some(slots - 2), Some(slots - 1), Some(0)]
    );
    assert_eq!(limiter.sweep_at(10 * SECOND), 2);
    assert_eq!(
        [evicted_early, kept, evicted_last, wrapped].map(position),
        [None, Some(slots - 2), None, Some(slots - 3)]
    );
    assert_eq!(limiter.len(), fillers + 2);
}

/// A balance that leaves the wide range (`>= 2^62` units) moves back into its bucket, and the
/// key's side-map entry goes with it when nothing else is in it; an override keeps the entry.
#[test]
fn a_balance_back_below_2_62_units_moves_into_its_bucket_and_frees_an_empty_side_entry() {
    // 5e9 tokens x 10^9 units per token = 5e18 units >= 2^62 (about 4.61e18) when full.
    let wide = Config::new(5_000_000_000, Rate::per_second(1)).unwrap();
    let limiter: Limiter<u64> = Limiter::builder(wide).hasher_seed(1).build();
    limiter.acquire_at(&1, 1, 0).unwrap();
    assert_eq!(
        packing(&limiter, 1),
        (true, true, Some(wide.capacity_units() - 1_000_000_000))
    );
    // One billion tokens more: 3.99e18 units, narrow again.
    limiter.acquire_at(&1, 1_000_000_000, 0).unwrap();
    assert_eq!(packing(&limiter, 1), (false, false, None));
    let (state, _) = limiter.inspect(&1).unwrap();
    assert_eq!(
        state.balance(),
        wide.capacity_units() - 1_000_000_001 * 1_000_000_000
    );

    // With an override the entry stays (it holds the override), only the wide balance leaves.
    limiter.reconfigure_at(&2, wide, 0).unwrap();
    limiter.acquire_at(&2, 1, 0).unwrap();
    assert!(packing(&limiter, 2).1, "the overridden key is wide first");
    limiter.acquire_at(&2, 1_000_000_000, 0).unwrap();
    assert_eq!(packing(&limiter, 2), (true, false, None));
}

/// The room scan at the key bound inspects its 32 entries even across the table's vacant slots (it
/// may step over four slots per wanted entry): an evictable bucket that is the 32nd live entry from
/// the sweep cursor, more than 36 slots on, is found and makes room; one that is the 33rd is not
/// looked at, and the new key is refused.
#[test]
fn the_room_scan_reaches_the_32nd_entry_across_vacant_slots_and_no_further() {
    const SECOND: Nanos = NANOS_PER_SECOND;
    let config = Config::new(2, Rate::per_second(1)).unwrap();
    let keys = 200u64;
    // The scan's reach in slots when the evictable bucket is the `nth` live entry from the cursor,
    // and whether a new key then gets in.
    let make_room_with_evictable = |nth: usize| {
        let limiter: Limiter<u64> = Limiter::builder(config)
            .shards(1)
            .max_keys(keys as usize, EvictionPolicy::EvictFull)
            .sweep_per_op(0)
            .hasher_seed(7)
            .build();
        for key in 0..keys {
            limiter.acquire_at(&key, 1, SECOND).unwrap();
        }
        let reach = {
            let mut shard = lock(&limiter.shards[0].0);
            let slots = shard.entries.slots();
            let cursor = shard.sweep_cursor % slots;
            let (reach, pos) = (0..slots)
                .map(|step| (step + 1, (cursor + step) % slots))
                .filter(|&(_, pos)| shard.entries.get(pos).is_some())
                .nth(nth - 1)
                .unwrap();
            let key = *shard.entries.get(pos).unwrap().0;
            shard.store(pos, &key, BucketState::full(&config, SECOND));
            reach
        };
        (reach, limiter.acquire_at(&keys, 1, SECOND).is_ok())
    };
    let (reach, admitted) = make_room_with_evictable(32);
    assert!(
        (37..=128).contains(&reach),
        "the 32nd entry is {reach} slots on"
    );
    assert!(
        admitted,
        "the 32nd entry, {reach} slots on, was not inspected"
    );
    let (reach, admitted) = make_room_with_evictable(33);
    assert!(reach <= 128, "the 33rd entry is {reach} slots on");
    assert!(!admitted, "the scan inspected a 33rd entry");
}

/// `EvictLeastRecent` among equally old buckets drops the first the room scan meets from the sweep
/// cursor (a later one of the same age does not displace it), so which key a tie costs follows the
/// cursor's rotation rather than the end of the sample.
#[test]
fn evict_least_recent_breaks_a_tie_by_the_first_bucket_from_the_cursor() {
    const SECOND: Nanos = NANOS_PER_SECOND;
    let config = Config::new(2, Rate::per_second(1)).unwrap();
    let limiter: Limiter<u64> = Limiter::builder(config)
        .shards(1)
        .max_keys(6, EvictionPolicy::EvictLeastRecent)
        .sweep_per_op(0)
        .hasher_seed(11)
        .build();
    for key in 0..6 {
        limiter.acquire_at(&key, 1, SECOND).unwrap();
    }
    let first = {
        let shard = lock(&limiter.shards[0].0);
        let slots = shard.entries.slots();
        let cursor = shard.sweep_cursor % slots;
        (0..slots)
            .map(|step| (cursor + step) % slots)
            .find_map(|pos| shard.entries.get(pos).map(|(key, _)| *key))
            .unwrap()
    };
    limiter.acquire_at(&6, 1, SECOND).unwrap();
    let gone: Vec<u64> = (0..6)
        .filter(|key| limiter.inspect(key).is_none())
        .collect();
    assert_eq!(gone, [first]);
}

/// A room scan that evicts leaves the sweep cursor on the slot after the evicted one (a slot
/// position, below the table's size), so the next walk starts there: it neither rescans from the
/// table's start nor looks again at the slot just freed.
#[test]
fn a_room_scan_that_evicts_leaves_the_cursor_on_the_next_slot() {
    const SECOND: Nanos = NANOS_PER_SECOND;
    let config = Config::new(2, Rate::per_second(1)).unwrap();
    let keys = 60u64;
    let limiter: Limiter<u64> = Limiter::builder(config)
        .shards(1)
        .max_keys(keys as usize, EvictionPolicy::EvictFull)
        .sweep_per_op(0)
        .hasher_seed(13)
        .build();
    for key in 0..keys {
        limiter.acquire_at(&key, 1, SECOND).unwrap();
    }
    for nth in [10, 20] {
        let (evicted_pos, slots) = {
            let mut shard = lock(&limiter.shards[0].0);
            let slots = shard.entries.slots();
            let cursor = shard.sweep_cursor % slots;
            let pos = (0..slots)
                .map(|step| (cursor + step) % slots)
                .filter(|&pos| shard.entries.get(pos).is_some())
                .nth(nth - 1)
                .unwrap();
            let key = *shard.entries.get(pos).unwrap().0;
            shard.store(pos, &key, BucketState::full(&config, SECOND));
            (pos, slots)
        };
        limiter.acquire_at(&(keys + nth as u64), 1, SECOND).unwrap();
        let shard = lock(&limiter.shards[0].0);
        assert_eq!(shard.entries.slots(), slots, "the table grew at its bound");
        assert_eq!(shard.sweep_cursor, (evicted_pos + 1) % slots);
    }
}

/// With a fixed seed, a key's shard is the same on every run and every machine (what verification
/// runs rely on to place keys identically), so the placement is pinned here like the seeded hash:
/// a change to the shard remix is a change to every recorded run.
#[test]
fn a_seeded_limiter_places_keys_in_pinned_shards() {
    let config = Config::new(2, Rate::per_second(1)).unwrap();
    let limiter: Limiter<u64> = Limiter::builder(config).shards(8).hasher_seed(7).build();
    let placement: Vec<usize> = (0..16u64).map(|key| limiter.shard_of(&key)).collect();
    assert_eq!(placement, [3, 4, 3, 4, 4, 5, 7, 2, 1, 5, 7, 4, 1, 7, 0, 2]);
}

/// A dedupe window of 0 turns request ids off (docs/semantics.md, acquire step 6): no record is ever
/// live, so none is kept either, and the key needs no side-map entry for one.
#[test]
fn a_zero_dedupe_window_keeps_no_request_id_record() {
    let config = Config::new(5, Rate::per_second(1)).unwrap();
    let limiter: Limiter<u64> = Limiter::builder(config)
        .dedupe(std::time::Duration::ZERO, 4)
        .hasher_seed(1)
        .build();
    for now in [10 * NANOS_PER_SECOND, 5 * NANOS_PER_SECOND] {
        let request = Request::cost(1).at(now).id(7u64);
        assert!(!limiter.acquire_with(&0, request).unwrap().replayed);
    }
    assert_eq!(packing(&limiter, 0), (false, false, None));
}

/// A walk whose entry budget outlasts its slot limit steps over exactly `max_slots` slots from the
/// cursor, occupied ones counted like vacant ones: it visits every entry among those slots and
/// none beyond, and leaves the cursor on the first slot it did not step over (how the room scan's
/// 128-slot bound ends a scan of a sparse table before its 32 entries).
#[test]
fn a_walk_ended_by_its_slot_limit_steps_over_exactly_max_slots_slots() {
    let config = Config::new(2, Rate::per_second(1)).unwrap();
    let limiter: Limiter<u64> = Limiter::builder(config).shards(1).hasher_seed(17).build();
    for key in 0..40u64 {
        limiter.acquire_at(&key, 1, NANOS_PER_SECOND).unwrap();
    }
    let mut shard = lock(&limiter.shards[0].0);
    let slots = shard.entries.slots();
    let (cursor, max_slots) = (3, slots / 2);
    let within: Vec<usize> = (cursor..cursor + max_slots)
        .filter(|&pos| shard.entries.get(pos).is_some())
        .collect();
    assert!(!within.is_empty() && within.len() < shard.entries.len());
    shard.sweep_cursor = cursor;
    let mut visited = Vec::new();
    shard.walk_from_cursor(usize::MAX, max_slots, |_, pos| {
        visited.push(pos);
        ControlFlow::Continue(())
    });
    assert_eq!(visited, within, "{slots} slots");
    assert_eq!(shard.sweep_cursor, cursor + max_slots);
}

/// A decision that finds its shard's lock held is counted once, with its wait; acquisitions that
/// find the lock free (every other call here, the reads of the counters included) add nothing.
#[test]
fn a_contended_acquisition_is_counted_with_its_wait() {
    let config = Config::new(4, Rate::per_second(1)).unwrap();
    let limiter: Limiter<u64> = Limiter::builder(config).shards(1).build();
    limiter.acquire_at(&1, 1, 0).unwrap();
    assert_eq!(limiter.stats().lock_contended, 0);
    let held = lock(&limiter.shards[0].0);
    let hold = std::time::Duration::from_millis(20);
    std::thread::scope(|scope| {
        let waiter = scope.spawn(|| limiter.acquire_at(&2, 1, 0).map(|d| d.is_allowed()));
        std::thread::sleep(hold);
        drop(held);
        assert_eq!(waiter.join().ok().and_then(Result::ok), Some(true));
    });
    let stats = limiter.stats();
    assert_eq!(stats.lock_contended, 1);
    assert!(
        stats.lock_wait_nanos >= hold.as_nanos() as u64 / 2,
        "waited {} ns",
        stats.lock_wait_nanos
    );
    assert_eq!((stats.allowed, stats.live_keys), (2, 2));
}

/// The table estimate is the allocated slots times the slot size: 24 bytes for a `u64` key.
#[test]
fn table_bytes_counts_every_allocated_slot() {
    let config = Config::new(4, Rate::per_second(1)).unwrap();
    let limiter: Limiter<u64> = Limiter::builder(config).shards(2).build();
    assert_eq!(limiter.table_bytes(), 0);
    for key in 0..100u64 {
        limiter.acquire_at(&key, 1, 0).unwrap();
    }
    let slots: usize = (limiter.shards.iter())
        .map(|shard| lock(&shard.0).entries.slots())
        .sum();
    assert!(slots >= 100);
    assert_eq!(limiter.table_bytes(), slots * 24);
}

/// The amortized sweep's budget counts the entries it keeps, not the ones it drops: from a cursor
/// on a probe run of expired buckets it drops all of them, steps over the vacant slots after it and
/// stops on the `budget`-th bucket it keeps, leaving the cursor on the slot after that one.
#[test]
fn the_amortized_sweep_drops_expired_buckets_for_free_and_stops_at_its_budget_of_kept_ones() {
    const SECOND: Nanos = NANOS_PER_SECOND;
    let config = Config::new(2, Rate::per_second(1)).unwrap();
    let limiter: Limiter<u64> = Limiter::builder(config)
        .shards(1)
        .sweep_per_op(0)
        .hasher_seed(19)
        .build();
    for key in 0..200u64 {
        limiter.acquire_at(&key, 1, SECOND).unwrap();
    }
    let mut shard = lock(&limiter.shards[0].0);
    let slots = shard.entries.slots();
    let live = |shard: &Shard<u64>, pos: usize| shard.entries.get(pos).is_some();
    // A probe run of at least three entries that starts after a vacant slot and is followed, after
    // vacant slots, by another run of at least two: removals in the first move nothing out of it.
    let (start, end, next) = (1..slots)
        .filter(|&pos| !live(&shard, pos - 1) && live(&shard, pos))
        .find_map(|start| {
            let end = (start..slots).find(|&pos| !live(&shard, pos))?;
            let next = (end..slots - 1).find(|&pos| live(&shard, pos))?;
            (end - start >= 3 && live(&shard, next + 1)).then_some((start, end, next))
        })
        .unwrap();
    for pos in start..end {
        let key = *shard.entries.get(pos).unwrap().0;
        shard.store(pos, &key, BucketState::full(&config, SECOND));
    }
    let settings = &limiter.settings;
    shard.sweep_cursor = start;
    let dropped = shard.sweep_some(SECOND, 2, slots, settings);
    assert_eq!(dropped, end - start, "every expired bucket of the run");
    assert_eq!(shard.entries.len(), 200 - dropped);
    assert!((start..end).all(|pos| !live(&shard, pos)));
    assert!(live(&shard, next) && live(&shard, next + 1));
    assert_eq!(shard.sweep_cursor, next + 2);
    // A budget of 0 sweeps nothing, not even an expired bucket.
    shard.sweep_cursor = 0;
    assert_eq!(shard.sweep_some(10 * SECOND, 0, slots, settings), 0);
    assert_eq!(shard.entries.len(), 200 - dropped);
}
