//! `RedisLimiter`: the keyed limiter's front end, with the state in Redis so many instances share it.
//!
//! Every acquire is one `EVALSHA` of the transition script (see `bucket.lua`): the atomicity that an
//! in-process lock gives the in-memory limiter comes from Redis running one script at a time. What stays
//! in the client: the cost check (an invalid cost never reaches Redis, so it changes nothing, as in the
//! core), splitting instants into limbs, rebuilding the [`Decision`](bucketproof_limiter::Decision), retries, and the explicit policy for
//! when Redis cannot be reached.
//!
//! Several bandwidths: a limiter built from a [`Bandwidths`] set of more than one runs `set.lua`
//! instead, still one `EVALSHA` on the user's one hash: every bandwidth's balance beside the one cursor,
//! all charged or none, each bandwidth's part in the reply. `acquire_set*` return that whole decision,
//! `acquire*` its binding part; the cost bound (the smallest capacity) is checked here before sending.
//! Per-key `reconfigure` of such a limiter is refused ([`ReconfigureError::SeveralBandwidths`]).
//!
//! State loss: each script call names the epoch marker of its key's Cluster slot beside the user's
//! hash (crate `epoch`); a script about to create a bucket reads it, writes it when missing (a loss
//! detected) and applies the [`Recovery`](crate::Recovery) policy (docs/semantics.md). Decisions that
//! created a bucket while recovering carry [`Outcome::recovering`] and are counted in [`RedisStats`].
//! [`RedisLimiter::provision`] marks a new Redis as whole. Not yet under the policy: peek of a missing
//! key reports a full bucket, and per-key reconfigure creates a full one.
//!
//! Retries: a call whose reply was lost may or may not have run. With a request id, retrying is safe
//! (the script answers a known id with the recorded decision and charges nothing), so the limiter retries.
//! Without one it retries only when the connection was refused (nothing can have run); otherwise a lost
//! reply goes straight to the unavailability policy rather than risking a double charge.
//!
//! A replay needs the record: a retry is charged again if it comes after the dedupe window, or after
//! `dedupe_per_key` newer request ids on the same key pushed its record out (the bound is per key, as in
//! the in-memory limiter). Size `dedupe_per_key` for the requests a key sees during the longest retry
//! sequence (`attempts` x (`response_timeout` + backoff)); backoff doubles but is capped at 100 ms.
//!
//! Settle: [`RedisLimiter::settle`] reconciles an admitted request's charge with its actual cost
//! (docs/semantics.md, "settle") in one `EVALSHA` of `settle.lua`, the one settle script for both
//! layouts of a key. It has no outage fallback: an unreachable Redis is
//! [`RedisSettleError::Unavailable`], never a settlement; it is retried like an acquire with a
//! request id (a retry of a settle that ran replays it), and so can the caller.
//!
//! Owns: the [`RedisLimiter`] type (its connection, its pre-rendered script arguments, the outage
//! fallback) and its key naming. Each job on it has a file of its own: `builder` (settings and
//! connecting), `acquire` (the script call and retries), `settle`, `policy` (the outage policy),
//! `peek`, `reconfigure` (and forget), `stats`, `error`, and `stored` (the one decoder of the stored
//! hash).
//!
//! Promises: the public paths are those of `bucketproof_redis` (re-exported from the crate root).

use bucketproof_limiter::outage::Fallback;
use bucketproof_limiter::{Bandwidths, Config};
use redis::aio::ConnectionManager;
use redis::{Client, Script};

mod acquire;
mod builder;
mod error;
mod peek;
mod policy;
mod reconfigure;
mod settle;
mod stats;
mod stored;
mod wait;

pub use bucketproof_limiter::outage::{Source, Unavailable};
pub use builder::{MAX_RECORDS_PER_KEY, RedisBuilder};
pub use error::{BuildError, ReconfigureError, RedisAcquireError, RedisSettleError};
pub use policy::Outcome;
pub use settle::SettleOutcome;
pub use stats::RedisStats;

use stats::Counters;

/// A keyed exact limiter whose buckets live in Redis. Cheap to share behind an `Arc`; every method
/// takes `&self` (the connection is multiplexed and pipelines concurrent calls).
pub struct RedisLimiter {
    settings: RedisBuilder,
    /// The set script and its pre-rendered arguments, for a limiter of several bandwidths.
    set: Option<SetWire>,
    /// The default config as `bucket.lua` takes and stores it (`script::packed_config`).
    conf: Vec<u8>,
    /// Arguments that never change, rendered once.
    window_arg: (u64, u64),
    /// For reconfigure, which needs a connection of its own (WATCH is per connection).
    client: Client,
    /// Read-only script for [`RedisLimiter::peek`].
    peek: Script,
    /// The settle script (`settle.lua`, both layouts) for [`RedisLimiter::settle`].
    settle: Script,
    conn: ConnectionManager,
    script: Script,
    counters: Counters,
    /// The outage policy with its local budget (policy [`Unavailable::LocalBudget`]).
    fallback: Fallback,
}

/// What a limiter of several bandwidths sends: its own scripts and arguments rendered once.
struct SetWire {
    script: Script,
    peek: Script,
    fingerprint: String,
    /// Per bandwidth: capacity in units, p, units per token.
    bandwidths: Vec<(String, u64, String)>,
}

impl std::fmt::Debug for RedisLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl RedisLimiter {
    /// The config every key uses; for a limiter of several bandwidths, the first bandwidth's (see
    /// [`RedisLimiter::bandwidths`]).
    pub fn config(&self) -> Config {
        self.settings.config
    }

    /// The bandwidths every key uses (one for a limiter built from a [`Config`]).
    pub fn bandwidths(&self) -> &Bandwidths {
        &self.settings.bandwidths
    }

    /// The Redis key holding `user`'s bucket and request-id records: `PREFIX{user}`, so everything of
    /// one user hashes to one Redis Cluster slot.
    pub fn redis_key(&self, user: &str) -> String {
        format!("{}{{{}}}", self.settings.prefix, user)
    }

    /// The hash of `redis_key`'s request-id records (same hash tag, so the same Cluster slot; a
    /// limiter of several bandwidths keeps them in the user's hash instead).
    pub fn records_key(&self, redis_key: &str) -> String {
        format!("{redis_key}:r")
    }

    /// The epoch marker of the slot of `redis_key` (a key from [`RedisLimiter::redis_key`]).
    pub fn marker_key(&self, redis_key: &str) -> String {
        crate::epoch::marker_key(&self.settings.prefix, redis_key)
    }

    /// Marks every slot of this limiter's prefix as whole since the beginning of time, where it is
    /// not marked yet (`SET NX`): run it once when a Redis is new, so that under
    /// [`crate::Recovery::Conservative`] its first buckets start full. Never run it at every start
    /// of an instance: after a loss, that would hide the loss. One pipelined round of 16,384 writes.
    pub async fn provision(&self) -> Result<(), redis::RedisError> {
        let mut pipe = redis::pipe();
        for marker in crate::epoch::all_markers(&self.settings.prefix) {
            pipe.cmd("SET").arg(marker).arg("whole").arg("NX").ignore();
        }
        let mut conn = self.conn.clone();
        pipe.query_async::<()>(&mut conn).await
    }
}
