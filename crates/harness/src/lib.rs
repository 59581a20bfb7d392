//! # bucketproof-harness: drive any limiter against the reference model and the oracles
//!
//! Vocabulary (design.md section 7):
//! - a [`Subject`] is one implementation under test behind one small trait;
//! - a [`Trace`] is a [`Setup`] plus [`Op`]s: plain data, serializable, replayable, shrinkable;
//! - the [`oracle`]s judge every step: the reference model decision by decision, the invariants, the
//!   arrival-curve bound (independently of the model), and retry-after tightness;
//! - the [`runner`] streams a trace through subjects and the model in lockstep;
//! - the [`shrink`]er reduces a failing trace to a minimal counterexample;
//! - `state_machine` (feature `state-machine`) runs generated op sequences against any subject,
//!   every oracle after every step.
//!
//! Nothing here reads a wall clock or iterates a hash map: the same trace gives the same verdict and the
//! same report bytes on every machine.
#![warn(missing_docs)]

pub mod compare;
pub mod engine;
pub mod gate;
pub mod oracle;
pub mod peers;
pub mod report;
pub mod runner;
pub mod shrink;
#[cfg(feature = "state-machine")]
pub mod state_machine;
pub mod subjects;

pub use bucketproof_trace::subject::{
    Amount, BandwidthObserved, Inspected, Inspection, Observed, Subject, SubjectError,
    SubjectFactory,
};
pub use bucketproof_trace::trace::{
    Acquire, BandwidthSpec, ConfigSpec, Op, PolicySpec, Settle, Setup, Trace,
};
pub use runner::{RunOptions, RunReport, Stepper, Verdict, run_trace};
pub use subjects::Registry;
