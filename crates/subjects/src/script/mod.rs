//! Redis script subjects: a user's own Lua limiter (a third party's script) run on Redis, described
//! by a TOML file (docs/redis-script.md), checked like any other subject under a profile (almost
//! always `safety`).
//!
//! Roles: [`spec`] is the description and its parsing, [`source`] where the Lua text comes from
//! (a file, or a crate, npm or Python package), [`prelude`] the time injection, [`args`] the
//! placeholders, [`reply`] the reply mapping, [`ScriptSubject`] one trace on Redis, and
//! [`ScriptSubjects`] the factory the registry uses: `redis-script:<file.toml>`, and the project's
//! `subjects/<name>.toml` files that have a `[script]` table (found by the same discovery as exec
//! subject files, `bucketproof_trace::subject_file::discover`).
//!
//! Promise: a description that does not parse, a script that cannot be found or loaded, and a
//! Redis that cannot be reached are harness errors naming the file (or `REDIS_URL`); a config or op
//! the script cannot be given is a skipped run, never a verdict.

pub mod args;
pub mod prelude;
pub mod reply;
pub mod source;
pub mod spec;
mod subject;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

pub use self::spec::{SCRIPT_PREFIX, ScriptSpec, TimeMode};
pub use self::subject::{DEADLINE, PIPELINE, ScriptSubject, redis_url};
use bucketproof_trace::subject::{Subject, SubjectError, SubjectFactory};
use bucketproof_trace::subject_file::{FileKind, SpecError, discover, kind_of_file, named_file};
use bucketproof_trace::trace::Setup;

/// A description with its script text, ready to load into Redis.
#[derive(Debug)]
pub struct Loaded {
    /// The description.
    pub spec: ScriptSpec,
    /// The text loaded (the prelude, if any, and the script).
    pub text: String,
}

impl Loaded {
    /// Reads `spec`'s script from its source (`project`: the project root).
    pub fn new(spec: ScriptSpec, project: &Path) -> Result<Loaded, source::SourceError> {
        let body = source::script_body(&spec, project)?;
        let text = prelude::script_text(&body, spec.prelude);
        Ok(Loaded { spec, text })
    }
}

/// Builds `redis-script:<file.toml>` subjects and script subject files named by path (`./x.toml`;
/// both taken from a directory), and the project's script subject files (by file stem).
pub struct ScriptSubjects {
    cwd: PathBuf,
    project: PathBuf,
    files: BTreeMap<String, PathBuf>,
    loaded: Mutex<BTreeMap<PathBuf, Arc<Loaded>>>,
}

impl ScriptSubjects {
    /// `redis-script:` subjects only; their paths, and the project root, are `cwd`.
    pub fn new(cwd: impl Into<PathBuf>) -> ScriptSubjects {
        let cwd = cwd.into();
        ScriptSubjects {
            project: cwd.clone(),
            cwd,
            files: BTreeMap::new(),
            loaded: Mutex::default(),
        }
    }

    /// Also the script subject files in `project/subjects/` (parsed now, so a broken one is an
    /// error before anything runs); `project` is also where package sources are looked up.
    pub fn with_subject_files(mut self, project: &Path) -> Result<ScriptSubjects, SpecError> {
        self.project = project.to_path_buf();
        for (name, (path, kind)) in discover(project)? {
            if kind == FileKind::Script {
                ScriptSpec::load(&path)?;
                self.files.insert(name, path);
            }
        }
        Ok(self)
    }

    /// The script subject files' names and paths.
    pub fn files(&self) -> &BTreeMap<String, PathBuf> {
        &self.files
    }

    /// The description file `name` names, if it is this factory's.
    pub fn path(&self, name: &str) -> Option<PathBuf> {
        if let Some(path) = name.strip_prefix(SCRIPT_PREFIX) {
            return Some(self.cwd.join(path));
        }
        // A script subject file named by its path (`./my-script.toml`); every other `.toml`
        // path is the exec factory's, which reports a file it cannot read.
        if let Some(path) = named_file(name).map(|path| self.cwd.join(path))
            && kind_of_file(&path) == Some(FileKind::Script)
        {
            return Some(path);
        }
        self.files.get(name).cloned()
    }

    /// The description and script of `path`, read once per factory.
    pub fn load(&self, path: &Path) -> Result<Arc<Loaded>, String> {
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(known) = loaded.get(path) {
            return Ok(Arc::clone(known));
        }
        let spec = ScriptSpec::load(path).map_err(|e| e.to_string())?;
        let ready = Arc::new(Loaded::new(spec, &self.project).map_err(|e| e.to_string())?);
        loaded.insert(path.to_path_buf(), Arc::clone(&ready));
        Ok(ready)
    }

    /// Builds the subject of an already loaded description under `name` (tests use it to change a
    /// description in code, e.g. to turn the prelude off).
    pub fn build_loaded(
        name: &str,
        loaded: Arc<Loaded>,
        setup: &Setup,
    ) -> Result<ScriptSubject, SubjectError> {
        ScriptSubject::new(name, loaded, setup)
    }
}

impl SubjectFactory for ScriptSubjects {
    fn names(&self) -> Vec<String> {
        self.files.keys().cloned().collect()
    }

    fn knows(&self, name: &str) -> bool {
        self.path(name).is_some()
    }

    fn build(&self, name: &str, setup: &Setup) -> Option<Result<Box<dyn Subject>, SubjectError>> {
        let path = self.path(name)?;
        Some(
            self.load(&path)
                .map_err(SubjectError::Build)
                .and_then(|loaded| ScriptSubject::new(name, loaded, setup))
                .map(|s| Box::new(s) as Box<dyn Subject>),
        )
    }
}
