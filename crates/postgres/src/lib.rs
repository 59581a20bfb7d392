//! bucketproof on PostgreSQL: the exact token-bucket transition in one call, so several
//! instances share one quota through a database they already run.
//!
//! Roles: [`PgLimiter`] (`limiter.rs`) is the front end, built by [`PgBuilder`] (`builder.rs`: the
//! settings) and [`PgBuilder::connect`] (`connect.rs`: the pool, the schema and the statements);
//! `acquire.rs` calls the transition (`acquire.sql`), with its retries and the outage policy (the
//! same [`Unavailable`] as the Redis limiter's); `cleanup.rs` removes full rows a bounded step at a
//! time (`cleanup.sql`, the schema's `cleanup`), keeping each part's row count right; the key bound
//! (`PgBuilder::max_keys`, per part, `RejectNewKeys` or `EvictFull`) is the schema's `admit_new`,
//! called by every creation; `peek.rs` reads without writing (`peek.sql`); `reconfigure.rs` gives a key a
//! config of its own (`reconfigure.sql`); `settle.rs` reconciles an admitted request's charge with
//! its actual cost (`settle.sql`, no outage fallback); [`schema`] owns the namespace and the versioned tables and
//! functions (`schema.sql`); [`error`] the typed errors.
//!
//! The transition runs in the server as one PL/pgSQL function (`schema.sql`), called by one prepared
//! statement and atomic by the key's row lock: replay a live request id, or refill to `max(now,
//! last)`, decide, write, record the id, mark when the row becomes removable. Several bandwidths per
//! key live in the same row. Balances are integers in units of `1/(q * 10^9)` token and instants integer
//! nanoseconds, both `numeric`: exact and unbounded, so no config is refused for its size and nothing
//! is ever rounded. Time is the server's `clock_timestamp()` (microseconds) or injected.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use bucketproof_limiter::{Config, Rate, Request, RequestId, Settle};
//! use bucketproof_postgres::PgLimiter;
//!
//! let config = Config::new(10, Rate::per_second(5))?;
//! let limiter = PgLimiter::builder(config)
//!     .namespace("ratelimit")
//!     .connect("postgres://postgres@127.0.0.1/app")
//!     .await?;
//! let outcome = limiter.acquire("alice", 1).await?; // the server's clock
//! assert!(outcome.decision().is_allowed());
//! // A request id: a retry of this call answers the recorded decision and charges nothing.
//! let request = Request::cost(2).id(RequestId(7));
//! let first = limiter.acquire_with("alice", request).await?;
//! assert_eq!(limiter.acquire_with("alice", request).await?.decision(), first.decision());
//! // Reserve, then settle: the work cost 1, so 1 comes back, once however often it is retried.
//! assert!(limiter.settle("alice", Settle::new(RequestId(7), 1)).await?.decision.is_allowed());
//! assert!(limiter.settle("alice", Settle::new(RequestId(7), 1)).await?.replayed);
//! limiter.cleanup(1_000).await?; // now and then: removes full rows, never blocks a decision
//! # Ok(()) }
//! ```

mod acquire;
mod builder;
mod cleanup;
mod connect;
pub mod error;
mod limiter;
mod peek;
mod reconfigure;
pub mod schema;
mod settle;
mod wait;

pub use bucketproof_limiter::outage::{Source, Unavailable};
pub use builder::{MAX_RECORDS_PER_KEY, PgBuilder};
pub use cleanup::Cleanup;
pub use error::{BuildError, PgAcquireError};
pub use limiter::{Outcome, PgLimiter};
pub use schema::{KEY_PARTS, Namespace, SCHEMA_VERSION};
