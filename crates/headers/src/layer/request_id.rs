//! The request ids under which the layer reserves ([`request_id`]): this process's instance nonce
//! in the high 64 bits, a process-wide counter in the low 64.
//!
//! Promises: ids unique within the process and, but for a nonce collision (about one chance in
//! 2^64 per pair of processes), across the processes sharing a store; never an id a caller builds
//! from a `u64`; never a panic, even without the operating system's random source.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use bucketproof_limiter::RequestId;

/// The low 64 bits of the next [`request_id`]: a process-wide counter.
static NEXT_REQUEST: AtomicU64 = AtomicU64::new(0);

/// The high 64 bits of every [`request_id`] of this process: drawn once, on the first reservation.
static INSTANCE: OnceLock<u64> = OnceLock::new();

/// Replaces a drawn instance nonce of 0, which would make ids a caller builds from a `u64`.
const ZERO_NONCE: u64 = 0x6275_636b_6574_7072;

/// A fresh request id for one reservation of the layer.
///
/// The high 64 bits are this process's instance nonce, drawn once from the operating system's
/// random source (`getrandom`, through `rand_core::OsRng`) and never 0; the low 64 bits count the
/// process's reservations. So an id is
/// - unique within the process (the scope of the in-memory limiter's records);
/// - unique across the processes sharing a store (Redis, PostgreSQL), whose records of every
///   instance live side by side: two instances, or one instance and its own restart (which starts
///   counting from 0 again while its previous run's records are still live), collide only if
///   their nonces are equal, about one chance in 2^64 per pair;
/// - never equal to an id a caller builds from a `u64` (its high bits are 0), so it cannot replay
///   another caller's record on a shared limiter.
///
/// If the operating system has no randomness to give, the nonce falls back to one built from the
/// time, the process id and std's per-process hash keys: still distinct per process in practice,
/// never a panic.
pub fn request_id() -> RequestId {
    let instance = *INSTANCE.get_or_init(instance_nonce);
    let count = NEXT_REQUEST.fetch_add(1, Ordering::Relaxed);
    RequestId(u128::from(instance) << 64 | u128::from(count))
}

/// This process's instance nonce (see [`request_id`]).
fn instance_nonce() -> u64 {
    use rand_core::RngCore;
    let mut bytes = [0; 8];
    let drawn = match rand_core::OsRng.try_fill_bytes(&mut bytes) {
        Ok(()) => u64::from_le_bytes(bytes),
        Err(_) => fallback_nonce(),
    };
    if drawn == 0 { ZERO_NONCE } else { drawn }
}

/// A nonce without the operating system's random source: the wall clock, the process id and std's
/// randomly keyed hasher (keys it seeds per process as best it can).
fn fallback_nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    hasher.write_u128(nanos);
    hasher.write_u32(std::process::id());
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every id of the process carries the one nonce, never 0 (no id a caller builds from a `u64`),
    /// and a counter that never repeats.
    #[test]
    fn request_ids_are_the_instance_nonce_and_a_counter() {
        let ids: Vec<u128> = (0..3).map(|_| request_id().0).collect();
        let nonce = ids[0] >> 64;
        assert_ne!(nonce, 0);
        assert!(ids.iter().all(|id| id >> 64 == nonce), "{ids:x?}");
        let counts: Vec<u64> = ids.iter().map(|id| *id as u64).collect();
        assert!(counts.windows(2).all(|w| w[0] < w[1]), "{counts:?}");
    }

    /// The nonce is drawn, not fixed: a fresh draw is another number (equal once in 2^64).
    #[test]
    fn instance_nonces_are_drawn_per_process() {
        assert_ne!(instance_nonce(), instance_nonce());
        assert_ne!(fallback_nonce(), 0);
    }
}
