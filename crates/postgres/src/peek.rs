//! Peek: a read-only look at a key's bucket.
//!
//! Owns: [`PgLimiter::peek`] and its statement (`peek.sql`).
//!
//! Promises: nothing is written, refilled or created; the time, the row and the horizon are read from
//! one snapshot; the view is the core's `snapshot` of the bucket an acquire would find or create (a
//! key with no row: full at `max(now, horizon)`), exactly. Not covered by the outage policy: an
//! unreachable server is an error here.

use bucketproof_limiter::internal::snapshot;
use bucketproof_limiter::{Bandwidths, Nanos, Peek, SetState};

use crate::error::PgAcquireError;
use crate::limiter::{PgLimiter, classify};

impl PgLimiter {
    /// What an acquire on `user` at `now` (`None`: the server's clock) would see after refilling,
    /// without writing anything. For a limiter of several bandwidths: the bandwidth with the fewest
    /// whole tokens (the first of equals), as the Redis limiter's peek.
    pub async fn peek(&self, user: &str, now: Option<Nanos>) -> Result<Peek, PgAcquireError> {
        let read = self.read(user, now).await?;
        let set = &read.set;
        let present = read.stored.is_some();
        let state =
            (read.stored).unwrap_or_else(|| SetState::full(set, read.now.max(read.horizon)));
        let views = (set.as_slice().iter().enumerate()).filter_map(|(position, bandwidth)| {
            let config = *bandwidth.config();
            let view = snapshot(&config, state.bandwidth(position)?, read.now);
            Some(Peek {
                remaining: view.remaining,
                reset_after: view.reset_after,
                present,
                config,
            })
        });
        // `min_by_key` keeps the first of equals.
        views
            .min_by_key(|view| view.remaining.whole())
            .ok_or(PgAcquireError::Reply("a set with no bandwidth"))
    }

    /// `user`'s bucket as stored (not refilled) and the bandwidths it is on (its override or the
    /// limiter's), if it has a row: for tests and oracles that compare states, as the in-memory
    /// limiter's `inspect`.
    pub async fn inspect(
        &self,
        user: &str,
    ) -> Result<Option<(SetState, Bandwidths)>, PgAcquireError> {
        let read = self.read(user, Some(0)).await?;
        Ok(read.stored.map(|state| (state, read.set)))
    }

    /// One read of `peek.sql`, checked.
    async fn read(&self, user: &str, now: Option<Nanos>) -> Result<Read, PgAcquireError> {
        let (client, statement) = self.prepared(&self.peek).await?;
        let now_text = now.map(|now| now.to_string());
        let row = client
            .query_one(&statement, &[&user, &now_text])
            .await
            .map_err(classify)?;
        let number = |index: usize| -> Result<u128, PgAcquireError> {
            row.get::<_, &str>(index)
                .parse()
                .map_err(|_| PgAcquireError::Reply("a number that is not a whole u128"))
        };
        let instant = |index: usize| -> Result<Nanos, PgAcquireError> {
            Nanos::try_from(number(index)?)
                .map_err(|_| PgAcquireError::Reply("an instant past u64"))
        };
        let set = self.effective(row.get(5))?;
        let stored = match row.get::<_, Option<Vec<&str>>>(1) {
            None => None,
            Some(_) if row.get::<_, &str>(3) != self.words.fingerprint => {
                return Err(PgAcquireError::ConfigMismatch(format!(
                    "the stored bucket of {user:?} is on another config than {}",
                    self.words.fingerprint
                )));
            }
            Some(balances) => {
                let balances = (balances.into_iter())
                    .map(|text| text.parse())
                    .collect::<Result<Vec<u128>, _>>()
                    .map_err(|_| PgAcquireError::Reply("a balance that is not a whole u128"))?;
                Some(
                    SetState::new(&set, &balances, instant(2)?)
                        .ok_or(PgAcquireError::Reply("a balance above its capacity"))?,
                )
            }
        };
        Ok(Read {
            set,
            now: instant(0)?,
            stored,
            horizon: instant(4)?,
        })
    }
}

/// What `peek.sql` read, from one snapshot.
struct Read {
    /// The key's bandwidths: its override, or the limiter's.
    set: Bandwidths,
    now: Nanos,
    stored: Option<SetState>,
    horizon: Nanos,
}
