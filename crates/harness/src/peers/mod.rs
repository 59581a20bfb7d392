//! Third-party limiters checked by the gate: the catalogue of peers (`peers/peers.toml`), their
//! findings and the report that publishes them (`reports/peers.md` and `.json`).
//!
//! Roles: [`catalogue`] says what each peer is and what is known about it, [`claims`] holds each
//! note to the counterexample it sits beside, [`findings`] turns the
//! gate's runs of one peer into properties held and violated, `render` writes the report. The
//! peers themselves are subjects like any other (subject files, `exec:`, `redis-script:`); nothing
//! here knows how they run.
//!
//! Promise: the report is a function of the catalogue, the scenarios and the peers' answers (no
//! timings, no machine paths), so CI can hold the committed one to byte equality; a peer that could
//! not run at all (not installed, broken) is an error, never a quiet gap in the table.

pub mod catalogue;
pub mod claims;
pub mod findings;
mod render;

use std::path::PathBuf;

pub use self::catalogue::{Catalogue, CatalogueError, Note, NoteKind, Peer};
pub use self::findings::PeerFindings;

use crate::Registry;
use crate::gate::{Gate, GateError, GateOptions, Observer, each_oracle};
use bucketproof_check::oracle::OracleSet;
use bucketproof_scenario::Scenario;

/// The peers report: every peer's findings, in catalogue order.
#[derive(Clone, Debug)]
pub struct PeersReport {
    /// One per peer.
    pub peers: Vec<PeerFindings>,
}

impl PeersReport {
    /// Runs every peer of `catalogue` on every scenario (their declared seeds, scale 1): once with
    /// every oracle on, then once per property with only its oracle on; counterexample files go
    /// under `work_dir`.
    pub fn run(
        registry: &Registry,
        catalogue: &Catalogue,
        scenarios: &[Scenario],
        work_dir: impl Into<PathBuf>,
        observer: &mut dyn Observer,
    ) -> Result<PeersReport, GateError> {
        let work_dir = work_dir.into();
        // Every peer must be able to run before any runs: a missing install is one error.
        for peer in &catalogue.peers {
            registry
                .preflight(&peer.subject)
                .map_err(|message| GateError::PeerNotReady {
                    peer: peer.name.clone(),
                    subject: peer.subject.clone(),
                    message,
                })?;
        }
        let mut peers = Vec::with_capacity(catalogue.peers.len());
        for peer in &catalogue.peers {
            // Every oracle on under `all/`, then each alone under its own name.
            let mut options = GateOptions::new(work_dir.join("all"));
            options.subjects = vec![peer.subject.clone()];
            options.allow_skips = true;
            let all = Gate::new(registry, options.clone())?.check(scenarios, observer)?;
            options.reports_dir = work_dir.clone();
            let each = each_oracle(registry, &options, OracleSet::ALL, scenarios, observer)?;
            let alone: Vec<_> = (each.outcomes.into_iter())
                .map(|(kind, outcome)| (kind, outcome.results().to_vec()))
                .collect();
            peers.push(PeerFindings::of(peer, all.results(), &alone));
        }
        Ok(PeersReport { peers })
    }

    /// Peers with a run that could not be built or run: the report is not trustworthy.
    pub fn broken(&self) -> Vec<&str> {
        self.peers
            .iter()
            .filter(|findings| findings.counts.errors > 0)
            .map(|findings| findings.peer.name.as_str())
            .collect()
    }

    /// The Markdown report.
    pub fn to_markdown(&self) -> String {
        render::markdown(self)
    }

    /// The JSON report (pretty, trailing newline).
    pub fn to_json(&self) -> String {
        render::json(self)
    }
}
