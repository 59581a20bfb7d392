//! Shared by the loom, shuttle, stress and linearizability tests.
//!
//! - [`history`]: recording a concurrent history of limiter calls (who called what, at which injected
//!   `now`, what came back, and the invoke/return order), and the checks every explored execution must
//!   pass: no overselling (arrival-curve bound), invariants, counters.
//! - [`linearizability`]: a per-key Wing–Gong search that explains a history by a sequential order of the
//!   reference model (`bucketproof-model`), consistent with real-time order.
//! - [`spec`]: the sequential spec of one key that search replays (the model's bucket plus the per-key
//!   rules of docs/semantics.md).
//! - [`direct`]: histories of the unkeyed `DirectLimiter` and their checks (atomicity against the
//!   crate's sequential transition, no overselling, invariants), for the loom and shuttle suites.
#![allow(dead_code)]

pub mod direct;
pub mod history;
pub mod linearizability;
pub mod spec;
