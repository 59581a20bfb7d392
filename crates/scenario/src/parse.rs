//! Text to a [`Scenario`]: reading files, parsing TOML, and saying where an error is.
//!
//! Owns the translation of every failure into a [`ScenarioError::At`]: toml's own errors (with their
//! span), rules broken across tables (located by the key path the rule names), and the file's default
//! name. Promises: an error always carries a 1-based line and column inside the text and a non-empty
//! message saying what is wrong, even where toml itself gives none (the end of the file, a control
//! character); no input panics.

use std::path::{Path, PathBuf};

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess};
use toml::Spanned;

use super::validate::{self, Segment};
use super::{Scenario, ScenarioError};
use bucketproof_trace::location::line_column;

impl Scenario {
    /// Parses scenario text; `path` names it in errors and gives the default name.
    pub fn parse(text: &str, path: &Path) -> Result<Scenario, ScenarioError> {
        let at = |offset: usize, message: String| {
            let (line, column) = line_column(text, offset);
            ScenarioError::At {
                path: path.to_path_buf(),
                line,
                column,
                message,
            }
        };
        let mut scenario: Scenario = toml::from_str(text).map_err(|error| {
            let offset = error.span().map_or(0, |span| span.start);
            at(offset, toml_message(&error, text, offset))
        })?;
        if scenario.name.is_empty() {
            scenario.name = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
        }
        validate::check(&scenario)
            .map_err(|broken| at(locate(text, &broken.place), broken.message))?;
        Ok(scenario)
    }

    /// Reads and parses a file.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Scenario::parse(&text, path)
    }
}

/// Loads every `*.toml` under `path` (a file or a directory, not recursive), sorted by file name, and
/// refuses duplicate scenario names.
pub fn load_all(path: &Path) -> Result<Vec<Scenario>, ScenarioError> {
    let files = if path.is_dir() {
        let entries = std::fs::read_dir(path).map_err(|source| ScenarioError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let mut files: Vec<PathBuf> = entries
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|ext| ext == "toml"))
            .collect();
        files.sort();
        files
    } else {
        vec![path.to_path_buf()]
    };
    let mut scenarios: Vec<Scenario> = Vec::new();
    for file in files {
        let scenario = Scenario::load(&file)?;
        if scenarios.iter().any(|s| s.name == scenario.name) {
            return Err(ScenarioError::DuplicateName {
                path: file,
                name: scenario.name,
            });
        }
        scenarios.push(scenario);
    }
    Ok(scenarios)
}

/// toml's message, or, where it has none (its parser reports some failures with an empty message), a
/// description of what sits at `offset`.
fn toml_message(error: &toml::de::Error, text: &str, offset: usize) -> String {
    let message = error.message().trim();
    if !message.is_empty() {
        return message.to_owned();
    }
    let rest = text.get(offset..).unwrap_or_default();
    match rest.chars().next() {
        None => {
            let line = text.rsplit('\n').next().unwrap_or_default().trim_end();
            if line.ends_with('=') {
                "the file ends after `=`: expected a value".to_owned()
            } else {
                "the file ends in the middle of an item: expected the rest of it".to_owned()
            }
        }
        Some(c) if c.is_control() && c != '\t' && c != '\n' => format!(
            "control character U+{:04X} is not allowed here (TOML allows only tab, and newlines \
             between lines)",
            u32::from(c)
        ),
        Some(c) => format!("invalid TOML: unexpected {c:?}"),
    }
}

/// Byte offset of the deepest part of `place` that the text spells out (0 if none: a default).
fn locate(text: &str, place: &[Segment]) -> usize {
    let Ok(root) = toml::from_str::<Tree>(text) else {
        return 0;
    };
    let mut offset = 0;
    let mut node = &root;
    for segment in place {
        let child = match segment {
            Segment::Key(key) => node.keys.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            Segment::Index(index) => node.items.get(*index),
        };
        let Some(child) = child else {
            break;
        };
        offset = child.span().start;
        node = child.get_ref();
    }
    offset
}

/// Any TOML document with the span of every value: what [`locate`] walks.
#[derive(Default)]
struct Tree {
    keys: Vec<(String, Spanned<Tree>)>,
    items: Vec<Spanned<Tree>>,
}

impl<'de> Deserialize<'de> for Tree {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> de::Visitor<'de> for Visitor {
            type Value = Tree;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any TOML value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Tree, A::Error> {
                let mut tree = Tree::default();
                while let Some(key) = map.next_key::<String>()? {
                    let value = map.next_value()?;
                    tree.keys.push((key, value));
                }
                Ok(tree)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Tree, A::Error> {
                let mut tree = Tree::default();
                while let Some(item) = seq.next_element()? {
                    tree.items.push(item);
                }
                Ok(tree)
            }
            fn visit_bool<E>(self, _: bool) -> Result<Tree, E> {
                Ok(Tree::default())
            }
            fn visit_i64<E>(self, _: i64) -> Result<Tree, E> {
                Ok(Tree::default())
            }
            fn visit_u64<E>(self, _: u64) -> Result<Tree, E> {
                Ok(Tree::default())
            }
            fn visit_f64<E>(self, _: f64) -> Result<Tree, E> {
                Ok(Tree::default())
            }
            fn visit_str<E>(self, _: &str) -> Result<Tree, E> {
                Ok(Tree::default())
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bucketproof_trace::trace::ConfigSpec;

    const MINIMAL: &str = r#"
length = 10
reach = ["allowed"]
[setup]
capacity = 3
rate = "1/s"
"#;

    fn parse(text: &str) -> Result<Scenario, ScenarioError> {
        Scenario::parse(text, Path::new("scenarios/example.toml"))
    }

    #[test]
    fn a_minimal_scenario_gets_defaults_and_its_file_name() {
        let scenario = parse(MINIMAL).unwrap();
        assert_eq!(scenario.name, "example");
        assert_eq!(scenario.seeds, vec![1]);
        assert_eq!(scenario.subjects, vec!["core".to_string()]);
        assert_eq!(scenario.setup().config, ConfigSpec::new(3, "1/s"));
    }

    #[test]
    fn a_typo_is_reported_with_file_line_and_column() {
        let text = MINIMAL.replace("length = 10", "lenght = 10");
        let error = parse(&text).unwrap_err().to_string();
        assert!(
            error.starts_with("scenarios/example.toml:2:1: unknown field `lenght`"),
            "{error}"
        );
    }

    #[test]
    fn bad_values_are_reported_where_they_are() {
        let cases = [
            (
                MINIMAL.replace("\"allowed\"", "\"alowed\""),
                "3:",
                "unknown event",
            ),
            (
                MINIMAL.replace("\"1/s\"", "\"1/fortnight\""),
                "4:",
                "unknown unit",
            ),
            (
                format!("{MINIMAL}[clock]\njitter = \"5 parsecs\"\n"),
                "8:",
                "unknown duration unit",
            ),
            (
                format!("{MINIMAL}[clock]\nfrozen = 1.5\n"),
                "8:",
                "probability",
            ),
            (
                format!("{MINIMAL}[[costs]]\ncost = \"lots\"\n"),
                "8:",
                "\"capacity\"",
            ),
            (
                MINIMAL.replace("capacity = 3", "capacity = 0"),
                "4:",
                "capacity",
            ),
            (format!("{MINIMAL}[keys\n"), "7:", ""),
        ];
        for (text, place, words) in cases {
            let error = parse(&text).unwrap_err().to_string();
            assert!(
                error.starts_with(&format!("scenarios/example.toml:{place}")),
                "{error}"
            );
            assert!(error.contains(words), "{error}");
        }
    }

    #[test]
    fn cross_field_mistakes_are_named() {
        let text = MINIMAL.replace("reach = [\"allowed\"]", "reach = []");
        assert!(parse(&text).unwrap_err().to_string().contains("reach"));
        let text = format!("{MINIMAL}[[tiers]]\nkeys = [5, 2]\ncapacity = 1\nrate = \"1/s\"\n");
        assert!(parse(&text).unwrap_err().to_string().contains("tiers[0]"));
    }

    #[test]
    fn a_bad_request_id_space_names_its_field() {
        let cases = [
            ("space = \"global\"\n", "8:", "unknown variant `global`"),
            (
                "space = \"shared\"\n",
                "8:",
                "request_ids.space = \"shared\" needs ids",
            ),
            (
                "space = \"shared\"\nids = 0\n",
                "9:",
                "request_ids.ids must be at least 1",
            ),
            ("ids = 7\n", "8:", "request_ids.ids sizes a shared space"),
            ("space = \"shared\"\nids = -1\n", "9:7:", "expected u64"),
        ];
        for (table, place, words) in cases {
            let error = parse(&format!("{MINIMAL}[request_ids]\n{table}"))
                .unwrap_err()
                .to_string();
            assert!(
                error.starts_with(&format!("scenarios/example.toml:{place}")),
                "{error}"
            );
            assert!(error.contains(words), "{error}");
        }
        let shared = parse(&format!(
            "{MINIMAL}[request_ids]\nspace = \"shared\"\nids = 3\n"
        ));
        assert_eq!(shared.unwrap().request_ids.ids, Some(3));
    }
}
