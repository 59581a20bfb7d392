//! `bucketproof replay FILE`: reads a counterexample, prints its ops, runs them against the recorded
//! subject and says whether the recorded failure reproduces (exit 1), differs (exit 1) or no longer
//! happens (exit 0).

use std::path::Path;

use bucketproof_harness::counterexample::{Counterexample, Replayed, replay};
use bucketproof_harness::gate::known_subjects;

use crate::fatal::Fatal;
use crate::out::Out;
use crate::project;

/// The exit code of a reproduced failure.
const REPRODUCED: u8 = 1;

/// Replays `file`.
pub fn replay_file(file: &Path, out: &mut Out) -> Result<u8, Fatal> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| Fatal(format!("{}: cannot read: {e}", file.display())))?;
    let counterexample: Counterexample = serde_json::from_str(&text).map_err(|e| {
        Fatal(format!(
            "{}:{}:{}: not a counterexample file: {e}",
            file.display(),
            e.line(),
            e.column()
        ))
    })?;
    let registry = project::registry()?;
    // A child-process subject is started from the command recorded in the file.
    if counterexample.exec.is_none() {
        known_subjects(&registry, std::slice::from_ref(&counterexample.subject))?;
    }
    out.line(format!(
        "replaying {} ({} seed {}, subject {}, profile {}): {} ops",
        file.display(),
        counterexample.scenario,
        counterexample.seed,
        counterexample.subject,
        counterexample.profile.word(),
        counterexample.ops.len()
    ))?;
    for (index, op) in counterexample.ops.iter().enumerate() {
        out.line(format!("  {index}: {}", serde_json::to_string(op)?))?;
    }
    Ok(match replay(&registry, &counterexample) {
        Replayed::Reproduced(violation) => {
            out.line(format!("reproduced: {violation}"))?;
            REPRODUCED
        }
        Replayed::Different(violation) => {
            out.line(format!("fails differently than recorded: {violation}"))?;
            out.line(format!("recorded: {}", counterexample.violation))?;
            REPRODUCED
        }
        Replayed::Passed => {
            out.line("passes now: the recorded failure no longer reproduces")?;
            0
        }
        Replayed::Incompatible(reason) => {
            return Err(Fatal(format!("cannot replay: {reason}")));
        }
    })
}
