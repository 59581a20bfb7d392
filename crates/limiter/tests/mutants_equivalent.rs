//! Keeps `crates/limiter/mutants-equivalent.md` (the cargo-mutants mutants of this crate that no test
//! can tell from the original, each with why) true for the code as it is.
//!
//! What it checks, for every entry:
//! - the name is one cargo-mutants prints (`path:line:col: description`), and no name is listed twice;
//! - the entry gives a reason;
//! - the source line still holds what the mutant changes: for an operator mutant (`replace OP with
//!   OP2 in FN`, `delete OP in FN`) the text at `line:col` starts with `OP`; for every mutant the
//!   nearest `fn` declaration at or above `line` is `FN`'s last path segment. A change that moves,
//!   rewrites or removes the mutated code fails here and forces the entry to be redone (and the
//!   mutant to be run again: it may no longer be equivalent);
//! - `.cargo/mutants.toml` excludes exactly the listed mutants (`exclude_re`, one anchored, escaped
//!   pattern per entry), so a run from a clone skips them and nothing else.
//!
//! The checker reports problems as values ([`Problem`]) and never panics on a malformed file; the
//! last test feeds it stale and broken entries to show each one is caught.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};

/// The equivalents file, relative to this crate's manifest.
const EQUIVALENTS: &str = "mutants-equivalent.md";
/// The cargo-mutants config, relative to the workspace root.
const CONFIG: &str = ".cargo/mutants.toml";

/// One listed mutant: its name exactly as cargo-mutants prints it, and why it is equivalent.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    name: String,
    reason: String,
    /// 1-based line of the entry in the equivalents file (for messages).
    at: usize,
}

/// What a cargo-mutants name says: where, and what is changed.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Mutant<'a> {
    path: &'a str,
    line: usize,
    col: usize,
    /// The operator the mutant replaces or deletes, if it is an operator mutant.
    operator: Option<&'a str>,
    /// The function the mutant is in (operator mutants) or whose body it replaces.
    function: &'a str,
}

/// Everything that makes the equivalents file (or the config) disagree with the code.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Problem {
    /// The name is not `path:line:col: description` with a description this checker knows.
    Malformed {
        at: usize,
        name: String,
    },
    NoReason {
        at: usize,
        name: String,
    },
    Duplicate {
        at: usize,
        name: String,
    },
    /// The source file cannot be read.
    MissingFile {
        name: String,
        path: String,
    },
    /// The line number is past the end of the file.
    NoSuchLine {
        name: String,
    },
    /// The text at `line:col` does not start with the mutated operator.
    OperatorMoved {
        name: String,
        found: String,
    },
    /// The nearest `fn` at or above the line is not the named function.
    FunctionMoved {
        name: String,
        found: Option<String>,
    },
    /// The config has no `exclude_re = [...]` list of plain strings.
    ConfigMalformed {
        reason: String,
    },
    /// A listed mutant the config does not exclude.
    NotExcluded {
        name: String,
    },
    /// A config pattern that is no listed mutant's.
    ExcludedButNotListed {
        pattern: String,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Malformed { at, name } => {
                write!(f, "{EQUIVALENTS}:{at}: not a cargo-mutants name: `{name}`")
            }
            Problem::NoReason { at, name } => {
                write!(f, "{EQUIVALENTS}:{at}: `{name}` gives no reason")
            }
            Problem::Duplicate { at, name } => {
                write!(f, "{EQUIVALENTS}:{at}: `{name}` is listed twice")
            }
            Problem::MissingFile { name, path } => write!(f, "`{name}`: cannot read {path}"),
            Problem::NoSuchLine { name } => write!(f, "`{name}`: the file has no such line"),
            Problem::OperatorMoved { name, found } => write!(
                f,
                "`{name}`: stale, the source at that line:col reads `{found}`"
            ),
            Problem::FunctionMoved { name, found } => write!(
                f,
                "`{name}`: stale, the nearest fn at or above that line is {found:?}"
            ),
            Problem::ConfigMalformed { reason } => write!(f, "{CONFIG}: {reason}"),
            Problem::NotExcluded { name } => {
                write!(f, "{CONFIG} does not exclude `{name}` (exclude_re)")
            }
            Problem::ExcludedButNotListed { pattern } => write!(
                f,
                "{CONFIG} excludes `{pattern}`, which is no entry of {EQUIVALENTS}"
            ),
        }
    }
}

/// The entries of the equivalents file: a line `- `NAME`: reason`, the reason going on over the
/// indented lines after it. Every other line is prose.
fn parse_entries(text: &str) -> (Vec<Entry>, Vec<Problem>) {
    let mut entries: Vec<Entry> = Vec::new();
    let mut problems = Vec::new();
    let mut open = false;
    for (index, line) in text.lines().enumerate() {
        let at = index + 1;
        if let Some(rest) = line.strip_prefix("- `") {
            let Some((name, reason)) = rest.split_once('`') else {
                problems.push(Problem::Malformed {
                    at,
                    name: rest.to_string(),
                });
                open = false;
                continue;
            };
            let reason = reason.trim_start_matches(':').trim();
            entries.push(Entry {
                name: name.to_string(),
                reason: reason.to_string(),
                at,
            });
            open = true;
        } else if open && line.starts_with("  ") && !line.trim().is_empty() {
            if let Some(entry) = entries.last_mut() {
                if !entry.reason.is_empty() {
                    entry.reason.push(' ');
                }
                entry.reason.push_str(line.trim());
            }
        } else {
            open = false;
        }
    }
    let mut seen = BTreeSet::new();
    for entry in &entries {
        if entry.reason.is_empty() {
            problems.push(Problem::NoReason {
                at: entry.at,
                name: entry.name.clone(),
            });
        }
        if !seen.insert(entry.name.as_str()) {
            problems.push(Problem::Duplicate {
                at: entry.at,
                name: entry.name.clone(),
            });
        }
    }
    (entries, problems)
}

/// Reads a cargo-mutants name: `path:line:col: replace OP with OP2 in FN`, `delete OP in FN`, or
/// `replace FN[ -> TYPE] with VALUE` (the whole body replaced).
fn parse_name(name: &str) -> Option<Mutant<'_>> {
    let (path, rest) = name.split_once(':')?;
    let (line, rest) = rest.split_once(':')?;
    let (col, description) = rest.split_once(": ")?;
    let (line, col) = (line.parse().ok()?, col.parse().ok()?);
    let (operator, function) = if let Some(deleted) = description.strip_prefix("delete ") {
        let (operator, function) = deleted.split_once(" in ")?;
        (Some(operator), function)
    } else {
        let replaced = description.strip_prefix("replace ")?;
        let (what, with) = replaced.split_once(" with ")?;
        match with.split_once(" in ") {
            // An operator: `what` has no path or signature in it.
            Some((_, function)) if !what.contains("::") && !what.contains(' ') => {
                (Some(what), function)
            }
            _ => (None, what.split(" -> ").next()?),
        }
    };
    (line >= 1 && col >= 1 && !path.is_empty() && !function.is_empty()).then_some(Mutant {
        path,
        line,
        col,
        operator,
        function,
    })
}

/// The last path segment of a cargo-mutants function name, without generics:
/// `<impl Drop for FlatMap<K, V, S>>::drop` -> `drop`, `Limiter<K, C>::shard_of` -> `shard_of`.
fn last_segment(function: &str) -> &str {
    function.rsplit("::").next().unwrap_or(function)
}

/// The name declared by the nearest `fn NAME` at or above the 0-based `line`.
fn enclosing_fn(lines: &[&str], line: usize) -> Option<String> {
    lines[..=line].iter().rev().find_map(|text| {
        let code = text.split("//").next().unwrap_or("");
        let after = code.split_once("fn ").and_then(|(before, after)| {
            let boundary = before
                .chars()
                .last()
                .is_none_or(|c| !c.is_alphanumeric() && c != '_');
            boundary.then_some(after)
        })?;
        let name: String = after
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        (!name.is_empty()).then_some(name)
    })
}

/// Checks one entry against the source, read by `read` from a path relative to the workspace root.
fn check_entry(entry: &Entry, read: &dyn Fn(&str) -> Option<String>) -> Result<(), Problem> {
    let name = entry.name.clone();
    let mutant = parse_name(&entry.name).ok_or_else(|| Problem::Malformed {
        at: entry.at,
        name: name.clone(),
    })?;
    let source = read(mutant.path).ok_or_else(|| Problem::MissingFile {
        name: name.clone(),
        path: mutant.path.to_string(),
    })?;
    let lines: Vec<&str> = source.lines().collect();
    let index = mutant.line - 1;
    let text = lines
        .get(index)
        .ok_or(Problem::NoSuchLine { name: name.clone() })?;
    if let Some(operator) = mutant.operator {
        let at: String = text.chars().skip(mutant.col - 1).collect();
        if !at.starts_with(operator) {
            return Err(Problem::OperatorMoved {
                name,
                found: at.chars().take(operator.len().max(8)).collect(),
            });
        }
    }
    let found = enclosing_fn(&lines, index);
    if found.as_deref() != Some(last_segment(mutant.function)) {
        return Err(Problem::FunctionMoved { name, found });
    }
    Ok(())
}

/// The `exclude_re` pattern that skips exactly the mutant `name`: anchored, every regex
/// metacharacter escaped.
fn exclusion_for(name: &str) -> String {
    let mut pattern = String::from("^");
    for c in name.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('$');
    pattern
}

/// The strings of the config's `exclude_re = [ ... ]` array (TOML basic strings, one or more per
/// line, with `\\` and `\"` the only escapes used).
fn exclude_patterns(config: &str) -> Result<Vec<String>, Problem> {
    let malformed = |reason: &str| Problem::ConfigMalformed {
        reason: reason.to_string(),
    };
    let start = config
        .lines()
        .position(|line| line.trim_start().starts_with("exclude_re"))
        .ok_or_else(|| malformed("no exclude_re"))?;
    let mut patterns = Vec::new();
    let mut body: String = config
        .lines()
        .skip(start)
        .map(|line| {
            // A `#` outside a string starts a comment; patterns hold no `#`.
            let code = line.split('#').next().unwrap_or("");
            format!("{code}\n")
        })
        .collect();
    body = body
        .split_once('[')
        .ok_or_else(|| malformed("exclude_re is not an array"))?
        .1
        .to_string();
    let mut chars = body.chars();
    loop {
        match chars.next() {
            None => return Err(malformed("exclude_re is not closed")),
            Some(']') => return Ok(patterns),
            Some('"') => {
                let mut pattern = String::new();
                loop {
                    match chars.next() {
                        None => return Err(malformed("an unterminated string")),
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('\\' | '"')) => pattern.push(c),
                            _ => return Err(malformed("an escape other than \\\\ or \\\"")),
                        },
                        Some(c) => pattern.push(c),
                    }
                }
                patterns.push(pattern);
            }
            Some(c) if c.is_whitespace() || c == ',' => {}
            Some(c) => return Err(malformed(&format!("unexpected `{c}` in exclude_re"))),
        }
    }
}

/// Everything wrong with the equivalents file and the config, against the sources `read` returns.
fn problems(
    equivalents: &str,
    config: &str,
    read: &dyn Fn(&str) -> Option<String>,
) -> Vec<Problem> {
    let (entries, mut problems) = parse_entries(equivalents);
    problems.extend(
        entries
            .iter()
            .filter_map(|entry| check_entry(entry, read).err()),
    );
    match exclude_patterns(config) {
        Err(problem) => problems.push(problem),
        Ok(patterns) => {
            let patterns: BTreeSet<String> = patterns.into_iter().collect();
            let wanted: BTreeSet<String> = entries
                .iter()
                .map(|entry| exclusion_for(&entry.name))
                .collect();
            for entry in &entries {
                if !patterns.contains(&exclusion_for(&entry.name)) {
                    problems.push(Problem::NotExcluded {
                        name: entry.name.clone(),
                    });
                }
            }
            for pattern in patterns.difference(&wanted) {
                problems.push(Problem::ExcludedButNotListed {
                    pattern: pattern.clone(),
                });
            }
        }
    }
    problems
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read_in_workspace(path: &str) -> Option<String> {
    std::fs::read_to_string(workspace_root().join(path)).ok()
}

#[test]
fn the_equivalent_mutants_file_matches_the_code_and_the_config() {
    let equivalents =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(EQUIVALENTS))
            .expect("the equivalents file is readable");
    let config = read_in_workspace(CONFIG).expect("the cargo-mutants config is readable");
    let (entries, _) = parse_entries(&equivalents);
    assert!(!entries.is_empty(), "{EQUIVALENTS} lists no mutant");
    let found = problems(&equivalents, &config, &read_in_workspace);
    let report: Vec<String> = found.iter().map(ToString::to_string).collect();
    assert!(found.is_empty(), "\n{}", report.join("\n"));
}

/// Whether a reported problem is the one a broken entry should cause.
type IsExpected = fn(&Problem) -> bool;

/// The checker itself: a moved line, a changed operator, a renamed function, a duplicate, a missing
/// reason and a config out of step are each reported (and a current entry is not).
#[test]
fn stale_or_broken_entries_are_reported() {
    let source = "fn other() {}\n\nfn spin(x: u32) -> u32 {\n    x + 1\n}\n";
    let read = |path: &str| (path == "src/a.rs").then(|| source.to_string());
    let current = "- `src/a.rs:4:7: replace + with - in spin`: adds one\n";
    let config_for = |names: &[&str]| {
        let quoted: Vec<String> = names
            .iter()
            .map(|name| format!("  \"{}\",", exclusion_for(name).replace('\\', "\\\\")))
            .collect();
        format!("exclude_re = [\n{}\n]\n", quoted.join("\n"))
    };
    let config = config_for(&["src/a.rs:4:7: replace + with - in spin"]);
    assert_eq!(problems(current, &config, &read), vec![]);

    let cases: [(&str, IsExpected); 6] = [
        ("- `src/a.rs:1:7: replace + with - in spin`: moved", |p| {
            matches!(p, Problem::OperatorMoved { .. })
        }),
        ("- `src/a.rs:4:7: replace * with - in spin`: changed", |p| {
            matches!(p, Problem::OperatorMoved { .. })
        }),
        ("- `src/a.rs:4:7: replace + with - in spun`: renamed", |p| {
            matches!(p, Problem::FunctionMoved { .. })
        }),
        ("- `src/a.rs:9:1: replace spin -> u32 with 0`: gone", |p| {
            matches!(p, Problem::NoSuchLine { .. })
        }),
        ("- `src/b.rs:4:7: replace + with - in spin`: no file", |p| {
            matches!(p, Problem::MissingFile { .. })
        }),
        ("- `src/a.rs: replace + with - in spin`: no line", |p| {
            matches!(p, Problem::Malformed { .. })
        }),
    ];
    for (entry, expected) in cases {
        let name = parse_entries(entry).0[0].name.clone();
        let found = problems(entry, &config_for(&[&name]), &read);
        assert!(found.iter().any(expected), "{entry}: {found:?}");
    }

    let twice = format!("{current}{current}");
    assert!(
        problems(&twice, &config, &read).contains(&Problem::Duplicate {
            at: 2,
            name: "src/a.rs:4:7: replace + with - in spin".into()
        })
    );
    let silent = "- `src/a.rs:4:7: replace + with - in spin`\n";
    assert!(matches!(
        problems(silent, &config, &read)[..],
        [Problem::NoReason { .. }]
    ));
    let unlisted = config_for(&[
        "src/a.rs:4:7: replace + with - in spin",
        "src/a.rs:4:5: replace spin -> u32 with 0",
    ]);
    assert!(matches!(
        problems(current, &unlisted, &read)[..],
        [Problem::ExcludedButNotListed { .. }]
    ));
    assert!(matches!(
        problems(current, "exclude_re = [\n]\n", &read)[..],
        [Problem::NotExcluded { .. }]
    ));
    assert!(matches!(
        problems(current, "timeout_multiplier = 2.0\n", &read)[..],
        [Problem::ConfigMalformed { .. }]
    ));
}
