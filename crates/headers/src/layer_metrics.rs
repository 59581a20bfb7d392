//! The layer's own numbers through the `metrics` facade (feature `metrics`).
//!
//! **What it owns:** the names and labels of what the layer emits per response, and the one
//! function that reads them from a response and its advertisement. The limiter's counters are not
//! here: `bucketproof-metrics` publishes those from the limiter's own snapshots.
//!
//! **What it promises:** per response, on the recorder the layer was given
//! ([`crate::layer::RateLimitLayer::metrics_recorder`]) or else the current one:
//! - `bucketproof_http_responses_total{policy, status}`: every response the layer answered or let
//!   through, by status code (`429`s visible), `policy` the layer's [`Advertiser::policy`];
//! - `bucketproof_http_degraded_responses_total{policy, status}`: of those, the ones decided by a
//!   fallback while the store was unavailable (the responses carrying [`DEGRADED_HEADER`]);
//! - per item of a decided response (one per bandwidth), the gauges
//!   `bucketproof_http_advertised_quota{policy}` and `bucketproof_http_advertised_window_seconds{policy}`,
//!   the `q` and `w` the layer wrote into `RateLimit-Policy` (the very values it rendered), next to
//!   `bucketproof_http_enforced_capacity{policy}` and `bucketproof_http_enforced_window_seconds{policy}`,
//!   the capacity and the exact refill time (`capacity / rate`) of the bandwidth that decided, so a
//!   quota capped by the Structured Field range or a window rounded up shows as a difference. A
//!   window the field omits (zero rate) is not set.
//!
//! Per settle of a reserved request ([`crate::layer::RateLimitLayer::settle`]):
//! - `bucketproof_http_settles_total{policy, result}`, `result` one of `settled` (the refund given or
//!   the extra charged), `extra_denied` (the extra was not covered: nothing charged, the response
//!   returned all the same) and `failed` (the source could not settle: the estimate stays charged);
//! - `bucketproof_http_settle_failures_total{policy, reason}`: of the `failed` ones, why
//!   ([`SettleFailure`]): `refused` (the rule refused it: no live record, an actual above the
//!   capacity, ...), `unavailable` (the shared store could not be reached) or `store` (it answered
//!   with no settlement);
//! - `bucketproof_http_unpaid_total{policy}`: the sum of the denied extras, in the quota's unit: what
//!   keys used beyond what they were charged ([`SettleReport::unpaid`]).
//!
//! Emitting costs a few registry look-ups per response, on the HTTP path, never in the limiter.
//!
//! [`Advertiser::policy`]: crate::layer::Advertiser::policy
//! [`DEGRADED_HEADER`]: crate::layer::DEGRADED_HEADER
//! [`SettleReport::unpaid`]: crate::layer::SettleReport::unpaid
//! [`SettleFailure`]: crate::source::SettleFailure

use bucketproof_limiter::{Decisions, Settled};
use http::StatusCode;

use crate::field::{PolicyName, RateLimitPolicy};
use crate::set::SetOutcome;
use crate::source::SettleFailure;

/// Emits one response's numbers under the layer's `policy`: its status, whether a fallback decided
/// it, and, for a decided response (`decided` = the `RateLimit-Policy` it advertised and its
/// outcome), every item's advertised and enforced limits.
pub(crate) fn response(
    policy: &PolicyName,
    status: StatusCode,
    decided: Option<(&RateLimitPolicy, &SetOutcome)>,
) {
    let policy = policy.as_str().to_owned();
    let status_label = status.as_str().to_owned();
    let labels = [("policy", policy), ("status", status_label)];
    metrics::counter!("bucketproof_http_responses_total", &labels).increment(1);
    let Some((advertised, outcome)) = decided else {
        return;
    };
    if outcome.degraded() {
        metrics::counter!("bucketproof_http_degraded_responses_total", &labels).increment(1);
    }
    for (item, part) in advertised.policies.iter().zip(outcome.parts()) {
        let labels = [("policy", item.name.as_str().to_owned())];
        let config = part.config();
        let rate = config.rate();
        metrics::gauge!("bucketproof_http_advertised_quota", &labels).set(item.quota as f64);
        metrics::gauge!("bucketproof_http_enforced_capacity", &labels)
            .set(config.capacity() as f64);
        if let Some(window) = item.window {
            metrics::gauge!("bucketproof_http_advertised_window_seconds", &labels)
                .set(window as f64);
        }
        if rate.numer() > 0 {
            let exact = config.capacity() as f64 * rate.denom() as f64 / rate.numer() as f64;
            metrics::gauge!("bucketproof_http_enforced_window_seconds", &labels).set(exact);
        }
    }
}

/// Emits one settle's numbers under the layer's `policy`: its result, and what it left `unpaid`
/// ([`SettleReport::unpaid`]).
pub(crate) fn settle(
    policy: &PolicyName,
    result: &Result<Settled<Decisions>, SettleFailure>,
    unpaid: u64,
) {
    let policy = policy.as_str().to_owned();
    let result_label = match result {
        Ok(settled) if settled.decision.is_allowed() => "settled",
        Ok(_) => "extra_denied",
        Err(_) => "failed",
    };
    let labels = [
        ("policy", policy.clone()),
        ("result", result_label.to_owned()),
    ];
    metrics::counter!("bucketproof_http_settles_total", &labels).increment(1);
    if let Err(failure) = result {
        let reason = match failure {
            SettleFailure::Refused(_) => "refused",
            SettleFailure::Unavailable(_) => "unavailable",
            SettleFailure::Store(_) => "store",
        };
        let labels = [("policy", policy.clone()), ("reason", reason.to_owned())];
        metrics::counter!("bucketproof_http_settle_failures_total", &labels).increment(1);
    }
    if unpaid > 0 {
        metrics::counter!("bucketproof_http_unpaid_total", "policy" => policy).increment(unpaid);
    }
}
