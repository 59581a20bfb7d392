//! A Redis script description (`redis-script:<file.toml>`, or a `subjects/<name>.toml` with a
//! `[script]` table) and its parsing: where the Lua text comes from, how time reaches it, the KEYS
//! and ARGV templates, and how its reply maps to a decision (docs/redis-script.md).
//!
//! Promise: a description is refused, with `file:line:column`, on a syntax error, an unknown field,
//! a bad value, an unknown placeholder or a key template without `{key}` (so every key is
//! namespaced; `""`, an absent optional key, is the one exception); nothing is read from Redis or the script's source here.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::args::{self, Configs};
use super::reply::{Allowed, Decimal, RemainingMap, ReplyMap, TimeUnit, WaitMap};
use bucketproof_trace::profile::{Profile, Resolution};
use bucketproof_trace::subject_file::SpecError;
use bucketproof_trace::subject_file::{ProfileField, parse_toml};

/// The prefix of a subject given as a description file.
pub const SCRIPT_PREFIX: &str = "redis-script:";

/// The default offset added to every time the script sees (2023-11-14T22:13:20Z): the harness's
/// clock starts at 0, real scripts subtract an epoch of their own.
pub const DEFAULT_EPOCH_S: u64 = 1_700_000_000;

/// How the script learns the time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeMode {
    /// It calls `redis.call('TIME')`; the prelude answers with the op's now.
    Server,
    /// Only from placeholders; no prelude.
    Argument,
}

/// Where the Lua text comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A file, relative to the description's directory (already joined).
    Path(PathBuf),
    /// A file inside a package.
    Package {
        /// Which package manager, and the package.
        package: Package,
        /// The file, relative to the package directory.
        file: PathBuf,
        /// The text is the first substring between these two delimiters that contains `containing`.
        between: Option<(String, String)>,
        /// See `between`.
        containing: Option<String>,
    },
}

/// A package holding the script.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Package {
    /// A crate that some workspace member depends on (`cargo metadata`).
    Crate(String),
    /// `<npm root>/node_modules/<name>`.
    Npm(String),
    /// A Python package found by `importlib`.
    Pypi(String),
}

impl Package {
    /// `crate "x"`, for messages.
    pub fn describe(&self) -> String {
        match self {
            Package::Crate(name) => format!("crate {name:?}"),
            Package::Npm(name) => format!("npm package {name:?}"),
            Package::Pypi(name) => format!("Python package {name:?}"),
        }
    }
}

/// A parsed description.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScriptSpec {
    /// The description file.
    pub path: PathBuf,
    /// The profile asked (`None`: safety, at the time mode's resolution).
    pub profile: Option<Profile>,
    /// Where the Lua text comes from.
    pub source: Source,
    /// How time reaches the script.
    pub time: TimeMode,
    /// Whether the time prelude is prepended (`time = "server"`); only this crate's tests turn it
    /// off, to show that the injection is what makes such a script work.
    pub prelude: bool,
    /// KEYS templates.
    pub keys: Vec<String>,
    /// ARGV templates.
    pub argv: Vec<String>,
    /// Tokens per script unit.
    pub unit: u64,
    /// Seconds added to every time the script sees.
    pub epoch_s: u64,
    /// The largest config or cost integer the script handles exactly (e.g. 2^53 for Lua doubles):
    /// an integer placeholder that is not a time above it makes the run or op unsupported.
    pub max_integer: Option<u128>,
    /// The largest time integer the script handles exactly, in the unit it is given (`{now_ms}` in
    /// ms, the injected `TIME` in microseconds): a time above it makes the op unsupported. Apart
    /// from `max_integer`, so a cap on config values does not skip the clock's end.
    pub max_time: Option<u128>,
    /// The configs the script's caller allows (`[script.configs]`).
    pub configs: Configs,
    /// The reply mapping.
    pub reply: ReplyMap,
}

impl ScriptSpec {
    /// The profile checked: the one asked, else `safety` at the time mode's resolution (`us` for
    /// server time, whose now is given at microsecond resolution).
    pub fn profile(&self) -> Profile {
        self.profile.clone().unwrap_or_else(|| Profile {
            time_resolution: match self.time {
                TimeMode::Server => Resolution::Us,
                TimeMode::Argument => Resolution::Ns,
            },
            ..Profile::safety()
        })
    }

    /// Reads and parses a description.
    pub fn load(path: &Path) -> Result<ScriptSpec, SpecError> {
        let text = std::fs::read_to_string(path).map_err(|source| SpecError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        ScriptSpec::parse(&text, path)
    }

    /// Parses description text (`path` names it in errors; relative sources are taken from its
    /// directory).
    pub fn parse(text: &str, path: &Path) -> Result<ScriptSpec, SpecError> {
        let file: DescriptionFile = parse_toml(text, path).map_err(|e| match e {
            SpecError::At {
                path,
                line,
                column,
                message,
            } if message.contains("untagged enum SourceField") => SpecError::At {
                path,
                line,
                column,
                message: "source must be a path (a string) or a table { crate | npm | pypi = \
                          NAME, file = PATH, between = [OPEN, CLOSE], containing = TEXT } with \
                          no other field"
                    .into(),
            },
            other => other,
        })?;
        let at = |needle: &str, message: String| {
            let offset = text.find(needle).unwrap_or(0);
            let (line, column) = bucketproof_trace::location::line_column(text, offset);
            SpecError::At {
                path: path.to_path_buf(),
                line,
                column,
                message,
            }
        };
        let profile = ProfileField::resolve(file.profile, path)?;
        let script = file.script;
        let dir = path.parent().unwrap_or(Path::new(""));
        let source = match script.source {
            SourceField::Path(file) => Source::Path(dir.join(file)),
            SourceField::Package(package) => {
                let named = [
                    package.krate.map(Package::Crate),
                    package.npm.map(Package::Npm),
                    package.pypi.map(Package::Pypi),
                ];
                let mut named = named.into_iter().flatten();
                let (Some(which), None) = (named.next(), named.next()) else {
                    return Err(at(
                        "source",
                        "source names exactly one of crate, npm, pypi".into(),
                    ));
                };
                let between = match package.between {
                    None => None,
                    Some(pair) => match <[String; 2]>::try_from(pair) {
                        Ok([open, close]) if !open.is_empty() && !close.is_empty() => {
                            Some((open, close))
                        }
                        _ => {
                            return Err(at(
                                "between",
                                "between is two non-empty delimiters [OPEN, CLOSE]".into(),
                            ));
                        }
                    },
                };
                Source::Package {
                    package: which,
                    file: package.file,
                    between,
                    containing: package.containing,
                }
            }
        };
        for template in &script.keys {
            args::check_template(template).map_err(|e| at(template, e))?;
            // "" names no key (how a script is told an optional key is absent); any other key
            // must be namespaced.
            if !template.is_empty() && !template.contains("{key}") {
                return Err(at(
                    template,
                    format!("key template {template:?} has no {{key}}: every key is namespaced"),
                ));
            }
        }
        for template in &script.argv {
            args::check_template(template).map_err(|e| at(template, e))?;
        }
        if script.unit == 0 {
            return Err(at("unit", "unit is at least 1 token".into()));
        }
        let reply = script.reply.resolve().map_err(|e| at("allowed", e))?;
        let spec = ScriptSpec {
            path: path.to_path_buf(),
            profile,
            source,
            time: script.time,
            prelude: script.time == TimeMode::Server,
            keys: script.keys,
            argv: script.argv,
            unit: script.unit,
            epoch_s: script.epoch_s.unwrap_or(DEFAULT_EPOCH_S),
            max_integer: script.max_integer.map(u128::from),
            max_time: script.max_time.map(u128::from),
            configs: script.configs.map_or(Configs::default(), |c| Configs {
                integer_rate: c.integer_rate,
                capacity_at_least_rate: c.capacity_at_least_rate,
            }),
            reply,
        };
        let profile = spec.profile();
        if spec.time == TimeMode::Server
            && (!profile.is_safety() || profile.time_resolution == Resolution::Ns)
        {
            return Err(at(
                "time",
                "time = \"server\" gives the script its now at microsecond resolution: check it \
                 under the safety profile with time_resolution \"us\" or coarser"
                    .into(),
            ));
        }
        Ok(spec)
    }
}

/// The description file as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DescriptionFile {
    profile: Option<ProfileField>,
    script: ScriptTable,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptTable {
    source: SourceField,
    time: TimeMode,
    keys: Vec<String>,
    argv: Vec<String>,
    #[serde(default = "one")]
    unit: u64,
    epoch_s: Option<u64>,
    max_integer: Option<u64>,
    max_time: Option<u64>,
    configs: Option<ConfigsField>,
    reply: ReplyTable,
}

/// `[script.configs]`: what the script's caller can be configured with.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigsField {
    #[serde(default)]
    integer_rate: bool,
    #[serde(default)]
    capacity_at_least_rate: bool,
}

fn one() -> u64 {
    1
}

#[derive(Deserialize)]
#[serde(untagged)]
enum SourceField {
    Path(PathBuf),
    Package(PackageField),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PackageField {
    #[serde(rename = "crate")]
    krate: Option<String>,
    npm: Option<String>,
    pypi: Option<String>,
    file: PathBuf,
    between: Option<Vec<String>>,
    containing: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplyTable {
    allowed: AllowedField,
    remaining: Option<RemainingField>,
    retry_after: Option<WaitField>,
    reset_after: Option<WaitField>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AllowedField {
    index: usize,
    equals: Option<i64>,
    not_equals: Option<i64>,
    at_least: Option<i64>,
    truthy: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RemainingField {
    index: usize,
    /// The entry is a balance only in an admission's reply (a denial's holds a marker, as -1).
    #[serde(default)]
    only_when_allowed: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WaitField {
    index: usize,
    unit: TimeUnit,
    none_below: Option<NumberField>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum NumberField {
    Integer(i64),
    Float(f64),
}

impl ReplyTable {
    fn resolve(self) -> Result<ReplyMap, String> {
        let a = self.allowed;
        let allowed = match (a.equals, a.not_equals, a.at_least, a.truthy) {
            (Some(v), None, None, None) => Allowed::Equals(v),
            (None, Some(v), None, None) => Allowed::NotEquals(v),
            (None, None, Some(v), None) => Allowed::AtLeast(v),
            (None, None, None, Some(v)) => Allowed::Truthy(v),
            _ => {
                return Err(
                    "reply.allowed has an index and exactly one of equals, not_equals, \
                            at_least, truthy"
                        .into(),
                );
            }
        };
        let wait = |field: Option<WaitField>| -> Result<Option<WaitMap>, String> {
            field
                .map(|w| {
                    let none_below = match w.none_below {
                        None => None,
                        Some(NumberField::Integer(i)) => Some(Decimal::from_i64(i)),
                        Some(NumberField::Float(f)) => Some(
                            Decimal::parse(&f.to_string())
                                .ok_or_else(|| format!("none_below {f} is not a number"))?,
                        ),
                    };
                    Ok(WaitMap {
                        index: w.index,
                        unit: w.unit,
                        none_below,
                    })
                })
                .transpose()
        };
        Ok(ReplyMap {
            allowed_index: a.index,
            allowed,
            remaining: self.remaining.map(|r| RemainingMap {
                index: r.index,
                only_when_allowed: r.only_when_allowed,
            }),
            retry_after: wait(self.retry_after)?,
            reset_after: wait(self.reset_after)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r##"profile = { name = "safety", time_resolution = "us" }
[script]
source = { crate = "redis-rate", file = "src/scripts.rs", between = ["r#\"", "\"#"], containing = "TIME" }
time = "server"
keys = ["{key}"]
argv = ["{emission_interval_s}", "{capacity_times_interval_s}", "{cost_times_interval_s}", "{cost}"]
[script.reply]
allowed = { index = 0, truthy = false }
remaining = { index = 1 }
retry_after = { index = 2, unit = "s", none_below = 0 }
reset_after = { index = 3, unit = "s" }
"##;

    #[test]
    fn a_description_reads_every_field() {
        let spec = ScriptSpec::parse(GOOD, Path::new("d/peer.toml")).unwrap();
        assert_eq!(spec.time, TimeMode::Server);
        assert!(spec.prelude);
        assert_eq!(spec.epoch_s, DEFAULT_EPOCH_S);
        assert_eq!(spec.unit, 1);
        assert!(matches!(
            &spec.source,
            Source::Package { package: Package::Crate(name), between: Some(_), .. } if name == "redis-rate"
        ));
        assert_eq!(spec.reply.allowed, Allowed::Truthy(false));
        assert_eq!(spec.configs, Configs::default());
        let capped = GOOD.replace(
            "[script.reply]",
            "max_integer = 7\nmax_time = 9\n[script.configs]\ncapacity_at_least_rate = true\n[script.reply]",
        );
        let spec = ScriptSpec::parse(&capped, Path::new("d/peer.toml")).unwrap();
        assert_eq!((spec.max_integer, spec.max_time), (Some(7), Some(9)));
        assert!(spec.configs.capacity_at_least_rate && !spec.configs.integer_rate);
        let local = GOOD.replace(
            r###"{ crate = "redis-rate", file = "src/scripts.rs", between = ["r#\"", "\"#"], containing = "TIME" }"###,
            "\"gcra.lua\"",
        );
        let spec = ScriptSpec::parse(&local, Path::new("d/peer.toml")).unwrap();
        assert_eq!(spec.source, Source::Path(PathBuf::from("d/gcra.lua")));
    }

    #[test]
    fn bad_descriptions_name_their_place() {
        let cases = [
            (
                GOOD.replace("time = \"server\"", "tim = \"server\""),
                "unknown field",
            ),
            (
                GOOD.replace("source = {", "sourc = {"),
                "unknown field `sourc`",
            ),
            (
                GOOD.lines()
                    .filter(|l| !l.starts_with("source"))
                    .collect::<Vec<_>>()
                    .join("\n"),
                "missing field `source`",
            ),
            (
                GOOD.replace("file = \"src", "fil = \"src"),
                "source must be",
            ),
            (
                GOOD.replace("\"{cost}\"", "\"{costs}\""),
                "unknown placeholder",
            ),
            (GOOD.replace("[\"{key}\"]", "[\"global\"]"), "has no {key}"),
            (
                GOOD.replace("truthy = false", "equals = 0, truthy = false"),
                "exactly one",
            ),
            (GOOD.replace("index = 1", "index = -1"), "invalid value"),
            (
                GOOD.replace("\"{cost}\"]", "\"{cost:round}\"]"),
                "unknown rounding",
            ),
            (
                GOOD.replace(
                    "[script.reply]",
                    "[script.configs]\nburst = true\n[script.reply]",
                ),
                "unknown field `burst`",
            ),
            (
                GOOD.replace("time_resolution = \"us\"", "time_resolution = \"ns\""),
                "microsecond",
            ),
        ];
        for (text, needle) in cases {
            let error = ScriptSpec::parse(&text, Path::new("d/peer.toml")).unwrap_err();
            let shown = error.to_string();
            assert!(shown.starts_with("d/peer.toml:"), "{shown}");
            assert!(shown.contains(needle), "{needle:?} in {shown}");
        }
    }
}
