//! # bucketproof-limiter: an exact token-bucket rate limiter
//!
//! Every peer rounds somewhere (floats, or a refill interval truncated to whole nanoseconds). This crate
//! does not: a rate is an exact fraction `p/q` tokens per second, balances are integers in units of
//! `1 / (q * 10^9)` token, and one nanosecond adds exactly `p` units. Allow and deny are exact,
//! `retry_after` is exact and rounded up, and a backwards clock credits nothing.
//!
//! ```
//! use bucketproof_limiter::{Config, Limiter, Rate, Wait};
//!
//! // 10 tokens of burst, refilled at 5 tokens per second.
//! let config = Config::new(10, Rate::per_second(5)).unwrap();
//! let limiter: Limiter<&str> = Limiter::new(config);
//!
//! let t0 = 1_000_000_000; // explicit time in ns (or `acquire` to read the monotonic clock)
//! assert!(limiter.acquire_at(&"alice", 10, t0).unwrap().is_allowed());
//! let denied = limiter.acquire_at(&"alice", 1, t0).unwrap();
//! assert!(!denied.is_allowed());
//! assert_eq!(denied.retry_after(), Some(Wait::After(200_000_000))); // exactly 1/5 s
//! assert!(limiter.acquire_at(&"alice", 1, t0 + 200_000_000).unwrap().is_allowed());
//! assert!(limiter.acquire_at(&"alice", 0, t0).is_err()); // an error, never a denial
//! ```
//!
//! Map of the crate (see ARCHITECTURE.md at the repository root for the invariants):
//! - [`rate`] and [`config`]: validated, reduced rates and capacities;
//! - [`units`]: exact [`Tokens`] and [`Wait`];
//! - `bucket`: [`BucketState`], [`Decision`] and the single transition every front end uses;
//! - `bandwidths` and `set`: a key's [`Bandwidths`] (1 to 8 bandwidths, all of which must cover a cost)
//!   and the transition over them, [`SetState`] and [`Decisions`];
//! - [`keyed`]: the sharded keyed [`Limiter`] with its memory bound, expiry and request ids, and
//!   reserve-then-settle ([`Limiter::settle`]: an acquire with a request id reserves an estimate; the
//!   settle gives back what the work did not use, at most once and never above capacity, or charges
//!   the extra by the ordinary rule);
//! - [`direct`]: [`DirectLimiter`], one bucket behind a spin lock (the one-key case, no map);
//! - [`clock`]: [`Clock`], [`MonotonicClock`], [`ManualClock`];
//! - [`outage`]: the shared-state front ends' outage policy ([`outage::Unavailable`]) and its fallback;
//! - [`defaults`]: the default settings, named once;
//! - `sync`: the std / loom / shuttle switch for every lock, atomic and cell;
//! - `table`: a shard's storage, one open-addressing table (linear probing, backward-shift deletion)
//!   whose slots hold a key and its packed bucket inline, used by [`keyed`];
//! - `internal`: the transition itself, for the project's own oracles, mutants and Redis tests (not
//!   public API).

// On docs.rs (`--cfg docsrs`, nightly), items behind a feature say which one.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

mod bandwidths;
mod bucket;
pub mod clock;
pub mod config;
pub mod defaults;
pub mod direct;
mod error;
mod hashing;
pub mod keyed;
pub mod outage;
pub mod rate;
mod set;
mod sync;
mod table;
pub mod units;
pub mod wait;

pub use bandwidths::{
    Bandwidth, BandwidthName, Bandwidths, Identity, MAX_BANDWIDTHS, MAX_NAME_LEN,
};
pub use bucket::{BucketState, Decision, Snapshot};
pub use clock::{Clock, ManualClock, MonotonicClock};
pub use config::Config;
pub use direct::DirectLimiter;
pub use error::{AcquireError, ConfigError, SettleError};
pub use keyed::{
    Acquired, Builder, DEFICIT_SLOTS_PER_KEY, EvictionPolicy, FillLevels, Limiter, Peek, Request,
    RequestId, Settle, Settled, Stats,
};
pub use rate::{MAX_RATE_DENOMINATOR, Rate};
pub use set::{Decisions, SetState};
pub use units::{Tokens, Wait};
pub use wait::{Pacing, WaitError};

/// Time in nanoseconds since a clock's origin.
pub type Nanos = u64;

/// Nanoseconds in one second: the factor between a rate per second and the unit grid.
pub const NANOS_PER_SECOND: Nanos = 1_000_000_000;

/// The engine's pure functions, for the project's own oracles, mutants and Redis tests.
///
/// Not public API: nothing here is covered by semver, and a product should use [`Limiter`] or
/// [`DirectLimiter`], which keep every invariant. [`transition`](internal::transition) is the one
/// copy of the decision arithmetic; the Redis crate's tests and the harness use it as the oracle,
/// and the mutants are small deviations around it. [`state_from_parts`](internal::state_from_parts)
/// builds a state without checking its balance against a config, for mutants that must hold states
/// no correct limiter produces.
#[doc(hidden)]
pub mod internal {
    pub use crate::bucket::{
        Attempt, SettleAttempt, StoredDecision, StoredSettlement, settle, snapshot,
        stored_decision, stored_settlement, transition,
    };
    pub use crate::set::{
        StoredDecisions, StoredSettlements, settle_set, stored_decisions, stored_settlements,
        transition_set,
    };
    use crate::{BucketState, Nanos};

    /// A state with any `balance` and cursor, unchecked (see [`BucketState::new`] for the checked
    /// constructor). The transition clamps to capacity on every refill, so it is total on such states.
    pub const fn state_from_parts(balance: u128, last_refill: Nanos) -> BucketState {
        BucketState::from_parts(balance, last_refill)
    }
}

/// The README's example runs as a doctest, so the front page cannot rot (`README.md` is the
/// workspace's, through a link, so the packaged crate carries it too).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
