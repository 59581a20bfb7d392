//! Peek: a read-only look at a key's bucket.
//!
//! Owns: the read-only script ([`PEEK_SOURCE`]) and [`RedisLimiter::peek`].
//!
//! Promises: nothing is written, refilled or created; the time and the state are read in one atomic
//! call; the view is computed by the core's `snapshot`, exactly.

use bucketproof_limiter::internal::snapshot;
use bucketproof_limiter::{BucketState, Nanos, Peek};

use super::RedisLimiter;
use super::acquire::is_unavailable;
use super::error::RedisAcquireError;
use super::stored::{parse_override, stored_int, stored_state};
use crate::script::{ReplyError, limbs};

/// Read-only: the time to peek at (server `TIME` or injected limbs) and the stored state, in one atomic
/// call so the two cannot straddle a write.
pub(super) const PEEK_SOURCE: &str = r#"
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

impl RedisLimiter {
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
}
