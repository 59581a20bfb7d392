//! [`ExecSubject`]: one trace through a child process, as a [`Subject`].
//!
//! Batching without losing a probe: the runner announces the ops it will step
//! ([`Subject::upcoming`]), and the subject writes up to the child's `batch` of them ahead, each
//! acquire carrying its own probes (`inspect`: the key's state before and after; `probe_retry`: the
//! retry-after pair). The runner's `inspect` and `would_allow` calls around an op are then answered
//! from those replies, which saw the state exactly there, even though the child has already run the
//! ops after it. A settle carries `inspect` as an acquire does. Without announcements (the state machine steps one op at a time) every call is one
//! round trip.
//!
//! Promises: the ops sent are exactly the ops stepped, in order (a step that was not announced where
//! announced ops are outstanding is a harness bug, reported as broken); a probe the replies cannot
//! answer is "cannot tell" (`Inspection::Unsupported`, `None`), never a guess; once broken, every
//! later call fails the same way, and the process is not reused.

use std::collections::VecDeque;
use std::sync::Arc;

use bucketproof_limiter::Wait;

use super::pool::Pool;
use super::process::{Broken, Process};
use super::reply::Reply;
use super::wire::{Bandwidth, Request, WireState, WireWait};
use bucketproof_trace::profile::Profile;
use bucketproof_trace::subject::{
    Amount, BandwidthObserved, Inspected, Inspection, Observed, Subject, SubjectError,
};
use bucketproof_trace::subject_file::ExecSpec;
use bucketproof_trace::trace::{Acquire, ConfigSpec, Op, Settle, Setup};

/// A request written and the op it came from; its reply once read.
struct Sent {
    op: Op,
    request: Request,
    reply: Option<Reply>,
}

/// The op most recently answered, for the probes around it.
struct Answered {
    op: Op,
    reply: Reply,
}

/// A child process running one trace.
pub struct ExecSubject {
    name: String,
    spec: ExecSpec,
    profile: Profile,
    process: Option<Process>,
    pool: Arc<Pool>,
    retry_slack_ns: u64,
    queued: VecDeque<Op>,
    sent: VecDeque<Sent>,
    answered: Option<Answered>,
    broken: Option<String>,
}

/// A config as the protocol carries it: every bandwidth, in order.
pub fn bandwidths(config: &ConfigSpec) -> Result<Vec<Bandwidth>, SubjectError> {
    let parsed = config
        .to_bandwidths()
        .map_err(|e| SubjectError::Build(e.to_string()))?;
    let written = config.bandwidths();
    Ok((parsed.as_slice().iter().zip(written))
        .map(|(bandwidth, spec)| {
            let rate = bandwidth.config().rate();
            Bandwidth {
                capacity: bandwidth.config().capacity(),
                rate_per_s: format!("{}/{}", rate.numer(), rate.denom()),
                rate: spec.rate.clone(),
                name: spec.name.clone(),
            }
        })
        .collect())
}

fn as_u64(value: usize) -> u64 {
    u64::try_from(value).unwrap_or(u64::MAX)
}

mod probes;

impl ExecSubject {
    /// Sends `setup` to `process` and wraps it; `profile` is the one checked.
    pub(super) fn start(
        name: &str,
        spec: ExecSpec,
        profile: Profile,
        mut process: Process,
        pool: Arc<Pool>,
        setup: &Setup,
    ) -> Result<ExecSubject, SubjectError> {
        let held = process.hello.capabilities.bandwidths;
        if as_u64(setup.config.bandwidths().len()) > held {
            return Err(SubjectError::Unsupported(
                "several bandwidths per key (the subject holds fewer per key)",
            ));
        }
        let id = process.next_id();
        let request = Request::Setup {
            id,
            config: bandwidths(&setup.config)?,
            max_keys: as_u64(setup.max_keys),
            policy: setup.policy,
            sweep_per_op: as_u64(setup.sweep_per_op),
            dedupe_window_ns: setup.dedupe_window_ns,
            dedupe_per_key: as_u64(setup.dedupe_per_key),
        };
        let broken = |b: Broken| SubjectError::Broken(b.0);
        process
            .write(std::slice::from_ref(&request))
            .map_err(broken)?;
        let reply = process.read(&request).map_err(broken)?;
        let retry_slack_ns = match profile.retry_after_rounding {
            bucketproof_trace::profile::Rounding::Up => 0,
            _ if profile.is_safety() => profile.time_resolution.ns(),
            _ => 0,
        };
        let subject = ExecSubject {
            name: name.to_owned(),
            spec,
            profile,
            process: Some(process),
            pool,
            retry_slack_ns,
            queued: VecDeque::new(),
            sent: VecDeque::new(),
            answered: None,
            broken: None,
        };
        match reply.error {
            None => Ok(subject),
            Some(error) if error.kind == "unsupported" => Err(SubjectError::unsupported_because(
                format!("this setup (the subject refused it: {})", error.message),
                "this setup (the subject refused it as unsupported)",
            )),
            Some(error) => {
                let message = format!(
                    "subject {} refused the setup with {}: {}",
                    subject.spec.command.display(),
                    error.kind,
                    error.message
                );
                Err(SubjectError::Broken(message))
            }
        }
    }

    fn process(&mut self) -> Result<&mut Process, SubjectError> {
        if let Some(message) = &self.broken {
            return Err(SubjectError::Broken(message.clone()));
        }
        Ok(self.process.as_mut().expect("present until drop"))
    }

    /// Marks the subject broken and returns the error.
    fn fail(&mut self, broken: Broken) -> SubjectError {
        self.broken.get_or_insert(broken.0);
        SubjectError::Broken(self.broken.clone().unwrap_or_default())
    }

    fn capabilities(&self) -> super::wire::Capabilities {
        self.process
            .as_ref()
            .map(|p| p.hello.capabilities)
            .expect("present until drop")
    }

    /// Why the child cannot run `op`, if it cannot.
    fn unsupported(&self, op: &Op) -> Option<&'static str> {
        let caps = self.capabilities();
        match op {
            Op::Acquire(acquire) if acquire.request_id.is_some() && !caps.request_ids => {
                Some("request ids")
            }
            Op::Acquire(_) => None,
            Op::Reconfigure { .. } if !caps.reconfigure => Some("reconfigure"),
            Op::Reconfigure { config, .. } => (as_u64(config.bandwidths().len()) > caps.bandwidths)
                .then_some("several bandwidths per key (the subject holds fewer per key)"),
            Op::Forget { .. } => (!caps.forget).then_some("forget"),
            Op::Sweep { .. } => (!caps.sweep).then_some("sweep"),
            Op::Settle(_) => (!caps.settle).then_some("settle"),
        }
    }

    /// The request for `op`, with the probes the child can answer.
    fn request_for(&mut self, op: &Op) -> Result<Request, SubjectError> {
        let caps = self.capabilities();
        let id = self.process()?.next_id();
        Ok(match op {
            Op::Acquire(Acquire {
                key,
                cost,
                now,
                request_id,
            }) => Request::Acquire {
                id,
                key: *key,
                now_ns: *now,
                cost: *cost,
                request_id: *request_id,
                inspect: caps.inspect,
                probe_retry: caps.would_allow,
                retry_slack_ns: self.retry_slack_ns,
            },
            Op::Reconfigure { key, now, config } => Request::Reconfigure {
                id,
                key: *key,
                now_ns: *now,
                config: bandwidths(config)?,
                inspect: caps.inspect,
            },
            Op::Forget { key } => Request::Forget { id, key: *key },
            Op::Sweep { now } => Request::Sweep { id, now_ns: *now },
            Op::Settle(Settle {
                key,
                request_id,
                actual,
                now,
            }) => Request::Settle {
                id,
                key: *key,
                now_ns: *now,
                request_id: *request_id,
                actual: *actual,
                inspect: caps.inspect,
            },
        })
    }

    /// Writes announced ops ahead, up to the child's batch, stopping at one it cannot run.
    fn fill(&mut self) -> Result<(), SubjectError> {
        let batch = self
            .capabilities()
            .batch
            .min(self.spec.batch.unwrap_or(u64::MAX));
        let batch = usize::try_from(batch.max(1)).unwrap_or(usize::MAX);
        let mut requests = Vec::new();
        while self.sent.len() + requests.len() < batch {
            let Some(op) = self.queued.front() else { break };
            if self.unsupported(op).is_some() {
                break;
            }
            let op = self.queued.pop_front().expect("front exists");
            let request = self.request_for(&op)?;
            requests.push(request.clone());
            self.sent.push_back(Sent {
                op,
                request,
                reply: None,
            });
        }
        if requests.is_empty() {
            return Ok(());
        }
        let written = self.process()?.write(&requests);
        written.map_err(|b| self.fail(b))
    }

    /// Reads the oldest sent op's reply if it has not been read.
    fn read_front(&mut self) -> Result<(), SubjectError> {
        let Some(front) = self.sent.front() else {
            return Ok(());
        };
        if front.reply.is_some() {
            return Ok(());
        }
        let request = front.request.clone();
        let read = self.process()?.read(&request);
        let reply = read.map_err(|b| self.fail(b))?;
        self.sent.front_mut().expect("front exists").reply = Some(reply);
        Ok(())
    }

    /// Steps `op`: the reply to it, written ahead or now.
    fn step(&mut self, op: Op) -> Result<Reply, SubjectError> {
        if let Some(what) = self.unsupported(&op) {
            if self.queued.front() == Some(&op) && self.sent.is_empty() {
                self.queued.pop_front();
            }
            return Err(SubjectError::Unsupported(what));
        }
        self.fill()?;
        if self.sent.is_empty() {
            // Not announced (or nothing is ahead): one round trip.
            if self.queued.front() == Some(&op) {
                self.queued.pop_front();
            }
            let request = self.request_for(&op)?;
            let written = self.process()?.write(std::slice::from_ref(&request));
            written.map_err(|b| self.fail(b))?;
            self.sent.push_back(Sent {
                op: op.clone(),
                request,
                reply: None,
            });
        }
        if self.sent.front().map(|sent| &sent.op) != Some(&op) {
            let ahead = self.sent.front().map(|sent| sent.op.clone());
            return Err(self.fail(Broken(format!(
                "the harness stepped {op:?} where it had announced {ahead:?} (a bug of the caller of \
                 Subject::upcoming)"
            ))));
        }
        self.read_front()?;
        let sent = self.sent.pop_front().expect("front exists");
        let op_name = sent.request.op();
        let reply = sent.reply.expect("read above");
        self.answered = Some(Answered {
            op,
            reply: reply.clone(),
        });
        if let Some(error) = &reply.error {
            return Err(match error.kind.as_str() {
                "invalid_cost" => SubjectError::InvalidCost,
                "key_limit" => SubjectError::KeyLimitReached,
                "unknown_request" => SubjectError::UnknownRequest,
                "not_admitted" => SubjectError::NotAdmitted,
                "already_settled" => SubjectError::AlreadySettled,
                "unsupported" => SubjectError::unsupported_because(
                    format!("{op_name} (the subject refused it: {})", error.message),
                    "an op (the subject said unsupported)",
                ),
                "store" => SubjectError::Store(error.message.clone()),
                other => {
                    let what = format!("answered with an unknown error kind {other:?}");
                    let broken = self.process()?.broken(what);
                    self.fail(broken)
                }
            });
        }
        Ok(reply)
    }

    /// A reply's value the protocol calls malformed.
    fn malformed(&mut self, what: String) -> SubjectError {
        match self.process() {
            Ok(process) => {
                let broken = process.broken(what);
                self.fail(broken)
            }
            Err(error) => error,
        }
    }

    fn wait(
        &mut self,
        field: &str,
        wait: Option<Option<WireWait>>,
    ) -> Result<Option<Wait>, SubjectError> {
        match wait.flatten() {
            None => Ok(None),
            Some(WireWait::Ns(ns)) => Ok(Some(Wait::After(ns))),
            Some(WireWait::Word(word)) if word == "never" => Ok(Some(Wait::Never)),
            Some(WireWait::Word(word)) => {
                Err(self.malformed(format!("{field} is {word:?}, not ns, \"never\" or null")))
            }
        }
    }

    fn state(&mut self, state: Option<&WireState>) -> Result<Inspection, SubjectError> {
        let Some(state) = state else {
            return Ok(Inspection::Absent);
        };
        let Some(tokens) = state.tokens.to_amount() else {
            let what = format!("a state's tokens {:?} are not an amount", state.tokens);
            return Err(self.malformed(what));
        };
        Ok(Inspection::Held(Inspected {
            tokens,
            last_refill: state.last_refill_ns,
            capacity: state.capacity,
        }))
    }

    /// The key `op` is about, if one.
    fn key_of(op: &Op) -> Option<u64> {
        match op {
            Op::Acquire(acquire) => Some(acquire.key),
            Op::Reconfigure { key, .. } | Op::Forget { key } => Some(*key),
            Op::Settle(settle) => Some(settle.key),
            Op::Sweep { .. } => None,
        }
    }

    /// An acquire's or a settle's decision reply as what the subject answered.
    /// A reply without `remaining` reports no balance: the one unreported amount the oracles skip,
    /// as for a script whose reply maps none.
    fn observed(&mut self, reply: &Reply) -> Result<Observed, SubjectError> {
        let remaining = match &reply.remaining {
            None => Amount::UNREPORTED,
            Some(wire) => match wire.to_amount() {
                Some(amount) => amount,
                None => {
                    let what = format!("remaining {wire:?} is not an amount");
                    return Err(self.malformed(what));
                }
            },
        };
        let mut bandwidths = Vec::new();
        for (position, part) in reply.bandwidths.iter().flatten().enumerate() {
            let Some(part_remaining) = part.remaining.to_amount() else {
                let what = format!(
                    "bandwidths[{position}].remaining {:?} is not an amount",
                    part.remaining
                );
                return Err(self.malformed(what));
            };
            bandwidths.push(BandwidthObserved {
                remaining: part_remaining,
                retry_after: self.wait(
                    "bandwidths[].retry_after_ns",
                    Some(part.retry_after_ns.clone()),
                )?,
                reset_after: self.wait(
                    "bandwidths[].reset_after_ns",
                    Some(part.reset_after_ns.clone()),
                )?,
            });
        }
        Ok(Observed {
            allowed: reply.allowed.unwrap_or(false),
            remaining,
            retry_after: self.wait("retry_after_ns", reply.retry_after_ns.clone())?,
            reset_after: self.wait("reset_after_ns", reply.reset_after_ns.clone().map(Some))?,
            bandwidths,
            created: reply.created,
            replayed: reply.replayed.unwrap_or(false),
        })
    }
}

impl Subject for ExecSubject {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn acquire(&mut self, acquire: Acquire) -> Result<Observed, SubjectError> {
        let reply = self.step(Op::Acquire(acquire))?;
        self.observed(&reply)
    }

    fn settle(&mut self, settle: Settle) -> Result<Observed, SubjectError> {
        let reply = self.step(Op::Settle(settle))?;
        self.observed(&reply)
    }

    fn reconfigure(&mut self, key: u64, config: &ConfigSpec, now: u64) -> Result<(), SubjectError> {
        let op = Op::Reconfigure {
            key,
            now,
            config: config.clone(),
        };
        self.step(op).map(drop)
    }

    fn forget(&mut self, key: u64) -> Result<(), SubjectError> {
        self.step(Op::Forget { key }).map(drop)
    }

    fn sweep(&mut self, now: u64) -> Result<(), SubjectError> {
        self.step(Op::Sweep { now }).map(drop)
    }

    fn would_allow(&mut self, acquire: Acquire) -> Option<bool> {
        self.try_would_allow(acquire).ok().flatten()
    }

    fn shows_state(&self) -> bool {
        self.capabilities().inspect
    }

    fn inspect(&mut self, key: u64) -> Inspection {
        self.try_inspect(key).unwrap_or(Inspection::Unsupported)
    }

    fn may_evict(&self) -> bool {
        self.capabilities().evicts
    }

    fn upcoming(&mut self, ops: &[Op]) {
        self.queued.extend(ops.iter().cloned());
    }

    fn health(&self) -> Result<(), SubjectError> {
        match &self.broken {
            Some(message) => Err(SubjectError::Broken(message.clone())),
            None => Ok(()),
        }
    }

    fn profile(&self) -> Profile {
        self.profile.clone()
    }

    fn exec_spec(&self) -> Option<ExecSpec> {
        Some(ExecSpec {
            profile: Some(self.profile.clone()),
            ..self.spec.clone()
        })
    }
}

impl Drop for ExecSubject {
    /// A healthy child is drained, reset and handed back to the pool for the next trace.
    fn drop(&mut self) {
        let Some(mut process) = self.process.take() else {
            return;
        };
        if self.broken.is_some() {
            return;
        }
        // Read what is outstanding (answers nobody asked for any more), then reset.
        let id = process.next_id();
        let reset = Request::Reset { id };
        let ok = process
            .drain()
            .and_then(|()| process.write(std::slice::from_ref(&reset)))
            .and_then(|()| process.read(&reset))
            .is_ok_and(|reply| reply.error.is_none());
        if ok {
            self.pool.give_back(&self.name, process);
        }
    }
}
