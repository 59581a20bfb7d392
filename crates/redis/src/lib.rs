//! bucketproof-redis: the exact token-bucket transition as one atomic Redis Lua script, so that many
//! instances share one quota and every decision equals the in-memory core's (docs/semantics.md).
//!
//! - [`script`]: the Lua source and its wire format; the script does read, replay check, refill, decide,
//!   write, request-id record and TTL in one `EVALSHA` (reloaded on `NOSCRIPT` by `redis::Script`).
//! - [`set`]: a key of several bandwidths (a [`Bandwidths`](bucketproof_limiter::Bandwidths) set): its
//!   script `set.lua`, which keeps every bandwidth's balance beside the one cursor in the user's one hash
//!   and decides all or none in one call, and the rebuilding of the in-memory
//!   [`Decisions`](bucketproof_limiter::Decisions) from its reply.
//! - [`settle`]: reserve, then settle: the settle script `settle.lua` (one for both layouts of a key),
//!   which finds the key's live request-id record, refunds or charges the difference and closes the
//!   record in one call, and the rebuilding of the in-memory settlement from its reply.
//! - [`epoch`]: state loss: each Cluster slot's epoch marker, read by the scripts only when they create
//!   a bucket, and the [`Recovery`] policy for buckets created after a loss.
//! - [`range`]: the configs the script computes exactly (per bandwidth, for a set) (Lua numbers are doubles) and the typed error
//!   for the others.
//! - [`limiter`]: [`RedisLimiter`], the async front end with the in-memory limiter's shape
//!   (`acquire`, `acquire_at`, `acquire_with(Request)` returning [`Acquired`](bucketproof_limiter::Acquired),
//!   and `acquire_set*` returning every bandwidth's part),
//!   server time by default or an injected `now`, and the explicit policy for an unavailable store.
//!
//! Time: instants are `u64` nanoseconds, beyond the 2^53 a double holds, so they cross into Lua as two
//! limbs (whole seconds, nanoseconds below 10^9) and are stored that way; the server's `TIME`
//! (seconds, microseconds) becomes the same limbs. Elapsed time becomes one number only after it is
//! capped near the time-to-full, which the range check keeps below 2^53.

pub mod epoch;
pub mod limiter;
pub mod range;
pub mod script;
pub mod set;
pub mod settle;

pub use epoch::Recovery;
pub use limiter::{
    BuildError, MAX_RECORDS_PER_KEY, Outcome, ReconfigureError, RedisAcquireError, RedisBuilder,
    RedisLimiter, RedisSettleError, RedisStats, SettleOutcome, Source, Unavailable,
};
pub use range::{EXACT_LIMIT, RangeError, check_exact, max_capacity};
