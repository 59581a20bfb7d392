//! Malformed scenario files: every error names the file, the line and the column, and says what is
//! wrong; no input panics.
//!
//! The inputs are generated from the committed scenarios: every prefix (a truncation at every byte),
//! control characters in comments, strings and keys, and bad values in place of every value.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use bucketproof_scenario::Scenario;

fn committed() -> Vec<(PathBuf, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("the scenarios directory")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
        .collect();
    files.sort();
    assert!(files.len() >= 10, "only {} scenario files", files.len());
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("a readable scenario");
            (path, text)
        })
        .collect()
}

/// Parses `text`; on an error, checks it reads `path:line:col: message` with a message that says
/// something, and that the place is inside the text. Returns the error text, if any.
fn check_one(path: &Path, text: &str, what: &str) -> Option<String> {
    let parsed = catch_unwind(AssertUnwindSafe(|| Scenario::parse(text, path)))
        .unwrap_or_else(|_| panic!("{what}: parsing panicked on {text:?}"));
    let error = parsed.err()?.to_string();
    let prefix = format!("{}:", path.display());
    let rest = error
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{what}: {error:?} does not start with {prefix:?}"));
    let mut parts = rest.splitn(3, ':');
    let line: usize = parts
        .next()
        .and_then(|l| l.parse().ok())
        .unwrap_or_else(|| panic!("{what}: no line number in {error:?}"));
    let column: usize = parts
        .next()
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("{what}: no column number in {error:?}"));
    let message = parts.next().unwrap_or_default();
    assert!(
        message.starts_with(' ') && message.trim().chars().any(char::is_alphabetic),
        "{what}: empty message in {error:?} (input {text:?})"
    );
    let lines = text.split('\n').count();
    assert!(
        (1..=lines).contains(&line) && column >= 1,
        "{what}: {error:?} points outside the text ({lines} lines)"
    );
    Some(error)
}

#[test]
fn every_truncation_of_every_scenario_is_valid_or_a_located_error() {
    let mut errors = 0;
    for (path, text) in committed() {
        for end in (0..text.len()).filter(|&end| text.is_char_boundary(end)) {
            let what = format!("{} cut at byte {end}", path.display());
            errors += usize::from(check_one(&path, &text[..end], &what).is_some());
        }
    }
    assert!(errors > 1_000, "only {errors} truncations were refused");
}

#[test]
fn control_characters_anywhere_are_located_errors() {
    let controls: Vec<char> = (0u8..0x20)
        .filter(|&b| b != b'\t' && b != b'\n')
        .chain([0x7f])
        .map(char::from)
        .collect();
    for (path, text) in committed() {
        let comment = format!("# a comment\n{text}");
        for &c in &controls {
            let places = [
                // In a comment, in the first key, after the first `=`, and at the end of the file.
                comment.replacen("comment", &format!("com{c}ment"), 1),
                format!("{c}{text}"),
                text.replacen("= ", &format!("= {c}"), 1),
                text.replacen("= \"", &format!("= \"{c}"), 1),
                format!("{text}{c}"),
                format!("{text}# {c}"),
            ];
            for (index, input) in places.iter().enumerate() {
                let what = format!("{}: {:?} at place {index}", path.display(), c);
                // A carriage return before a newline is a valid line ending, and some places may
                // not exist in a file: anything that parses is fine, any error must be located.
                check_one(&path, input, &what);
            }
        }
    }
}

#[test]
fn bad_values_in_place_of_every_value_are_located_errors() {
    let bad = [
        "",
        "-1",
        "0",
        "1.5",
        "1e400",
        "18446744073709551616",
        "\"\"",
        "\"x\"",
        "\"-3s\"",
        "true",
        "[",
        "[]",
        "{",
        "{}",
        "\"1/0s\"",
        "\"99999999999999999999y\"",
        "[1, \"a\"]",
    ];
    let mut refused = 0;
    for (path, text) in committed() {
        let lines: Vec<&str> = text.split('\n').collect();
        for (number, line) in lines.iter().enumerate() {
            let Some((key, _)) = line.split_once(" = ") else {
                continue;
            };
            for value in bad {
                let mut edited = lines.clone();
                let replaced = format!("{key} = {value}");
                edited[number] = &replaced;
                let input = edited.join("\n");
                let what = format!("{}:{}: {key} = {value}", path.display(), number + 1);
                refused += usize::from(check_one(&path, &input, &what).is_some());
            }
        }
    }
    assert!(refused > 500, "only {refused} bad values were refused");
}

#[test]
fn a_rate_without_a_value_at_the_end_of_the_file_says_what_is_missing() {
    let text = "length = 10\nreach = [\"allowed\"]\n[setup]\ncapacity = 3\nrate =";
    let error = check_one(Path::new("scenarios/cut.toml"), text, "rate =").expect("an error");
    assert!(error.starts_with("scenarios/cut.toml:5:"), "{error}");
    assert!(error.contains("value"), "{error}");
}

#[test]
fn a_control_character_in_a_comment_is_named() {
    let text =
        "# tab\u{1}\nlength = 10\nreach = [\"allowed\"]\n[setup]\ncapacity = 3\nrate = \"1/s\"\n";
    let error = check_one(Path::new("scenarios/ctl.toml"), text, "control").expect("an error");
    assert!(error.starts_with("scenarios/ctl.toml:1:6:"), "{error}");
    assert!(error.contains("U+0001"), "{error}");
}
