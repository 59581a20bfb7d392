//! [`ScriptSubject`]: one trace of a user's Lua script on Redis, as a [`Subject`].
//!
//! Each instance owns a key prefix (`bucketproof:{<pid>-<n>:<key>}`: the hash tag keeps every key of
//! one call in one Cluster slot); dropping it deletes every key under the prefix (SCAN MATCH +
//! UNLINK), so each trace starts from an empty store and nothing is left behind. The script is
//! loaded once with SCRIPT LOAD and called by EVALSHA, and loaded again on NOSCRIPT.
//!
//! Promises: a Redis error reply to an acquire (the script raised) is the limiter's answer, a
//! [`SubjectError::Store`] with the script's message, which the runner judges (a failure where the
//! spec answers); an unreachable Redis is a harness error ([`SubjectError::Broken`], exit 2 in the
//! gate) naming the `REDIS_URL` tried; a reply that does not match the description's mapping is a harness error naming
//! the description and the reply; only acquires are supported (no reconfigure, forget, sweep,
//! inspect, would_allow or request ids), so scenarios needing them are skipped.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::{ErrorKind, ServerErrorKind, Value};

use super::Loaded;
use super::args::{Context, OpValues, Unsupported};
use super::prelude::time_args;
use super::spec::TimeMode;
use crate::profile::Profile;
use crate::subject::{Observed, Subject, SubjectError};
use crate::trace::{Acquire, Setup};

/// Distinguishes subjects made by one process; the process id distinguishes processes.
static INSTANCE: AtomicU64 = AtomicU64::new(0);

/// Where Redis is, and the default.
pub fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".to_owned())
}

/// A user's script on Redis, for one trace.
pub struct ScriptSubject {
    name: String,
    loaded: Arc<Loaded>,
    connection: redis::Connection,
    sha: String,
    prefix: String,
    context: Context,
    url: String,
}

/// Why a value cannot be given to the script, as the run's skip reason.
fn unsupported(Unsupported(text): Unsupported) -> SubjectError {
    SubjectError::unsupported_because(
        text,
        "a value the script cannot be given (see docs/redis-script.md)",
    )
}

impl ScriptSubject {
    /// Connects to `REDIS_URL`, loads the script and checks that the setup's config can be given
    /// to it (else [`SubjectError::Unsupported`]: the run is skipped).
    pub(super) fn new(
        name: &str,
        loaded: Arc<Loaded>,
        setup: &Setup,
    ) -> Result<ScriptSubject, SubjectError> {
        let spec = &loaded.spec;
        if setup.max_keys < bucketproof_limiter::defaults::MAX_KEYS {
            // A script on Redis holds as many keys as Redis does: no key bound to check.
            return Err(SubjectError::Unsupported(
                "a key bound below the default (a script on Redis has none)",
            ));
        }
        let config = crate::subjects::one_bandwidth(&setup.config)?;
        let context = Context {
            capacity: config.capacity(),
            rate_numer: config.rate().numer(),
            rate_denom: config.rate().denom(),
            unit: spec.unit,
            epoch_s: spec.epoch_s,
            max_integer: spec.max_integer,
        };
        context.check().map_err(unsupported)?;
        let url = redis_url();
        let unreachable = |e: redis::RedisError| {
            SubjectError::Build(format!(
                "{}: cannot reach Redis at REDIS_URL={url}: {e}",
                spec.path.display()
            ))
        };
        let client = redis::Client::open(url.as_str()).map_err(unreachable)?;
        let mut connection = client
            .get_connection_with_timeout(Duration::from_secs(5))
            .map_err(unreachable)?;
        connection
            .set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(unreachable)?;
        let sha = load(&mut connection, &loaded).map_err(SubjectError::Build)?;
        let prefix = format!(
            "bucketproof:{{{}-{}:",
            std::process::id(),
            INSTANCE.fetch_add(1, Ordering::Relaxed)
        );
        let subject = ScriptSubject {
            name: name.to_owned(),
            loaded,
            connection,
            sha,
            prefix,
            context,
            url,
        };
        // Every template filled once for a first op, so a config the script cannot be given (a rate
        // of zero where an interval is needed) skips the run before it starts.
        let probe = Acquire {
            key: 0,
            cost: subject.loaded.spec.unit,
            now: 0,
            request_id: None,
        };
        subject.call_args(probe).map_err(unsupported)?;
        Ok(subject)
    }

    /// The prefix of every key of this subject (for tests: nothing under it survives the drop).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The namespaced key.
    fn key(&self, key: u64) -> String {
        format!("{}{key}}}", self.prefix)
    }

    /// KEYS and ARGV for `acquire` (with the time entries under server time).
    fn call_args(&self, acquire: Acquire) -> Result<(Vec<String>, Vec<String>), Unsupported> {
        let spec = &self.loaded.spec;
        let key = self.key(acquire.key);
        let op = OpValues {
            key: &key,
            cost: acquire.cost,
            now: acquire.now,
        };
        let fill = |templates: &[String]| -> Result<Vec<String>, Unsupported> {
            templates.iter().map(|t| self.context.fill(t, op)).collect()
        };
        let keys = fill(&spec.keys)?;
        let mut argv = fill(&spec.argv)?;
        if spec.time == TimeMode::Server {
            let (seconds, micros) = time_args(acquire.now, spec.epoch_s);
            if let Some(max) = spec.max_integer
                && seconds * 1_000_000 + micros > max
            {
                return Err(Unsupported(format!(
                    "the injected TIME ({seconds} s {micros} us) is above the script's max_integer \
                     {max} in microseconds"
                )));
            }
            argv.push(seconds.to_string());
            argv.push(micros.to_string());
        }
        Ok((keys, argv))
    }

    fn broken(&self, what: String) -> SubjectError {
        SubjectError::Broken(format!("{}: {what}", self.loaded.spec.path.display()))
    }

    fn evalsha(&mut self, keys: &[String], argv: &[String]) -> redis::RedisResult<Value> {
        redis::cmd("EVALSHA")
            .arg(&self.sha)
            .arg(keys.len())
            .arg(keys)
            .arg(argv)
            .query(&mut self.connection)
    }
}

/// SCRIPT LOAD of the script's text: its sha, or why Redis refused it.
fn load(connection: &mut redis::Connection, loaded: &Loaded) -> Result<String, String> {
    redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(&loaded.text)
        .query(connection)
        .map_err(|e| {
            format!(
                "{}: Redis refused to load the script: {e}",
                loaded.spec.path.display()
            )
        })
}

impl Subject for ScriptSubject {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn acquire(&mut self, acquire: Acquire) -> Result<Observed, SubjectError> {
        if acquire.request_id.is_some() {
            return Err(SubjectError::Unsupported("request ids"));
        }
        let (keys, argv) = self.call_args(acquire).map_err(unsupported)?;
        let mut reply = self.evalsha(&keys, &argv);
        if let Err(e) = &reply
            && e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
        {
            // Flushed (SCRIPT FLUSH, a restart, a failover): load it again, once.
            self.sha = load(&mut self.connection, &self.loaded).map_err(SubjectError::Broken)?;
            reply = self.evalsha(&keys, &argv);
        }
        let reply = reply.map_err(|e| {
            if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() {
                self.broken(format!("lost Redis at REDIS_URL={}: {e}", self.url))
            } else {
                // The script itself raised: its caller gets an error instead of a decision. That
                // is a finding about the limiter, judged by the runner, not a harness error.
                // No KEYS in the message: they carry this instance's prefix, and reports built
                // from the message must be the same on every run.
                SubjectError::Store(format!("the script raised an error (ARGV {argv:?}): {e}"))
            }
        })?;
        self.loaded
            .spec
            .reply
            .observe(&reply, self.loaded.spec.unit)
            .map_err(|m| {
                self.broken(format!(
                    "the reply to {acquire:?} does not match [script.reply]: {}",
                    m.0
                ))
            })
    }

    fn profile(&self) -> Profile {
        self.loaded.spec.profile()
    }
}

impl Drop for ScriptSubject {
    /// Deletes every key under the prefix.
    fn drop(&mut self) {
        let pattern = format!("{}*", self.prefix);
        let mut cursor: u64 = 0;
        loop {
            let scanned: redis::RedisResult<(u64, Vec<String>)> = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query(&mut self.connection);
            let Ok((next, keys)) = scanned else { return };
            if !keys.is_empty() {
                let unlinked: redis::RedisResult<i64> =
                    redis::cmd("UNLINK").arg(&keys).query(&mut self.connection);
                if unlinked.is_err() {
                    return;
                }
            }
            if next == 0 {
                return;
            }
            cursor = next;
        }
    }
}
