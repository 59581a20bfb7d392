//! What the shipped binary knows about the project it runs in: its subjects (the registry), where
//! its scenarios are, and where its files go.
//!
//! Promise: files go to the project's `reports/` (beside its `scenarios/`) unless a flag names
//! another directory; a scenario's own path never decides it. Only real subjects are registered:
//! the harness's test fixtures are not reachable from this binary.

use std::path::{Path, PathBuf};

use bucketproof_harness::Registry;
use bucketproof_protocol::ExecSubjects;
use bucketproof_scenario::{self as scenario, Scenario};
use bucketproof_subjects::script::ScriptSubjects;

use crate::fatal::Fatal;

/// Every subject the CLI can build: the harness's own, the mutation catalogue (`mutant:<slug>`),
/// any `exec:<command line>` (run in the current directory), any `redis-script:<description.toml>`
/// (a user's Lua script on Redis, docs/redis-script.md) and the project's subject files
/// (`subjects/<name>.toml` beside `scenarios/`: a child process, or a `[script]`). A subject file
/// that does not parse is an error here, before anything runs.
pub fn registry() -> Result<Registry, Fatal> {
    Ok(Registry::default()
        .with(bucketproof_mutants::MutantSubjects)
        .with(exec_subjects()?)
        .with(script_subjects()?))
}

/// The `redis-script:` factory with the project's script subject files (paths of `redis-script:`
/// names are taken from the current directory; package sources are looked up in the project).
pub fn script_subjects() -> Result<ScriptSubjects, Fatal> {
    Ok(ScriptSubjects::new(".").with_subject_files(&project_dir())?)
}

/// The `exec:` factory with the project's subject files.
pub fn exec_subjects() -> Result<ExecSubjects, Fatal> {
    Ok(ExecSubjects::new(".").with_subject_files(&project_dir())?)
}

/// The directory holding `scenarios/`, `subjects/` and `reports/`: empty (the current directory,
/// so paths stay relative, as in replay commands) when run from a clone.
pub fn project_dir() -> PathBuf {
    scenarios_dir()
        .parent()
        .map_or_else(PathBuf::new, Path::to_path_buf)
}

/// The project's scenarios: `./scenarios` (run from a clone), else the workspace's.
pub fn scenarios_dir() -> PathBuf {
    let local = PathBuf::from("scenarios");
    if local.is_dir() {
        return local;
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    workspace.canonicalize().unwrap_or(workspace)
}

/// The project's reports directory: `reports/` beside [`scenarios_dir`] (`./reports` in a clone).
pub fn reports_dir() -> PathBuf {
    project_dir().join("reports")
}

/// The paths to load: those given, else the project's scenarios.
pub fn scenario_paths(paths: &[PathBuf]) -> Vec<PathBuf> {
    if paths.is_empty() {
        vec![scenarios_dir()]
    } else {
        paths.to_vec()
    }
}

/// Finds a scenario by path, or by file stem or name in the project's scenarios.
pub fn find_scenario(spec: &str) -> Result<Scenario, Fatal> {
    let path = Path::new(spec);
    if path.is_file() {
        return Ok(Scenario::load(path)?);
    }
    let dir = scenarios_dir();
    let by_file = dir.join(format!("{spec}.toml"));
    if by_file.is_file() {
        return Ok(Scenario::load(&by_file)?);
    }
    scenario::load_all(&dir)?
        .into_iter()
        .find(|s| s.name == spec)
        .ok_or_else(|| {
            Fatal(format!(
                "no scenario {spec:?}: not a file, and not a scenario name in {}",
                dir.display()
            ))
        })
}
