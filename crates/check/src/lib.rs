//! # bucketproof-check: judge any subject against the reference model and the oracles
//!
//! Owns the checking itself, on the vocabulary of `bucketproof-trace`:
//! - the [`oracle`]s judge every step: the reference model decision by decision, the invariants,
//!   the arrival-curve bound (independently of the model), retry-after tightness, request-id
//!   replays and eviction legality;
//! - the [`runner`] streams a trace through a subject and the model in lockstep;
//! - the [`shrink`]er reduces a failing trace to a minimal counterexample;
//! - `state_machine` (feature `state-machine`) runs generated op sequences against any subject
//!   factory, every oracle after every step;
//! - [`subjects`]: the subjects that need nothing outside this workspace (the exact core, the
//!   model, the float baselines), and the deliberately broken fixtures (feature `test-fixtures`).
//!
//! Promises: nothing here reads a wall clock or iterates a hash map, so the same trace gives the same
//! verdict on every machine; nothing here builds a store client, a child-process protocol or a
//! scenario file parser, so a user who checks their own Rust limiter builds none of them.
#![warn(missing_docs)]

pub mod oracle;
pub mod runner;
pub mod shrink;
#[cfg(feature = "state-machine")]
pub mod state_machine;
pub mod subjects;

pub use runner::{RunOptions, RunReport, Stepper, Verdict, run_trace};
