//! # bucketproof-model: the reference model
//!
//! The rules of `docs/semantics.md` transcribed literally, in big rationals, so that a reviewer can check them line
//! by line and the harness can compare any implementation against them decision by decision.
//!
//! What it owns:
//! - [`ModelConfig`]: capacity and a reduced rate `p/q` tokens per second, validated ([`ConfigError`]).
//! - [`ModelBucket`]: the pure single-bucket transition (fresh, refill, decide, peek, reconfigure), no keys.
//! - [`ModelBandwidths`]: a key's config as a set of 1 to 8 bandwidths, each a config with an optional name
//!   (validated: count, structured-field-key names, distinct), its [`ModelIdentity`]s (name, or `#position`) and
//!   its smallest capacity (the cost bound). A [`ModelConfig`] is the set of one unnamed bandwidth.
//! - [`ModelSetBucket`]: the pure transition of one key's state under a set (one balance per bandwidth, one
//!   cursor): [`ModelBucket`]'s transition per bandwidth, allowed iff every bandwidth covers, all charged or none,
//!   reconfiguration by identity. [`ModelDecisions`]: every bandwidth's part of a decision, the largest waits, and
//!   the binding part.
//! - [`Model`]: the keyed limiter over `u64` keys built on that one transition: request-id dedupe (window and
//!   per-key FIFO, a record holding the whole decision, its cost and its settlement), settle, per-key override
//!   sets and versions, forget, expiry
//!   (`model/expiry.rs`: `is_evictable_at`, `sweep`, `evict`, `lose_records`, `recreate_owing`). A key of one
//!   bandwidth answers exactly as the single-bucket rules.
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
//! - No panics on bad input: invalid costs, configs and sets are typed [`ModelError`]s and change nothing. The
//!   `assert!`s inside check the model's own invariants (per bandwidth `0 <= tokens <= capacity` and tokens on the
//!   unit grid `1/(q * 10^9)`, one cursor for every bandwidth, `last_refill` monotone per key); one firing is a
//!   bug in the model.
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
//!
//! Two bandwidths: a burst of 2 at 1 token/s and a `daily` allowance of 3 refilled at 1 token a minute. A request
//! is allowed only when both cover it; a denial charges neither, and waits for the slower one.
//!
//! ```
//! use bucketproof_model::{Model, ModelBandwidths, ModelConfig, ModelWait};
//!
//! const S: u64 = 1_000_000_000;
//! let set = ModelBandwidths::new([
//!     (Some("burst"), ModelConfig::new(2, 1, 1)?),
//!     (Some("daily"), ModelConfig::new(3, 1, 60)?),
//! ])?;
//! let mut model = Model::new(set, 0, 0);
//! assert!(model.acquire(7, 0, 2, None)?.decision.is_allowed()); // burst 0, daily 1
//! // At 2 s the burst is full again, but `daily` holds 1 + 2/60: short of 2 by 58/60 token, 58 s at 1/60.
//! let denied = model.acquire(7, 2 * S, 2, None)?;
//! let waits: Vec<_> = denied.decisions.bandwidths().iter().map(|d| d.retry_after()).collect();
//! assert_eq!(waits, [Some(ModelWait::After(0)), Some(ModelWait::After(58 * S))]);
//! assert_eq!(denied.decisions.retry_after(), Some(ModelWait::After(58 * S)));
//! assert_eq!(denied.decision.retry_after(), Some(ModelWait::After(58 * S)), "daily binds");
//! assert!(model.acquire(7, 60 * S, 2, None)?.decisions.is_allowed());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

//! Reserve, then settle: an acquire with a request id charges an estimate; its settle gives back what the work did
//! not use (never above capacity, at most once) or charges the extra by the ordinary rule.
//!
//! ```
//! use bucketproof_model::{Model, ModelConfig, ModelError, Rational};
//!
//! const S: u64 = 1_000_000_000;
//! let mut model = Model::new(ModelConfig::new(10, 1, 1)?, 60 * S, 8); // ids live 60 s, 8 per key
//! model.acquire(7, 0, 6, Some(1))?; // reserve 6 of 10
//! let refund = model.settle(7, 0, 1, 2)?; // the work cost 2: 4 come back
//! assert_eq!(refund.decision.remaining(), &Rational::from(8u8));
//! assert!(model.settle(7, 0, 1, 2)?.replayed); // a retried settle replays, refunds nothing more
//! assert_eq!(model.settle(7, 0, 1, 0), Err(ModelError::AlreadySettled { actual: 2 }));
//! assert_eq!(model.settle(8, 0, 1, 0), Err(ModelError::UnknownRequest)); // another key's request
//! # Ok::<(), ModelError>(())
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

/// The README's example runs as a doctest, so the crate's front page cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
