//! The acquire path: one `EVALSHA` of the transition script, its reply, and the retries.
//!
//! Owns: [`RedisLimiter::acquire`], [`RedisLimiter::acquire_at`], [`RedisLimiter::acquire_with`], the
//! script's arguments, the retry rule and its backoff, and which Redis errors count as "unavailable".
//!
//! Promises: a retry happens only when it cannot double-charge (a request id, or a refused
//! connection); a decision from Redis equals the core's (rebuilt by [`crate::script`]); every other
//! failure goes to the outage policy or is a typed error.

use std::time::Duration;

use bucketproof_limiter::{AcquireError, Acquired, Decisions, Nanos, Request, RequestId};
use redis::{RedisError, ScriptInvocation};

use super::RedisLimiter;
use super::Source;
use super::error::RedisAcquireError;
use super::policy::Outcome;
use super::stats::bump;
use crate::script::{Reply, ReplyError, ScriptCall, limbs};
use crate::set::SetReply;

/// The longest pause between two attempts.
const MAX_BACKOFF: Duration = Duration::from_millis(100);

impl RedisLimiter {
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
    ///
    /// For a limiter of several bandwidths this is [`RedisLimiter::acquire_set_with`] with the
    /// decision's binding part ([`Decisions::binding`]), as the in-memory limiter's `acquire_at` on
    /// such a key: for a denial the bandwidth with the largest wait, for an allow the one with the
    /// fewest whole tokens left.
    pub async fn acquire_with(
        &self,
        user: &str,
        request: Request,
    ) -> Result<Outcome, RedisAcquireError> {
        if self.set.is_some() {
            return Ok(self.acquire_set_with(user, request).await?.binding());
        }
        let config = self.settings.config;
        match self.call_one(user, request).await? {
            Ok(reply) => {
                let decision = self.decoded(reply.decision(&config, request.cost))?;
                self.count(reply.replayed, reply.recovering, reply.loss_detected);
                Ok(Outcome {
                    acquired: Acquired {
                        decision,
                        created: reply.created,
                        replayed: reply.replayed,
                    },
                    source: Source::Store,
                    recovering: reply.recovering,
                    seq: reply.seq,
                })
            }
            Err((attempts, last)) => self.unavailable(request, attempts, last),
        }
    }

    /// One call of today's one-bandwidth script: its reply, or `Err((attempts, last))` for the
    /// outage policy.
    async fn call_one(
        &self,
        user: &str,
        request: Request,
    ) -> Result<Result<Reply, (u32, RedisError)>, RedisAcquireError> {
        let config = self.settings.config;
        // Step 1 of the semantics (cost 0 or above the key's capacity) is checked inside the script,
        // against the key's effective config (its override, if reconfigured): nothing changes.
        let call = self.script_words(user, request);
        let mut invocation = self.script.prepare_invoke();
        for key in &call.keys {
            invocation.key(key);
        }
        for arg in &call.args {
            invocation.arg(arg);
        }
        Ok(
            match self.invoke(&invocation, request, config.capacity()).await? {
                Ok(raw) => Ok(self.decoded(Reply::parse(raw))?),
                Err(unavailable) => Err(unavailable),
            },
        )
    }

    /// One call of the one-bandwidth transition script as plain words: exactly what
    /// [`RedisLimiter::acquire_with`] sends for `request`, for tools that drive scripts through a
    /// client of their own (the Redis peers benchmark sends every script, ours and third parties',
    /// through one loop). `None` for a limiter of several bandwidths, which runs another script.
    pub fn script_call(&self, user: &str, request: Request) -> Option<ScriptCall> {
        self.set.is_none().then(|| self.script_words(user, request))
    }

    fn script_words(&self, user: &str, request: Request) -> ScriptCall {
        let key = self.redis_key(user);
        let marker = self.marker_key(&key);
        let (mode, now_s, now_n, ttl_floor_ms) = self.time_args(request.now);
        let number = |n: u64| n.to_string().into_bytes();
        let mut args = vec![
            mode.as_bytes().to_vec(),
            self.conf.clone(),
            number(request.cost),
        ];
        if request.now.is_some() {
            args.extend([number(now_s), number(now_n), number(ttl_floor_ms)]);
        }
        let mut keys = vec![key, marker];
        if let Some(id) = request.request_id {
            keys.push(self.records_key(&keys[0]));
            let (win_s, win_n) = self.window_arg;
            args.extend([
                id_text(id).into_bytes(),
                number(win_s),
                number(win_n),
                self.settings.dedupe_per_key.to_string().into_bytes(),
            ]);
        }
        ScriptCall {
            sha: self.script.get_hash().to_owned(),
            keys,
            args,
        }
    }

    /// Takes `cost` tokens for `user` at the server's time, with every bandwidth's part.
    pub async fn acquire_set(
        &self,
        user: &str,
        cost: u64,
    ) -> Result<Outcome<Decisions>, RedisAcquireError> {
        self.acquire_set_with(user, Request::cost(cost)).await
    }

    /// Takes `cost` tokens for `user` at the injected time `now`, with every bandwidth's part.
    pub async fn acquire_set_at(
        &self,
        user: &str,
        cost: u64,
        now: Nanos,
    ) -> Result<Outcome<Decisions>, RedisAcquireError> {
        self.acquire_set_with(user, Request::cost(cost).at(now))
            .await
    }

    /// [`RedisLimiter::acquire_with`] with every bandwidth's part of the decision (one part for a
    /// limiter of one bandwidth, which runs today's script unchanged).
    ///
    /// A key of several bandwidths is one hash and one script call (`set.lua`): every bandwidth
    /// refilled from the one cursor by its own rate, allowed iff every one covers `cost`, then all
    /// charged, otherwise none; [`Decisions::retry_after`] is the largest wait. A cost of 0 or above
    /// the smallest capacity is refused here, before anything is sent. A replay returns the whole
    /// recorded decision. Retries and the outage policy are those of `acquire_with`.
    pub async fn acquire_set_with(
        &self,
        user: &str,
        request: Request,
    ) -> Result<Outcome<Decisions>, RedisAcquireError> {
        let Some(wire) = &self.set else {
            return self.acquire_one_as_set(user, request).await;
        };
        let set = &self.settings.bandwidths;
        let bound = set.cost_bound();
        if request.cost == 0 || request.cost > bound {
            return Err(AcquireError::InvalidCost {
                cost: request.cost,
                capacity: bound,
            }
            .into());
        }
        let key = self.redis_key(user);
        let marker = self.marker_key(&key);
        let mut invocation = wire.script.key(&key);
        invocation.key(&marker);
        let (mode, now_s, now_n, ttl_floor_ms) = self.time_args(request.now);
        let (win_s, win_n) = self.window_arg;
        invocation
            .arg(mode)
            .arg(now_s)
            .arg(now_n)
            .arg(&wire.fingerprint)
            .arg(request.cost)
            .arg(request.request_id.map(id_text).unwrap_or_default())
            .arg(win_s)
            .arg(win_n)
            .arg(self.settings.dedupe_per_key)
            .arg(ttl_floor_ms)
            .arg(bound)
            .arg(set.len());
        for (capacity, p, unit) in &wire.bandwidths {
            invocation.arg(capacity).arg(*p).arg(unit);
        }
        match self.invoke(&invocation, request, bound).await? {
            Ok(raw) => {
                let reply = self.decoded(SetReply::parse(raw))?;
                let decisions = self.decoded(reply.decisions(set))?;
                self.count(reply.replayed, reply.recovering, reply.loss_detected);
                Ok(Outcome {
                    acquired: Acquired {
                        decision: decisions,
                        created: reply.created,
                        replayed: reply.replayed,
                    },
                    source: Source::Store,
                    recovering: reply.recovering,
                    seq: reply.seq,
                })
            }
            Err((attempts, last)) => self.unavailable_set(request, attempts, last),
        }
    }

    /// `acquire_set_with` on a limiter of one bandwidth: today's call, its decision as a set of one
    /// (under the key's override config if it has one).
    async fn acquire_one_as_set(
        &self,
        user: &str,
        request: Request,
    ) -> Result<Outcome<Decisions>, RedisAcquireError> {
        match self.call_one(user, request).await? {
            Ok(reply) => {
                let decisions =
                    self.decoded(reply.decisions(&self.settings.config, request.cost))?;
                self.count(reply.replayed, reply.recovering, reply.loss_detected);
                Ok(Outcome {
                    acquired: Acquired {
                        decision: decisions,
                        created: reply.created,
                        replayed: reply.replayed,
                    },
                    source: Source::Store,
                    recovering: reply.recovering,
                    seq: reply.seq,
                })
            }
            Err((attempts, last)) => self.unavailable_set(request, attempts, last),
        }
    }

    /// The time arguments: mode (the time source's letter, then the recovery policy's), now's limbs,
    /// and the TTL floor (injected time only).
    pub(super) fn time_args(&self, now: Option<Nanos>) -> (&'static str, u64, u64, u64) {
        let recovery = self.settings.recovery;
        match now {
            Some(now) => {
                let (s, n) = limbs(now);
                let floor =
                    u64::try_from(self.settings.injected_ttl_floor.as_millis()).unwrap_or(u64::MAX);
                (recovery.mode(true), s, n, floor)
            }
            None => (recovery.mode(false), 0, 0, 0),
        }
    }

    /// A reply's decoding, counted as a store error when it fails.
    pub(super) fn decoded<T>(&self, decoded: Result<T, ReplyError>) -> Result<T, ReplyError> {
        if decoded.is_err() {
            bump(&self.counters.store_errors);
        }
        decoded
    }

    fn count(&self, replayed: bool, recovering: bool, loss_detected: bool) {
        bump(&self.counters.redis_decisions);
        for (happened, counter) in [
            (replayed, &self.counters.replayed),
            (recovering, &self.counters.recovering),
            (loss_detected, &self.counters.losses_detected),
        ] {
            if happened {
                bump(counter);
            }
        }
    }

    /// Runs `invocation` under the retry rule: the raw reply, or `Err((attempts, last))` when Redis was
    /// unavailable (for the outage policy), or a typed error. `capacity` names the cost bound in an
    /// invalid-cost error when the script's own message cannot be read.
    async fn invoke(
        &self,
        invocation: &ScriptInvocation<'_>,
        request: Request,
        capacity: u64,
    ) -> Result<Result<Vec<i64>, (u32, RedisError)>, RedisAcquireError> {
        // Retrying is safe with a request id (a replay charges nothing) or when nothing was sent.
        match self.run(invocation, request.request_id.is_some()).await {
            Ok(raw) => Ok(Ok(raw)),
            Err(Failed::Unavailable(attempts, last)) => Ok(Err((attempts, last))),
            Err(Failed::Answered(e)) if e.code() == Some("BPCOST") => {
                let capacity = e
                    .detail()
                    .and_then(|d| d.trim().parse().ok())
                    .unwrap_or(capacity);
                Err(AcquireError::InvalidCost {
                    cost: request.cost,
                    capacity,
                }
                .into())
            }
            Err(Failed::Answered(e)) => Err(match self.store_error(e) {
                Ok(mismatch) => RedisAcquireError::ConfigMismatch(mismatch),
                Err(e) => RedisAcquireError::Script(e),
            }),
        }
    }

    /// A script's error that is no answer of its own (counted as a store error): `Ok` with the
    /// detail of a stored config mismatch, else the error.
    pub(super) fn store_error(&self, e: RedisError) -> Result<String, RedisError> {
        bump(&self.counters.store_errors);
        // WRONGTYPE: the key holds another layout (a GET on a set's hash).
        if e.code() == Some("BPCONFIG") || e.code() == Some("WRONGTYPE") {
            Ok(e.detail().unwrap_or_default().to_string())
        } else {
            Err(e)
        }
    }

    /// Runs `invocation`, retried while Redis is unavailable if `retry_safe` (or, whatever it is,
    /// when the connection was refused: then nothing can have run), at most `attempts` times with
    /// the backoff: the raw reply, or why not.
    pub(super) async fn run(
        &self,
        invocation: &ScriptInvocation<'_>,
        retry_safe: bool,
    ) -> Result<Vec<i64>, Failed> {
        let mut backoff = self.settings.retry_backoff;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let mut conn = self.conn.clone();
            // The connection manager applies the response timeout to every command.
            let started = std::time::Instant::now();
            let call = invocation.invoke_async::<Vec<i64>>(&mut conn).await;
            let error = match call {
                Ok(raw) => {
                    self.timed(started);
                    return Ok(raw);
                }
                Err(e) if !is_unavailable(&e) => {
                    self.timed(started);
                    return Err(Failed::Answered(e));
                }
                Err(e) => e,
            };
            let safe = retry_safe || error.is_connection_refusal();
            if attempts >= self.settings.attempts || !safe {
                return Err(Failed::Unavailable(attempts, error));
            }
            bump(&self.counters.retries);
            tokio::time::sleep(backoff).await;
            backoff = backoff.saturating_mul(2).min(MAX_BACKOFF);
        }
    }

    /// Counts a call that Redis answered (a reply or a server error) and its round trip.
    fn timed(&self, started: std::time::Instant) {
        bump(&self.counters.store_calls);
        let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.counters
            .store_nanos
            .fetch_add(nanos, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Why [`RedisLimiter::run`] has no reply.
pub(super) enum Failed {
    /// Redis was unavailable on the last of these attempts (the effect of a call whose reply was
    /// lost is unknown).
    Unavailable(u32, RedisError),
    /// Redis answered with an error (the script's own, or a refusal): nothing was retried.
    Answered(RedisError),
}

/// A request id as the script's hash field suffix: 32 hex digits.
pub(super) fn id_text(id: RequestId) -> String {
    format!("{:032x}", id.0)
}

/// Errors that mean "Redis is not there right now", as opposed to a bug or a refused script.
pub(super) fn is_unavailable(e: &RedisError) -> bool {
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
