//! The one door through which the limiter's synchronization passes.
//!
//! `std` by default, `loom` under `--cfg loom`, `shuttle` under the `shuttle` feature: the model
//! checkers explore the shipped code, not a copy of it (the tokio/loom pattern). Nothing else in the
//! crate names `std::sync::Mutex`, an atomic, `UnsafeCell`, `spin_loop` or `yield_now`.
//!
//! - `Mutex`, `lock`, `lock_timed`: the keyed limiter's shard locks. `lock_timed` tries the lock
//!   first and reads the clock only when that fails, so an uncontended acquisition costs what `lock`
//!   costs, and a contended one reports how long it waited to a function of the caller.
//! - `AtomicBool`, `UnsafeCell`, `spin_loop`, `yield_now`: the [`crate::DirectLimiter`]'s spin lock.
//!   `UnsafeCell` has loom's closure API (`with`, `with_mut`) under every cfg, so loom can track each
//!   access to the guarded state and report one that is not ordered by the lock; over std it is a
//!   zero-cost wrapper, and under shuttle (which does not track cells) each access is also a
//!   scheduling point, so a broken lock lets another thread in between a read and a write. Under
//!   loom and shuttle `spin_loop` is a scheduling point (a yield), so a spinning thread lets the lock
//!   holder run.

#[cfg(all(loom, feature = "shuttle"))]
compile_error!("choose one explorer: --cfg loom or the `shuttle` feature, not both");

#[cfg(loom)]
pub(crate) use loom::{
    cell::UnsafeCell,
    hint::spin_loop,
    sync::{Mutex, MutexGuard, atomic::AtomicBool},
    thread::yield_now,
};
#[cfg(all(feature = "shuttle", not(loom)))]
pub(crate) use shuttle::{
    hint::spin_loop,
    sync::{Mutex, MutexGuard, atomic::AtomicBool},
    thread::yield_now,
};
#[cfg(not(any(loom, feature = "shuttle")))]
pub(crate) use std::{
    hint::spin_loop,
    sync::{Mutex, MutexGuard, atomic::AtomicBool},
    thread::yield_now,
};

// Loom's and shuttle's `try_lock` return std's error type too.
use std::sync::TryLockError;

/// `std::cell::UnsafeCell` behind loom's closure API, for the std and shuttle builds.
#[cfg(not(loom))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(data: T) -> UnsafeCell<T> {
        UnsafeCell(std::cell::UnsafeCell::new(data))
    }

    /// Runs `f` with a shared pointer to the contents. The caller guarantees no concurrent writer.
    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        cell_access_point();
        f(self.0.get())
    }

    /// Runs `f` with a mutable pointer to the contents. The caller guarantees exclusive access.
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        cell_access_point();
        f(self.0.get())
    }
}

/// Under shuttle, a context switch before every cell access: shuttle schedules only at its own
/// primitives and does not track cells, so without this a read and a later write of the guarded
/// state would always run back to back, and a broken lock could never be seen to let two threads
/// interleave them. (Shuttle does not model time: a zero sleep is exactly a scheduling point.)
/// Nothing under std.
#[cfg(not(loom))]
#[inline(always)]
fn cell_access_point() {
    #[cfg(feature = "shuttle")]
    shuttle::thread::sleep(std::time::Duration::ZERO);
}

/// Locks, ignoring poisoning: a panic inside a critical section cannot leave a shard half-written,
/// because every write is a single assignment of a fully computed state after all checks.
#[inline]
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// Locks like [`lock`]; when the lock was contended (the first `try_lock` failed), runs `waited`
/// on the locked value with the nanoseconds spent in the blocking `lock` after that failure. The
/// clock is read only on the contended path, which is out of line, so the uncontended path is the
/// one compare-and-swap of `lock` and nothing more. (Under loom and shuttle the wait is the
/// explorer's wall time, meaningless but harmless: only the count of contended acquisitions means
/// something there.)
#[inline(always)]
pub(crate) fn lock_timed<T>(mutex: &Mutex<T>, waited: fn(&mut T, u64)) -> MutexGuard<'_, T> {
    match mutex.try_lock() {
        Ok(guard) => guard,
        Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        Err(TryLockError::WouldBlock) => lock_contended(mutex, waited),
    }
}

/// The contended half of [`lock_timed`].
#[cold]
#[inline(never)]
fn lock_contended<T>(mutex: &Mutex<T>, waited: fn(&mut T, u64)) -> MutexGuard<'_, T> {
    let start = std::time::Instant::now();
    let mut guard = lock(mutex);
    // Saturates: a wait of more than 584 years does not fit, and is not worth a panic.
    let nanos = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
    waited(&mut guard, nanos);
    guard
}
