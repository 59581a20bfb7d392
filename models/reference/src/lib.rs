//! # bucketproof-model: the reference model
//!
//! The rules of `docs/semantics.md` transcribed literally, in big rationals, so that a reviewer can check them line
//! by line and the harness can compare any implementation against them decision by decision.
//!
//! What it owns:
//! - [`ModelConfig`]: capacity and a reduced rate `p/q` tokens per second, validated ([`ConfigError`]).
//! - [`ModelBucket`]: the pure single-bucket transition (fresh, refill, decide, peek, reconfigure), no keys.
//! - [`Model`]: the keyed limiter over `u64` keys built on that one transition: request-id dedupe (window and
//!   per-key FIFO), per-key override configs and versions, forget, expiry (`is_evictable_at`, `sweep`, `evict`).
//!
//! What it promises:
//! - It shares no code with `crates/limiter`: a bug cannot hide in both.
//! - Times and costs come in as `u64`, but every computation is done in exact [`Integer`]s and [`Rational`]s, so nothing
//!   overflows, wraps, saturates or rounds, except the two roundings the spec prescribes (`ceil` of waits, `floor`
//!   onto the new grid at reconfiguration).
//! - Where a rule would reduce a fraction only to compare it or take its ceiling, the model takes the same
//!   number in integers ([`cmp_whole`] for a balance against capacity, cost or 0; the waits'
//!   `ceil((whole - a/b) / (c/d))`). Each such form is tested against the plain rational definition, on
//!   its u128 path and on its big-integer path.
//! - Deterministic: a `BTreeMap`, no clock, no randomness, no hashing.
//! - No panics on bad input: invalid costs and configs are typed [`ModelError`]s and change nothing. The `assert!`s
//!   inside check the model's own invariants (`0 <= tokens <= capacity`, tokens on the unit grid `1/(q * 10^9)`,
//!   `last_refill` monotone per key); one firing is a bug in the model.
//!
//! ```
//! use bucketproof_model::{Model, ModelConfig, ModelWait};
//!
//! // 1 token, refilled at 1/3 token per second; no request-id dedupe.
//! let mut model = Model::new(ModelConfig::new(1, 1, 3)?, 0, 0);
//! let first = model.acquire(42, 0, 1, None)?;
//! assert!(first.decision.is_allowed() && first.created);
//! let denied = model.acquire(42, 1_000_000_000, 1, None)?;
//! assert_eq!(denied.decision.retry_after(), Some(ModelWait::After(2_000_000_000)));
//! assert!(model.acquire(42, 3_000_000_000, 1, None)?.decision.is_allowed());
//! # Ok::<(), bucketproof_model::ModelError>(())
//! ```

#![warn(missing_docs)]

mod bandwidths;
mod bucket;
mod config;
mod decisions;
mod model;
mod set;

pub use bandwidths::{ModelBandwidths, ModelIdentity};
pub use bucket::{ModelBucket, ModelDecision, ModelPeek, ModelWait, cmp_whole};
pub use config::{
    ConfigError, MAX_BANDWIDTHS, MAX_NAME_LEN, MAX_RATE_DENOM, ModelConfig, ModelError,
    NANOS_PER_SECOND, NameRule,
};
pub use decisions::ModelDecisions;
pub use model::{Model, Outcome};
pub use set::ModelSetBucket;

/// The model's exact rational: always reduced, arbitrary precision.
///
/// `dashu`'s integers keep up to two machine words inline, and every model value (ns times up to `2^64`,
/// denominators up to `2^32 * 10^9`) fits there, so arithmetic does not allocate and its gcd runs on `u128`
/// words; `num-rational` allocated and ran a bit-by-bit gcd on every operation, which was ~90% of a
/// harness run. Re-exported so that the harness and the tests name the model's number type, not a crate.
pub use dashu_ratio::RBig as Rational;

/// The model's exact integer (floors and ceilings of [`Rational`]s, wide sums).
pub use dashu_int::IBig as Integer;
