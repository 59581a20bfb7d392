//! bucketproof on PostgreSQL: the exact token-bucket transition as one statement, so several
//! instances share one quota through a database they already run.
//!
//! Roles: [`PgLimiter`] (`limiter.rs`) is the front end: a pool, one prepared statement per acquire,
//! and the answer rebuilt into the core's exact [`Decision`](bucketproof_limiter::Decision);
//! `acquire.sql` is that statement, `schema.sql` the tables; [`schema`] the namespace and the
//! versioned migration; [`error`] the typed errors.
//!
//! The transition runs in the server as one plain-SQL statement (`INSERT .. ON CONFLICT DO UPDATE ..
//! RETURNING`), atomic by the key's row: create or read, refill to `max(now, last)`, decide, write. Balances are integers in
//! units of `1/(q * 10^9)` token and instants integer nanoseconds, both `numeric`: exact and unbounded,
//! so no config is refused for its size and nothing is ever rounded. Time is the server's
//! `clock_timestamp()` (microseconds) or injected.
//!
//! Not yet here (docs say so where a user would look): request ids, expiry of full rows and their
//! cleanup, per-key reconfigure, the outage policy, the headers layer's source and the harness
//! subject. A row stays until deleted.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use bucketproof_limiter::{Config, Rate};
//! use bucketproof_postgres::PgLimiter;
//!
//! let config = Config::new(10, Rate::per_second(5))?;
//! let limiter = PgLimiter::connect("postgres://postgres@127.0.0.1/app", "ratelimit", config).await?;
//! let outcome = limiter.acquire("alice", 1).await?; // the server's clock
//! assert!(outcome.decision().is_allowed());
//! # Ok(()) }
//! ```

pub mod error;
mod limiter;
pub mod schema;

pub use error::{BuildError, PgAcquireError};
pub use limiter::{Outcome, PgLimiter};
pub use schema::{Namespace, SCHEMA_VERSION};
