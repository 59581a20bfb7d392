//! Where a script's Lua text comes from: a file beside the description, or a file inside a crate,
//! an npm package or a Python package, optionally cut out of it between two literal delimiters.
//!
//! Promise: a missing package, a missing file or no match is an error naming the description and
//! what was looked for; nothing is copied into the project.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::spec::{Package, ScriptSpec, Source};

/// Why the text could not be had.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}: {what}", description.display())]
pub struct SourceError {
    /// The description file.
    pub description: PathBuf,
    /// What was looked for, and why it was not found.
    pub what: String,
}

/// The Lua text of `spec`'s script (before any prelude); `project` is the project root (where
/// `cargo metadata` runs, and the default `peers/` directories are).
pub fn script_body(spec: &ScriptSpec, project: &Path) -> Result<String, SourceError> {
    let error = |what: String| SourceError {
        description: spec.path.clone(),
        what,
    };
    match &spec.source {
        Source::Path(path) => std::fs::read_to_string(path)
            .map_err(|e| error(format!("cannot read the script {}: {e}", path.display()))),
        Source::Package {
            package,
            file,
            between,
            containing,
        } => {
            let dir = package_dir(package, project).map_err(error)?;
            let path = dir.join(file);
            let text = std::fs::read_to_string(&path).map_err(|e| {
                error(format!(
                    "{}: cannot read {} in it ({}): {e}",
                    package.describe(),
                    file.display(),
                    path.display()
                ))
            })?;
            cut(&text, between.as_ref(), containing.as_deref()).ok_or_else(|| {
                error(format!(
                    "{} {}: no text between {:?} that contains {:?}",
                    package.describe(),
                    file.display(),
                    between,
                    containing.as_deref().unwrap_or("")
                ))
            })
        }
    }
}

/// The first substring between `open` and `close` (scanning pairs in order) that contains
/// `containing`; the whole text when no delimiters are given.
pub fn cut(
    text: &str,
    between: Option<&(String, String)>,
    containing: Option<&str>,
) -> Option<String> {
    let Some((open, close)) = between else {
        return containing
            .is_none_or(|needle| text.contains(needle))
            .then(|| text.to_owned());
    };
    let mut rest = text;
    while let Some(start) = rest.find(open.as_str()) {
        let inside = &rest[start + open.len()..];
        let end = inside.find(close.as_str())?;
        let candidate = &inside[..end];
        if containing.is_none_or(|needle| candidate.contains(needle)) {
            return Some(candidate.to_owned());
        }
        rest = &inside[end + close.len()..];
    }
    None
}

fn package_dir(package: &Package, project: &Path) -> Result<PathBuf, String> {
    match package {
        Package::Crate(name) => crate_dir(name, project),
        Package::Npm(name) => {
            let root = std::env::var_os("BUCKETPROOF_PEERS_NPM")
                .map_or_else(|| project.join("peers/npm"), PathBuf::from);
            let dir = root.join("node_modules").join(name);
            if dir.is_dir() {
                Ok(dir)
            } else {
                Err(format!(
                    "npm package {name:?} is not installed: no {} (npm root: BUCKETPROOF_PEERS_NPM \
                     or peers/npm)",
                    dir.display()
                ))
            }
        }
        Package::Pypi(name) => {
            let extra = std::env::var_os("BUCKETPROOF_PEERS_PYTHON")
                .map_or_else(|| project.join("target/peers/python"), PathBuf::from);
            let mut path = std::ffi::OsString::from(&extra);
            if let Some(old) = std::env::var_os("PYTHONPATH") {
                path.push(":");
                path.push(old);
            }
            let output = Command::new("python3")
                .arg("-c")
                .arg(
                    "import importlib.util,sys; \
                     print(importlib.util.find_spec(sys.argv[1]).submodule_search_locations[0])",
                )
                .arg(name)
                .env("PYTHONPATH", path)
                .output()
                .map_err(|e| format!("Python package {name:?}: cannot run python3: {e}"))?;
            let dir = String::from_utf8_lossy(&output.stdout).trim().to_owned();
            if !output.status.success() || dir.is_empty() {
                return Err(format!(
                    "Python package {name:?} is not importable (PYTHONPATH starts with {}): {}",
                    extra.display(),
                    String::from_utf8_lossy(&output.stderr).trim()
                ));
            }
            Ok(PathBuf::from(dir))
        }
    }
}

/// The directory of the package `name` in `cargo metadata` run in `project`.
fn crate_dir(name: &str, project: &Path) -> Result<PathBuf, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let dir = if project.as_os_str().is_empty() {
        Path::new(".")
    } else {
        project
    };
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1"])
        .current_dir(dir)
        .output()
        .map_err(|e| format!("crate {name:?}: cannot run cargo metadata: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "crate {name:?}: cargo metadata in {} failed: {}",
            dir.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout)
        .map_err(|e| format!("crate {name:?}: cargo metadata is not JSON: {e}"))?;
    let manifest = metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|package| package["name"] == name)
        .and_then(|package| package["manifest_path"].as_str())
        .ok_or_else(|| {
            format!(
                "crate {name:?} is not in cargo metadata of {} (it must be a dependency of a \
                 workspace member)",
                dir.display()
            )
        })?;
    Ok(Path::new(manifest)
        .parent()
        .map_or_else(PathBuf::new, Path::to_path_buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_takes_the_first_pair_containing_the_needle() {
        let text = "a `one` b `two TIME` c `three TIME`";
        let pair = ("`".to_owned(), "`".to_owned());
        assert_eq!(cut(text, Some(&pair), Some("TIME")).unwrap(), "two TIME");
        assert_eq!(cut(text, Some(&pair), None).unwrap(), "one");
        assert_eq!(cut(text, Some(&pair), Some("nowhere")), None);
        assert_eq!(cut(text, None, Some("nowhere")), None);
        assert_eq!(cut(text, None, None).unwrap(), text);
    }
}
