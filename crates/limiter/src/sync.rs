//! The one door through which the limiter's synchronization passes.
//!
//! `std` by default, `loom` under `--cfg loom`, `shuttle` under the `shuttle` feature: the model
//! checkers explore the shipped code, not a copy of it (the tokio/loom pattern). Nothing else in the
//! crate names `std::sync::Mutex`.

#[cfg(all(loom, feature = "shuttle"))]
compile_error!("choose one explorer: --cfg loom or the `shuttle` feature, not both");

#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
#[cfg(all(feature = "shuttle", not(loom)))]
pub(crate) use shuttle::sync::{Mutex, MutexGuard};
#[cfg(not(any(loom, feature = "shuttle")))]
pub(crate) use std::sync::{Mutex, MutexGuard};

/// Locks, ignoring poisoning: a panic inside a critical section cannot leave a shard half-written,
/// because every write is a single assignment of a fully computed state after all checks.
#[inline]
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}
