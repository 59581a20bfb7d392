//! The limiter's default settings, in one place.
//!
//! [`crate::Limiter::builder`] starts from these; the Redis limiter and the harness's trace format
//! default to the same numbers by naming them, so the defaults cannot drift apart.

use crate::{NANOS_PER_SECOND, Nanos};

/// Bound on live keys: 2^20 (1,048,576).
pub const MAX_KEYS: usize = 1 << 20;

/// Entries the amortized sweep inspects each time a shard inserts a new key.
pub const SWEEP_PER_OP: usize = 2;

/// How long a request-id record is live: 60 s.
pub const DEDUPE_WINDOW: Nanos = 60 * NANOS_PER_SECOND;

/// Request-id records kept per key.
pub const DEDUPE_PER_KEY: usize = 8;
