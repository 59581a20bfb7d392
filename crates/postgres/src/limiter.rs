//! `PgLimiter`: the keyed limiter's front end with its buckets in PostgreSQL, so many instances share
//! one quota.
//!
//! Owns: the [`PgLimiter`] type (its pool, its statements' texts, the config's words rendered once,
//! the outage fallback), [`Outcome`], `forget` (`forget.sql`: the row and its part's count, in one
//! statement), the key bound as enforced ([`PgLimiter::key_bound`]), and the one helper that runs a statement on a pooled
//! connection. Each other job has a file: `builder` (settings), `connect` (connecting), `acquire` (the
//! transition's call, its retries and the outage policy), `cleanup`, `peek`, `reconfigure`,
//! `settle`.
//!
//! Promises: every decision equals the core's transition on the same state, unit for unit (the
//! function computes in `numeric`, and the answer is rebuilt by the core and refused if it is no
//! decision the core could make); an invalid cost (judged by the function against the key's own
//! config) is an error that changes nothing; time is the
//! server's `clock_timestamp()` or injected, and a key's cursor never moves back under either.

use std::sync::Mutex;

use bucketproof_limiter::outage::{Fallback, Source};
use bucketproof_limiter::{Acquired, Bandwidths, Config, Decision, Decisions, Rate};
use deadpool_postgres::Pool;

use crate::builder::PgBuilder;
use crate::error::PgAcquireError;
use crate::schema::Namespace;

/// What an acquire answers: the core's [`Acquired`], where the decision came from, and the key's
/// transition counter, which orders concurrent decisions on one key. `Outcome` carries one
/// [`Decision`] (`acquire*`); `Outcome<Decisions>` every bandwidth's part (`acquire_set*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome<D = Decision> {
    /// The decision, whether the bucket was created by this call, whether it was a replay.
    pub acquired: Acquired<D>,
    /// PostgreSQL ([`Source::Store`]), or which fallback of the outage policy.
    pub source: Source,
    /// The key's transition counter after this decision (1 for the first; a replay answers the
    /// recorded decision's; 0 for a fallback decision).
    pub seq: u64,
}

impl Outcome {
    /// The decision.
    pub fn decision(&self) -> &Decision {
        &self.acquired.decision
    }
}

impl Outcome<Decisions> {
    /// Every bandwidth's part of the decision.
    pub fn decisions(&self) -> &Decisions {
        &self.acquired.decision
    }

    /// The same outcome with the binding part ([`Decisions::binding`]) as its one decision: what
    /// `acquire*` answers, as the in-memory limiter's `acquire_at` on a key of several bandwidths.
    pub fn binding(&self) -> Outcome {
        Outcome {
            acquired: self.acquired.binding(),
            source: self.source,
            seq: self.seq,
        }
    }
}

/// A keyed exact limiter whose buckets live in PostgreSQL, in the tables of one namespace. Cheap to
/// share behind an `Arc`; every method takes `&self`.
pub struct PgLimiter {
    pub(crate) pool: Pool,
    pub(crate) namespace: Namespace,
    pub(crate) settings: PgBuilder,
    pub(crate) words: Words,
    /// The statements' texts (each prepared once per pooled connection).
    pub(crate) acquire: String,
    pub(crate) cleanup: String,
    pub(crate) peek: String,
    pub(crate) reconfigure: String,
    pub(crate) settle: String,
    pub(crate) forget: String,
    pub(crate) fallback: Fallback,
    /// The last key the cleanup examined (it goes on from there, wrapping around).
    pub(crate) cleaned_up_to: Mutex<String>,
}

/// The settings as the statements take them, rendered once.
pub(crate) struct Words {
    /// Per bandwidth, as `numeric[]` literals: capacity in units, p (units per ns), units per token.
    pub(crate) capacity_units: String,
    pub(crate) p: String,
    pub(crate) unit: String,
    /// The set a row is stored under: per bandwidth units per token / capacity units / p, joined
    /// by `;`.
    pub(crate) fingerprint: String,
    pub(crate) window: String,
    pub(crate) keep: String,
    /// The key bound per part (`None`: no bound) and whether a new key at it may replace a
    /// removable row.
    pub(crate) per_part: Option<String>,
    pub(crate) evict: bool,
}

impl Words {
    pub(crate) fn new(settings: &PgBuilder) -> Words {
        let configs: Vec<Config> = (settings.bandwidths.as_slice().iter())
            .map(|bandwidth| *bandwidth.config())
            .collect();
        let array = |number: fn(&Config) -> u128| {
            let numbers: Vec<String> = configs.iter().map(|c| number(c).to_string()).collect();
            format!("{{{}}}", numbers.join(","))
        };
        let fingerprints: Vec<String> = (configs.iter())
            .map(|c| {
                format!(
                    "{}/{}/{}",
                    c.units_per_token(),
                    c.capacity_units(),
                    c.units_per_nanosecond()
                )
            })
            .collect();
        Words {
            capacity_units: array(Config::capacity_units),
            p: array(|c| u128::from(c.units_per_nanosecond())),
            unit: array(Config::units_per_token),
            fingerprint: fingerprints.join(";"),
            window: settings.dedupe_window.to_string(),
            keep: settings.dedupe_per_key.to_string(),
            per_part: settings.per_part().map(|n| n.to_string()),
            evict: matches!(
                settings.max_keys,
                Some((_, bucketproof_limiter::EvictionPolicy::EvictFull))
            ),
        }
    }
}

impl std::fmt::Debug for PgLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgLimiter")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl PgLimiter {
    /// The config every key uses; for a limiter of several bandwidths, the first bandwidth's (see
    /// [`PgLimiter::bandwidths`]).
    pub fn config(&self) -> Config {
        *self.settings.bandwidths.as_slice()[0].config()
    }

    /// Every key's bandwidths.
    pub fn bandwidths(&self) -> &Bandwidths {
        &self.settings.bandwidths
    }

    /// The namespace of the limiter's tables.
    pub fn namespace(&self) -> &str {
        self.namespace.as_str()
    }

    /// The key bound as enforced: `max_keys` rounded up to a multiple of [`crate::KEY_PARTS`]
    /// (`None`: no bound).
    pub fn key_bound(&self) -> Option<u64> {
        (self.settings.per_part()).map(|per_part| per_part * u64::from(crate::KEY_PARTS))
    }

    /// The error for a new key the bound has no room for.
    pub(crate) fn key_limit(&self) -> PgAcquireError {
        PgAcquireError::KeyLimitReached {
            max_keys: self.settings.max_keys.map_or(0, |(max_keys, _)| max_keys),
            per_part: self.settings.per_part().unwrap_or(0),
            parts: crate::KEY_PARTS,
        }
    }

    /// Drops `user`'s bucket and its request-id records; its next acquire finds a fresh one. True if
    /// there was one.
    pub async fn forget(&self, user: &str) -> Result<bool, PgAcquireError> {
        let (client, statement) = self.prepared(&self.forget).await?;
        let removed = client
            .execute(&statement, &[&user])
            .await
            .map_err(classify)?;
        Ok(removed > 0)
    }

    /// Removes the namespace with every bucket and record in it (for tests and uninstalling). Other
    /// limiters on the same namespace fail from then on.
    pub async fn drop_namespace(self) -> Result<(), PgAcquireError> {
        let client = self
            .pool
            .get()
            .await
            .map_err(|e| PgAcquireError::Unavailable(e.to_string()))?;
        client
            .batch_execute(&self.namespace.fill("DROP SCHEMA IF EXISTS __NS__ CASCADE"))
            .await
            .map_err(classify)
    }

    /// The bandwidths a key is decided on: its override (`spec`, as `reconfigure` stores it:
    /// capacity/p/q) or the limiter's.
    pub(crate) fn effective(&self, spec: Option<&str>) -> Result<Bandwidths, PgAcquireError> {
        let Some(spec) = spec else {
            return Ok(self.settings.bandwidths.clone());
        };
        let bad = || PgAcquireError::Reply("a stored override that is no config");
        let mut parts = spec
            .split('/')
            .map(|part| part.parse::<u64>().map_err(|_| bad()));
        let (Some(capacity), Some(p), Some(q), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        let rate = Rate::new(p?, q?).map_err(|_| bad())?;
        Ok(Config::new(capacity?, rate).map_err(|_| bad())?.into())
    }

    /// A pooled connection and `text` prepared on it (once per connection).
    pub(crate) async fn prepared(
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
}

/// A statement's error as the caller should see it: PostgreSQL's own answer, or no answer at all
/// (the connection broke, or the server is shutting down or starting: it may come back).
pub(crate) fn classify(e: tokio_postgres::Error) -> PgAcquireError {
    match e.as_db_error() {
        Some(db) if !is_outage(db.code()) => PgAcquireError::Postgres(e),
        _ => PgAcquireError::Unavailable(e.to_string()),
    }
}

/// SQLSTATEs of a server that is going away or not there yet: an outage, not a refusal.
fn is_outage(code: &tokio_postgres::error::SqlState) -> bool {
    use tokio_postgres::error::SqlState;
    [
        SqlState::ADMIN_SHUTDOWN,
        SqlState::CRASH_SHUTDOWN,
        SqlState::CANNOT_CONNECT_NOW,
        SqlState::CONNECTION_FAILURE,
        SqlState::CONNECTION_EXCEPTION,
        SqlState::TOO_MANY_CONNECTIONS,
    ]
    .contains(code)
}
