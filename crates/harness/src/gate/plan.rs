//! From scenario files to the job list: loading (with duplicate names refused), scaling, the seeds of
//! each scenario, and the subjects each one runs against.
//!
//! Promise: this is the one place a scenario's length is scaled ([`scaled`]) and its seeds are chosen
//! ([`seeds`]); `check` and `run` both go through it, so a limit on either applies to both.

use std::path::PathBuf;

use super::{GateError, GateOptions, joined};
use crate::Registry;
use bucketproof_scenario::{self as scenario, Scenario};

/// Loads every scenario under `paths` (files or directories), in order; refuses duplicate names and
/// an empty result.
pub fn load_scenarios(paths: &[PathBuf]) -> Result<Vec<Scenario>, GateError> {
    let mut scenarios: Vec<Scenario> = Vec::new();
    for path in paths {
        for loaded in scenario::load_all(path)? {
            if scenarios.iter().any(|s| s.name == loaded.name) {
                return Err(GateError::DuplicateScenario {
                    path: path.clone(),
                    name: loaded.name,
                });
            }
            scenarios.push(loaded);
        }
    }
    if scenarios.is_empty() {
        return Err(GateError::NoScenarios {
            paths: joined(paths),
        });
    }
    Ok(scenarios)
}

/// One scenario x seed x subject.
pub(super) struct Job {
    /// Index into [`Plan::scenarios`].
    pub scenario: usize,
    pub seed: u64,
    pub subject: String,
}

/// The scaled scenarios and every job over them, in scenario, seed, subject order.
pub(super) struct Plan {
    pub scenarios: Vec<Scenario>,
    pub jobs: Vec<Job>,
}

impl Plan {
    /// Scales the scenarios, checks every subject name and that each can run, and lists the jobs;
    /// runs nothing.
    pub fn new(
        registry: &Registry,
        options: &GateOptions,
        scenarios: &[Scenario],
    ) -> Result<Plan, GateError> {
        let scenarios = scenarios
            .iter()
            .map(|scenario| scaled(scenario, options.scale))
            .collect::<Result<Vec<_>, _>>()?;
        let mut jobs = Vec::new();
        let mut ready: Vec<String> = Vec::new();
        for (index, scenario) in scenarios.iter().enumerate() {
            let subjects = if options.subjects.is_empty() {
                &scenario.subjects
            } else {
                &options.subjects
            };
            known_subjects(registry, subjects)?;
            for subject in subjects {
                if !ready.contains(subject) {
                    ready_subject(registry, subject)?;
                    ready.push(subject.clone());
                }
            }
            for seed in seeds(scenario, options.seeds)? {
                jobs.extend(subjects.iter().map(|subject| Job {
                    scenario: index,
                    seed,
                    subject: subject.clone(),
                }));
            }
        }
        Ok(Plan { scenarios, jobs })
    }
}

/// `scenario` with its length multiplied by `scale`; the scenario refuses 0 and totals above its cap.
pub(super) fn scaled(scenario: &Scenario, scale: u64) -> Result<Scenario, GateError> {
    Ok(scenario.scaled(scale)?)
}

/// The seeds to run: the declared ones, or `count` of them (declared first); the scenario refuses
/// counts above its cap.
fn seeds(scenario: &Scenario, count: Option<usize>) -> Result<Vec<u64>, GateError> {
    Ok(scenario.seeds_to_run(count)?)
}

/// Refuses a subject that cannot run at all, once, before any run ([`Registry::preflight`]).
pub fn ready_subject(registry: &Registry, name: &str) -> Result<(), GateError> {
    registry
        .preflight(name)
        .map_err(|message| GateError::NotReady {
            name: name.to_owned(),
            message,
        })
}

/// Refuses a subject name the registry cannot build (before anything runs, unlike a build error).
pub fn known_subjects(registry: &Registry, names: &[String]) -> Result<(), GateError> {
    match names.iter().find(|name| !registry.knows(name)) {
        Some(name) => Err(GateError::UnknownSubject {
            name: name.clone(),
            known: registry.names().join(", "),
        }),
        None => Ok(()),
    }
}
