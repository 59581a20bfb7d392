//! The conversation of docs/subject-protocol.md: `hello` once, then per trace a `setup`, its ops
//! and a `reset`, each request answered by exactly one reply with the same id.
//!
//! Promises: ids are checked to count up from 0; an op outside the conversation's order is a
//! protocol error; a request whose capability the subject does not declare is refused as
//! `unsupported` rather than half-answered; the probes of an acquire (`inspect`, `probe_retry`) are
//! asked right after it, before the next request, so they see the state it left even when the
//! harness has already written the requests that follow (batching).

use crate::error::ProtocolError;
use crate::reply::{
    AcquireReply, DoneReply, ErrorKind, ErrorReply, HelloReply, InspectReply, Refusal, Reply,
    RetryProbe, SettleReply, WouldAllowReply,
};
use crate::request::{Acquire, Hello, Reconfigure, Request, Settle};
use crate::subject::Subject;
use crate::values::Wait;

/// The protocol version this adapter speaks.
pub const PROTOCOL: u64 = 1;

/// One process's conversation with the harness.
pub struct Session<S> {
    next_id: u64,
    greeted: bool,
    subject: Option<S>,
}

impl<S: Subject> Default for Session<S> {
    fn default() -> Self {
        Session {
            next_id: 0,
            greeted: false,
            subject: None,
        }
    }
}

impl<S: Subject> Session<S> {
    /// The id the next request must carry.
    pub fn next_id(&self) -> u64 {
        self.next_id
    }

    /// Answers one request, or stops the conversation if it is out of order.
    pub fn answer(&mut self, request: Request) -> Result<Reply, ProtocolError> {
        let id = request.id();
        if id != self.next_id {
            return Err(ProtocolError::WrongId {
                expected: self.next_id,
                got: id,
            });
        }
        self.next_id += 1;
        let out_of_order = |when| ProtocolError::OutOfOrder {
            id,
            op: request.op(),
            when,
        };
        match (&request, self.greeted) {
            (Request::Hello(_), true) => return Err(out_of_order("a second time")),
            (Request::Hello(_), false) => {}
            (_, false) => return Err(out_of_order("before hello")),
            (Request::Setup(_) | Request::Reset(_), true) => {}
            (_, true) if self.subject.is_none() => return Err(out_of_order("outside a setup")),
            (_, true) => {}
        }
        Ok(match request {
            Request::Hello(hello) => self.hello(hello),
            Request::Setup(setup) => {
                // A setup replaces any limiter still standing: each trace starts from nothing.
                self.subject = None;
                match S::setup(&setup) {
                    Ok(subject) => {
                        self.subject = Some(subject);
                        Reply::Done(DoneReply::ok(id))
                    }
                    Err(refusal) => refuse(id, refusal),
                }
            }
            Request::Reset(_) => {
                self.subject = None;
                Reply::Done(DoneReply::ok(id))
            }
            op => match &mut self.subject {
                Some(subject) => operate(subject, op),
                None => unreachable_reply(id),
            },
        })
    }

    fn hello(&mut self, hello: Hello) -> Reply {
        if !hello.protocol.contains(&PROTOCOL) {
            return refuse(
                hello.id,
                Refusal::new(
                    ErrorKind::Unsupported,
                    format!(
                        "this subject speaks protocol {PROTOCOL} only, offered {:?}",
                        hello.protocol
                    ),
                ),
            );
        }
        self.greeted = true;
        Reply::Hello(HelloReply {
            id: hello.id,
            protocol: PROTOCOL,
            name: S::NAME,
            version: S::VERSION,
            capabilities: S::CAPABILITIES,
            profile: S::PROFILE,
        })
    }
}

/// The answer to an op of a trace (not hello, setup or reset).
fn operate<S: Subject>(subject: &mut S, request: Request) -> Reply {
    let caps = S::CAPABILITIES;
    let id = request.id();
    let unsupported = |what: &str| {
        refuse(
            id,
            Refusal::new(
                ErrorKind::Unsupported,
                format!("this subject has no {what}"),
            ),
        )
    };
    match request {
        Request::Acquire(acquire) => {
            if acquire.request_id.is_some() && !caps.request_ids {
                return unsupported("request ids");
            }
            if (acquire.inspect && !caps.inspect) || (acquire.probe_retry && !caps.would_allow) {
                return unsupported("probes");
            }
            answer_acquire(subject, acquire)
        }
        Request::Settle(_) if !caps.settle => unsupported("settle"),
        Request::Settle(settle) if settle.inspect && !caps.inspect => unsupported("inspect"),
        Request::Settle(settle) => answer_settle(subject, settle),
        Request::Reconfigure(_) if !caps.reconfigure => unsupported("reconfigure"),
        Request::Reconfigure(reconfigure) if reconfigure.inspect && !caps.inspect => {
            unsupported("inspect")
        }
        Request::Reconfigure(reconfigure) => answer_reconfigure(subject, reconfigure),
        Request::Forget(_) if !caps.forget => unsupported("forget"),
        Request::Forget(forget) => {
            subject.forget(forget.key);
            Reply::Done(DoneReply::ok(id))
        }
        Request::Sweep(_) if !caps.sweep => unsupported("sweep"),
        Request::Sweep(sweep) => {
            subject.sweep(sweep.now_ns);
            Reply::Done(DoneReply::ok(id))
        }
        Request::Inspect(_) if !caps.inspect => unsupported("inspect"),
        Request::Inspect(inspect) => Reply::Inspect(InspectReply {
            id,
            state: subject.inspect(inspect.key),
        }),
        Request::WouldAllow(_) if !caps.would_allow => unsupported("would_allow"),
        Request::WouldAllow(ask) => Reply::WouldAllow(WouldAllowReply {
            id,
            allowed: subject.would_allow(ask.key, ask.now_ns, ask.cost),
        }),
        Request::Hello(_) | Request::Setup(_) | Request::Reset(_) => unreachable_reply(id),
    }
}

fn answer_acquire<S: Subject>(subject: &mut S, acquire: Acquire) -> Reply {
    let Acquire {
        id,
        key,
        now_ns: now,
        cost,
        request_id,
        inspect,
        probe_retry,
    } = acquire;
    let before = inspect.then(|| subject.inspect(key));
    let outcome = subject.acquire(key, now, cost, request_id);
    let after = inspect.then(|| subject.inspect(key));
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(error) => {
            return Reply::Error(ErrorReply {
                id,
                error,
                before,
                after,
            });
        }
    };
    // The retry probes belong to a denial with a finite wait `w` that was decided, not replayed.
    let retry = match outcome.retry_after {
        Some(Wait::After(w)) if probe_retry && !outcome.allowed && !outcome.replayed => {
            // `now + w` is on the clock: a wait past its end is reported as never.
            let at = now.saturating_add(w);
            Some(RetryProbe {
                at: subject.would_allow(key, at, cost),
                before: (w > 0).then(|| subject.would_allow(key, at - 1, cost)),
            })
        }
        _ => None,
    };
    Reply::Acquire(AcquireReply {
        id,
        allowed: outcome.allowed,
        remaining: outcome.remaining,
        retry_after_ns: outcome.retry_after,
        reset_after_ns: outcome.reset_after,
        created: outcome.created,
        replayed: outcome.replayed,
        before,
        after,
        retry,
    })
}

fn answer_settle<S: Subject>(subject: &mut S, settle: Settle) -> Reply {
    let Settle {
        id,
        key,
        now_ns,
        request_id,
        actual,
        inspect,
    } = settle;
    let before = inspect.then(|| subject.inspect(key));
    let outcome = subject.settle(key, now_ns, request_id, actual);
    let after = inspect.then(|| subject.inspect(key));
    match outcome {
        Ok(outcome) => Reply::Settle(SettleReply {
            id,
            allowed: outcome.allowed,
            remaining: outcome.remaining,
            retry_after_ns: outcome.retry_after,
            reset_after_ns: outcome.reset_after,
            replayed: outcome.replayed,
            before,
            after,
        }),
        Err(error) => Reply::Error(ErrorReply {
            id,
            error,
            before,
            after,
        }),
    }
}

fn answer_reconfigure<S: Subject>(subject: &mut S, reconfigure: Reconfigure) -> Reply {
    let Reconfigure {
        id,
        key,
        now_ns,
        config,
        inspect,
    } = reconfigure;
    let before = inspect.then(|| subject.inspect(key));
    let result = subject.reconfigure(key, now_ns, &config);
    let after = inspect.then(|| subject.inspect(key));
    match result {
        Ok(()) => Reply::Done(DoneReply {
            id,
            ok: true,
            before,
            after,
        }),
        Err(error) => Reply::Error(ErrorReply {
            id,
            error,
            before,
            after,
        }),
    }
}

fn refuse(id: u64, error: Refusal) -> Reply {
    Reply::Error(ErrorReply {
        id,
        error,
        before: None,
        after: None,
    })
}

/// `Session::answer` routes hello, setup and reset itself, and ops only with a subject standing;
/// this reply exists so that no input can make the adapter panic even if that routing changes.
fn unreachable_reply(id: u64) -> Reply {
    refuse(
        id,
        Refusal::new(
            ErrorKind::Store,
            "internal error: request routed to the wrong handler",
        ),
    )
}
