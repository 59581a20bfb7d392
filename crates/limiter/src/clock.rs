//! Time sources. Time is `u64` nanoseconds since an arbitrary origin; every operation of the limiter
//! also has a form that takes `now` explicitly, so tests and simulations never need a real clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::Nanos;

/// A source of monotonic nanoseconds.
///
/// The limiter tolerates a clock that goes backwards (it clamps), but a real monotonic clock is what
/// makes `retry_after` meaningful to a caller.
pub trait Clock: Send + Sync {
    /// Nanoseconds since this clock's origin.
    fn now(&self) -> Nanos;
}

/// `std::time::Instant` since construction. Saturates after ~584 years.
#[derive(Clone, Copy, Debug)]
pub struct MonotonicClock {
    origin: Instant,
}

impl MonotonicClock {
    /// A clock whose origin is now.
    pub fn new() -> MonotonicClock {
        MonotonicClock {
            origin: Instant::now(),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    fn now(&self) -> Nanos {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// A clock set by hand: for tests and deterministic simulation. Clones share the same time.
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    now: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock reading `start`.
    pub fn new(start: Nanos) -> ManualClock {
        ManualClock {
            now: Arc::new(AtomicU64::new(start)),
        }
    }

    /// Sets the time (backwards too: the limiter must cope).
    pub fn set(&self, now: Nanos) {
        self.now.store(now, Ordering::SeqCst);
    }

    /// Moves the time forward by `nanos`, saturating at `u64::MAX`.
    pub fn advance(&self, nanos: Nanos) {
        let _ = self
            .now
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
                Some(t.saturating_add(nanos))
            });
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Nanos {
        self.now.load(Ordering::SeqCst)
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Nanos {
        (**self).now()
    }
}
