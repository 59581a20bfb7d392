//! [`ScriptSubject`]: one trace of a user's Lua script on Redis, as a [`Subject`].
//!
//! Each instance owns a key prefix (`bucketproof:{<pid>-<n>:<key>}`: the hash tag keeps every key of
//! one call in one Cluster slot), so each trace starts from an empty store; dropping it unlinks
//! every key it passed the script in KEYS, so nothing a cluster-safe script wrote is left behind.
//! (A scan of the prefix would cost a pass over the whole keyspace per trace, and the shrinker
//! builds thousands of subjects: on a Redis holding other data that was most of a peers run.) The script is
//! loaded once with SCRIPT LOAD and called by EVALSHA, and loaded again on NOSCRIPT.
//!
//! Pipelining: the runner announces the ops it will step ([`Subject::upcoming`]); when an acquire
//! is stepped and nothing is in flight, it and the announced acquires after it (up to
//! [`PIPELINE`], stopping before the first op the script cannot be given) are sent as one pipeline
//! of EVALSHA calls, one per op in trace order, and each reply is judged when its op is stepped.
//! Redis runs a pipeline's commands one after another on the one connection, exactly as separate
//! round trips would, so every reply is the one the op alone would have got. A script subject has
//! no probes (no `inspect`, no `would_allow`), so an op's reply is all there is to keep. Without
//! announcements (the state machine steps one op at a time) every acquire is one round trip.
//!
//! Promises: a Redis error reply to an acquire (the script raised) is the limiter's answer, a
//! [`SubjectError::Store`] with the script's message, which the runner judges (a failure where the
//! spec answers); an unreachable Redis is a harness error ([`SubjectError::Broken`], exit 2 in the
//! gate) naming the `REDIS_URL` tried; a reply that does not match the description's mapping is a harness error naming
//! the description and the reply; only acquires are supported (no reconfigure, forget, sweep,
//! inspect, would_allow or request ids), so scenarios needing them are skipped; the ops sent are the
//! announced ops in order, and a step that is not the next one announced is a harness bug, reported
//! as broken; every call to Redis has a deadline ([`DEADLINE`]), so a hung Redis is an error naming
//! `REDIS_URL`, never a hang.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::{ErrorKind, ServerErrorKind, Value};

use super::Loaded;
use super::args::{Context, OpValues, Unsupported};
use super::prelude::time_args;
use super::spec::TimeMode;
use bucketproof_trace::profile::Profile;
use bucketproof_trace::subject::{Observed, Subject, SubjectError};
use bucketproof_trace::trace::{Acquire, Op, Setup};

/// The most EVALSHA calls sent in one pipeline. Past a few hundred the round trip is no longer
/// what costs; more would only run further past a failing op, whose later replies nobody reads.
pub const PIPELINE: usize = 256;

/// How long any one call to Redis (a pipeline's writes, or the read of its replies) may take.
pub const DEADLINE: Duration = Duration::from_secs(10);

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
    /// Announced ops not sent yet, in order.
    queued: VecDeque<Op>,
    /// Acquires sent, with their replies, not stepped yet.
    sent: VecDeque<Sent>,
    /// A pipeline failed after it was sent: replies may still be on their way, so the connection's
    /// next reply would not be the next call's. Nothing more is sent on it, the cleanup included.
    out_of_step: bool,
    /// Every key passed in KEYS so far: what the drop unlinks. Bounded by the trace's keys times
    /// the description's KEYS templates.
    written: BTreeSet<String>,
}

/// An acquire sent in a pipeline, the ARGV it was given (for a raised error's message) and its
/// reply, a server error kept as the error a lone call would have returned.
struct Sent {
    acquire: Acquire,
    argv: Vec<String>,
    reply: redis::RedisResult<Value>,
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
        let config = bucketproof_trace::subject::one_bandwidth(&setup.config)?;
        let context = Context {
            capacity: config.capacity(),
            rate_numer: config.rate().numer(),
            rate_denom: config.rate().denom(),
            unit: spec.unit,
            epoch_s: spec.epoch_s,
            max_integer: spec.max_integer,
            max_time: spec.max_time,
            configs: spec.configs,
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
            .set_read_timeout(Some(DEADLINE))
            .map_err(unreachable)?;
        connection
            .set_write_timeout(Some(DEADLINE))
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
            queued: VecDeque::new(),
            sent: VecDeque::new(),
            out_of_step: false,
            written: BTreeSet::new(),
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
            if let Some(max) = spec.max_time
                && seconds * 1_000_000 + micros > max
            {
                return Err(Unsupported(format!(
                    "the injected TIME ({seconds} s {micros} us) is above the script's max_time \
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

    fn lost(&self, e: &redis::RedisError) -> SubjectError {
        self.broken(format!("lost Redis at REDIS_URL={}: {e}", self.url))
    }

    /// Sends `calls` as one pipeline of EVALSHA calls: one reply per call, in order, each a server
    /// error kept as what a lone call returns. An error of the connection (lost, or no whole answer
    /// within [`DEADLINE`] of the send, give or take a tenth of it) fails the whole pipeline.
    fn pipeline(
        &mut self,
        calls: &[(Vec<String>, Vec<String>)],
    ) -> Result<Vec<redis::RedisResult<Value>>, SubjectError> {
        let mut pipe = redis::pipe();
        for (keys, argv) in calls {
            self.written.extend(keys.iter().cloned());
            pipe.cmd("EVALSHA")
                .arg(&self.sha)
                .arg(keys.len())
                .arg(keys)
                .arg(argv);
        }
        // Read reply by reply rather than through `Pipeline::query`: the crate's reader goes on
        // reading after a timed-out read, one read timeout per call, so a Redis that stopped
        // answering would hold a pipeline of 256 calls for 256 deadlines. Here the one deadline
        // covers the whole pipeline and the first failed read ends it.
        if self.out_of_step {
            return Err(self.broken("its connection to Redis failed earlier in this run".into()));
        }
        // Until every reply is read: an early return leaves the connection out of step.
        self.out_of_step = true;
        let sent = Instant::now();
        self.connection
            .send_packed_command(&pipe.get_packed_pipeline())
            .map_err(|e| self.lost(&e))?;
        let mut replies = Vec::with_capacity(calls.len());
        // The socket's read timeout is DEADLINE between calls; it is cut to what is left only
        // when a read under the current one could end more than a tenth of the deadline late (a
        // system call per reply would cost a fifth of the throughput).
        let mut timeout = DEADLINE;
        for _ in calls {
            let elapsed = sent.elapsed();
            let left = DEADLINE.saturating_sub(elapsed);
            if left.is_zero() {
                return Err(self.broken(format!(
                    "Redis at REDIS_URL={} did not answer a pipeline of {} calls within {DEADLINE:?}",
                    self.url,
                    calls.len()
                )));
            }
            if elapsed + timeout > DEADLINE + DEADLINE / 10 {
                timeout = left;
                self.connection
                    .set_read_timeout(Some(timeout))
                    .map_err(|e| self.lost(&e))?;
            }
            let reply = self.connection.recv_response().map_err(|e| self.lost(&e))?;
            replies.push(reply.extract_error());
        }
        if timeout != DEADLINE {
            // Every other call (SCRIPT LOAD, the cleanup's SCAN) has the whole deadline again.
            self.connection
                .set_read_timeout(Some(DEADLINE))
                .map_err(|e| self.lost(&e))?;
        }
        self.out_of_step = false;
        Ok(replies)
    }

    /// Sends `acquire`, and the announced acquires after it, as one pipeline; their replies wait
    /// in `sent`.
    fn send(&mut self, acquire: Acquire) -> Result<(), SubjectError> {
        match self.queued.front() {
            Some(Op::Acquire(next)) if *next == acquire => {
                self.queued.pop_front();
            }
            None => {}
            Some(ahead) => {
                return Err(self.broken(format!(
                    "the harness stepped {:?} where it had announced {ahead:?} (a bug of the \
                     caller of Subject::upcoming)",
                    Op::Acquire(acquire)
                )));
            }
        }
        let first = self.call_args(acquire).map_err(unsupported)?;
        let mut acquires = vec![acquire];
        let mut calls = vec![first];
        // Up to the first op that is not an acquire the script can be given: that op's step
        // answers it (unsupported) on its own.
        while calls.len() < PIPELINE {
            let Some(&Op::Acquire(next)) = self.queued.front() else {
                break;
            };
            if next.request_id.is_some() {
                break;
            }
            let Ok(call) = self.call_args(next) else {
                break;
            };
            self.queued.pop_front();
            acquires.push(next);
            calls.push(call);
        }
        let mut replies = self.pipeline(&calls)?;
        let flushed = replies.iter().position(|reply| {
            matches!(reply, Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript))
        });
        if let Some(from) = flushed {
            // Flushed (SCRIPT FLUSH, a restart, a failover) before call `from` ran: load it again,
            // once, and send that call and the rest again. The calls before it ran as they were.
            self.sha = load(&mut self.connection, &self.loaded).map_err(SubjectError::Broken)?;
            let again = self.pipeline(&calls[from..])?;
            replies.truncate(from);
            replies.extend(again);
        }
        for ((acquire, (_, argv)), reply) in acquires.into_iter().zip(calls).zip(replies) {
            self.sent.push_back(Sent {
                acquire,
                argv,
                reply,
            });
        }
        Ok(())
    }

    /// The decision in `sent`'s reply, or the error it is.
    fn judge(&self, sent: Sent) -> Result<Observed, SubjectError> {
        let Sent {
            acquire,
            argv,
            reply,
        } = sent;
        let reply = reply.map_err(|e| {
            if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() {
                self.lost(&e)
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
            if self.sent.is_empty() && self.queued.front() == Some(&Op::Acquire(acquire)) {
                self.queued.pop_front();
            }
            return Err(SubjectError::Unsupported("request ids"));
        }
        if self.sent.is_empty() {
            self.send(acquire)?;
        }
        let Some(sent) = self.sent.pop_front() else {
            return Err(self.broken(format!("no reply was kept for {acquire:?}")));
        };
        if sent.acquire != acquire {
            return Err(self.broken(format!(
                "the harness stepped {:?} where it had announced {:?} (a bug of the caller of \
                 Subject::upcoming)",
                Op::Acquire(acquire),
                Op::Acquire(sent.acquire)
            )));
        }
        self.judge(sent)
    }

    fn upcoming(&mut self, ops: &[Op]) {
        self.queued.extend(ops.iter().cloned());
    }

    fn profile(&self) -> Profile {
        self.loaded.spec.profile()
    }
}

impl Drop for ScriptSubject {
    /// Unlinks every key passed in KEYS, unless the connection is out of step (a Redis that
    /// stopped answering, or lost mid-pipeline): its keys are then left under the prefix, which no
    /// later subject uses, and a hung Redis costs the run one deadline, not two.
    fn drop(&mut self) {
        if self.out_of_step || self.written.is_empty() {
            return;
        }
        let keys: Vec<&String> = self.written.iter().collect();
        for chunk in keys.chunks(1000) {
            let unlinked: redis::RedisResult<i64> =
                redis::cmd("UNLINK").arg(chunk).query(&mut self.connection);
            if unlinked.is_err() {
                return;
            }
        }
    }
}
