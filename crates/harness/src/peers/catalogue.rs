//! The peers catalogue (`peers/peers.toml`): which third-party limiters are checked, as which
//! subject, installed from where, and what is known about each of their violations.
//!
//! Promise: a catalogue is refused, with `file:line:column`, on a syntax error, a missing or an
//! unknown field; a note names a property the harness has, and says whether the behaviour is a
//! documented design choice (with the peer's own words) or a bug (with where it is reported).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use bucketproof_check::oracle::OracleKind;

/// Every peer, in the order the report shows them.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Catalogue {
    /// The peers.
    #[serde(rename = "peer")]
    pub peers: Vec<Peer>,
}

/// One third-party limiter.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Peer {
    /// How the report names it.
    pub name: String,
    /// The subject that runs it (a subject file's name, `exec:...` or `redis-script:...`).
    pub subject: String,
    /// The package it comes from.
    pub package: String,
    /// The registry it is installed from (`crates.io`, `npm`, `PyPI`).
    pub registry: String,
    /// The pinned version.
    pub version: String,
    /// Where its source lives.
    pub home: String,
    /// What it is, in a few words (algorithm, arithmetic, clock).
    pub what: String,
    /// Why it is held to its profile.
    pub profile_why: String,
    /// What is known about its violations, property by property.
    #[serde(default, rename = "note")]
    pub notes: Vec<Note>,
}

/// What a violated property means for this peer.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Note {
    /// The properties it explains (oracles' names: `arrival-curve`, `invariant`, `retry-after`,
    /// ...): one cause often breaks several.
    pub properties: Vec<String>,
    /// Design choice or bug.
    pub kind: NoteKind,
    /// What happens and why, in our words.
    pub text: String,
    /// The text's checkable facts about the counterexample beside the note (at least one):
    /// `bucketproof peers` refuses a report where the counterexample does not bear one out.
    pub claims: Vec<Claim>,
    /// The peer's own words (its documentation or code comment), quoted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quote: Option<String>,
    /// Where the quote is from, or where the bug is reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// The two kinds of note.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NoteKind {
    /// The peer documents this behaviour; it is not a bug by its own contract.
    Design,
    /// The peer breaks what it promises.
    Bug,
}

/// A catalogue that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CatalogueError {
    /// The file cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a catalogue.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What and where (`line:column` included).
        message: String,
    },
}

impl Catalogue {
    /// Reads and checks `path`.
    pub fn load(path: &Path) -> Result<Catalogue, CatalogueError> {
        let text = std::fs::read_to_string(path).map_err(|source| CatalogueError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Catalogue::parse(&text, path)
    }

    /// Parses `text` (read from `path`, for messages) and checks every note's property.
    pub fn parse(text: &str, path: &Path) -> Result<Catalogue, CatalogueError> {
        let parse_error = |message: String| CatalogueError::Parse {
            path: path.to_path_buf(),
            message,
        };
        let catalogue: Catalogue = toml::from_str(text).map_err(|error| {
            let offset = error.span().map_or(0, |span| span.start);
            let (line, column) = bucketproof_trace::location::line_column(text, offset);
            parse_error(format!("{line}:{column}: {}", error.message()))
        })?;
        for peer in &catalogue.peers {
            if let Some(note) = peer.notes.iter().find(|note| note.claims.is_empty()) {
                return Err(parse_error(format!(
                    "peer {:?}: the note on {} states no claims; a note says at least one \
                     checkable fact about its counterexample (claims = [...])",
                    peer.name,
                    note.properties.join(", ")
                )));
            }
            for name in peer.notes.iter().flat_map(|note| &note.properties) {
                if property(name).is_none() {
                    return Err(parse_error(format!(
                        "peer {:?}: a note names property {:?}; the properties are {}",
                        peer.name,
                        name,
                        PROPERTIES.map(OracleKind::name).join(", ")
                    )));
                }
            }
        }
        Ok(catalogue)
    }
}

/// The properties a peer is judged by, in report order.
pub const PROPERTIES: [OracleKind; 6] = [
    OracleKind::ArrivalCurve,
    OracleKind::Invariant,
    OracleKind::RetryAfter,
    OracleKind::Replay,
    OracleKind::Model,
    OracleKind::Subject,
];

/// The property named `name`.
pub fn property(name: &str) -> Option<OracleKind> {
    PROPERTIES.into_iter().find(|kind| kind.name() == name)
}

/// One checkable fact about a counterexample.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Claim {
    /// Some op's time is earlier than an earlier op's.
    ClockStepsBack,
    /// No op's time is earlier than an earlier op's.
    ClockNeverStepsBack,
    /// More was admitted than the exact bucket allows: an arrival-curve counterexample whose
    /// admitted units are above the bound.
    AdmitsMore,
    /// The peer reported a balance above the capacity.
    ReportsAboveCapacity,
    /// The peer reported a balance below zero.
    ReportsBelowZero,
    /// The failing op (the last) asks for more than the capacity.
    CostAboveCapacity,
    /// The failing op (the last) asks for 0 tokens, which the spec refuses.
    CostZero,
    /// The capacity is above 2^53, past the integers a double holds exactly.
    #[serde(rename = "capacity-above-2^53")]
    CapacityAbove2Pow53,
    /// The peer raised an error instead of deciding.
    RaisesError,
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: &str = r#"
[[peer]]
name = "x"
subject = "exec:x"
package = "x"
registry = "npm"
version = "1.0.0"
home = "https://example.org/x"
what = "a bucket"
profile_why = "it rounds"
[[peer.note]]
properties = ["arrival-curve"]
kind = "design"
text = "windows"
claims = ["admits-more"]
"#;

    #[test]
    fn parses_a_peer_with_a_note() {
        let catalogue = Catalogue::parse(ONE, Path::new("peers.toml")).unwrap();
        assert_eq!(catalogue.peers[0].notes[0].kind, NoteKind::Design);
    }

    #[test]
    fn refuses_an_unknown_field_with_its_position() {
        let text = ONE.replace("home =", "homepage =");
        let error = Catalogue::parse(&text, Path::new("peers.toml")).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("peers.toml: 8:1: unknown field `homepage`"),
            "{error}"
        );
    }

    #[test]
    fn refuses_a_note_without_claims_and_an_unknown_claim() {
        let text = ONE.replace("claims = [\"admits-more\"]", "claims = []");
        let error = Catalogue::parse(&text, Path::new("peers.toml")).unwrap_err();
        assert!(error.to_string().contains("states no claims"), "{error}");
        let text = ONE.replace("admits-more", "admits-fewer");
        let error = Catalogue::parse(&text, Path::new("peers.toml")).unwrap_err();
        assert!(error.to_string().contains("admits-fewer"), "{error}");
    }

    #[test]
    fn refuses_a_note_on_an_unknown_property() {
        let text = ONE.replace(
            "properties = [\"arrival-curve\"]",
            "properties = [\"fairness\"]",
        );
        let error = Catalogue::parse(&text, Path::new("peers.toml")).unwrap_err();
        assert!(
            error.to_string().contains("property \"fairness\""),
            "{error}"
        );
    }
}
