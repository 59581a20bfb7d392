//! The one clock every subject of the limiter benches reads: equal clock cost by construction.
//!
//! [`BenchClock`] is a shared `AtomicU64` of nanoseconds. Reading it is one `Relaxed` load, through
//! each library's own clock trait (`bucketproof_limiter::Clock` for ours, `governor::clock::Clock`
//! for governor), and the bench loop moves it with one `Relaxed` store before each call, the same
//! for every subject. Neither side gets `now` as an argument, and neither pays a compare-and-swap
//! to advance time.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A settable clock both peers read the same way.
#[derive(Clone, Debug, Default)]
pub struct BenchClock(Arc<AtomicU64>);

impl BenchClock {
    /// A clock reading `start` nanoseconds.
    pub fn new(start: u64) -> BenchClock {
        BenchClock(Arc::new(AtomicU64::new(start)))
    }

    /// Sets the time: one `Relaxed` store.
    #[inline(always)]
    pub fn set(&self, now: u64) {
        self.0.store(now, Ordering::Relaxed)
    }
}

impl bucketproof_limiter::Clock for BenchClock {
    #[inline(always)]
    fn now(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

impl governor::clock::Clock for BenchClock {
    type Instant = governor::nanos::Nanos;

    #[inline(always)]
    fn now(&self) -> governor::nanos::Nanos {
        self.0.load(Ordering::Relaxed).into()
    }
}
