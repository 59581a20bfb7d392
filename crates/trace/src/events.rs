//! The names of the events a run counts and a scenario may require (`reach`): one list, so the
//! runner that counts them and the scenario language that names them cannot drift apart.
//!
//! Promise: the names are stable (they appear in scenario files and reports); the runner's counters
//! are indexed in this order, and its unit tests hold its event enum to it.

/// Event names a scenario may require (see `scenarios/README.md`), in the order of the runner's
/// event enum, which indexes its counters.
pub const EVENTS: &[&str] = &[
    "allowed",
    "denied",
    "invalid_cost",
    "replayed",
    "rollback",
    "frozen_clock",
    "saturated",
    "denied_at_boundary",
    "allowed_at_boundary",
    "long_idle",
    "near_clock_end",
    "retry_never",
    "evicted",
    "key_limit",
    "reconfigured_up",
    "reconfigured_down",
    "forgotten",
    "swept",
    "new_key",
    "shared_request_id",
    "wide_credit",
    "partial_denial",
    "created_owing",
    "refunded",
    "extra_charged",
    "extra_denied",
    "settle_refused",
];
