//! The retry rules of the pacing client: only idempotent requests (or ones carrying an
//! `Idempotency-Key`) are retried, within an attempt budget and a deadline, with Retry-After honoured.

use std::cell::{Cell, RefCell};

use bucketproof_headers::client::{
    PacedError, Pacer, PacerConfig, RequestInfo, RetryPolicy, is_retryable, send_paced,
};
use http::{HeaderMap, HeaderValue, Method, StatusCode};

const S: u64 = 1_000_000_000;

fn throttled(retry_after: &'static str) -> (StatusCode, HeaderMap, ()) {
    let mut h = HeaderMap::new();
    h.insert("retry-after", HeaderValue::from_static(retry_after));
    (StatusCode::TOO_MANY_REQUESTS, h, ())
}

#[test]
fn only_idempotent_or_keyed_requests_are_retryable() {
    let none = HeaderMap::new();
    for m in [
        Method::GET,
        Method::HEAD,
        Method::PUT,
        Method::DELETE,
        Method::OPTIONS,
    ] {
        assert!(is_retryable(&m, &none), "{m}");
    }
    assert!(!is_retryable(&Method::POST, &none));
    assert!(!is_retryable(&Method::PATCH, &none));
    let mut keyed = HeaderMap::new();
    keyed.insert("idempotency-key", HeaderValue::from_static("8e03978e-40d5"));
    assert!(is_retryable(&Method::POST, &keyed));
}

/// Drives `send_paced` on a virtual clock: `sleep` advances it, `send` replays scripted responses.
fn drive(
    method: Method,
    headers: HeaderMap,
    policy: RetryPolicy,
    script: Vec<(StatusCode, HeaderMap, ())>,
) -> (Result<StatusCode, String>, Vec<u64>) {
    let clock = Cell::new(0u64);
    let sent_at = RefCell::new(Vec::new());
    let script = RefCell::new(script.into_iter());
    let mut pacer = Pacer::new(
        PacerConfig {
            window_jitter: 0,
            ..PacerConfig::default()
        },
        5,
    );
    let fut = send_paced(
        &mut pacer,
        policy,
        RequestInfo {
            method: &method,
            headers: &headers,
            cost: 1,
        },
        || clock.get(),
        |ns| {
            clock.set(clock.get() + ns);
            std::future::ready(())
        },
        || {
            sent_at.borrow_mut().push(clock.get());
            let next = script.borrow_mut().next();
            std::future::ready(next.ok_or("script exhausted"))
        },
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let result = rt.block_on(fut).map(|(s, _, ())| s).map_err(|e| match e {
        PacedError::NotRetryable => "not retryable".to_owned(),
        PacedError::GaveUp { attempts, .. } => format!("gave up after {attempts}"),
        PacedError::Transport(e) => e.to_owned(),
        other => other.to_string(),
    });
    (result, sent_at.into_inner())
}

#[test]
fn retry_after_is_honoured_then_the_request_succeeds() {
    let (result, sent) = drive(
        Method::GET,
        HeaderMap::new(),
        RetryPolicy::default(),
        vec![throttled("2"), (StatusCode::OK, HeaderMap::new(), ())],
    );
    assert_eq!(result, Ok(StatusCode::OK));
    assert_eq!(sent.len(), 2);
    // Retry-After 2 s plus full jitter of at most the first backoff ceiling (100 ms).
    assert!(
        sent[1] >= 2 * S && sent[1] <= 2 * S + 100_000_000,
        "{sent:?}"
    );
}

#[test]
fn a_post_without_idempotency_key_is_not_retried() {
    let (result, sent) = drive(
        Method::POST,
        HeaderMap::new(),
        RetryPolicy::default(),
        vec![throttled("1"), (StatusCode::OK, HeaderMap::new(), ())],
    );
    assert_eq!(result, Err("not retryable".to_owned()));
    assert_eq!(sent.len(), 1);
}

#[test]
fn a_post_with_idempotency_key_is_retried() {
    let mut h = HeaderMap::new();
    h.insert("idempotency-key", HeaderValue::from_static("k-1"));
    let (result, sent) = drive(
        Method::POST,
        h,
        RetryPolicy::default(),
        vec![throttled("1"), (StatusCode::OK, HeaderMap::new(), ())],
    );
    assert_eq!(result, Ok(StatusCode::OK));
    assert_eq!(sent.len(), 2);
}

#[test]
fn attempts_and_deadline_bound_the_retries() {
    let (result, sent) = drive(
        Method::GET,
        HeaderMap::new(),
        RetryPolicy {
            max_attempts: 3,
            deadline: 3600 * S,
        },
        vec![throttled("1"); 10],
    );
    assert_eq!(result, Err("gave up after 3".to_owned()));
    assert_eq!(sent.len(), 3);

    let (result, sent) = drive(
        Method::GET,
        HeaderMap::new(),
        RetryPolicy {
            max_attempts: 100,
            deadline: 5 * S,
        },
        vec![throttled("4"); 10],
    );
    assert!(result.is_err());
    assert!(sent.iter().all(|t| *t <= 5 * S), "{sent:?}");
    assert_eq!(
        sent.len(),
        2,
        "0 s, then ~4 s; a third try would start after the deadline"
    );
}
