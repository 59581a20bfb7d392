//! Reserve, then settle: reconciling an admitted request's charge with its actual cost.
//!
//! Owns: [`PgLimiter::settle`] and [`PgLimiter::settle_set`], their statement (`settle.sql`, calling
//! the schema's `settle` function), the reading of its answer and its retries.
//!
//! Promises: the rule of docs/semantics.md ("settle") in one call under the key's row lock, equal to
//! the core's `settle_set` on the same state (the settlement is rebuilt by `stored_settlements` and
//! refused if it is no settlement the core could make); each error is the core's [`SettleError`]
//! case and changes nothing; a settle never creates a row. No outage fallback: a settle that cannot
//! reach PostgreSQL is [`PgAcquireError::Unavailable`]. Because a retried settle with the same actual
//! replays the recorded settlement (a refund happens at most once per record), the limiter runs it
//! again after a broken connection, up to `attempts` times, and so may the caller.

use std::time::Duration;

use bucketproof_limiter::internal::{SettleAttempt, StoredSettlements, stored_settlements};
use bucketproof_limiter::{Decisions, Nanos, Settle, SettleError, Settled};
use tokio_postgres::Row;

use crate::error::PgAcquireError;
use crate::limiter::{PgLimiter, classify};

/// The pause before the second attempt, doubled each time.
const FIRST_BACKOFF: Duration = Duration::from_millis(10);

/// The longest pause between two attempts.
const MAX_BACKOFF: Duration = Duration::from_millis(100);

impl PgLimiter {
    /// Reconciles the charge of `user`'s admitted acquire that carried `settle.request_id` with the
    /// actual cost, at `settle.now` (`None`: the server's clock), as the in-memory limiter's
    /// `settle`: gives back the difference when the actual is lower (never above capacity), charges
    /// the extra when it is higher (denied, nothing charged and the request left open, when a
    /// bandwidth cannot cover it). A retry with the same actual replays the first settlement
    /// (`replayed`) and changes nothing. For a limiter of several bandwidths the decision is the
    /// binding part of [`PgLimiter::settle_set`]'s.
    ///
    /// Errors: [`PgAcquireError::Settle`] with the core's case (nothing changed);
    /// [`PgAcquireError::ConfigMismatch`]; [`PgAcquireError::Unavailable`] when PostgreSQL cannot be
    /// reached after `attempts` tries: settle has no local fallback (a local budget never charged the
    /// request), so retry it later; it is idempotent.
    pub async fn settle(&self, user: &str, settle: Settle) -> Result<Settled, PgAcquireError> {
        let settled = self.settle_set(user, settle).await?;
        Ok(Settled {
            decision: *settled.decision.binding(),
            replayed: settled.replayed,
        })
    }

    /// [`PgLimiter::settle`] with every bandwidth's part of the settlement.
    pub async fn settle_set(
        &self,
        user: &str,
        settle: Settle,
    ) -> Result<Settled<Decisions>, PgAcquireError> {
        let mut backoff = FIRST_BACKOFF;
        let mut attempt = 1;
        loop {
            match self.run_settle(user, settle).await {
                // Running it again cannot settle twice: the function answers a settled record with
                // its settlement, so a broken connection is retried like a missing one.
                Err(PgAcquireError::Unavailable(_)) if attempt < self.settings.attempts => {
                    attempt += 1;
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
                answer => return answer,
            }
        }
    }

    /// One run of the statement.
    async fn run_settle(
        &self,
        user: &str,
        settle: Settle,
    ) -> Result<Settled<Decisions>, PgAcquireError> {
        let (client, statement) = self.prepared(&self.settle).await?;
        let w = &self.words;
        let rows = client
            .query(
                &statement,
                &[
                    &user,
                    &settle.request_id.0.to_string(),
                    &settle.actual.to_string(),
                    &settle.now.map(|now| now.to_string()),
                    &w.capacity_units,
                    &w.p,
                    &w.unit,
                    &w.fingerprint,
                    &w.window,
                ],
            )
            .await
            .map_err(classify)?;
        let row = rows.first().ok_or(PgAcquireError::Reply("no row"))?;
        let whole = |index: usize| -> Result<u64, PgAcquireError> {
            (row.get::<_, &str>(index).parse())
                .map_err(|_| PgAcquireError::Reply("a number that is not a whole u64"))
        };
        match row.get::<_, &str>(0) {
            "ok" => self.settlement(row, settle),
            "unknown" => Err(SettleError::UnknownRequest.into()),
            "not_admitted" => Err(SettleError::NotAdmitted.into()),
            "settled" => Err(SettleError::AlreadySettled { actual: whole(7)? }.into()),
            "invalid" => Err(SettleError::InvalidActual {
                actual: settle.actual,
                capacity: whole(1)?,
            }
            .into()),
            "mismatch" => Err(PgAcquireError::ConfigMismatch(format!(
                "the stored bucket of {user:?} is on another config than {}",
                w.fingerprint
            ))),
            _ => Err(PgAcquireError::Reply(
                "a settle status the crate does not know",
            )),
        }
    }

    /// The function's settlement row as the core's settlement, every bandwidth's part.
    fn settlement(&self, row: &Row, settle: Settle) -> Result<Settled<Decisions>, PgAcquireError> {
        let whole = |text: &str| -> Result<u128, PgAcquireError> {
            text.parse()
                .map_err(|_| PgAcquireError::Reply("a number that is not a whole u128"))
        };
        let narrow = |index: usize| -> Result<u64, PgAcquireError> {
            u64::try_from(whole(row.get(index))?)
                .map_err(|_| PgAcquireError::Reply("a number past u64"))
        };
        let balances = (row.get::<_, Vec<&str>>(3).into_iter())
            .map(whole)
            .collect::<Result<Vec<u128>, _>>()?;
        let now: Nanos = narrow(5)?;
        let report = StoredSettlements {
            allowed: row.get(2),
            balances_after: &balances,
            cursor: narrow(4)?,
            settle: SettleAttempt {
                charged: narrow(6)?,
                actual: settle.actual,
                now,
            },
        };
        let set = self.effective(row.get(9))?;
        let decision = stored_settlements(&set, report)
            .ok_or(PgAcquireError::Reply("no settlement the core could make"))?;
        Ok(Settled {
            decision,
            replayed: row.get(8),
        })
    }
}
