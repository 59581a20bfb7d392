//! `PgLimiter`: the keyed limiter's front end with its buckets in PostgreSQL, so many instances share
//! one quota.
//!
//! Owns: the pool, the one prepared statement of an acquire (`acquire.sql`: one round trip, atomic by
//! the key's row) and the rebuilding of its answer into the core's exact
//! [`Decision`](bucketproof_limiter::Decision).
//!
//! Promises: every decision equals the core's transition on the same state, unit for unit (the
//! statement computes in `numeric`, and the answer is rebuilt by the core and refused if it is no
//! decision the core could make); an invalid cost is an error before anything is sent; time is the
//! server's `clock_timestamp()` or injected, and a key's cursor never moves back under either.

use bucketproof_limiter::internal::{StoredDecision, stored_decision};
use bucketproof_limiter::{AcquireError, Acquired, Config, Nanos};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::NoTls;

use crate::error::{BuildError, PgAcquireError};
use crate::schema::{Namespace, migrate};

/// Connections the pool keeps at most.
const POOL_SIZE: usize = 16;

/// What an acquire answers: the core's [`Acquired`] (never replayed: request ids are not stored
/// here yet) and the key's transition counter, which orders concurrent decisions on one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The decision and whether the bucket was created by this call.
    pub acquired: Acquired,
    /// The key's transition counter after this decision (1 for the first).
    pub seq: u64,
}

impl Outcome {
    /// The decision.
    pub fn decision(&self) -> &bucketproof_limiter::Decision {
        &self.acquired.decision
    }
}

/// A keyed exact limiter whose buckets live in PostgreSQL, in the tables of one namespace. Cheap to
/// share behind an `Arc`; every method takes `&self`.
pub struct PgLimiter {
    pool: Pool,
    namespace: Namespace,
    config: Config,
    /// The statement text (prepared once per pooled connection).
    statement: String,
    /// The config's words, rendered once: capacity units, p, units per token, fingerprint.
    words: [String; 4],
}

impl std::fmt::Debug for PgLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgLimiter")
            .field("namespace", &self.namespace)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl PgLimiter {
    /// Connects to `url` (a tokio-postgres connection string or URL), creates the crate's schema in
    /// `namespace` if it has none (refusing one of another version), and returns a limiter with
    /// `config` for every key.
    pub async fn connect(
        url: &str,
        namespace: &str,
        config: Config,
    ) -> Result<PgLimiter, BuildError> {
        let namespace = Namespace::new(namespace)?;
        let pg: tokio_postgres::Config =
            url.parse().map_err(|e| BuildError::Url(format!("{e}")))?;
        let manager = Manager::from_config(
            pg,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .build()
            .map_err(|e| BuildError::Url(format!("{e}")))?;
        let mut client = pool.get().await?;
        migrate(&mut client, &namespace).await?;
        let statement = namespace.fill(include_str!("acquire.sql"));
        let words = [
            config.capacity_units().to_string(),
            config.units_per_nanosecond().to_string(),
            config.units_per_token().to_string(),
            fingerprint(&config),
        ];
        Ok(PgLimiter {
            pool,
            namespace,
            config,
            statement,
            words,
        })
    }

    /// The config every key uses.
    pub fn config(&self) -> Config {
        self.config
    }

    /// The namespace of the limiter's tables.
    pub fn namespace(&self) -> &str {
        self.namespace.as_str()
    }

    /// Takes `cost` tokens for `user` at the server's time.
    pub async fn acquire(&self, user: &str, cost: u64) -> Result<Outcome, PgAcquireError> {
        self.call(user, cost, None).await
    }

    /// Takes `cost` tokens for `user` at the injected time `now`.
    pub async fn acquire_at(
        &self,
        user: &str,
        cost: u64,
        now: Nanos,
    ) -> Result<Outcome, PgAcquireError> {
        self.call(user, cost, Some(now)).await
    }

    /// Drops `user`'s bucket; its next acquire finds a fresh one. True if there was one.
    pub async fn forget(&self, user: &str) -> Result<bool, PgAcquireError> {
        let forget = self
            .namespace
            .fill("DELETE FROM __NS__.buckets WHERE key = $1");
        let (client, statement) = self.prepared(&forget).await?;
        let removed = client
            .execute(&statement, &[&user])
            .await
            .map_err(classify)?;
        Ok(removed > 0)
    }

    /// A pooled connection and `text` prepared on it (once per connection).
    async fn prepared(
        &self,
        text: &str,
    ) -> Result<(deadpool_postgres::Object, tokio_postgres::Statement), PgAcquireError> {
        let client = self
            .pool
            .get()
            .await
            .map_err(|e| PgAcquireError::Unavailable(e.to_string()))?;
        let statement = client.prepare_cached(text).await.map_err(classify)?;
        Ok((client, statement))
    }

    async fn call(
        &self,
        user: &str,
        cost: u64,
        now: Option<Nanos>,
    ) -> Result<Outcome, PgAcquireError> {
        if cost == 0 || cost > self.config.capacity() {
            return Err(AcquireError::InvalidCost {
                cost,
                capacity: self.config.capacity(),
            }
            .into());
        }
        let (client, statement) = self.prepared(&self.statement).await?;
        let [capacity_units, p, unit, fingerprint] = &self.words;
        let cost_text = cost.to_string();
        let now_text = now.map(|now| now.to_string());
        let row = client
            .query_opt(
                &statement,
                &[
                    &user,
                    &cost_text,
                    &now_text,
                    capacity_units,
                    p,
                    unit,
                    fingerprint,
                ],
            )
            .await
            .map_err(classify)?
            // The row holds another config: the statement left it alone.
            .ok_or_else(|| {
                PgAcquireError::ConfigMismatch(format!(
                    "the stored bucket of {user:?} is on another config than {fingerprint}"
                ))
            })?;
        let number = |index: usize| -> Result<u128, PgAcquireError> {
            row.get::<_, &str>(index)
                .parse()
                .map_err(|_| PgAcquireError::Reply("a number that is not a whole u128"))
        };
        let instant = |index: usize| -> Result<Nanos, PgAcquireError> {
            Nanos::try_from(number(index)?)
                .map_err(|_| PgAcquireError::Reply("an instant past u64"))
        };
        let allowed: bool = row.get(0);
        let report = StoredDecision {
            allowed,
            balance_after: number(1)?,
            cursor: instant(2)?,
            now: instant(3)?,
            cost_units: u128::from(cost) * self.config.units_per_token(),
        };
        let decision = stored_decision(&self.config, report).ok_or(PgAcquireError::Reply(
            "no decision the transition could make",
        ))?;
        let seq: i64 = row.get(4);
        Ok(Outcome {
            acquired: Acquired {
                decision,
                created: row.get(5),
                replayed: false,
            },
            seq: u64::try_from(seq).map_err(|_| PgAcquireError::Reply("a negative counter"))?,
        })
    }
}

/// The config a row is stored under: units per token / capacity units / p.
fn fingerprint(config: &Config) -> String {
    format!(
        "{}/{}/{}",
        config.units_per_token(),
        config.capacity_units(),
        config.units_per_nanosecond()
    )
}

/// A statement's error as the caller should see it: PostgreSQL's own answer, or no answer at all.
fn classify(e: tokio_postgres::Error) -> PgAcquireError {
    match e.as_db_error() {
        Some(_) => PgAcquireError::Postgres(e),
        None => PgAcquireError::Unavailable(e.to_string()),
    }
}
