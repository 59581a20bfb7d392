//! The direct (unkeyed) limiter: one exact token bucket, thread-safe, for the one-key case.
//!
//! **What it owns:** one [`Config`], one [`BucketState`] and a [`Clock`], behind a tiny spin lock (one
//! atomic flag). Nothing else: no key, no hash, no table, no request ids, no counters. It is the shape
//! of governor's direct limiter, with the exact arithmetic of the rest of the crate.
//!
//! **What it promises:**
//! - Every decision is made by the one transition (`bucket.rs`) (peeks by `snapshot`,
//!   reconfiguration by [`BucketState::reconfigured`]): the same decisions, to the unit and to the
//!   nanosecond, as one key of the keyed [`crate::Limiter`] given the same calls (checked by a seeded
//!   test that runs both side by side, rollbacks, invalid costs and reconfigurations included).
//! - The bucket starts full. Its cursor starts at 0 (the clock's origin); a full bucket is the same at
//!   any cursor before `now`, so the first call behaves exactly like the keyed limiter creating the key
//!   at that call's `now`.
//! - Each call's read-refill-decide-write is atomic: the spin lock is held across the whole transition,
//!   so two threads can never both spend the same token (no overselling: admitted cost in `[a, b]` is at
//!   most `capacity + rate * (b - a)`).
//! - `last_refill` never moves back; a caller whose clock lags (or runs backwards) is credited nothing.
//! - An invalid cost is an [`AcquireError`], never a denial, and changes nothing. No input panics.
//!
//! **The lock and why it is sound.** A `locked` flag (`AtomicBool`) guards an `UnsafeCell` holding the
//! config and the state. Locking is one `compare_exchange(false, true, Acquire, Relaxed)`: a single
//! atomic read-modify-write per decision (a `std::sync::Mutex` pays two: a CAS to lock and a swap to
//! unlock, so that it can wake sleepers). Unlocking is a plain `store(false, Release)`. The Release
//! store synchronizes with the next holder's Acquire CAS, so each holder sees every write of the
//! previous one; only the holder touches the cell. Under contention a thread first spins on loads
//! (`spin_loop`) for a bounded number of rounds, then `yield_now`s between attempts, so a preempted
//! holder is not starved on a loaded machine. The critical section is a few dozen instructions with no
//! allocation and no call out (the clock is read before locking), and the guard unlocks on unwind too.
//! Every atomic, the cell and the spin/yield hints come from `crate::sync`, so loom
//! (`tests/loom.rs`) checks every interleaving of the shipped lock, including that no cell access is
//! unordered by it, and shuttle (`tests/shuttle.rs`) runs random and PCT schedules of it.

use std::fmt;
use std::sync::atomic::Ordering;

use crate::bucket::{Attempt, Snapshot, snapshot, transition};
use crate::sync::{AtomicBool, UnsafeCell, spin_loop, yield_now};
use crate::{AcquireError, BucketState, Clock, Config, Decision, MonotonicClock, Nanos};

/// Spins with loads (and a CPU hint) this many times before yielding the thread between attempts.
const SPINS_BEFORE_YIELD: u32 = 64;

/// What the lock guards: read and written only while holding it.
#[derive(Clone, Copy, Debug)]
struct Slot {
    config: Config,
    state: BucketState,
}

/// One exact token bucket shared by threads: the unkeyed counterpart of [`crate::Limiter`].
///
/// ```
/// use bucketproof_limiter::{Config, DirectLimiter, ManualClock, Rate, Wait};
///
/// // 10 tokens of burst, refilled at 5 tokens per second.
/// let config = Config::new(10, Rate::per_second(5)).unwrap();
/// let limiter = DirectLimiter::new(config);
///
/// let t0 = 1_000_000_000; // explicit time in ns
/// assert!(limiter.acquire_at(10, t0).unwrap().is_allowed());
/// let denied = limiter.acquire_at(1, t0).unwrap();
/// assert_eq!(denied.retry_after(), Some(Wait::After(200_000_000))); // exactly 1/5 s
/// assert!(!limiter.acquire_at(1, t0 + 199_999_999).unwrap().is_allowed());
/// assert!(limiter.acquire_at(1, t0 + 200_000_000).unwrap().is_allowed());
/// assert!(limiter.acquire_at(0, t0).is_err()); // an error, never a denial
///
/// // With a clock: `acquire` and `peek` read it.
/// let clock = ManualClock::new(0);
/// let limiter = DirectLimiter::with_clock(config, clock.clone());
/// assert!(limiter.acquire(10).unwrap().is_allowed());
/// clock.advance(1_000_000_000);
/// assert_eq!(limiter.peek().remaining.whole(), 5);
/// ```
pub struct DirectLimiter<C = MonotonicClock> {
    locked: AtomicBool,
    slot: UnsafeCell<Slot>,
    clock: C,
}

// SAFETY: the only non-`Sync` field is `slot`, and every access to it goes through `load` / `store`,
// which require the spin lock's guard (see `Guard`): at most one thread touches the
// slot at a time, and the Release unlock / Acquire lock pair orders one holder's accesses before the
// next holder's. `Slot` is plain `Copy` data (`Send`), so handing it between threads is fine. The
// clock is shared by `&`, so it must itself be `Sync`.
unsafe impl<C: Sync> Sync for DirectLimiter<C> {}

impl DirectLimiter<MonotonicClock> {
    /// A full bucket with `config`, reading a [`MonotonicClock`] (started now) in
    /// [`DirectLimiter::acquire`] and [`DirectLimiter::peek`].
    pub fn new(config: Config) -> DirectLimiter<MonotonicClock> {
        DirectLimiter::with_clock(config, MonotonicClock::new())
    }
}

impl<C: Clock> DirectLimiter<C> {
    /// A full bucket with `config`, reading `clock` in the forms that do not take `now` (as
    /// [`crate::Builder::clock`] does for the keyed limiter).
    pub fn with_clock(config: Config, clock: C) -> DirectLimiter<C> {
        DirectLimiter {
            locked: AtomicBool::new(false),
            slot: UnsafeCell::new(Slot {
                config,
                // Full, cursor at the origin: identical to creating the bucket at the first call's
                // `now` (refilling a full bucket only moves its cursor up to `now`).
                state: BucketState::full(&config, 0),
            }),
            clock,
        }
    }

    /// Takes `cost` tokens at the clock's time (read before locking).
    #[inline]
    pub fn acquire(&self, cost: u64) -> Result<Decision, AcquireError> {
        self.acquire_at(cost, self.clock.now())
    }

    /// Takes `cost` tokens at `now`: allowed (and charged) or denied (nothing charged), exactly as
    /// the one transition decides. An invalid cost (`0` or above the capacity) is an error and
    /// changes nothing.
    #[inline]
    pub fn acquire_at(&self, cost: u64, now: Nanos) -> Result<Decision, AcquireError> {
        let held = self.lock();
        let slot = self.load(&held);
        let (next, decision) = transition(&slot.config, slot.state, Attempt { cost, now })?;
        self.store(&held, |stored| stored.state = next);
        Ok(decision)
    }

    /// The balance and time to full at `now`, read-only: nothing is refilled, charged or moved.
    pub fn peek_at(&self, now: Nanos) -> Snapshot {
        let held = self.lock();
        let slot = self.load(&held);
        snapshot(&slot.config, slot.state, now)
    }

    /// [`DirectLimiter::peek_at`] at the clock's time.
    pub fn peek(&self) -> Snapshot {
        self.peek_at(self.clock.now())
    }

    /// Moves the bucket to `config` at `now` ([`BucketState::reconfigured`]: refill under the old
    /// config, round down to the new unit grid, clamp to the new capacity; the cursor never moves back).
    pub fn reconfigure_at(&self, config: Config, now: Nanos) {
        let held = self.lock();
        let slot = self.load(&held);
        let state = slot.state.reconfigured(&slot.config, &config, now);
        self.store(&held, |stored| *stored = Slot { config, state });
    }

    /// [`DirectLimiter::reconfigure_at`] at the clock's time.
    pub fn reconfigure(&self, config: Config) {
        self.reconfigure_at(config, self.clock.now())
    }

    /// The current config.
    pub fn config(&self) -> Config {
        self.inspect().1
    }

    /// The stored state and config, as the last operation left them (not refilled to any time).
    pub fn inspect(&self) -> (BucketState, Config) {
        let held = self.lock();
        let slot = self.load(&held);
        (slot.state, slot.config)
    }

    /// The clock used by [`DirectLimiter::acquire`] and [`DirectLimiter::peek`].
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

impl<C> DirectLimiter<C> {
    /// Reads the slot. `held` proves this thread holds the lock.
    #[inline(always)]
    fn load(&self, held: &Guard<'_>) -> Slot {
        debug_assert!(std::ptr::eq(held.locked, &self.locked));
        // SAFETY: `held` is this limiter's guard (only `lock` makes one), so this thread holds the
        // lock until `held` drops; every access to the slot takes the lock first, so no other thread
        // writes it meanwhile, and the Acquire in `lock` made the previous holder's writes visible.
        // `Slot` is `Copy`: nothing borrowed outlives the access.
        self.slot.with(|slot| unsafe { *slot })
    }

    /// Writes (part of) the slot (after every check: the read-modify-write is one critical section, from `lock`
    /// to `held` dropping, and an error returns before this). `held` proves this thread holds the lock.
    #[inline(always)]
    fn store(&self, held: &Guard<'_>, write: impl FnOnce(&mut Slot)) {
        debug_assert!(std::ptr::eq(held.locked, &self.locked));
        // SAFETY: as in `load`; the lock also excludes every other reader, the reference does not
        // outlive `write`, and the Release store that drops `held` publishes the write to the next
        // holder.
        self.slot.with_mut(|slot| write(unsafe { &mut *slot }))
    }

    /// Takes the spin lock: one compare-and-swap when it is free (the common case).
    #[inline(always)]
    fn lock(&self) -> Guard<'_> {
        if self
            .locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_contended();
        }
        Guard {
            locked: &self.locked,
        }
    }

    /// Waits for the holder: test-and-test-and-set, spinning on loads, then yielding between tries.
    #[cold]
    #[inline(never)]
    fn lock_contended(&self) {
        let mut spins = 0u32;
        loop {
            while self.locked.load(Ordering::Relaxed) {
                if spins < SPINS_BEFORE_YIELD {
                    spins += 1;
                    spin_loop();
                } else {
                    yield_now();
                }
            }
            if self
                .locked
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
        }
    }
}

/// Holds the spin lock; unlocks on drop (also when unwinding, though nothing in a critical section
/// panics: every write is a single assignment after all checks).
struct Guard<'a> {
    locked: &'a AtomicBool,
}

impl Drop for Guard<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.locked.store(false, Ordering::Release);
    }
}

/// Shows the config and the stored state (takes the lock briefly).
impl<C> fmt::Debug for DirectLimiter<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let held = self.lock();
        let slot = self.load(&held);
        drop(held);
        f.debug_struct("DirectLimiter")
            .field("config", &slot.config)
            .field("state", &slot.state)
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(any(loom, feature = "shuttle"))))]
mod tests {
    use super::*;
    use crate::{ManualClock, Rate, Wait};

    const SECOND: Nanos = crate::NANOS_PER_SECOND;

    fn config(capacity: u64, rate: &str) -> Config {
        Config::new(capacity, rate.parse().unwrap()).unwrap()
    }

    #[test]
    fn a_new_limiter_is_full_and_allows_a_burst_up_to_capacity() {
        let limiter = DirectLimiter::new(config(5, "1/s"));
        assert_eq!(limiter.peek_at(7).remaining.whole(), 5);
        assert_eq!(limiter.peek_at(7).reset_after, Wait::After(0));
        for left in (0..5).rev() {
            let decision = limiter.acquire_at(1, 7).unwrap();
            assert!(decision.is_allowed());
            assert_eq!(decision.remaining().whole(), left);
        }
        assert!(!limiter.acquire_at(1, 7).unwrap().is_allowed());
        assert_eq!(limiter.inspect().0.last_refill(), 7);
    }

    #[test]
    fn a_denial_reports_a_tight_retry_after() {
        for rate in ["1/s", "7/3s", "1/h", "3000000/s", "5/min"] {
            let limiter = DirectLimiter::new(config(3, rate));
            assert!(limiter.acquire_at(3, 100).unwrap().is_allowed());
            let denied = limiter.acquire_at(2, 101).unwrap();
            assert!(!denied.is_allowed(), "{rate}");
            let wait = denied.retry_after().unwrap().nanos().unwrap();
            let before = limiter.inspect();
            assert!(
                !limiter.acquire_at(2, 101 + wait - 1).unwrap().is_allowed(),
                "{rate}: 1 ns early must fail"
            );
            assert_eq!(
                limiter.inspect().0.balance(),
                before.0.balance() + {
                    let refill = (wait - 1 + 101 - before.0.last_refill()) as u128;
                    refill * before.1.units_per_nanosecond() as u128
                }
            );
            assert!(
                limiter.acquire_at(2, 101 + wait).unwrap().is_allowed(),
                "{rate}: at now + retry_after it must succeed"
            );
        }
    }

    #[test]
    fn a_rollback_credits_nothing_and_never_moves_the_cursor_back() {
        let limiter = DirectLimiter::new(config(4, "1/s"));
        assert!(limiter.acquire_at(4, 10 * SECOND).unwrap().is_allowed());
        let denied = limiter.acquire_at(1, 5 * SECOND).unwrap();
        assert!(!denied.is_allowed());
        assert_eq!(denied.retry_after(), Some(Wait::After(6 * SECOND)));
        let (state, _) = limiter.inspect();
        assert_eq!((state.balance(), state.last_refill()), (0, 10 * SECOND));
        assert_eq!(limiter.peek_at(0).remaining.whole(), 0);
        assert!(!limiter.acquire_at(1, 10 * SECOND).unwrap().is_allowed());
        assert!(limiter.acquire_at(1, 11 * SECOND).unwrap().is_allowed());
        assert_eq!(limiter.inspect().0.last_refill(), 11 * SECOND);
    }

    #[test]
    fn an_invalid_cost_is_an_error_and_changes_nothing() {
        let limiter = DirectLimiter::new(config(3, "1/s"));
        limiter.acquire_at(2, SECOND).unwrap();
        let before = limiter.inspect();
        for cost in [0, 4, u64::MAX] {
            assert_eq!(
                limiter.acquire_at(cost, 5 * SECOND).unwrap_err(),
                AcquireError::InvalidCost { cost, capacity: 3 }
            );
            assert_eq!(limiter.inspect(), before, "cost {cost} changed the state");
        }
    }

    #[test]
    fn extreme_times_and_configs_do_not_panic() {
        let huge = Config::new(u64::MAX, Rate::new(u64::MAX, 1).unwrap()).unwrap();
        let limiter = DirectLimiter::new(huge);
        for now in [u64::MAX, 0, u64::MAX / 2, u64::MAX] {
            for cost in [u64::MAX, 1, 0] {
                let _ = limiter.acquire_at(cost, now);
                let _ = limiter.peek_at(now);
            }
        }
        limiter.reconfigure_at(config(1, "1/h"), 0);
        assert_eq!(limiter.inspect().0.last_refill(), u64::MAX);
        let denied = limiter.acquire_at(1, u64::MAX).unwrap();
        assert!(denied.is_allowed() || denied.retry_after() == Some(Wait::Never));
    }

    #[test]
    fn acquire_and_peek_read_the_clock() {
        let clock = ManualClock::new(SECOND);
        let limiter = DirectLimiter::with_clock(config(2, "1/s"), clock.clone());
        assert!(limiter.acquire(2).unwrap().is_allowed());
        assert_eq!(
            limiter.acquire(1).unwrap().retry_after(),
            Some(Wait::After(SECOND))
        );
        clock.advance(SECOND / 2);
        assert_eq!(
            limiter.peek().remaining.as_ratio(),
            (SECOND as u128 / 2, SECOND as u128)
        );
        clock.advance(SECOND / 2);
        assert!(limiter.acquire(1).unwrap().is_allowed());
        assert_eq!(limiter.config(), config(2, "1/s"));
        limiter.reconfigure(config(4, "2/s"));
        assert_eq!(limiter.config(), config(4, "2/s"));
        assert_eq!(limiter.clock().now(), 2 * SECOND);
    }

    #[test]
    fn debug_shows_config_and_state() {
        let limiter = DirectLimiter::new(config(2, "1/s"));
        let text = format!("{limiter:?}");
        assert!(text.starts_with("DirectLimiter { config: "), "{text}");
        assert!(text.contains("last_refill: 0"), "{text}");
    }
}
