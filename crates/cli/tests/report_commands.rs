//! The commands the documents give still run: every shell block of the reports, the docs and the
//! READMEs is read, and each
//! command in it that names something of this workspace is held to it. A cargo target (`-p P --bench
//! B`, `--example E`, `--test T`) must exist in that package; a `bucketproof` command must parse (its
//! arguments are handed to the shipped binary with `--help`, which clap answers only after
//! every argument before it parsed); a repository path it names must exist. The benches themselves
//! run in CI's smoke step, so a bench named here both exists and runs.
//!
//! Every benchmark report (`reports/bench-*.md`) also names the commit its figures were measured at,
//! and that commit is in the history.
//!
//! Placeholders (`<...>`, `$...`) are not checked; commands of other tools (valgrind, redis-server)
//! are checked only for the workspace targets and paths they name.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The workspace's targets by package: kind ("bench", "example", "test", "bin") and name.
fn targets() -> BTreeMap<String, BTreeSet<(String, String)>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root())
        .output()
        .expect("cargo metadata runs");
    assert!(output.status.success(), "cargo metadata failed");
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let mut targets = BTreeMap::new();
    for package in metadata["packages"].as_array().unwrap() {
        let entry: &mut BTreeSet<_> = targets
            .entry(package["name"].as_str().unwrap().to_string())
            .or_default();
        for target in package["targets"].as_array().unwrap() {
            for kind in target["kind"].as_array().unwrap() {
                let name = target["name"].as_str().unwrap().to_string();
                entry.insert((kind.as_str().unwrap().to_string(), name));
            }
        }
    }
    // The Rust reference adapter is a workspace of its own, built by `(cd adapters/rust && ...)`.
    targets
}

/// The commands of `markdown`'s shell blocks, one per line after joining continuations, without
/// comments and without the environment assignments and `cd` in front.
fn commands(markdown: &str) -> Vec<String> {
    let mut commands = Vec::new();
    let mut in_block = false;
    let mut pending = String::new();
    for line in markdown.lines() {
        let trimmed = line.trim_start();
        if let Some(fence) = trimmed.strip_prefix("```") {
            in_block = !in_block && matches!(fence.trim(), "sh" | "bash" | "console" | "shell");
            continue;
        }
        if !in_block {
            continue;
        }
        let line = line.split(" # ").next().unwrap_or("").trim_end();
        if let Some(head) = line.strip_suffix('\\') {
            pending.push_str(head);
            pending.push(' ');
            continue;
        }
        pending.push_str(line);
        let command = std::mem::take(&mut pending);
        let command = command.trim();
        if !command.is_empty() && !command.starts_with('#') {
            commands.push(command.to_string());
        }
    }
    commands
}

/// The words of `command` from its program on: environment assignments, a subshell's `(cd dir &&`
/// and a trailing `)` or `&` dropped. Quotes are dropped (no report quotes a space).
fn words(command: &str) -> Vec<String> {
    // A placeholder may hold spaces (`<its pid>`): one word.
    let mut command = command.to_string();
    while let Some(open) = command.find("<")
        && let Some(close) = command[open..].find('>')
        && command[open..open + close].contains(' ')
    {
        command.replace_range(open..=open + close, "<placeholder>");
    }
    let mut words: Vec<String> = (command.split_whitespace())
        .map(|word| word.trim_matches(|c| c == '"' || c == '\'').to_string())
        .collect();
    while words
        .first()
        .is_some_and(|w| w.starts_with('(') || w == "cd")
    {
        // `(cd dir && cmd ...)`: from `cmd` on.
        let Some(and) = words.iter().position(|w| w == "&&") else {
            break;
        };
        words.drain(..=and);
    }
    while words
        .first()
        .is_some_and(|w| w.contains('=') && !w.starts_with('-'))
    {
        words.remove(0);
    }
    while words
        .last()
        .is_some_and(|w| matches!(w.as_str(), ")" | "&"))
    {
        words.pop();
    }
    if let Some(last) = words.last_mut() {
        *last = last.trim_end_matches(')').to_string();
    }
    words
}

fn is_placeholder(word: &str) -> bool {
    word.contains('<') || word.contains('$') || word.contains('*')
}

/// What is wrong with `command` (from `report`), if anything.
fn problems(
    command: &str,
    targets: &BTreeMap<String, BTreeSet<(String, String)>>,
    in_adapter: bool,
) -> Vec<String> {
    let words = words(command);
    let mut problems = Vec::new();
    let Some(program) = words.first() else {
        return problems;
    };
    // A directory the command changes into.
    let raw: Vec<&str> = command.split_whitespace().collect();
    for pair in raw.windows(2) {
        if pair[0].trim_start_matches('(') == "cd"
            && !is_placeholder(pair[1])
            && !root().join(pair[1]).is_dir()
        {
            problems.push(format!("no directory {}", pair[1]));
        }
    }
    // Repository paths the command names: a program of the repository, or an argument that
    // points into one of its directories.
    for word in &words {
        let path = word.split_once(':').map_or(word.as_str(), |(_, path)| path);
        let rooted = [
            "scenarios/",
            "peers/",
            "crates/",
            "adapters/",
            "tests/",
            "subjects/",
        ]
        .iter()
        .any(|dir| path.starts_with(dir));
        if rooted && !is_placeholder(path) && !in_adapter && !root().join(path).exists() {
            problems.push(format!("{path} does not exist"));
        }
        if let Some(example) = path.strip_prefix("target/release/examples/")
            && !is_placeholder(example)
            && !(targets.values()).any(|t| t.contains(&("example".into(), example.into())))
        {
            problems.push(format!("no example {example} in the workspace"));
        }
    }
    if program == "cargo" && !in_adapter {
        let value = |flag: &str| {
            let at = words.iter().position(|w| w == flag)?;
            words.get(at + 1).cloned()
        };
        if let Some(package) = value("-p").or_else(|| value("--package")) {
            match targets.get(&package) {
                None => problems.push(format!("no package {package} in the workspace")),
                Some(of_package) => {
                    for (flag, kind) in [
                        ("--bench", "bench"),
                        ("--example", "example"),
                        ("--test", "test"),
                        ("--bin", "bin"),
                    ] {
                        if let Some(name) = value(flag)
                            && !of_package.contains(&(kind.into(), name.clone()))
                        {
                            problems.push(format!("{package} has no {kind} {name}"));
                        }
                    }
                }
            }
        }
    }
    let shipped = program == "bucketproof" || program.ends_with("/bucketproof");
    if shipped && !words.iter().any(|w| is_placeholder(w)) {
        let output = Command::new(env!("CARGO_BIN_EXE_bucketproof"))
            .args(&words[1..])
            .arg("--help")
            .current_dir(root())
            .output()
            .expect("the binary runs");
        if !output.status.success() {
            problems.push(format!(
                "does not parse: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
    }
    problems
}

/// The documents whose shell blocks are held: the reports, the docs, the README and every crate's.
fn documents() -> Vec<PathBuf> {
    let markdown_in = |dir: PathBuf| -> Vec<PathBuf> {
        (std::fs::read_dir(dir).into_iter().flatten())
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|e| e == "md"))
            .collect()
    };
    let mut documents = markdown_in(root().join("reports"));
    documents.extend(markdown_in(root().join("docs")));
    documents.push(root().join("README.md"));
    for entry in std::fs::read_dir(root().join("crates")).unwrap() {
        let readme = entry.unwrap().path().join("README.md");
        if readme.exists() {
            documents.push(readme);
        }
    }
    documents
}

/// Every report's commands name what exists and parse.
#[test]
fn every_command_of_every_report_names_what_exists_and_parses() {
    let targets = targets();
    let mut checked = 0;
    let mut failures = Vec::new();
    let mut reports = documents();
    reports.sort();
    for report in &reports {
        let text = std::fs::read_to_string(report).unwrap();
        for command in commands(&text) {
            let in_adapter = command.contains("cd adapters/");
            checked += 1;
            for problem in problems(&command, &targets, in_adapter) {
                failures.push(format!(
                    "{}: `{command}`: {problem}",
                    report.strip_prefix(root()).unwrap_or(report).display()
                ));
            }
        }
    }
    assert!(checked >= 40, "only {checked} commands found");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The check has teeth: a bench, an example, a test, a package, a path and a flag that do not exist
/// are each caught; the real ones pass.
#[test]
fn a_rotten_command_is_caught() {
    let targets = targets();
    let rotten = [
        "cargo bench -p bucketproof-harness --bench no_such_bench",
        "cargo run --release -p bucketproof-limiter --example no_such_example",
        "REDIS_URL=redis://x cargo test -p bucketproof-redis --test no_such_test",
        "cargo bench -p bucketproof-no-such-crate",
        "valgrind --tool=callgrind target/release/examples/no_such_example 1",
        "target/release/bucketproof check scenarios/no-such-scenario.toml",
        "target/release/bucketproof check --no-such-flag",
        "(cd crates/no-such-dir && cargo build)",
    ];
    for command in rotten {
        assert!(
            !problems(command, &targets, false).is_empty(),
            "not caught: {command}"
        );
    }
    let fresh = [
        "cargo bench -p bucketproof-harness --bench throughput",
        "DATABASE_URL=postgres://x cargo run --release -p bucketproof-postgres --example flood -- --attackers 1",
        "target/release/bucketproof check scenarios/rollback.toml --scale 10",
    ];
    for command in fresh {
        assert_eq!(
            problems(command, &targets, false),
            Vec::<String>::new(),
            "{command}"
        );
    }
}

/// Every benchmark report names the commit its figures came from ("commit `<hash>`"), and the
/// commit is in the history.
#[test]
fn every_bench_report_names_a_commit_of_the_history() {
    let mut failures = Vec::new();
    for entry in std::fs::read_dir(root().join("reports")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !(name.starts_with("bench-") && name.ends_with(".md")) {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        // "commit `abc1234`" or "commit abc1234": 7 to 40 hex digits.
        let hashes: Vec<&str> = (text.match_indices("commit "))
            .filter_map(|(at, found)| {
                let rest = text[at + found.len()..].trim_start_matches('`');
                let hex = rest.len()
                    - rest
                        .trim_start_matches(|c: char| c.is_ascii_hexdigit())
                        .len();
                (7..=40).contains(&hex).then(|| &rest[..hex])
            })
            .filter(|hash| hash.chars().any(|c| c.is_ascii_digit()))
            .collect();
        if hashes.is_empty() {
            failures.push(format!("{name}: names no commit (\"commit `<hash>`\")"));
        }
        for hash in hashes {
            let known = Command::new("git")
                .args(["cat-file", "-e", &format!("{hash}^{{commit}}")])
                .current_dir(root())
                .status()
                .is_ok_and(|status| status.success());
            if !known {
                failures.push(format!("{name}: commit {hash} is not in the history"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
