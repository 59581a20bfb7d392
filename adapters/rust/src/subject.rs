//! What a limiter must answer to be served over the protocol: the one trait to implement to put
//! your own limiter behind the gate (see `core.rs` for bucketproof's).
//!
//! Promises: the methods are the protocol's operations on plain values, with no JSON in sight; the
//! session (`session.rs`) composes them into replies (the `inspect` and retry probes of an acquire
//! are `inspect` and `would_allow` calls made right after it), so a subject writes each rule once.

use crate::reply::{Capabilities, ErrorKind, Profile, Refusal};
use crate::request::Setup;
use crate::values::{Bandwidth, Ratio, State, Wait};

/// A limiter with injected time, built per trace by [`Subject::setup`] and dropped by `reset`.
pub trait Subject: Sized {
    /// Shown in reports.
    const NAME: &'static str;
    /// Shown in reports.
    const VERSION: &'static str;
    /// Which requests it answers; the harness sends no other.
    const CAPABILITIES: Capabilities;
    /// What it promises: `exact` (checked against the model) or `safety`.
    const PROFILE: Profile;

    /// A fresh limiter for one trace, or an `unsupported` refusal (the trace is skipped).
    fn setup(setup: &Setup) -> Result<Self, Refusal>;

    /// Take `cost` tokens for `key` at `now`, deduplicated by `request_id`.
    fn acquire(
        &mut self,
        key: u64,
        now: u64,
        cost: u64,
        request_id: Option<u64>,
    ) -> Result<Outcome, Refusal>;

    /// Settle the admitted request `request_id` of `key` at `actual` whole tokens at `now`
    /// (docs/semantics.md, "settle"): a refund or an extra, as an [`Outcome`] (`created` unknown);
    /// `replayed` for a repeat with the same actual. Only asked if [`Capabilities::settle`].
    fn settle(
        &mut self,
        _key: u64,
        _now: u64,
        _request_id: u64,
        _actual: u64,
    ) -> Result<Outcome, Refusal> {
        Err(Refusal::new(ErrorKind::Unsupported, "no settle"))
    }

    /// Give `key` its own `config` at `now` (creating it, at the key bound, if it holds no state);
    /// a config of more bandwidths than [`Capabilities::bandwidths`] is `unsupported`.
    fn reconfigure(&mut self, key: u64, now: u64, config: &[Bandwidth]) -> Result<(), Refusal>;

    /// Drop everything about `key`.
    fn forget(&mut self, key: u64);

    /// Drop every bucket evictable at `now`.
    fn sweep(&mut self, now: u64);

    /// `key`'s stored state, not refilled; `None` if it holds none.
    fn inspect(&self, key: u64) -> Option<State>;

    /// Whether an acquire of `cost` for `key` at `now` would be admitted, changing nothing.
    fn would_allow(&self, key: u64, now: u64, cost: u64) -> bool;
}

/// What an acquire decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Admitted and charged.
    pub allowed: bool,
    /// The balance after the decision.
    pub remaining: Ratio,
    /// Denial: the wait until the same request succeeds (`None` for an admission).
    pub retry_after: Option<Wait>,
    /// The wait until the bucket is full again, if the subject knows it.
    pub reset_after: Option<Wait>,
    /// This call created the bucket, if the subject can tell.
    pub created: Option<bool>,
    /// Answered from a request-id record (nothing charged).
    pub replayed: bool,
}
