//! The subject side of the protocol for any in-process [`Subject`]: `bucketproof serve core` puts
//! the built-in core behind a pipe, so the exec subject can be checked against a subject whose
//! verdicts are known, and the protocol's own cost measured.
//!
//! Promise: one reply per request, in order, flushed whenever no more input is buffered (so a batch
//! costs one write); a request that is not protocol version 1 ends the server with an error, as the
//! protocol asks of every subject.

use std::io::{BufReader, Read, Write};

use bucketproof_limiter::Wait;

use super::lines::{Line, LineReader, Overflow};
use super::reply::Reply;
use super::wire::{
    Capabilities, Request, RetryProbe, VERSIONS, WireAmount, WireError, WirePart, WireState,
    WireWait,
};
use bucketproof_trace::profile::Profile;
use bucketproof_trace::subject::{Inspection, Observed, Subject, SubjectError, SubjectFactory};
use bucketproof_trace::subject_file::DEFAULT_MAX_LINE_BYTES;
use bucketproof_trace::trace::{Acquire, BandwidthSpec, ConfigSpec, Settle, Setup};

/// The server stopped on a request it cannot read, or its pipes failed.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A line that is not a request of this protocol.
    #[error("line {line}: not a request of the subject protocol: {what}")]
    Request {
        /// 1-based.
        line: u64,
        /// What is wrong.
        what: String,
    },
    /// Reading or writing failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The subject cannot be built at all.
    #[error("{0}")]
    Subject(String),
}

/// Serves `name` from `registry` on `input` and `output` until `input` ends.
pub fn serve(
    registry: &dyn SubjectFactory,
    name: &str,
    input: BufReader<impl Read>,
    mut output: impl Write,
) -> Result<(), ServeError> {
    let (capabilities, profile) = declared(registry, name)?;
    let mut subject: Option<Box<dyn Subject>> = None;
    let mut lines = LineReader::new(input, DEFAULT_MAX_LINE_BYTES, Overflow::Stop);
    let mut number = 0;
    loop {
        number += 1;
        let line = match lines.read()? {
            Line::Text(line) => line,
            Line::End => {
                output.flush()?;
                return Ok(());
            }
            Line::TooLong { cap } => {
                return Err(ServeError::Request {
                    line: number,
                    what: format!("longer than {cap} bytes"),
                });
            }
            Line::NotUtf8 { at, .. } => {
                return Err(ServeError::Request {
                    line: number,
                    what: format!("not UTF-8 (invalid byte at offset {at})"),
                });
            }
        };
        let request: Request =
            serde_json::from_str(line.trim_end()).map_err(|e| ServeError::Request {
                line: number,
                what: e.to_string(),
            })?;
        let mut reply = Reply {
            id: request.id(),
            ..Reply::default()
        };
        match request {
            Request::Hello { protocol, .. } => {
                let Some(version) = VERSIONS.iter().find(|v| protocol.contains(v)) else {
                    return Err(ServeError::Request {
                        line: number,
                        what: format!("speaks none of {protocol:?}"),
                    });
                };
                reply.protocol = Some(*version);
                reply.name = Some(name.to_owned());
                reply.version = Some(env!("CARGO_PKG_VERSION").to_owned());
                reply.capabilities = Some(capabilities);
                reply.profile = Some(profile.clone());
            }
            Request::Setup {
                config,
                max_keys,
                policy,
                sweep_per_op,
                dedupe_window_ns,
                dedupe_per_key,
                ..
            } => {
                let setup = Setup {
                    config: spec_of(&config),
                    max_keys: to_usize(max_keys),
                    policy,
                    sweep_per_op: to_usize(sweep_per_op),
                    dedupe_window_ns,
                    dedupe_per_key: to_usize(dedupe_per_key),
                };
                match build(registry, name, &setup) {
                    Ok(built) => {
                        subject = Some(built);
                        reply.ok = Some(true);
                    }
                    Err(error) => reply.error = Some(wire_error(&error)),
                }
            }
            Request::Reset { .. } => {
                subject = None;
                reply.ok = Some(true);
            }
            request => match subject.as_deref_mut() {
                None => {
                    reply.error = Some(wire_error(&SubjectError::Unsupported("an op before setup")))
                }
                Some(subject) => answer(subject, request, &mut reply),
            },
        }
        serde_json::to_writer(&mut output, &reply).map_err(std::io::Error::from)?;
        output.write_all(b"\n")?;
        // Nothing more buffered: the batch is answered, so the replies go out in one write (and
        // the next read may block).
        if lines.get_ref().buffer().is_empty() {
            output.flush()?;
        }
    }
}

/// `name` built by `registry`, or the error of a name it does not know.
fn build(
    registry: &dyn SubjectFactory,
    name: &str,
    setup: &Setup,
) -> Result<Box<dyn Subject>, SubjectError> {
    (registry.build(name, setup))
        .unwrap_or_else(|| Err(SubjectError::Build(format!("unknown subject {name:?}"))))
}

/// What `name` declares in its hello: each capability found by trying it on a throwaway subject
/// (an op the subject does not have answers `Unsupported`), so a child never declares a request it
/// would refuse; and its profile.
fn declared(
    registry: &dyn SubjectFactory,
    name: &str,
) -> Result<(Capabilities, Profile), ServeError> {
    let build = |setup: &Setup| {
        build(registry, name, setup).map_err(|e| ServeError::Subject(e.to_string()))
    };
    let config = ConfigSpec::new(1, "1/s");
    let mut probe = build(&Setup::new(config.clone()))?;
    let has =
        |result: Result<(), SubjectError>| !matches!(result, Err(SubjectError::Unsupported(_)));
    // A settle of a request the key never saw is refused (no record) by a subject that settles,
    // changing nothing; the other probes run on a key of their own.
    let settle = has(probe
        .settle(Settle {
            key: 0,
            request_id: 0,
            actual: 1,
            now: 0,
        })
        .map(drop));
    let acquire = Acquire {
        key: 1,
        cost: 1,
        now: 0,
        request_id: Some(1),
    };
    let capabilities = Capabilities {
        inspect: !matches!(probe.inspect(1), Inspection::Unsupported),
        would_allow: probe.would_allow(acquire).is_some(),
        request_ids: has(probe.acquire(acquire).map(drop)),
        reconfigure: has(probe.reconfigure(2, &config, 0)),
        sweep: has(probe.sweep(0)),
        forget: has(probe.forget(2)),
        evicts: probe.may_evict(),
        batch: BATCH,
        // A subject that cannot be built for two bandwidths holds one per key.
        bandwidths: match build(&Setup::new(ConfigSpec::set([
            BandwidthSpec::new(1, "1/s"),
            BandwidthSpec::new(2, "1/s"),
        ]))) {
            Ok(_) => bucketproof_limiter::MAX_BANDWIDTHS as u64,
            Err(_) => 1,
        },
        settle,
    };
    Ok((capabilities, probe.profile()))
}

/// Requests the server lets the harness write ahead of their replies.
const BATCH: u64 = 1024;

/// Answers an op of a running trace into `reply`.
fn answer(subject: &mut dyn Subject, request: Request, reply: &mut Reply) {
    let mut inspected = None;
    let result = match request {
        Request::Acquire {
            key,
            now_ns,
            cost,
            request_id,
            inspect,
            probe_retry,
            retry_slack_ns,
            ..
        } => {
            inspected = inspect.then_some(key);
            let acquire = Acquire {
                key,
                cost,
                now: now_ns,
                request_id,
            };
            if inspect {
                reply.before = Some(state(subject.inspect(key)));
            }
            subject.acquire(acquire).map(|observed| {
                decision(&observed, reply);
                reply.created = observed.created;
                if inspect {
                    reply.after = Some(state(subject.inspect(key)));
                }
                if let (true, false, false, Some(Wait::After(wait))) = (
                    probe_retry,
                    observed.allowed,
                    observed.replayed,
                    observed.retry_after,
                ) {
                    let at = |now: u64| Acquire { now, ..acquire };
                    let retry_at = now_ns.saturating_add(wait);
                    reply.retry = Some(RetryProbe {
                        at: subject
                            .would_allow(at(retry_at.saturating_add(retry_slack_ns)))
                            .unwrap_or(false),
                        before: (wait > 0)
                            .then(|| subject.would_allow(at(retry_at - 1)))
                            .flatten(),
                    });
                }
            })
        }
        Request::Settle {
            key,
            now_ns,
            request_id,
            actual,
            inspect,
            ..
        } => {
            inspected = inspect.then_some(key);
            if inspect {
                reply.before = Some(state(subject.inspect(key)));
            }
            let settle = Settle {
                key,
                request_id,
                actual,
                now: now_ns,
            };
            subject.settle(settle).map(|observed| {
                decision(&observed, reply);
                if inspect {
                    reply.after = Some(state(subject.inspect(key)));
                }
            })
        }
        Request::Reconfigure {
            key,
            now_ns,
            config,
            inspect,
            ..
        } => {
            inspected = inspect.then_some(key);
            if inspect {
                reply.before = Some(state(subject.inspect(key)));
            }
            subject
                .reconfigure(key, &spec_of(&config), now_ns)
                .map(|()| {
                    reply.ok = Some(true);
                    if inspect {
                        reply.after = Some(state(subject.inspect(key)));
                    }
                })
        }
        Request::Forget { key, .. } => subject.forget(key).map(|()| reply.ok = Some(true)),
        Request::Sweep { now_ns, .. } => subject.sweep(now_ns).map(|()| reply.ok = Some(true)),
        Request::Inspect { key, .. } => {
            reply.state = Some(state(subject.inspect(key)));
            Ok(())
        }
        Request::WouldAllow {
            key, now_ns, cost, ..
        } => {
            let acquire = Acquire {
                key,
                cost,
                now: now_ns,
                request_id: None,
            };
            reply.allowed = Some(subject.would_allow(acquire).unwrap_or(false));
            Ok(())
        }
        Request::Hello { .. } | Request::Setup { .. } | Request::Reset { .. } => Ok(()),
    };
    if let Err(error) = result {
        let before = reply.before.take();
        *reply = Reply {
            id: reply.id,
            error: Some(wire_error(&error)),
            ..Reply::default()
        };
        if let Some(key) = inspected {
            reply.before = before;
            reply.after = Some(state(subject.inspect(key)));
        }
    }
}

/// The decision fields of an acquire's or a settle's reply.
fn decision(observed: &Observed, reply: &mut Reply) {
    reply.allowed = Some(observed.allowed);
    // A subject that reports no balance leaves the field out, as the protocol lets it.
    reply.remaining =
        (observed.remaining.is_reported()).then(|| WireAmount::of(observed.remaining));
    reply.retry_after_ns = Some(observed.retry_after.map(wire_wait));
    reply.reset_after_ns = observed.reset_after.map(wire_wait);
    if !observed.bandwidths.is_empty() {
        reply.bandwidths = Some(
            (observed.bandwidths.iter())
                .map(|part| WirePart {
                    remaining: WireAmount::of(part.remaining),
                    retry_after_ns: part.retry_after.map(wire_wait),
                    reset_after_ns: part.reset_after.map(wire_wait),
                })
                .collect(),
        );
    }
    reply.replayed = Some(observed.replayed);
}

fn spec_of(config: &[super::wire::Bandwidth]) -> ConfigSpec {
    ConfigSpec::set(config.iter().map(|b| {
        let rate = match b.rate_per_s.split_once('/') {
            Some((p, q)) => format!("{p}/{q}s"),
            None => format!("{}/s", b.rate_per_s),
        };
        BandwidthSpec {
            capacity: b.capacity,
            rate,
            name: b.name.clone(),
        }
    }))
}

fn to_usize(value: u64) -> usize {
    usize::try_from(value).unwrap_or(usize::MAX)
}

fn state(inspection: Inspection) -> Option<WireState> {
    inspection.held().map(|held| WireState {
        tokens: WireAmount::of(held.tokens),
        last_refill_ns: held.last_refill,
        capacity: held.capacity,
    })
}

fn wire_wait(wait: Wait) -> WireWait {
    match wait {
        Wait::After(ns) => WireWait::Ns(ns),
        Wait::Never => WireWait::never(),
    }
}

fn wire_error(error: &SubjectError) -> WireError {
    let kind = match error {
        SubjectError::InvalidCost => "invalid_cost",
        SubjectError::KeyLimitReached => "key_limit",
        SubjectError::UnknownRequest => "unknown_request",
        SubjectError::NotAdmitted => "not_admitted",
        SubjectError::AlreadySettled => "already_settled",
        SubjectError::Unsupported(_) | SubjectError::Inexpressible(_) => "unsupported",
        SubjectError::Store(_) | SubjectError::Build(_) | SubjectError::Broken(_) => "store",
    };
    WireError {
        kind: kind.into(),
        message: error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The capabilities `serve` declares for `name` in its hello.
    fn hello(name: &str) -> Capabilities {
        let request = br#"{"op":"hello","id":0,"protocol":[1]}
"#;
        let mut output = Vec::new();
        serve(
            &bucketproof_check::subjects::BuiltinSubjects,
            name,
            BufReader::new(&request[..]),
            &mut output,
        )
        .unwrap();
        let reply: Reply = serde_json::from_slice(&output).unwrap();
        reply.capabilities.unwrap()
    }

    #[test]
    fn a_served_subject_declares_what_it_can_do_and_nothing_else() {
        let core = hello("core");
        assert!(core.reconfigure && core.forget && core.sweep, "{core:?}");
        assert!(core.inspect && core.would_allow && core.request_ids && core.settle);
        assert!(core.evicts);
        assert_eq!(core.bandwidths, bucketproof_limiter::MAX_BANDWIDTHS as u64);
        // The float baselines take no request ids, no reconfigure, no sweep and no settle, and
        // hold one bandwidth per key.
        let float = hello("float-textbook");
        assert!(
            !float.request_ids && !float.reconfigure && !float.settle,
            "{float:?}"
        );
        assert!(
            float.forget && float.inspect && float.would_allow,
            "{float:?}"
        );
        assert_eq!(float.bandwidths, 1);
    }
}
