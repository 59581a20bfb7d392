//! `RedisLimiter`: the keyed limiter's front end, with the state in Redis so many instances share it.
//!
//! Every acquire is one `EVALSHA` of the transition script (see `bucket.lua`): the atomicity that an
//! in-process lock gives the in-memory limiter comes from Redis running one script at a time. What stays
//! in the client: the cost check (an invalid cost never reaches Redis, so it changes nothing, as in the
//! core), splitting instants into limbs, rebuilding the [`Decision`], retries, and the explicit policy for
//! when Redis cannot be reached.
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

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bucketproof_limiter::internal::{Attempt, snapshot, transition};
use bucketproof_limiter::{
    AcquireError, Acquired, BucketState, Config, Decision, NANOS_PER_SECOND, Nanos, Peek, Request,
    RequestId, defaults,
};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, RedisError, Script};

use crate::range::{RangeError, check_exact};
use crate::script::{Reply, ReplyError, fingerprint, limbs, script};

/// What to do when Redis cannot be reached (refused, dropped, timed out, loading, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unavailable {
    /// Refuse: the acquire returns [`RedisAcquireError::Unavailable`]. The safe default.
    FailClosed,
    /// Decide from one local bucket per limiter instance (shared by all keys), so an outage admits at
    /// most `budget.capacity + budget.rate * outage` per instance. Decisions carry
    /// [`Source::LocalBudget`], denials included: they are never ordinary denials.
    LocalBudget {
        /// The instance's budget while Redis is away.
        budget: Config,
    },
    /// Admit everything, flagged [`Source::FailOpen`]. Only if asked for.
    FailOpen,
}

/// Where a decision came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The shared bucket in Redis: the real decision.
    Redis,
    /// Redis was unavailable; the instance's local budget decided.
    LocalBudget,
    /// Redis was unavailable; admitted by the fail-open policy. `remaining` is that of a fresh bucket
    /// after the charge and means nothing.
    FailOpen,
}

/// An acquire's result: the same [`Acquired`] the in-memory limiter returns, plus where it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Decision, whether the bucket was created, whether it was a replay.
    pub acquired: Acquired,
    /// Redis, or which fallback.
    pub source: Source,
    /// The key's transition counter in Redis after this decision (0 for a fallback decision). Tests
    /// use it to put concurrent decisions in the order Redis ran them.
    pub seq: u64,
}

impl Outcome {
    /// The decision.
    pub fn decision(&self) -> Decision {
        self.acquired.decision
    }
}

/// Why an acquire has no decision.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisAcquireError {
    /// The request is invalid (cost 0 or above capacity); nothing was sent, nothing changed.
    #[error(transparent)]
    Invalid(#[from] AcquireError),
    /// Redis could not be reached and the policy is [`Unavailable::FailClosed`]. Not a denial.
    #[error("Redis unavailable after {attempts} attempt(s) (fail-closed): {last}")]
    Unavailable {
        /// Attempts made.
        attempts: u32,
        /// The last error.
        #[source]
        last: RedisError,
    },
    /// The key's bucket in Redis was written under another config (another unit grid). Nothing changed.
    #[error("stored bucket has another config: {0}")]
    ConfigMismatch(String),
    /// Redis answered with something that is not a valid transition: a bug, never rounded over.
    #[error(transparent)]
    Reply(#[from] ReplyError),
    /// Redis answered with an error that is neither unavailability nor a config mismatch.
    #[error("script failed: {0}")]
    Script(#[source] RedisError),
}

/// Why a limiter could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The config is outside the range the script computes exactly.
    #[error(transparent)]
    Range(#[from] RangeError),
    /// The key prefix contains `{` or `}`, which would change the keys' hash tag.
    #[error("key prefix {0:?} must not contain '{{' or '}}' (keys are PREFIX{{user}})")]
    Prefix(String),
    /// More request-id records per key than the script's bound.
    #[error("dedupe per key {0} exceeds the bound {MAX_RECORDS_PER_KEY}")]
    TooManyRecords(usize),
    /// Attempts must be at least 1.
    #[error("attempts must be at least 1")]
    NoAttempts,
    /// Connecting to Redis failed.
    #[error("cannot connect to Redis: {0}")]
    Connect(#[source] RedisError),
}

/// Read-only: the time to peek at (server `TIME` or injected limbs) and the stored state, in one atomic
/// call so the two cannot straddle a write.
const PEEK_SOURCE: &str = r#"
local s, n
if ARGV[1] == 's' then
  local tm = redis.call('TIME')
  s = tm[1]; n = tostring(tonumber(tm[2]) * 1000)
else
  s = ARGV[2]; n = ARGV[3]
end
local h = redis.call('HMGET', KEYS[1], 'b', 's', 'n', 'g', 'o')
return {s, n, h[1], h[2], h[3], h[4], h[5]}
"#;

/// The longest pause between two attempts.
const MAX_BACKOFF: Duration = Duration::from_millis(100);

/// Upper bound on request-id records per key (each acquire may evict a few; keeps the script short).
pub const MAX_RECORDS_PER_KEY: usize = 1024;

/// Counters of what the limiter did. Fallback decisions are counted apart from Redis ones.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RedisStats {
    /// Decisions from Redis (replays included).
    pub redis_decisions: u64,
    /// Of those, replays of a recorded request id.
    pub replayed: u64,
    /// Calls retried after a lost reply or refused connection.
    pub retries: u64,
    /// Acquires that found Redis unavailable (every policy).
    pub unavailable: u64,
    /// Fail-closed errors returned.
    pub fail_closed: u64,
    /// Local-budget decisions that admitted.
    pub local_allowed: u64,
    /// Local-budget decisions that denied.
    pub local_denied: u64,
    /// Fail-open admissions.
    pub fail_open: u64,
}

#[derive(Default)]
struct Counters {
    redis_decisions: AtomicU64,
    replayed: AtomicU64,
    retries: AtomicU64,
    unavailable: AtomicU64,
    fail_closed: AtomicU64,
    local_allowed: AtomicU64,
    local_denied: AtomicU64,
    fail_open: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// Settings of a [`RedisLimiter`]; build one with [`RedisLimiter::builder`].
#[derive(Clone, Debug)]
pub struct RedisBuilder {
    config: Config,
    prefix: String,
    dedupe_window: Nanos,
    dedupe_per_key: usize,
    injected_ttl_floor: Duration,
    unavailable: Unavailable,
    attempts: u32,
    response_timeout: Duration,
    retry_backoff: Duration,
}

impl RedisBuilder {
    /// Keys are `PREFIX{user}`; give each application (and each test) its own prefix. Default `bp:`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Request-id records: live `window` long, at most `per_key` per key. Default: the in-memory
    /// limiter's, [`defaults::DEDUPE_WINDOW`] and [`defaults::DEDUPE_PER_KEY`].
    pub fn dedupe(mut self, window: Duration, per_key: usize) -> Self {
        self.dedupe_window = u64::try_from(window.as_nanos()).unwrap_or(u64::MAX);
        self.dedupe_per_key = per_key;
        self
    }

    /// Lowest TTL for keys written with an injected `now`. Injected time is not the server's clock, so
    /// a TTL computed in injected time could expire a bucket in real time before it is full in the
    /// trace's time; this floor keeps such keys for the duration of a test run. Default 1 h.
    pub fn injected_ttl_floor(mut self, floor: Duration) -> Self {
        self.injected_ttl_floor = floor;
        self
    }

    /// The policy when Redis is unavailable. Default [`Unavailable::FailClosed`].
    pub fn on_unavailable(mut self, policy: Unavailable) -> Self {
        self.unavailable = policy;
        self
    }

    /// Attempts per acquire (retries only when safe, see the module docs). Default 3.
    pub fn attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts;
        self
    }

    /// How long to wait for one reply. Default 500 ms.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Pause before a retry (doubled each time, at most 100 ms). Default 10 ms.
    pub fn retry_backoff(mut self, backoff: Duration) -> Self {
        self.retry_backoff = backoff;
        self
    }

    /// Validates the settings, connects, and loads the script.
    pub async fn connect(self, url: &str) -> Result<RedisLimiter, BuildError> {
        check_exact(&self.config)?;
        if self.prefix.contains(['{', '}']) {
            return Err(BuildError::Prefix(self.prefix));
        }
        if self.dedupe_per_key > MAX_RECORDS_PER_KEY {
            return Err(BuildError::TooManyRecords(self.dedupe_per_key));
        }
        if self.attempts == 0 {
            return Err(BuildError::NoAttempts);
        }
        let client = Client::open(url).map_err(BuildError::Connect)?;
        let client_for_admin = client.clone();
        let manager_config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(self.response_timeout))
            .set_connection_timeout(Some(self.response_timeout))
            .set_number_of_retries(2)
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(200));
        let mut conn = ConnectionManager::new_with_config(client, manager_config)
            .await
            .map_err(BuildError::Connect)?;
        let script = script();
        script
            .prepare_invoke()
            .load_async(&mut conn)
            .await
            .map_err(BuildError::Connect)?;
        Ok(RedisLimiter {
            fingerprint: fingerprint(&self.config),
            capacity_arg: self.config.capacity_units().to_string(),
            unit_arg: self.config.units_per_token().to_string(),
            client: client_for_admin,
            window_arg: limbs(self.dedupe_window),
            peek: Script::new(PEEK_SOURCE),
            settings: self,
            conn,
            script,
            counters: Counters::default(),
            local: Mutex::new(None),
            started: Instant::now(),
        })
    }
}

/// A keyed exact limiter whose buckets live in Redis. Cheap to share behind an `Arc`; every method
/// takes `&self` (the connection is multiplexed and pipelines concurrent calls).
pub struct RedisLimiter {
    settings: RedisBuilder,
    fingerprint: String,
    /// Arguments that never change, rendered once.
    capacity_arg: String,
    unit_arg: String,
    window_arg: (u64, u64),
    /// For reconfigure, which needs a connection of its own (WATCH is per connection).
    client: Client,
    /// Read-only script for [`RedisLimiter::peek`].
    peek: Script,
    conn: ConnectionManager,
    script: Script,
    counters: Counters,
    /// The local-budget bucket (policy [`Unavailable::LocalBudget`]), created on first use.
    local: Mutex<Option<BucketState>>,
    /// Origin of the local clock used by fallback decisions that carry no injected `now`.
    started: Instant,
}

impl std::fmt::Debug for RedisLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl RedisLimiter {
    /// Settings for a limiter with `config` for every key; see [`RedisBuilder`].
    pub fn builder(config: Config) -> RedisBuilder {
        RedisBuilder {
            config,
            prefix: "bp:".to_string(),
            dedupe_window: defaults::DEDUPE_WINDOW,
            dedupe_per_key: defaults::DEDUPE_PER_KEY,
            injected_ttl_floor: Duration::from_secs(3600),
            unavailable: Unavailable::FailClosed,
            attempts: 3,
            response_timeout: Duration::from_millis(500),
            retry_backoff: Duration::from_millis(10),
        }
    }

    /// The config every key uses.
    pub fn config(&self) -> Config {
        self.settings.config
    }

    /// The Redis key holding `user`'s bucket and request-id records: `PREFIX{user}`, so everything of
    /// one user hashes to one Redis Cluster slot.
    pub fn redis_key(&self, user: &str) -> String {
        format!("{}{{{}}}", self.settings.prefix, user)
    }

    /// Takes `cost` tokens for `user` at the server's time.
    pub async fn acquire(&self, user: &str, cost: u64) -> Result<Outcome, RedisAcquireError> {
        self.acquire_with(user, Request::cost(cost)).await
    }

    /// Takes `cost` tokens for `user` at the injected time `now`.
    pub async fn acquire_at(
        &self,
        user: &str,
        cost: u64,
        now: Nanos,
    ) -> Result<Outcome, RedisAcquireError> {
        self.acquire_with(user, Request::cost(cost).at(now)).await
    }

    /// The full form, as the in-memory limiter's `acquire_with`: `request.now == None` uses the Redis
    /// server's `TIME`; a request id makes retries (ours and the caller's) charge at most once.
    pub async fn acquire_with(
        &self,
        user: &str,
        request: Request,
    ) -> Result<Outcome, RedisAcquireError> {
        let config = self.settings.config;
        // Step 1 of the semantics (cost 0 or above the key's capacity) is checked inside the script,
        // against the key's effective config (its override, if reconfigured): nothing changes.
        let key = self.redis_key(user);
        let mut invocation = self.script.key(&key);
        let (mode, now_s, now_n, ttl_floor_ms) = match request.now {
            Some(now) => {
                let (s, n) = limbs(now);
                let floor =
                    u64::try_from(self.settings.injected_ttl_floor.as_millis()).unwrap_or(u64::MAX);
                ("i", s, n, floor)
            }
            None => ("s", 0, 0, 0),
        };
        let (win_s, win_n) = self.window_arg;
        invocation
            .arg(mode)
            .arg(now_s)
            .arg(now_n)
            .arg(&self.fingerprint)
            .arg(&self.capacity_arg)
            .arg(config.units_per_nanosecond())
            .arg(request.cost)
            .arg(request.request_id.map(id_text).unwrap_or_default())
            .arg(win_s)
            .arg(win_n)
            .arg(self.settings.dedupe_per_key)
            .arg(ttl_floor_ms)
            .arg(&self.unit_arg)
            .arg(config.capacity());

        let mut backoff = self.settings.retry_backoff;
        let mut attempts = 0;
        let last = loop {
            attempts += 1;
            let mut conn = self.conn.clone();
            // The connection manager applies the response timeout to every command.
            let call = invocation.invoke_async::<Vec<i64>>(&mut conn).await;
            let error = match call {
                Ok(raw) => {
                    let reply = Reply::parse(raw)?;
                    let decision = reply.decision(&config)?;
                    bump(&self.counters.redis_decisions);
                    if reply.replayed {
                        bump(&self.counters.replayed);
                    }
                    return Ok(Outcome {
                        acquired: Acquired {
                            decision,
                            created: reply.created,
                            replayed: reply.replayed,
                        },
                        source: Source::Redis,
                        seq: reply.seq,
                    });
                }
                Err(e) if e.code() == Some("BPCOST") => {
                    let capacity = e
                        .detail()
                        .and_then(|d| d.trim().parse().ok())
                        .unwrap_or(config.capacity());
                    return Err(AcquireError::InvalidCost {
                        cost: request.cost,
                        capacity,
                    }
                    .into());
                }
                Err(e) if e.code() == Some("BPCONFIG") => {
                    return Err(RedisAcquireError::ConfigMismatch(
                        e.detail().unwrap_or_default().to_string(),
                    ));
                }
                Err(e) if is_unavailable(&e) => e,
                Err(e) => return Err(RedisAcquireError::Script(e)),
            };
            // Retrying is safe with a request id (a replay charges nothing) or when nothing was sent.
            let safe = request.request_id.is_some() || error.is_connection_refusal();
            if attempts >= self.settings.attempts || !safe {
                break error;
            }
            bump(&self.counters.retries);
            tokio::time::sleep(backoff).await;
            backoff = backoff.saturating_mul(2).min(MAX_BACKOFF);
        };
        self.unavailable(request, attempts, last)
    }

    /// Read-only look at `user`'s bucket at `now` (`None`: the server's time): what an acquire would
    /// see after refilling, computed exactly in Rust by the core's `snapshot` from one atomic read.
    /// Nothing is written, refilled or created. Not covered by the unavailability policy: an
    /// unreachable Redis is an error here.
    pub async fn peek(&self, user: &str, now: Option<Nanos>) -> Result<Peek, RedisAcquireError> {
        let config = self.settings.config;
        let mut conn = self.conn.clone();
        let (mode, s, n) = match now {
            Some(now) => {
                let (s, n) = limbs(now);
                ("i", s, n)
            }
            None => ("s", 0, 0),
        };
        let raw: Vec<Option<String>> = self
            .peek
            .key(self.redis_key(user))
            .arg(mode)
            .arg(s)
            .arg(n)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| {
                if is_unavailable(&e) {
                    RedisAcquireError::Unavailable {
                        attempts: 1,
                        last: e,
                    }
                } else {
                    RedisAcquireError::Script(e)
                }
            })?;
        let bad = |reason| ReplyError {
            reply: Vec::new(),
            reason,
        };
        let int = |x: &Option<String>| -> Result<Option<u128>, ReplyError> {
            x.as_deref().map(stored_int).transpose().map_err(bad)
        };
        let [now_s, now_n, b, ls, ln, g, o] = &raw[..] else {
            return Err(bad("peek reply is not 7 values").into());
        };
        let config = match o {
            Some(o) => {
                parse_override(o)
                    .ok_or(bad("stored override unreadable"))?
                    .1
            }
            None => config,
        };
        let now = crate::script::join(
            int(now_s)?.unwrap_or(0) as i64,
            int(now_n)?.unwrap_or(0) as i64,
        )
        .ok_or(bad("now outside u64 ns"))?;
        let (state, present) = match stored_state(&config, b, ls, ln).map_err(bad)? {
            Some(state) => {
                if o.is_none() && g.as_deref() != Some(self.fingerprint.as_str()) {
                    return Err(RedisAcquireError::ConfigMismatch(format!(
                        "stored config {g:?} differs from {}",
                        self.fingerprint
                    )));
                }
                (state, true)
            }
            None => (BucketState::full(&config, now), false),
        };
        let view = snapshot(&config, state, now);
        Ok(Peek {
            remaining: view.remaining,
            reset_after: view.reset_after,
            present,
            config,
        })
    }

    /// Moves `user` to `new` at `now` (`None`: the server's time), as the in-memory limiter's
    /// `reconfigure_at`: refill under the old config up to `max(now, last)`, convert to the new unit grid
    /// rounding down, clamp to the new capacity. Returns the key's new config version (1 for the first).
    ///
    /// Atomic by optimistic locking (WATCH, read, compute with the core's exact `reconfigured`,
    /// MULTI/EXEC, retry if another instance wrote in between) on a connection of its own: rare, so it
    /// does not need a second Lua script with its own arithmetic. The override is stored with the
    /// bucket, every later acquire of the key uses it, and the key no longer expires until
    /// [`RedisLimiter::forget`] (as the in-memory limiter keeps overrides). `new` must be in the exact
    /// range like every config.
    pub async fn reconfigure(
        &self,
        user: &str,
        new: Config,
        now: Option<Nanos>,
    ) -> Result<u64, ReconfigureError> {
        check_exact(&new)?;
        let key = self.redis_key(user);
        let mut conn = self
            .client
            .get_multiplexed_async_connection()
            .await
            .map_err(ReconfigureError::Redis)?;
        loop {
            let _: () = redis::cmd("WATCH")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .map_err(ReconfigureError::Redis)?;
            let now = match now {
                Some(now) => now,
                None => {
                    let (s, us): (u64, u64) = redis::cmd("TIME")
                        .query_async(&mut conn)
                        .await
                        .map_err(ReconfigureError::Redis)?;
                    s.saturating_mul(NANOS_PER_SECOND)
                        .saturating_add(us.saturating_mul(1000))
                }
            };
            let (b, s, n, g, o): StoredFields = redis::cmd("HMGET")
                .arg(&key)
                .arg(&["b", "s", "n", "g", "o"][..])
                .query_async(&mut conn)
                .await
                .map_err(ReconfigureError::Redis)?;
            let (version, old) = match &o {
                Some(o) => parse_override(o).ok_or(ReconfigureError::Corrupt("override"))?,
                None => {
                    if g.as_ref().is_some_and(|g| *g != self.fingerprint) {
                        return Err(ReconfigureError::ConfigMismatch(g.unwrap_or_default()));
                    }
                    (0, self.settings.config)
                }
            };
            let state = stored_state(&old, &b, &s, &n)
                .map_err(|_| ReconfigureError::Corrupt("bucket"))?
                .unwrap_or_else(|| BucketState::full(&old, now));
            let next = state.reconfigured(&old, &new, now);
            let version = version + 1;
            let (ls, ln) = limbs(next.last_refill());
            let descriptor = format!(
                "{version}:{}:{}:{}",
                new.capacity(),
                new.rate().numer(),
                new.rate().denom()
            );
            let written: Option<redis::Value> = redis::pipe()
                .atomic()
                .cmd("HSET")
                .arg(&key)
                .arg("b")
                .arg(next.balance().to_string())
                .arg("s")
                .arg(ls)
                .arg("n")
                .arg(ln)
                .arg("g")
                .arg(fingerprint(&new))
                .arg("o")
                .arg(descriptor)
                .ignore()
                .cmd("PERSIST")
                .arg(&key)
                .ignore()
                .query_async(&mut conn)
                .await
                .map_err(ReconfigureError::Redis)?;
            if written.is_some() {
                return Ok(version);
            }
            // EXEC returned nil: another instance wrote the key after our WATCH; read again.
        }
    }

    /// Drops `user`'s bucket and request-id records; the next access is fresh.
    pub async fn forget(&self, user: &str) -> Result<bool, RedisError> {
        let mut conn = self.conn.clone();
        let removed: u64 = redis::cmd("DEL")
            .arg(self.redis_key(user))
            .query_async(&mut conn)
            .await?;
        Ok(removed > 0)
    }

    /// Counters so far.
    pub fn stats(&self) -> RedisStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        RedisStats {
            redis_decisions: get(&c.redis_decisions),
            replayed: get(&c.replayed),
            retries: get(&c.retries),
            unavailable: get(&c.unavailable),
            fail_closed: get(&c.fail_closed),
            local_allowed: get(&c.local_allowed),
            local_denied: get(&c.local_denied),
            fail_open: get(&c.fail_open),
        }
    }

    /// Applies the unavailability policy. Every branch is flagged or an error: never an ordinary denial.
    fn unavailable(
        &self,
        request: Request,
        attempts: u32,
        last: RedisError,
    ) -> Result<Outcome, RedisAcquireError> {
        bump(&self.counters.unavailable);
        let now = request.now.unwrap_or_else(|| self.local_now());
        // Without Redis the key's override (if any) is unknown: validate against the default config.
        let config = self.settings.config;
        let attempt = Attempt {
            cost: request.cost,
            now,
        };
        // Validates the cost, and is what fail-open answers: a fresh bucket's decision.
        let (_, fresh_decision) = transition(&config, BucketState::full(&config, now), attempt)?;
        let fallback = |decision: Decision, source| Outcome {
            acquired: Acquired {
                decision,
                created: false,
                replayed: false,
            },
            source,
            seq: 0,
        };
        match self.settings.unavailable {
            Unavailable::FailClosed => {
                bump(&self.counters.fail_closed);
                Err(RedisAcquireError::Unavailable { attempts, last })
            }
            Unavailable::FailOpen => {
                bump(&self.counters.fail_open);
                Ok(fallback(fresh_decision, Source::FailOpen))
            }
            Unavailable::LocalBudget { budget } => {
                let mut local = self.local.lock().unwrap_or_else(|e| e.into_inner());
                let state = local.unwrap_or_else(|| BucketState::full(&budget, now));
                let (next, decision) = if request.cost <= budget.capacity() {
                    transition(&budget, state, attempt)?
                } else {
                    // Valid for the real config but larger than the whole local budget: a flagged
                    // denial that can never succeed locally (shown as a full-budget request on an
                    // empty bucket), and nothing is charged.
                    let refilled = state.refilled(&budget, now);
                    let empty = BucketState::new(&budget, 0, refilled.last_refill())
                        .expect("an empty balance is within every capacity");
                    let whole_budget = Attempt {
                        cost: budget.capacity(),
                        now,
                    };
                    (refilled, transition(&budget, empty, whole_budget)?.1)
                };
                *local = Some(next);
                if decision.is_allowed() {
                    bump(&self.counters.local_allowed);
                } else {
                    bump(&self.counters.local_denied);
                }
                Ok(fallback(decision, Source::LocalBudget))
            }
        }
    }

    fn local_now(&self) -> Nanos {
        u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// `HMGET b s n g o` of a bucket.
type StoredFields = (
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);

/// A number as Redis stores it: an exact integer below 2^53, written by Redis's own number
/// formatting (maybe "1e+15").
fn stored_int(text: &str) -> Result<u128, &'static str> {
    let v: f64 = text.parse().map_err(|_| "stored number unreadable")?;
    if v.fract() != 0.0 || !(0.0..=crate::EXACT_LIMIT as f64).contains(&v) {
        return Err("stored number not an exact integer");
    }
    Ok(v as u128)
}

/// The one decoder of a stored bucket: the hash fields `b` (balance in units), `s` and `n` (the
/// cursor's seconds and nanoseconds) under `config`. `Ok(None)` when the key holds no bucket; an
/// error names what is unreadable (a number, the cursor, or a balance above the capacity).
fn stored_state(
    config: &Config,
    b: &Option<String>,
    s: &Option<String>,
    n: &Option<String>,
) -> Result<Option<BucketState>, &'static str> {
    let (Some(b), Some(s), Some(n)) = (b, s, n) else {
        return Ok(None);
    };
    let (balance, s, n) = (stored_int(b)?, stored_int(s)?, stored_int(n)?);
    let last_refill = crate::script::join(s as i64, n as i64).ok_or("cursor outside u64 ns")?;
    BucketState::new(config, balance, last_refill)
        .map(Some)
        .ok_or("stored balance above capacity")
}

/// The override descriptor `"version:capacity:p:q"` as (version, config).
fn parse_override(text: &str) -> Option<(u64, Config)> {
    let mut parts = text.split(':').map(|x| x.parse::<u64>().ok());
    let (Some(Some(version)), Some(Some(capacity)), Some(Some(p)), Some(Some(q)), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return None;
    };
    let config = Config::new(capacity, bucketproof_limiter::Rate::new(p, q).ok()?).ok()?;
    Some((version, config))
}

/// Why a reconfigure did not happen. Nothing was changed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReconfigureError {
    /// The new config is outside the exact range.
    #[error(transparent)]
    Range(#[from] RangeError),
    /// The stored bucket has another config and no override: it was not written by this limiter.
    #[error("stored bucket has another config: {0}")]
    ConfigMismatch(String),
    /// The stored bucket cannot be read as exact integers.
    #[error("stored {0} is not readable")]
    Corrupt(&'static str),
    /// Redis failed or could not be reached.
    #[error("Redis error during reconfigure: {0}")]
    Redis(#[source] RedisError),
}

/// A request id as the script's hash field suffix: 32 hex digits.
fn id_text(id: RequestId) -> String {
    format!("{:032x}", id.0)
}

/// Errors that mean "Redis is not there right now", as opposed to a bug or a refused script.
fn is_unavailable(e: &RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || matches!(
            e.kind(),
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::ReadOnly
            )
        )
        || e.code() == Some("BUSY")
}

#[cfg(test)]
mod tests {
    use bucketproof_limiter::Rate;

    use super::*;

    fn field(text: &str) -> Option<String> {
        Some(text.to_string())
    }

    /// The one decoder that peek and reconfigure share: no bucket, Redis's own number formatting,
    /// the cursor's two limbs, and every unreadable field refused by name.
    #[test]
    fn the_stored_bucket_decodes_once_for_peek_and_reconfigure() {
        let config = Config::new(2, Rate::per_second(1)).unwrap();
        assert_eq!(
            stored_state(&config, &None, &field("1"), &field("0")),
            Ok(None)
        );
        let state = stored_state(&config, &field("1e+9"), &field("3"), &field("5"))
            .unwrap()
            .unwrap();
        assert_eq!(
            (state.balance(), state.last_refill()),
            (1_000_000_000, 3 * NANOS_PER_SECOND + 5)
        );
        let full = config.capacity_units().to_string();
        assert!(stored_state(&config, &field(&full), &field("0"), &field("0")).is_ok());
        let above = (config.capacity_units() + 1).to_string();
        for (b, s, n, why) in [
            (above.as_str(), "0", "0", "stored balance above capacity"),
            ("x", "0", "0", "stored number unreadable"),
            ("1.5", "0", "0", "stored number not an exact integer"),
            ("1", "0", "1000000000", "cursor outside u64 ns"),
        ] {
            assert_eq!(
                stored_state(&config, &field(b), &field(s), &field(n)),
                Err(why),
                "{b} {s} {n}"
            );
        }
    }
}
