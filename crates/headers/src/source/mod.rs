//! Where the layer gets its decisions: the in-memory limiter, or a store shared by every instance,
//! Redis or PostgreSQL.
//!
//! [`DecisionSource`] is the seam. The in-memory [`Limiter`] implements it and never fails for a
//! store reason; the `RedisLimiter` (feature `redis`, module `redis`) and the `PgLimiter` (feature
//! `postgres`, module `postgres`) implement it too, and report an outage as
//! [`SourceError::Unavailable`] (fail closed) or as an [`Outcome`] with `degraded = true` (a local
//! fallback budget or fail-open decided it). The layer turns the first into a 503 and flags the
//! second with a response header: an outage is never disguised as an ordinary denial or approval.
//! Both stores share one outage policy and the [`bucketproof_limiter::outage::Source`] of a
//! decision, so what "degraded" means is stated once, here (`store_degraded`), and so is how a
//! store's decision over a set becomes the advertised parts (`store_set_outcome`).
//!
//! A source answers with one [`Outcome`] ([`DecisionSource::decide`]) or with every bandwidth's
//! part of the decision ([`DecisionSource::decide_set`], a [`SetOutcome`]); the layer asks for the
//! latter. Its provided body wraps `decide`, so a source that knows one bandwidth per key implements
//! `decide` alone. The in-memory [`Limiter`] answers `decide_set` with every bandwidth of a key of
//! several ([`decide_set_at`]), and so do the `RedisLimiter` (its set script) and the `PgLimiter`
//! (its function keeps every bandwidth in the key's row) built with several.
//!
//! Reserve, then settle ([`SettleSource`]): a source that can decide with a request id and later
//! reconcile that request's charge with its actual cost (docs/semantics.md, "settle"). The in-memory
//! [`Limiter`], the `RedisLimiter` and the `PgLimiter` implement it; the layer uses it when built
//! with [`crate::layer::RateLimitLayer::settle`]. A settle that did not happen is a
//! [`SettleFailure`]: the rule refused it ([`SettleFailure::Refused`]), or the store could not be
//! reached or did not answer with a settlement ([`SettleFailure::Unavailable`],
//! [`SettleFailure::Store`], the same two store cases as [`SourceError`]). A settle has no outage
//! fallback on either store: a reservation a fallback decided has no record there, and its settle
//! fails (see the store modules).
//!
//! The layer's digest keys ([`crate::key::KeyDigest`], from [`crate::key::HeaderKey`]) work with
//! every source: the in-memory limiter as a `Limiter<KeyDigest>` (16 bytes inline per key), the
//! Redis and PostgreSQL limiters under the digest's 32 hex digits (`keyed_by_digest`).
//!
//! This module also owns the glue from one limiter [`Decision`] to the advertised numbers
//! ([`Outcome::advertised`], [`Outcome::retry_after_secs`]), using [`crate::mapping`]'s rounding;
//! [`SetOutcome`] uses the same glue for each of its parts.

mod error;
mod memory;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod postgres;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;
#[cfg(any(feature = "redis", feature = "postgres"))]
mod store;
mod traits;

#[cfg(doc)]
use crate::set::SetOutcome;
#[cfg(doc)]
use bucketproof_limiter::{Decision, Limiter};

pub use crate::outcome::Outcome;
pub use error::{SettleFailure, SourceError};
pub use memory::decide_set_at;
pub use traits::{DecisionSource, SettleSource};
