//! Peek: a read-only look at a key's bucket.
//!
//! Owns: the read-only script ([`PEEK_SOURCE`]) and [`RedisLimiter::peek`].
//!
//! Promises: nothing is written, refilled or created; the time, the state and (for a key with no
//! bucket) its slot's epoch marker are read in one atomic call; the view is computed by the core's
//! `snapshot`, exactly, of the bucket an acquire would find or create, so a key with no bucket shows
//! what the recovery policy would start it with.

use bucketproof_limiter::internal::snapshot;
use bucketproof_limiter::{BucketState, Nanos, Peek};

use super::acquire::is_unavailable;
use super::error::RedisAcquireError;
use super::stored::{stored_int, stored_state};
use super::{RedisLimiter, SetWire};
use crate::epoch::Marker;
use crate::script::{Packed, ReplyError, limbs};

/// Read-only: the time to peek at (server `TIME` or injected limbs), the stored bucket (`bucket.lua`'s
/// packed string) and, when there is none, the epoch marker (KEYS[2]), in one atomic call so they
/// cannot straddle a write.
pub(super) const PEEK_SOURCE: &str = r#"
local s, n
if ARGV[1] == 's' then
  local tm = redis.call('TIME')
  s = tm[1]; n = tostring(tonumber(tm[2]) * 1000)
else
  s = ARGV[2]; n = ARGV[3]
end
local v = redis.call('GET', KEYS[1])
local m = false
if not v then m = redis.call('GET', KEYS[2]) end
return {s, n, v or false, m}
"#;

/// Read-only, for a key of several bandwidths: the time, the epoch marker (KEYS[2], only when the key
/// has no bucket) and the cursor, fingerprint, override field and every bandwidth's balance (`b1` ..
/// `bn`, n = ARGV[4]) in one atomic call.
pub(super) const PEEK_SET_SOURCE: &str = r#"
local s, n
if ARGV[1] == 's' then
  local tm = redis.call('TIME')
  s = tm[1]; n = tostring(tonumber(tm[2]) * 1000)
else
  s = ARGV[2]; n = ARGV[3]
end
local fields = {'s', 'n', 'g', 'o'}
for i = 1, tonumber(ARGV[4]) do fields[#fields + 1] = 'b' .. i end
local h = redis.pcall('HMGET', KEYS[1], unpack(fields))
if h.err then
  return redis.error_reply('BPCONFIG the stored key is not a key of several bandwidths')
end
local m = false
if not h[1] then m = redis.call('GET', KEYS[2]) end
local reply = {s, n, m}
for i = 1, #fields do reply[#reply + 1] = h[i] or false end
return reply
"#;

impl RedisLimiter {
    /// Read-only look at `user`'s bucket at `now` (`None`: the server's time): what an acquire would
    /// see after refilling, computed exactly in Rust by the core's `snapshot` from one atomic read.
    /// Nothing is written, refilled or created. A key with no bucket shows the bucket an acquire
    /// would create: full, or, under [`crate::Recovery::Conservative`] within one refill period of
    /// a state loss (or when its slot's marker is missing, which the acquire would detect as a loss),
    /// the recovering bucket. Not covered by the unavailability policy: an
    /// unreachable Redis is an error here.
    ///
    /// For a limiter of several bandwidths: the bandwidth with the fewest whole tokens (the first of
    /// equals), as the in-memory limiter's `peek_at`; [`RedisLimiter::peek_set`] gives all.
    pub async fn peek(&self, user: &str, now: Option<Nanos>) -> Result<Peek, RedisAcquireError> {
        if let Some(wire) = &self.set {
            let mut parts = self.peek_several(wire, user, now).await?;
            // `min_by_key` keeps the first of equals.
            let fewest = (0..parts.len())
                .min_by_key(|&i| parts[i].remaining.whole())
                .unwrap_or(0);
            return Ok(parts.swap_remove(fewest));
        }
        self.peek_one(user, now).await
    }

    /// The peek of a limiter of one bandwidth.
    async fn peek_one(&self, user: &str, now: Option<Nanos>) -> Result<Peek, RedisAcquireError> {
        let config = self.settings.config;
        let mut conn = self.conn.clone();
        let (mode, s, n) = match now {
            Some(now) => {
                let (s, n) = limbs(now);
                ("i", s, n)
            }
            None => ("s", 0, 0),
        };
        let key = self.redis_key(user);
        let raw: Vec<Option<Vec<u8>>> = self
            .peek
            .key(&key)
            .key(self.marker_key(&key))
            .arg(mode)
            .arg(s)
            .arg(n)
            .invoke_async(&mut conn)
            .await
            .map_err(peek_error)?;
        let bad = |reason| ReplyError {
            reply: Vec::new(),
            reason,
        };
        let [now_s, now_n, stored, marker] = &raw[..] else {
            return Err(bad("peek reply is not 4 values").into());
        };
        let int = |x: &Option<Vec<u8>>| -> Result<i64, ReplyError> {
            x.as_deref()
                .and_then(|x| std::str::from_utf8(x).ok()?.parse().ok())
                .ok_or(bad("peek time unreadable"))
        };
        let now = crate::script::join(int(now_s)?, int(now_n)?).ok_or(bad("now outside u64 ns"))?;
        let (config, state, present) = match stored {
            Some(bytes) => {
                let packed = Packed::decode(bytes).map_err(bad)?;
                let config = match packed.override_config().map_err(bad)? {
                    Some((_, config)) => config,
                    None if packed.config == self.conf => config,
                    None => {
                        return Err(RedisAcquireError::ConfigMismatch(
                            "the stored bucket is on another config".into(),
                        ));
                    }
                };
                let state = BucketState::new(&config, packed.balance, packed.last_refill)
                    .ok_or(bad("stored balance above capacity"))?;
                (config, state, true)
            }
            None => {
                let marker = marker
                    .as_deref()
                    .map(|m| std::str::from_utf8(m).unwrap_or("unreadable"));
                let start = self
                    .settings
                    .recovery
                    .start([&config], Marker::parse(marker), now);
                (config, start.state(&config, now), false)
            }
        };
        let view = snapshot(&config, state, now);
        Ok(Peek {
            remaining: view.remaining,
            reset_after: view.reset_after,
            present,
            config,
        })
    }
}

impl RedisLimiter {
    /// Every bandwidth's read-only view of `user` at `now` (`None`: the server's time), in the set's
    /// order: one atomic read of the key's hash, each bandwidth's view computed exactly by the core's
    /// `snapshot` from the one cursor. Nothing is written. For a limiter of one bandwidth, `[peek]`.
    pub async fn peek_set(
        &self,
        user: &str,
        now: Option<Nanos>,
    ) -> Result<Vec<Peek>, RedisAcquireError> {
        match &self.set {
            Some(wire) => self.peek_several(wire, user, now).await,
            None => Ok(vec![self.peek_one(user, now).await?]),
        }
    }

    async fn peek_several(
        &self,
        wire: &SetWire,
        user: &str,
        now: Option<Nanos>,
    ) -> Result<Vec<Peek>, RedisAcquireError> {
        let set = &self.settings.bandwidths;
        let mut conn = self.conn.clone();
        let (mode, s, n) = match now {
            Some(now) => {
                let (s, n) = limbs(now);
                ("i", s, n)
            }
            None => ("s", 0, 0),
        };
        let key = self.redis_key(user);
        let raw: Vec<Option<String>> = wire
            .peek
            .key(&key)
            .key(self.marker_key(&key))
            .arg(mode)
            .arg(s)
            .arg(n)
            .arg(set.len())
            .invoke_async(&mut conn)
            .await
            .map_err(peek_error)?;
        let bad = |reason| ReplyError {
            reply: Vec::new(),
            reason,
        };
        let int = |x: &Option<String>| -> Result<Option<u128>, ReplyError> {
            x.as_deref().map(stored_int).transpose().map_err(bad)
        };
        let [now_s, now_n, marker, ls, ln, g, o, balances @ ..] = &raw[..] else {
            return Err(bad("peek reply too short").into());
        };
        if balances.len() != set.len() {
            return Err(bad("peek reply is not one balance per bandwidth").into());
        }
        let now = crate::script::join(
            int(now_s)?.unwrap_or(0) as i64,
            int(now_n)?.unwrap_or(0) as i64,
        )
        .ok_or(bad("now outside u64 ns"))?;
        let present = ls.is_some();
        if present && (o.is_some() || g.as_deref() != Some(wire.fingerprint.as_str())) {
            return Err(RedisAcquireError::ConfigMismatch(format!(
                "stored config {g:?} differs from {}",
                wire.fingerprint
            )));
        }
        let configs = set.as_slice().iter().map(|bandwidth| bandwidth.config());
        let start = (self.settings.recovery).start(configs, Marker::parse(marker.as_deref()), now);
        set.as_slice()
            .iter()
            .zip(balances)
            .map(|(bandwidth, b)| {
                let config = *bandwidth.config();
                let state = match stored_state(&config, b, ls, ln).map_err(bad)? {
                    Some(state) => state,
                    None if present => return Err(bad("stored key lacks a bandwidth").into()),
                    None => start.state(&config, now),
                };
                let view = snapshot(&config, state, now);
                Ok(Peek {
                    remaining: view.remaining,
                    reset_after: view.reset_after,
                    present,
                    config,
                })
            })
            .collect()
    }
}

/// A peek's Redis error as the acquire would classify it: unavailable, a stored key of another config
/// or layout, or a script error.
fn peek_error(e: redis::RedisError) -> RedisAcquireError {
    if is_unavailable(&e) {
        RedisAcquireError::Unavailable {
            attempts: 1,
            last: e,
        }
    } else if e.code() == Some("BPCONFIG") || e.code() == Some("WRONGTYPE") {
        RedisAcquireError::ConfigMismatch(e.detail().unwrap_or_default().to_string())
    } else {
        RedisAcquireError::Script(e)
    }
}
