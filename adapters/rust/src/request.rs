//! Requests of protocol version 1, one typed struct per `op` (`parse.rs` reads them).
//!
//! Promises: each struct holds exactly the fields its `op` may carry, with the optional ones
//! defaulted (`inspect` and `probe_retry` false, no `request_id`), so the session never meets a
//! half-formed request.

use crate::values::{Bandwidth, Policy};

/// One request line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// The first request: which protocol versions the harness speaks.
    Hello(Hello),
    /// The start of a trace: build a fresh limiter.
    Setup(Setup),
    /// Take tokens.
    Acquire(Acquire),
    /// Reconcile a reserved request's charge with its actual cost.
    Settle(Settle),
    /// Give one key its own config.
    Reconfigure(Reconfigure),
    /// Drop everything about one key.
    Forget(Forget),
    /// Drop every evictable bucket.
    Sweep(Sweep),
    /// Show one key's stored state.
    Inspect(Inspect),
    /// Would an acquire be admitted, without recording anything.
    WouldAllow(WouldAllow),
    /// The end of a trace: drop everything.
    Reset(Reset),
}

impl Request {
    /// The request's `id`.
    pub fn id(&self) -> u64 {
        match self {
            Request::Hello(r) => r.id,
            Request::Setup(r) => r.id,
            Request::Acquire(r) => r.id,
            Request::Settle(r) => r.id,
            Request::Reconfigure(r) => r.id,
            Request::Forget(r) => r.id,
            Request::Sweep(r) => r.id,
            Request::Inspect(r) => r.id,
            Request::WouldAllow(r) => r.id,
            Request::Reset(r) => r.id,
        }
    }

    /// The request's `op`, for messages.
    pub fn op(&self) -> &'static str {
        match self {
            Request::Hello(_) => "hello",
            Request::Setup(_) => "setup",
            Request::Acquire(_) => "acquire",
            Request::Settle(_) => "settle",
            Request::Reconfigure(_) => "reconfigure",
            Request::Forget(_) => "forget",
            Request::Sweep(_) => "sweep",
            Request::Inspect(_) => "inspect",
            Request::WouldAllow(_) => "would_allow",
            Request::Reset(_) => "reset",
        }
    }
}

/// `{"op":"hello","protocol":[1]}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// Request id.
    pub id: u64,
    /// The versions the harness speaks.
    pub protocol: Vec<u64>,
}

/// The settings of one trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Setup {
    /// Request id.
    pub id: u64,
    /// The config of every key not reconfigured (one bandwidth in version 1).
    pub config: Vec<Bandwidth>,
    /// The key bound.
    pub max_keys: u64,
    /// What happens at the key bound.
    pub policy: Policy,
    /// Entries an amortized sweep may inspect per new key (a hint).
    pub sweep_per_op: u64,
    /// The request-id window; 0 turns request ids off.
    pub dedupe_window_ns: u64,
    /// The newest request-id records kept per key.
    pub dedupe_per_key: u64,
}

/// Take `cost` tokens for `key` at `now_ns`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acquire {
    /// Request id.
    pub id: u64,
    /// The key.
    pub key: u64,
    /// The harness's clock.
    pub now_ns: u64,
    /// Whole tokens.
    pub cost: u64,
    /// Makes a retry idempotent within the dedupe window.
    pub request_id: Option<u64>,
    /// Report the key's state before and after.
    pub inspect: bool,
    /// For a denial with a finite wait `w`: would the same acquire pass at `now + w` and `now + w - 1`.
    pub probe_retry: bool,
}

/// Settle the admitted request `request_id` on `key` at `actual` whole tokens, at `now_ns`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settle {
    /// Request id.
    pub id: u64,
    /// The key.
    pub key: u64,
    /// The harness's clock.
    pub now_ns: u64,
    /// The request id its acquire carried.
    pub request_id: u64,
    /// What the work really cost (0 gives the whole charge back).
    pub actual: u64,
    /// Report the key's state before and after.
    pub inspect: bool,
}

/// Move `key` to its own `config` at `now_ns`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reconfigure {
    /// Request id.
    pub id: u64,
    /// The key.
    pub key: u64,
    /// The harness's clock.
    pub now_ns: u64,
    /// The key's new config (one bandwidth in version 1).
    pub config: Vec<Bandwidth>,
    /// Report the key's state before and after.
    pub inspect: bool,
}

/// Drop `key`'s bucket, override and records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forget {
    /// Request id.
    pub id: u64,
    /// The key.
    pub key: u64,
}

/// Drop every bucket evictable at `now_ns`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sweep {
    /// Request id.
    pub id: u64,
    /// The harness's clock.
    pub now_ns: u64,
}

/// Show `key`'s stored state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inspect {
    /// Request id.
    pub id: u64,
    /// The key.
    pub key: u64,
}

/// Would `cost` for `key` at `now_ns` be admitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WouldAllow {
    /// Request id.
    pub id: u64,
    /// The key.
    pub key: u64,
    /// The harness's clock.
    pub now_ns: u64,
    /// Whole tokens.
    pub cost: u64,
}

/// Drop every key, record and override; a `setup` follows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reset {
    /// Request id.
    pub id: u64,
}
