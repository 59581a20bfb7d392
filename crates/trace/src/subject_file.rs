//! What starts an exec subject: a [`Command`] (program, arguments, environment, directory, per-op
//! timeout) and the profile to check it under, from an `exec:` name or a subject file.
//!
//! Promise: an `exec:` command line is split into words as a POSIX shell would and run without one;
//! a subject file is refused, with `file:line:column`, on a syntax error, a bad value or an unknown
//! field. The same [`ExecSpec`] is written into counterexample files, so `replay` starts the same
//! command.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::duration::DurationNs;
use crate::location::line_column;
use crate::profile::{Profile, ProfileName};

/// The longest protocol line accepted when a subject file sets none: replies and the handshake
/// are well under a kilobyte, so this leaves ample room and still bounds a runaway child.
pub const DEFAULT_MAX_LINE_BYTES: usize = 64 * 1024;

/// The prefix of a subject given as a command line.
pub const EXEC_PREFIX: &str = "exec:";

/// The per-request timeout when none is given.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// How to start the child.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Command {
    /// The program (found on `PATH`, or a path).
    pub program: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Added to the harness's environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Its working directory.
    pub cwd: PathBuf,
    /// Per request.
    #[serde(with = "timeout_ms", rename = "timeout_ms")]
    pub timeout: Duration,
    /// The longest line the child may write on its stdout; a longer one breaks it (its stderr
    /// lines are clipped to the same length).
    #[serde(default = "default_max_line_bytes")]
    pub max_line_bytes: usize,
    /// The most memory (resident, summed over the child's process group) the child may use; past
    /// it the group is killed and the subject is broken. Watched on Linux only.
    #[serde(default = "default_max_memory_bytes")]
    pub max_memory_bytes: u64,
}

/// The memory cap of a child when a subject file sets none: far above what any reference adapter
/// or peer here uses, far below what would take the machine down.
pub const DEFAULT_MAX_MEMORY_BYTES: u64 = 2 << 30;

fn default_max_line_bytes() -> usize {
    DEFAULT_MAX_LINE_BYTES
}

fn default_max_memory_bytes() -> u64 {
    DEFAULT_MAX_MEMORY_BYTES
}

mod timeout_ms {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(timeout: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

impl Command {
    /// The command line as one would type it (for messages).
    pub fn display(&self) -> String {
        let words = std::iter::once(&self.program).chain(&self.args);
        shell_words::join(words)
    }
}

/// An exec subject: the command, and the profile asked of it (`None`: the one it declares).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecSpec {
    /// How to start it.
    pub command: Command,
    /// The profile to check; `None`: the subject's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<Profile>,
    /// At most this many requests outstanding, below what the subject declares (`None`: what it
    /// declares; `Some(1)`: one round trip per request, as for measuring what batching saves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<u64>,
    /// What must be in place before the command can run, and what puts it there.
    #[serde(default, skip_serializing_if = "Readiness::is_empty")]
    pub readiness: Readiness,
}

/// What a subject needs built or installed before it can start (a subject file's `needs` and
/// `prepare`), checked without starting it: by `list`, and once before a gate's first run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Readiness {
    /// Paths (from the command's directory) that must exist: an interpreter's packages, a build.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub needs: Vec<PathBuf>,
    /// The command a user runs to make the subject ready (printed, never run by the harness).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepare: Option<String>,
}

impl Readiness {
    fn is_empty(&self) -> bool {
        self.needs.is_empty() && self.prepare.is_none()
    }

    /// How to make the subject ready, as the end of a message ("" when the file says nothing).
    pub fn advice(&self) -> String {
        self.prepare
            .as_ref()
            .map_or_else(String::new, |prepare| format!("; run `{prepare}` first"))
    }
}

impl ExecSpec {
    /// Why the subject cannot start yet, without starting it: its program given as a path that
    /// does not exist, or a path it needs missing; with the file's advice. `None`: nothing missing
    /// (it may still fail to start, which the first start reports).
    pub fn unready(&self) -> Option<String> {
        let command = &self.command;
        let program = Path::new(&command.program);
        let missing = std::iter::once(program)
            .filter(|path| path.components().count() > 1)
            .chain(self.readiness.needs.iter().map(PathBuf::as_path))
            .find(|path| !command.cwd.join(path).exists())?;
        Some(format!(
            "{} is missing (in directory {}){}",
            missing.display(),
            display_dir(&command.cwd),
            self.readiness.advice()
        ))
    }
}

/// `path` taken from `dir`, without a `./.` where either is the current directory (paths show
/// in messages and counterexample files).
pub fn within(dir: &Path, path: &Path) -> PathBuf {
    if dir == Path::new(".") || dir.as_os_str().is_empty() {
        path.to_path_buf()
    } else if path == Path::new(".") {
        dir.to_path_buf()
    } else {
        dir.join(path)
    }
}

/// A directory for messages: the empty path (the current directory) as `.`.
pub fn display_dir(dir: &Path) -> String {
    if dir.as_os_str().is_empty() {
        ".".into()
    } else {
        dir.display().to_string()
    }
}

/// A subject that cannot be started as written.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// `exec:` with nothing to run, or quotes that do not close.
    #[error("subject {name:?}: {what}")]
    CommandLine {
        /// The subject as given.
        name: String,
        /// What is wrong.
        what: String,
    },
    /// A subject file that cannot be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A subject file that does not parse.
    #[error("{}:{line}:{column}: {message}", path.display())]
    At {
        /// The file.
        path: PathBuf,
        /// 1-based.
        line: usize,
        /// 1-based.
        column: usize,
        /// What is wrong.
        message: String,
    },
}

impl ExecSpec {
    /// An `exec:<command line>` subject, run in `cwd`.
    pub fn from_exec_name(name: &str, cwd: &Path) -> Result<ExecSpec, SpecError> {
        let line = name.strip_prefix(EXEC_PREFIX).unwrap_or(name);
        let invalid = |what: String| SpecError::CommandLine {
            name: name.to_owned(),
            what,
        };
        let mut words = shell_words::split(line)
            .map_err(|e| invalid(format!("cannot split the command line: {e}")))?
            .into_iter();
        let program = words
            .next()
            .ok_or_else(|| invalid("no command after \"exec:\"".into()))?;
        Ok(ExecSpec {
            command: Command {
                program,
                args: words.collect(),
                env: BTreeMap::new(),
                cwd: cwd.to_path_buf(),
                timeout: DEFAULT_TIMEOUT,
                max_line_bytes: DEFAULT_MAX_LINE_BYTES,
                max_memory_bytes: DEFAULT_MAX_MEMORY_BYTES,
            },
            profile: None,
            batch: None,
            readiness: Readiness::default(),
        })
    }

    /// A subject file; relative directories are taken from `project` (the directory holding
    /// `subjects/`).
    pub fn load(path: &Path, project: &Path) -> Result<ExecSpec, SpecError> {
        let text = std::fs::read_to_string(path).map_err(|source| SpecError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        ExecSpec::parse(&text, path, project)
    }

    /// Parses subject-file text (`path` names it in errors).
    pub fn parse(text: &str, path: &Path, project: &Path) -> Result<ExecSpec, SpecError> {
        let file: SubjectFile = parse_toml(text, path)?;
        let profile = ProfileField::resolve(file.profile, path)?;
        let cwd = within(project, &file.cwd.unwrap_or_else(|| PathBuf::from(".")));
        Ok(ExecSpec {
            command: Command {
                program: file.command,
                args: file.args,
                env: file.env,
                cwd,
                timeout: Duration::from_nanos(file.timeout.map_or(
                    u64::try_from(DEFAULT_TIMEOUT.as_nanos()).unwrap_or(u64::MAX),
                    |t| t.0,
                )),
                max_line_bytes: file.max_line_bytes.unwrap_or(DEFAULT_MAX_LINE_BYTES),
                max_memory_bytes: file
                    .max_memory_mib
                    .map_or(DEFAULT_MAX_MEMORY_BYTES, |mib| mib.saturating_mul(1 << 20)),
            },
            profile,
            batch: file.batch,
            readiness: Readiness {
                needs: file.needs,
                prepare: file.prepare,
            },
        })
    }
}

/// `subjects/<name>.toml` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SubjectFile {
    command: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<PathBuf>,
    timeout: Option<DurationNs>,
    max_line_bytes: Option<usize>,
    max_memory_mib: Option<u64>,
    profile: Option<ProfileField>,
    batch: Option<u64>,
    #[serde(default)]
    needs: Vec<PathBuf>,
    prepare: Option<String>,
}

/// `profile = "safety"` or `profile = { name = "safety", ... }`: the same field in exec subject
/// files and in Redis script descriptions.
#[derive(Deserialize)]
#[serde(untagged)]
pub enum ProfileField {
    /// A profile's name alone, with the defaults of its other fields.
    Name(ProfileName),
    /// A whole profile.
    Full(Profile),
}

impl ProfileField {
    /// The profile written, checked (its tolerance parses); `path` names the file in errors.
    pub fn resolve(field: Option<ProfileField>, path: &Path) -> Result<Option<Profile>, SpecError> {
        let profile = match field {
            None => None,
            Some(ProfileField::Name(name)) => Some(Profile {
                name,
                ..Profile::default()
            }),
            Some(ProfileField::Full(profile)) => Some(profile),
        };
        if let Some(Err(e)) = profile.as_ref().map(Profile::tolerance) {
            return Err(SpecError::At {
                path: path.to_path_buf(),
                line: 1,
                column: 1,
                message: e.to_string(),
            });
        }
        Ok(profile)
    }
}

/// Deserializes TOML `text` as `T`; an error names `path:line:column`.
pub fn parse_toml<T: serde::de::DeserializeOwned>(text: &str, path: &Path) -> Result<T, SpecError> {
    toml::from_str(text).map_err(|error| {
        let offset = error.span().map_or(0, |span| span.start);
        let (line, column) = line_column(text, offset);
        SpecError::At {
            path: path.to_path_buf(),
            line,
            column,
            message: error.message().to_owned(),
        }
    })
}

/// What a subject file describes: a child process (`command = ...`) or a Redis Lua script (a
/// `[script]` table, the Redis script subjects). A file with a top-level `script` key is a script
/// description; every other file is an exec subject file (and refused as one if it is not).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// `command = ...`: [`ExecSpec`].
    Exec,
    /// `[script]`: a Redis script description.
    Script,
}

/// The kind of the subject file `text` (a syntax error names `path:line:column`).
pub fn file_kind(text: &str, path: &Path) -> Result<FileKind, SpecError> {
    let table: toml::Table = parse_toml(text, path)?;
    Ok(if table.contains_key("script") {
        FileKind::Script
    } else {
        FileKind::Exec
    })
}

/// A subject named by its file's path (`./my-limiter.toml`, an absolute path): a name ending in
/// `.toml` without a kind's prefix (`exec:`, `redis-script:`). Relative paths in such a file (its
/// `cwd`, a script's `file`) are taken from the current directory, as an `exec:` line's are.
pub fn named_file(name: &str) -> Option<&Path> {
    let prefixed = name
        .split_once(':')
        .is_some_and(|(kind, _)| kind.bytes().all(|b| b.is_ascii_lowercase() || b == b'-'));
    (name.ends_with(".toml") && !prefixed).then(|| Path::new(name))
}

/// The kind of the subject file at `path`, or `None` if it cannot be read or parsed (whoever
/// builds it then reports why).
pub fn kind_of_file(path: &Path) -> Option<FileKind> {
    let text = std::fs::read_to_string(path).ok()?;
    file_kind(&text, path).ok()
}

/// The one discovery of `project/subjects/*.toml` (none if the directory does not exist): each
/// file's name (its stem), path and kind, in name order. Each factory parses the files of its kind.
pub fn discover(project: &Path) -> Result<BTreeMap<String, (PathBuf, FileKind)>, SpecError> {
    let mut files = BTreeMap::new();
    let dir = project.join("subjects");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(files);
    };
    for entry in entries {
        let path = entry
            .map_err(|source| SpecError::Io {
                path: dir.clone(),
                source,
            })?
            .path();
        if path.extension().is_some_and(|e| e == "toml")
            && let Some(stem) = path.file_stem()
        {
            let text = std::fs::read_to_string(&path).map_err(|source| SpecError::Io {
                path: path.clone(),
                source,
            })?;
            let kind = file_kind(&text, &path)?;
            files.insert(stem.to_string_lossy().into_owned(), (path, kind));
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_names_split_like_a_shell_without_one() {
        let spec = ExecSpec::from_exec_name(
            "exec:python3 'my limiter.py' --bug strict-greater $HOME",
            Path::new("."),
        )
        .unwrap();
        assert_eq!(spec.command.program, "python3");
        assert_eq!(
            spec.command.args,
            ["my limiter.py", "--bug", "strict-greater", "$HOME"]
        );
        for bad in ["exec:", "exec:   ", "exec:python3 'open"] {
            let error = ExecSpec::from_exec_name(bad, Path::new(".")).unwrap_err();
            assert!(error.to_string().contains(bad), "{error}");
        }
    }

    #[test]
    fn a_toml_path_is_a_subject_file_unless_a_kind_prefix_names_it() {
        for path in [
            "./mine.toml",
            "mine.toml",
            "/abs/dir/mine.toml",
            "../x/y.toml",
        ] {
            assert_eq!(named_file(path), Some(Path::new(path)), "{path}");
        }
        for name in [
            "redis-script:peers/x.toml",
            "exec:./x.toml",
            "core",
            "./x.json",
        ] {
            assert_eq!(named_file(name), None, "{name}");
        }
    }

    #[test]
    fn subject_files_read_every_field_and_refuse_typos_with_their_place() {
        let text = "command = \"node\"\nargs = [\"a.js\"]\nenv = { A = \"1\" }\ncwd = \"adapters\"\n\
                    timeout = \"2s\"\nprofile = { name = \"safety\", time_resolution = \"ms\" }\n";
        let spec = ExecSpec::parse(text, Path::new("s.toml"), Path::new("proj")).unwrap();
        assert_eq!(spec.command.cwd, Path::new("proj").join("adapters"));
        assert_eq!(spec.command.timeout, Duration::from_secs(2));
        assert_eq!(spec.command.env["A"], "1");
        assert!(spec.profile.unwrap().is_safety());
        let short = ExecSpec::parse(
            "command = \"x\"\nprofile = \"exact\"\n",
            Path::new("s.toml"),
            Path::new("."),
        )
        .unwrap();
        assert_eq!(short.profile, Some(Profile::exact()));
        let error = ExecSpec::parse(
            "command = \"x\"\ntimout = \"1s\"\n",
            Path::new("s.toml"),
            Path::new("."),
        )
        .unwrap_err();
        assert!(error.to_string().starts_with("s.toml:2:1:"), "{error}");
    }
}
