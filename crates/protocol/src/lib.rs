//! # bucketproof-protocol: any limiter, in any language, as a child process speaking the subject
//! protocol (docs/subject-protocol.md) on its stdin and stdout; both ends
//!
//! Roles: the vocabulary's [`bucketproof_trace::subject_file`] says what to start (an `exec:`
//! command line or a `subjects/<name>.toml` file), [`wire`] is the messages, [`process`] one running child and its pipes (its deadlines and caps),
//! [`lines`] the capped line reading both ends share, [`pool`] keeps healthy
//! children between traces, and [`ExecSubject`] drives one trace through a child, batching ops
//! without losing the probes the oracles ask for. [`ExecSubjects`] is the factory a registry
//! uses. [`serve`] is the other end: any in-process subject behind the protocol.
//!
//! Promise: a child that breaks the protocol is a harness error ([`SubjectError::Broken`], exit 2
//! in the gate), never a verdict about the limiter; a profile asked of a subject is never stronger
//! than the one it declares.

pub mod lines;
pub mod pool;
pub mod process;
pub mod reply;
pub mod serve;
mod subject;
pub mod wire;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use self::pool::Pool;
use self::process::Process;
pub use self::subject::{ExecSubject, bandwidths};
use bucketproof_trace::subject::{Subject, SubjectError, SubjectFactory};
use bucketproof_trace::subject_file::{self as spec, EXEC_PREFIX, ExecSpec, FileKind, SpecError};
use bucketproof_trace::trace::Setup;

/// Builds `exec:<command line>` subjects (run in a given directory), the subjects of a project's
/// `subjects/*.toml` files (by file stem), and exec subject files named by path (`./my.toml`).
pub struct ExecSubjects {
    cwd: PathBuf,
    files: BTreeMap<String, PathBuf>,
    project: PathBuf,
    pool: Arc<Pool>,
}

impl ExecSubjects {
    /// `exec:` subjects only, run in `cwd`.
    pub fn new(cwd: impl Into<PathBuf>) -> ExecSubjects {
        let cwd = cwd.into();
        ExecSubjects {
            project: cwd.clone(),
            cwd,
            files: BTreeMap::new(),
            pool: Arc::default(),
        }
    }

    /// Also the subject files in `project/subjects/` (none if the directory does not exist);
    /// a file's relative `cwd` is taken from `project`.
    pub fn with_subject_files(mut self, project: &Path) -> Result<ExecSubjects, SpecError> {
        self.project = project.to_path_buf();
        for (name, (path, kind)) in spec::discover(project)? {
            match kind {
                FileKind::Exec => {
                    // Parsed now, so a broken file is an error before anything runs.
                    ExecSpec::load(&path, project)?;
                    self.files.insert(name, path);
                }
                // The script factory's (`bucketproof_subjects::script`, feature `redis`), which
                // parses them; a registry without it does not know their names.
                FileKind::Script => {}
            }
        }
        Ok(self)
    }

    /// The subject files' names and paths.
    pub fn files(&self) -> &BTreeMap<String, PathBuf> {
        &self.files
    }

    /// What `name` starts, if it is this factory's.
    pub fn spec(&self, name: &str) -> Option<Result<ExecSpec, SpecError>> {
        if name.starts_with(EXEC_PREFIX) {
            return Some(ExecSpec::from_exec_name(name, &self.cwd));
        }
        if let Some(path) = self.named_file(name) {
            return Some(ExecSpec::load(&path, &self.cwd));
        }
        let path = self.files.get(name)?;
        Some(ExecSpec::load(path, &self.project))
    }

    /// The file of a subject named by path, if it is this factory's: an exec subject file, or one
    /// that cannot be read or parsed (so the error names it).
    fn named_file(&self, name: &str) -> Option<PathBuf> {
        let path = spec::within(&self.cwd, spec::named_file(name)?);
        (spec::kind_of_file(&path) != Some(FileKind::Script)).then_some(path)
    }

    /// Checks `name` once before any run: its spec loads, nothing it needs is missing, and it
    /// starts and greets under the profile asked of it. The greeted child waits in the pool for
    /// the first trace.
    fn ready(&self, name: &str, spec: &ExecSpec) -> Result<(), String> {
        if let Some(missing) = spec.unready() {
            return Err(missing);
        }
        let process = Process::start(&spec.command)
            .map_err(|broken| format!("{}{}", broken.0, spec.readiness.advice()))?;
        let declared = &process.hello.profile;
        spec.profile
            .as_ref()
            .map_or(Ok(()), |asked| asked.admits(declared))
            .map_err(|e| format!("subject {name:?}: {e}"))?;
        self.pool.give_back(name, process);
        Ok(())
    }

    /// Builds the subject `spec` describes, under `name`, for `setup`.
    pub fn build_spec(
        &self,
        name: &str,
        spec: &ExecSpec,
        setup: &Setup,
    ) -> Result<ExecSubject, SubjectError> {
        let process = match self.pool.take(name) {
            Some(process) => process,
            None => Process::start(&spec.command).map_err(|b| SubjectError::Broken(b.0))?,
        };
        let declared = process.hello.profile.clone();
        let profile = spec.profile.clone().unwrap_or_else(|| declared.clone());
        profile
            .admits(&declared)
            .map_err(|e| SubjectError::Broken(format!("subject {name:?}: {e}")))?;
        ExecSubject::start(
            name,
            spec.clone(),
            profile,
            process,
            Arc::clone(&self.pool),
            setup,
        )
    }
}

impl SubjectFactory for ExecSubjects {
    fn names(&self) -> Vec<String> {
        self.files.keys().cloned().collect()
    }

    fn knows(&self, name: &str) -> bool {
        name.starts_with(EXEC_PREFIX)
            || self.files.contains_key(name)
            || self.named_file(name).is_some()
    }

    fn preflight(&self, name: &str) -> Option<Result<(), String>> {
        Some(match self.spec(name)? {
            Ok(spec) => self.ready(name, &spec),
            Err(e) => Err(e.to_string()),
        })
    }

    fn build(&self, name: &str, setup: &Setup) -> Option<Result<Box<dyn Subject>, SubjectError>> {
        let spec = match self.spec(name)? {
            Ok(spec) => spec,
            Err(e) => return Some(Err(SubjectError::Broken(e.to_string()))),
        };
        Some(
            self.build_spec(name, &spec, setup)
                .map(|s| Box::new(s) as Box<dyn Subject>),
        )
    }
}
