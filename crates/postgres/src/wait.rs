//! Waiting until allowed on PostgreSQL: the limiter crate's one retry rule
//! (`bucketproof_limiter::wait`), each attempt one acquire in the database, the sleeps on tokio's
//! timer (`until_ready`) or the thread's (`acquire_blocking`, each attempt run on the limiter's
//! runtime).
//!
//! Promises: those of the in-memory waiting forms (an attempt is an ordinary acquire, so a wait holds
//! no reservation and there is no order among waiters; it never waits forever; an error is returned
//! at once, a store failure included, unless the outage policy decided the attempt), except for
//! cancellation: an attempt is a round trip, so a future dropped during one may leave an admission
//! committed that the caller never sees (tokens lost to that caller, never an over-admission).
//! Dropped while it sleeps, it loses nothing. An attempt is decided at the server's time; a caller
//! with an injected clock drives `bucketproof_limiter::wait::pace` with `acquire_at` and its own sleep.

use bucketproof_limiter::wait::{Pacing, Verdict, WaitError, blocking, pace};
use bucketproof_limiter::{Decisions, Wait};

use crate::{Outcome, PgAcquireError, PgLimiter};

impl<D: Verdict> Verdict for Outcome<D> {
    fn is_allowed(&self) -> bool {
        self.acquired.decision.is_allowed()
    }

    fn retry_after(&self) -> Option<Wait> {
        self.acquired.decision.retry_after()
    }
}

impl PgLimiter {
    /// Takes `cost` tokens for `user`, sleeping on tokio's timer by the retry rule until allowed
    /// (see the module doc for cancellation).
    pub async fn until_ready(
        &self,
        user: &str,
        cost: u64,
        pacing: Pacing,
    ) -> Result<Outcome, WaitError<Outcome, PgAcquireError>> {
        pace(pacing, || self.acquire(user, cost), tokio::time::sleep).await
    }

    /// [`PgLimiter::until_ready`] for every bandwidth of a key's set: waits the largest
    /// retry-after, after which every bandwidth covers the cost.
    pub async fn until_ready_set(
        &self,
        user: &str,
        cost: u64,
        pacing: Pacing,
    ) -> Result<Outcome<Decisions>, WaitError<Outcome<Decisions>, PgAcquireError>> {
        pace(pacing, || self.acquire_set(user, cost), tokio::time::sleep).await
    }

    /// The blocking form of [`PgLimiter::until_ready`]: the calling thread sleeps
    /// (`std::thread::sleep`) by the same retry rule, and each attempt runs on `runtime`, which must
    /// be the multi-thread runtime the limiter was built on (its workers drive the connections).
    /// Call it from a thread outside that runtime (a plain thread, or `spawn_blocking`): like any
    /// `Handle::block_on`, it panics inside an async task.
    pub fn acquire_blocking(
        &self,
        runtime: &tokio::runtime::Handle,
        user: &str,
        cost: u64,
        pacing: Pacing,
    ) -> Result<Outcome, WaitError<Outcome, PgAcquireError>> {
        blocking(
            pacing,
            || runtime.block_on(self.acquire(user, cost)),
            std::thread::sleep,
        )
    }
}
