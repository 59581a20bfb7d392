//! The cleanup: removing rows whose bucket is full with no live request-id record, a bounded step at a
//! time, without ever blocking a decision.
//!
//! Owns: [`PgLimiter::cleanup`], [`PgLimiter::cleanup_at`], [`Cleanup`], its statement
//! (`cleanup.sql`) and the position it goes on from.
//!
//! Promises: one call examines at most `batch` rows (the next ones in key order after the last call's,
//! wrapping around), removes only rows whose bucket is removable at their judgment time (full, no live
//! record: dropping them loses nothing), skips rows a decision holds, takes each off its part's row
//! count and raises the namespace's horizon in the same transaction, so a bucket created afterwards never starts before a dropped one's
//! judgment time (docs/semantics.md, "Expiry and the key bound"). Run it on an interval (or whenever
//! convenient); it is never needed for correctness, only to bound the table.

use bucketproof_limiter::Nanos;

use crate::error::PgAcquireError;
use crate::limiter::{PgLimiter, classify};

/// What one cleanup step did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cleanup {
    /// Rows examined.
    pub examined: u64,
    /// Rows removed.
    pub removed: u64,
    /// True if this step reached the end of the table (the next one starts again from the first key).
    pub wrapped: bool,
}

impl PgLimiter {
    /// One cleanup step at the server's time: examines the next `batch` rows, removes the removable
    /// ones.
    pub async fn cleanup(&self, batch: u32) -> Result<Cleanup, PgAcquireError> {
        self.cleanup_step(batch, None).await
    }

    /// One cleanup step judged at the injected time `now` (for tests and simulations on injected
    /// time; a row is judged at `max(now, its cursor)`).
    pub async fn cleanup_at(&self, batch: u32, now: Nanos) -> Result<Cleanup, PgAcquireError> {
        self.cleanup_step(batch, Some(now)).await
    }

    async fn cleanup_step(
        &self,
        batch: u32,
        now: Option<Nanos>,
    ) -> Result<Cleanup, PgAcquireError> {
        let after = self
            .cleaned_up_to
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let (client, statement) = self.prepared(&self.cleanup).await?;
        let now_text = now.map(|now| now.to_string());
        let batch_text = batch.to_string();
        let row = client
            .query_one(&statement, &[&now_text, &after, &batch_text])
            .await
            .map_err(classify)?;
        let count = |index: usize| u64::try_from(row.get::<_, i64>(index)).unwrap_or(0);
        let step = Cleanup {
            examined: count(0),
            removed: count(2),
            wrapped: count(0) < u64::from(batch),
        };
        let last: Option<String> = row.get(1);
        *self.cleaned_up_to.lock().unwrap_or_else(|e| e.into_inner()) = match last {
            Some(last) if !step.wrapped => last,
            _ => String::new(),
        };
        Ok(step)
    }
}
