//! Why a gate could not run or could not write its files. A failing run is never an error: it is a
//! [`super::Verdict`].

use std::path::PathBuf;

use bucketproof_scenario::ScenarioError;

/// A problem with the gate's inputs or outputs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GateError {
    /// A scenario file did not load.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// Two scenarios share a name (their reports would overwrite each other).
    #[error("{path}: duplicate scenario name {name:?}")]
    DuplicateScenario {
        /// The file or directory the second one came from.
        path: PathBuf,
        /// The shared name.
        name: String,
    },
    /// The paths held no scenario.
    #[error("no scenarios (*.toml) found in {paths}")]
    NoScenarios {
        /// The paths searched, joined.
        paths: String,
    },
    /// A subject name the registry cannot build.
    #[error("unknown subject {name:?}; known: {known}")]
    UnknownSubject {
        /// The name asked for.
        name: String,
        /// Every buildable name, joined.
        known: String,
    },
    /// A subject that cannot run at all (checked once, before the first run).
    #[error("subject {name:?} cannot run: {message}")]
    NotReady {
        /// The subject.
        name: String,
        /// What is wrong, and what to run when known.
        message: String,
    },
    /// A peer of the catalogue whose subject cannot run (checked for every peer before any run).
    #[error(
        "could not run {peer} (subject {subject:?}): {message} (installed? run `peers/install`)"
    )]
    PeerNotReady {
        /// The peer's name in the catalogue.
        peer: String,
        /// Its subject.
        subject: String,
        /// What is wrong.
        message: String,
    },
    /// One gate per oracle writes no scenario reports and no JUnit (both are of runs with every
    /// oracle on).
    #[error("each oracle alone writes no scenario reports and no JUnit file: run those without it")]
    EachOracleFiles,
    /// [`super::GateOptions::seeds`] is `Some(0)`.
    #[error("the seed count must be at least 1")]
    ZeroSeeds,
    /// [`super::GateOptions::scale`] is 0.
    #[error("the scale must be at least 1")]
    ZeroScale,
    /// Reports are written or checked at scale 1 only: a scaled run would not match them.
    #[error("reports are written and checked at scale 1 only, not at scale {scale}")]
    ScaledReports {
        /// The scale asked for.
        scale: u64,
    },
    /// The reports directory exists and is not a directory.
    #[error("{path}: the reports directory is not a directory")]
    ReportsNotADirectory {
        /// The path given.
        path: PathBuf,
    },
    /// An output file cannot be written.
    #[error("{path}: cannot write: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// A plot could not be drawn.
    #[error("plotting {scenario}: {message}")]
    Plot {
        /// The scenario whose plot failed.
        scenario: String,
        /// The plotting library's message.
        message: String,
    },
}
