//! # bucketproof-harness: the gate, on top of the checking crates
//!
//! Owns what runs many checks and reports on them, over the crates below it
//! (`bucketproof-trace`: the vocabulary; `bucketproof-scenario`: the scenario language;
//! `bucketproof-check`: the oracles, the runner, the shrinker):
//! - the [`engine`] runs scenario x seed x subject with reach targets and shrinking; a failure is
//!   a [`counterexample`], which `replay` runs again;
//! - the [`gate`] is what `bucketproof check` does, as a library: jobs, verdicts, JSON, JUnit, files;
//! - [`compare`] (float versus rational), [`peers`] (the third-party report) and [`report`]
//!   (scenario reports) render what the engine found;
//! - the [`Registry`] builds any subject by name: the check crate's, the external ones
//!   (`bucketproof-subjects`, each behind this crate's feature of the same name) and child
//!   processes (`bucketproof-protocol`, feature `exec`) are registered by their factories.
//!
//! Nothing here reads a wall clock for a verdict or iterates a hash map: the same runs give the same
//! report bytes on every machine.
#![warn(missing_docs)]

pub mod compare;
pub mod counterexample;
pub mod engine;
pub mod gate;
pub mod peers;
mod registry;
pub mod report;

pub use registry::Registry;
