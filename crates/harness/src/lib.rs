//! # bucketproof-harness: the gate, on top of the checking crates
//!
//! Owns what runs many checks and reports on them, over the crates below it
//! (`bucketproof-trace`: the vocabulary; `bucketproof-scenario`: the scenario language;
//! `bucketproof-check`: the oracles, the runner, the shrinker):
//! - the [`engine`] runs scenario x seed x subject with reach targets, shrinking and the
//!   counterexample, and replays one;
//! - the [`gate`] is what `bucketproof check` does, as a library: jobs, verdicts, JSON, JUnit, files;
//! - [`compare`] (float versus rational), [`peers`] (the third-party report) and [`report`]
//!   (scenario reports) render what the engine found;
//! - [`subjects`]: the subjects that need something outside this workspace, each behind its
//!   feature, and the [`Registry`] that builds any subject by name.
//!
//! Nothing here reads a wall clock for a verdict or iterates a hash map: the same runs give the same
//! report bytes on every machine.
#![warn(missing_docs)]

pub mod compare;
pub mod engine;
pub mod gate;
pub mod peers;
pub mod report;
pub mod subjects;

pub use subjects::Registry;
