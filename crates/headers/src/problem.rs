//! `application/problem+json` bodies (RFC 9457) for the draft-11 problem types (Section 5).
//!
//! Bodies are built with `serde_json`, so policy names and details are always escaped correctly.

use http::StatusCode;
use serde_json::json;

use crate::field::PolicyName;
use crate::profile::{PROBLEM_QUOTA_EXCEEDED, PROBLEM_TEMPORARY_REDUCED_CAPACITY};

/// The media type of every body built here.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// Body of a 429 for a request that exceeded `violated` (draft-11 Section 5.1, "quota-exceeded").
pub fn quota_exceeded(violated: &[&PolicyName], retry_after_secs: Option<u64>) -> String {
    let names: Vec<&str> = violated.iter().map(|p| p.as_str()).collect();
    let detail = match retry_after_secs {
        Some(s) => format!("Quota exceeded; retry in {s} s."),
        None => "Quota exceeded; this quota does not refill.".to_owned(),
    };
    json!({
        "type": PROBLEM_QUOTA_EXCEEDED,
        "title": "Request cannot be satisfied as assigned quota has been exceeded",
        "status": 429,
        "detail": detail,
        "violated-policies": names,
    })
    .to_string()
}

/// Body of a 503 when the limiter cannot decide (draft-11 Section 5.2, "temporary-reduced-capacity").
pub fn temporary_reduced_capacity(violated: &[&PolicyName], detail: &str) -> String {
    let names: Vec<&str> = violated.iter().map(|p| p.as_str()).collect();
    json!({
        "type": PROBLEM_TEMPORARY_REDUCED_CAPACITY,
        "title": "Request cannot be satisfied due to temporary server capacity constraints",
        "status": 503,
        "detail": detail,
        "violated-policies": names,
    })
    .to_string()
}

/// Body of a 413 for a request whose cost exceeds the bucket's capacity: it can never be admitted,
/// so it is neither a denial (nothing to wait for) nor a server fault.
pub fn cost_exceeds_capacity(policy: &PolicyName, cost: u64, capacity: u64) -> String {
    json!({
        "type": "about:blank",
        "title": "Request cost exceeds the quota",
        "status": 413,
        "detail": format!("This request costs {cost} quota units; policy {policy} allows at most {capacity} at once."),
        "violated-policies": [policy.as_str()],
    })
    .to_string()
}

/// Body of a 4xx for a request whose limiter key was refused ([`crate::key::KeyRejection`]): no
/// decision was made, so no policy is named. `about:blank`, titled with the status's reason phrase
/// (RFC 9457 Section 4.2.1).
pub fn key_refused(status: StatusCode, detail: &str) -> String {
    json!({
        "type": "about:blank",
        "title": status.canonical_reason().unwrap_or("Client Error"),
        "status": status.as_u16(),
        "detail": detail,
    })
    .to_string()
}
