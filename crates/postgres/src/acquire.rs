//! The acquire path: the transition's one statement (`acquire.sql`), its answer, its retries and the
//! outage policy.
//!
//! Owns: [`PgLimiter::acquire`], [`PgLimiter::acquire_at`], [`PgLimiter::acquire_with`] and their
//! `acquire_set*` forms (every bandwidth's part), the statement's parameters, the reading of its
//! answer and when to run it again.
//!
//! Promises: a decision from PostgreSQL equals the core's (rebuilt by `stored_decision`, refused if
//! it is no decision the core could make); the statement runs again only when that cannot charge
//! twice: when no connection could be had (nothing was sent), or when the call carries a request id
//! (the function answers a recorded id with its decision); every other failure goes to the outage
//! policy or is a typed error, never a denial.

use std::time::Duration;

use bucketproof_limiter::internal::{StoredDecisions, stored_decisions};
use bucketproof_limiter::outage::Source;
use bucketproof_limiter::{AcquireError, Acquired, Decisions, Nanos, Request};
use tokio_postgres::Row;

use crate::error::PgAcquireError;
use crate::limiter::{Outcome, PgLimiter, classify};

/// The pause before the second attempt, doubled each time.
const FIRST_BACKOFF: Duration = Duration::from_millis(10);

/// The longest pause between two attempts.
const MAX_BACKOFF: Duration = Duration::from_millis(100);

/// What one run of the statement answered.
enum Answer {
    Decided(Box<Outcome<Decisions>>),
    /// The key's row is on another config.
    Mismatch,
}

impl PgLimiter {
    /// Takes `cost` tokens for `user` at the server's time.
    pub async fn acquire(&self, user: &str, cost: u64) -> Result<Outcome, PgAcquireError> {
        self.acquire_with(user, Request::cost(cost)).await
    }

    /// Takes `cost` tokens for `user` at the injected time `now`.
    pub async fn acquire_at(
        &self,
        user: &str,
        cost: u64,
        now: Nanos,
    ) -> Result<Outcome, PgAcquireError> {
        self.acquire_with(user, Request::cost(cost).at(now)).await
    }

    /// The full form, as the in-memory limiter's `acquire_with`: `request.now == None` uses the
    /// server's `clock_timestamp()`; a request id makes retries (ours and the caller's) charge at most
    /// once within the dedupe window. For a limiter of several bandwidths the decision is the binding
    /// part ([`Decisions::binding`]) of [`PgLimiter::acquire_set_with`]'s.
    pub async fn acquire_with(
        &self,
        user: &str,
        request: Request,
    ) -> Result<Outcome, PgAcquireError> {
        Ok(self.acquire_set_with(user, request).await?.binding())
    }

    /// Takes `cost` tokens from every bandwidth of `user` at the server's time: every part.
    pub async fn acquire_set(
        &self,
        user: &str,
        cost: u64,
    ) -> Result<Outcome<Decisions>, PgAcquireError> {
        self.acquire_set_with(user, Request::cost(cost)).await
    }

    /// Takes `cost` tokens from every bandwidth of `user` at the injected time `now`: every part.
    pub async fn acquire_set_at(
        &self,
        user: &str,
        cost: u64,
        now: Nanos,
    ) -> Result<Outcome<Decisions>, PgAcquireError> {
        self.acquire_set_with(user, Request::cost(cost).at(now))
            .await
    }

    /// The full form with every bandwidth's part of the decision (for one bandwidth, one part).
    pub async fn acquire_set_with(
        &self,
        user: &str,
        request: Request,
    ) -> Result<Outcome<Decisions>, PgAcquireError> {
        // The cost is checked by the function, against the key's own config (an override may differ
        // from the limiter's); an invalid one changes nothing there either.
        let mut backoff = FIRST_BACKOFF;
        let mut attempt = 1;
        let last = loop {
            let failure = match self.run(user, request).await {
                Ok(Answer::Decided(outcome)) => return Ok(*outcome),
                Ok(Answer::Mismatch) => {
                    return Err(PgAcquireError::ConfigMismatch(format!(
                        "the stored bucket of {user:?} is on another config than {}",
                        self.words.fingerprint
                    )));
                }
                Err(failure) => failure,
            };
            let retry_is_safe = match &failure {
                // Nothing was sent.
                Failure::NoConnection(_) => true,
                // It may have run: only a request id makes running it again harmless.
                Failure::Broken(_) => request.request_id.is_some(),
                Failure::Refused(_) => false,
            };
            if !retry_is_safe || attempt >= self.settings.attempts {
                break failure;
            }
            attempt += 1;
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        };
        let last = match last {
            Failure::Refused(error) => return Err(error),
            Failure::NoConnection(error) | Failure::Broken(error) => error,
        };
        match self
            .fallback
            .decide(&self.settings.bandwidths, request.cost, request.now)?
        {
            None => Err(last),
            Some((decisions, source)) => Ok(Outcome {
                acquired: Acquired {
                    decision: decisions,
                    created: false,
                    replayed: false,
                },
                source,
                seq: 0,
            }),
        }
    }

    /// One run of the statement.
    async fn run(&self, user: &str, request: Request) -> Result<Answer, Failure> {
        let (client, statement) = self.prepared(&self.acquire).await.map_err(|e| match e {
            PgAcquireError::Unavailable(_) => Failure::NoConnection(e),
            other => Failure::Refused(other),
        })?;
        let w = &self.words;
        let cost = request.cost.to_string();
        let now = request.now.map(|now| now.to_string());
        let id = request.request_id.map(|id| id.0.to_string());
        let rows = client
            .query(
                &statement,
                &[
                    &user,
                    &cost,
                    &now,
                    &w.capacity_units,
                    &w.p,
                    &w.unit,
                    &w.fingerprint,
                    &id,
                    &w.window,
                    &w.keep,
                    &w.per_part,
                    &w.evict,
                ],
            )
            .await
            .map_err(|e| match classify(e) {
                e @ PgAcquireError::Unavailable(_) => Failure::Broken(e),
                e => Failure::Refused(e),
            })?;
        let row = rows
            .first()
            .ok_or(Failure::Refused(PgAcquireError::Reply("no row")))?;
        if row.get::<_, bool>(8) {
            return Ok(Answer::Mismatch);
        }
        if row.get::<_, bool>(11) {
            return Err(Failure::Refused(self.key_limit()));
        }
        if let Some(bound) = row.get::<_, Option<&str>>(9) {
            let capacity = bound
                .parse()
                .map_err(|_| Failure::Refused(PgAcquireError::Reply("a capacity past u64")))?;
            return Err(Failure::Refused(
                AcquireError::InvalidCost {
                    cost: request.cost,
                    capacity,
                }
                .into(),
            ));
        }
        (self.outcome(row))
            .map(|outcome| Answer::Decided(Box::new(outcome)))
            .map_err(Failure::Refused)
    }

    /// The statement's decision row as the core's decision, every bandwidth's part.
    fn outcome(&self, row: &Row) -> Result<Outcome<Decisions>, PgAcquireError> {
        let whole = |text: &str| -> Result<u128, PgAcquireError> {
            text.parse()
                .map_err(|_| PgAcquireError::Reply("a number that is not a whole u128"))
        };
        let instant = |index: usize| -> Result<Nanos, PgAcquireError> {
            Nanos::try_from(whole(row.get(index))?)
                .map_err(|_| PgAcquireError::Reply("an instant past u64"))
        };
        let balances = (row.get::<_, Vec<&str>>(1).into_iter())
            .map(whole)
            .collect::<Result<Vec<u128>, _>>()?;
        let report = StoredDecisions {
            allowed: row.get(0),
            balances_after: &balances,
            cursor: instant(2)?,
            now: instant(3)?,
            cost: u64::try_from(whole(row.get(4))?)
                .map_err(|_| PgAcquireError::Reply("a cost past u64"))?,
        };
        let set = self.effective(row.get(10))?;
        let decision = stored_decisions(&set, report).ok_or(PgAcquireError::Reply(
            "no decision the transition could make",
        ))?;
        let seq: i64 = row.get(5);
        Ok(Outcome {
            acquired: Acquired {
                decision,
                created: row.get(6),
                replayed: row.get(7),
            },
            source: Source::Store,
            seq: u64::try_from(seq).map_err(|_| PgAcquireError::Reply("a negative counter"))?,
        })
    }
}

/// Why one run of the statement has no answer, by what running it again could do.
enum Failure {
    /// No connection could be had: nothing was sent.
    NoConnection(PgAcquireError),
    /// The connection broke or the server went away: it may or may not have run.
    Broken(PgAcquireError),
    /// PostgreSQL answered with an error, or the answer is malformed: running it again would not help.
    Refused(PgAcquireError),
}
