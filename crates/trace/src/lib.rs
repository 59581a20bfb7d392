//! # bucketproof-trace: the vocabulary every other part of the harness speaks
//!
//! Owns the plain data a check is made of, and nothing that runs one:
//! - a [`Trace`] is a [`Setup`] plus [`Op`]s: serializable, replayable, shrinkable ([`trace`]);
//! - a [`Subject`] is one implementation under test behind one small trait, and [`Observed`] what
//!   it reports of a decision ([`subject`]); a [`SubjectFactory`] builds subjects by name;
//! - a [`profile::Profile`] is what a subject promises, and so which oracles judge it;
//! - the boundary values of a config's arithmetic ([`boundary`]) and the eviction-summary pressure
//!   phase ([`pressure`]): the menus every generator (the scenario engine, the state machine, the
//!   mutants' traces) mixes in;
//! - durations as people write them ([`duration`]), and subject files: how a child process or a Redis
//!   script is named and started ([`subject_file`]), the same description a counterexample keeps.
//!
//! Promise: this crate depends on the limiter and the reference model only (for configs and exact
//! amounts); it builds no store client, no child-process protocol and no checking logic, so a crate
//! that only adds a subject depends on it alone.
#![warn(missing_docs)]

pub mod amount;
pub mod boundary;
pub mod duration;
pub mod events;
pub mod location;
pub mod pressure;
pub mod profile;
pub mod subject;
pub mod subject_file;
pub mod trace;

pub use subject::{
    Amount, BandwidthObserved, Inspected, Inspection, Observed, Subject, SubjectError,
    SubjectFactory,
};
pub use trace::{Acquire, BandwidthSpec, ConfigSpec, Op, PolicySpec, Settle, Setup, Trace};
