//! Holds docs/subject-protocol.md to docs/subject-protocol.schema.json, and the schema to the doc.
//! Promises: the schema is a valid draft 2020-12 schema whose every object forbids unknown fields;
//! every complete message the doc shows validates (a request against `#/$defs/request`, a reply
//! against `#/$defs/reply`, a `request -> reply` pair with the same id and a reply of the request's
//! kind), and every request op and reply kind the doc shows a complete example of stays shown;
//! hand-written malformed messages are rejected; a transcript the harness recorded of a real session
//! (named by `PROTOCOL_SCHEMA_TRANSCRIPT`) validates line by line, each reply answering its request.
//! Examples are found in the doc by shape, not listed here, so a new example is checked without
//! touching this file, and a broken one fails the test (as the planted-error tests show).

use std::collections::BTreeSet;

use jsonschema::Validator;
use serde_json::{Map, Value, json};

const SCHEMA: &str = include_str!("../../../docs/subject-protocol.schema.json");
const DOC: &str = include_str!("../../../docs/subject-protocol.md");

/// The schema, compiled once per entry point and once per branch of `request` and `reply`, so a
/// failure can name the branch the message was meant for and say what is wrong with it.
struct Schema {
    root: Validator,
    request: Validator,
    reply: Validator,
    /// `(def name, validator, is a request)` for every branch of `request` and `reply`.
    branches: Vec<(String, Validator, bool)>,
}

impl Schema {
    fn load() -> Schema {
        let root: Value = serde_json::from_str(SCHEMA).expect("the schema file is JSON");
        let names = |entry: &str| -> Vec<String> {
            root["$defs"][entry]["oneOf"]
                .as_array()
                .unwrap_or_else(|| panic!("$defs/{entry} is a oneOf"))
                .iter()
                .map(|b| {
                    b["$ref"]
                        .as_str()
                        .and_then(|r| r.strip_prefix("#/$defs/"))
                        .unwrap_or_else(|| panic!("a branch of $defs/{entry} is a local $ref"))
                        .to_owned()
                })
                .collect()
        };
        let mut branches = Vec::new();
        for name in names("request") {
            branches.push((name.clone(), entry(&root, &name), true));
        }
        for name in names("reply") {
            branches.push((name.clone(), entry(&root, &name), false));
        }
        Schema {
            root: jsonschema::draft202012::new(&root).expect("the schema compiles"),
            request: entry(&root, "request"),
            reply: entry(&root, "reply"),
            branches,
        }
    }

    fn entry(&self, role: Role) -> &Validator {
        match role {
            Role::Request => &self.request,
            Role::Reply => &self.reply,
            Role::Either => &self.root,
        }
    }

    /// The one branch `message` matches, or what is wrong with it as the branch it was most
    /// likely meant for: a request's `op` names its branch; otherwise the branch with the fewest
    /// errors.
    fn classify(&self, message: &Value, role: Role) -> Result<&str, String> {
        let candidates: Vec<&(String, Validator, bool)> = self
            .branches
            .iter()
            .filter(|(_, _, is_request)| match role {
                Role::Request => *is_request,
                Role::Reply => !*is_request,
                Role::Either => true,
            })
            .collect();
        if self.entry(role).is_valid(message) {
            let matched: Vec<&str> = candidates
                .iter()
                .filter(|(_, v, _)| v.is_valid(message))
                .map(|(n, _, _)| n.as_str())
                .collect();
            // The root is a oneOf of oneOfs: a valid message is exactly one kind.
            assert_eq!(matched.len(), 1, "{message} matches {matched:?}");
            return Ok(matched[0]);
        }
        let errors = |v: &Validator| -> Vec<String> {
            v.iter_errors(message)
                .map(|e| format!("at '{}': {e}", e.instance_path()))
                .collect()
        };
        let by_op = message
            .get("op")
            .and_then(Value::as_str)
            .map(|op| format!("{op}_request"));
        let meant = candidates
            .iter()
            .find(|(n, _, _)| Some(n) == by_op.as_ref())
            .or_else(|| candidates.iter().min_by_key(|(_, v, _)| errors(v).len()))
            .expect("at least one branch");
        Err(format!(
            "not a valid {} (as {}: {})",
            role.name(),
            meant.0,
            errors(&meant.1).join("; ")
        ))
    }
}

/// A validator for `#/$defs/{def}` of the whole document, so its `$ref`s resolve as in the root.
fn entry(root: &Value, def: &str) -> Validator {
    let mut s = root.clone();
    let o = s.as_object_mut().expect("the schema is an object");
    o.remove("oneOf");
    o.insert("$ref".into(), json!(format!("#/$defs/{def}")));
    jsonschema::draft202012::new(&s).unwrap_or_else(|e| panic!("$defs/{def} compiles: {e}"))
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Role {
    Request,
    Reply,
    /// Not marked by a `->`: the root (request or reply) decides.
    Either,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Request => "request",
            Role::Reply => "reply",
            Role::Either => "message",
        }
    }
}

struct Example {
    line: usize,
    value: Value,
    role: Role,
}

/// What the doc shows: its complete messages, the `request -> reply` pairs among them (indices),
/// and what could not be read where a message had to be.
#[derive(Default)]
struct Extracted {
    examples: Vec<Example>,
    pairs: Vec<(usize, usize)>,
    problems: Vec<String>,
}

/// Finds the messages of a protocol doc by shape:
/// - a ```json block is nothing but messages, each on one or more lines, optionally as
///   `request -> reply`: anything in it that does not read as JSON objects is a problem;
/// - a line of prose of the form `` `request` -> `reply` `` is a pair, and both must read;
/// - elsewhere (other blocks, other code spans) a `{...}` that reads as a JSON object with an
///   `"id"` is a complete message; a sketch (`{"id":1,"op":"setup",...}`), a template
///   (`{"id":N,...}`) or a fragment (`"profile":{...}`) does not read, and is not one.
fn extract(md: &str) -> Extracted {
    let mut out = Extracted::default();
    let mut fence: Option<(String, usize, String)> = None; // (info string, first line, text)
    for (n, line) in md.lines().enumerate() {
        let n = n + 1;
        if let Some(info) = line.trim_start().strip_prefix("```") {
            match fence.take() {
                None => fence = Some((info.trim().to_owned(), n + 1, String::new())),
                Some((info, first, text)) if info == "json" => json_block(&text, first, &mut out),
                Some((_, first, text)) => {
                    for (i, l) in text.lines().enumerate() {
                        loose_objects(l, first + i, &mut out);
                    }
                }
            }
            continue;
        }
        match &mut fence {
            Some((_, _, text)) => {
                text.push_str(line);
                text.push('\n');
            }
            None => prose_line(line, n, &mut out),
        }
    }
    if let Some((_, first, _)) = fence {
        out.problems
            .push(format!("line {first}: a code block is never closed"));
    }
    out
}

/// A ```json block: JSON objects separated by whitespace, a `->` between a request and its reply.
fn json_block(text: &str, first: usize, out: &mut Extracted) {
    let line_at = |offset: usize| first + text[..offset].matches('\n').count();
    let mut at = 0;
    let mut arrow_from: Option<usize> = None; // the request an `->` pairs with the next object
    let mut last: Option<usize> = None; // the block's latest object, if not already a reply
    loop {
        at += text[at..].len() - text[at..].trim_start().len();
        if at == text.len() {
            break;
        }
        if text[at..].starts_with("->") {
            match last.take() {
                Some(request) if arrow_from.is_none() => arrow_from = Some(request),
                _ => out
                    .problems
                    .push(format!("line {}: `->` after no request", line_at(at))),
            }
            at += 2;
            continue;
        }
        let mut stream = serde_json::Deserializer::from_str(&text[at..]).into_iter::<Value>();
        match stream.next() {
            Some(Ok(value @ Value::Object(_))) => {
                let role = if let Some(req) = arrow_from.take() {
                    out.examples[req].role = Role::Request;
                    out.pairs.push((req, out.examples.len()));
                    last = None;
                    Role::Reply
                } else {
                    last = Some(out.examples.len());
                    Role::Either
                };
                out.examples.push(Example {
                    line: line_at(at),
                    value,
                    role,
                });
                at += stream.byte_offset();
            }
            Some(Ok(other)) => {
                out.problems.push(format!(
                    "line {}: a JSON block holds {other}, not a message",
                    line_at(at)
                ));
                return;
            }
            Some(Err(e)) => {
                out.problems.push(format!(
                    "line {}: not JSON in a JSON block: {e}",
                    line_at(at)
                ));
                return;
            }
            None => break,
        }
    }
    if arrow_from.is_some() {
        out.problems
            .push(format!("line {first}: a JSON block ends with `->`"));
    }
}

/// A line outside code blocks: its code spans, and a `` `a` -> `b` `` pair among them.
fn prose_line(line: &str, n: usize, out: &mut Extracted) {
    let parts: Vec<&str> = line.split('`').collect();
    let spans: Vec<(usize, &str)> = parts
        .iter()
        .copied()
        .enumerate()
        .skip(1)
        .step_by(2)
        .collect();
    let mut paired = BTreeSet::new();
    for w in spans.windows(2) {
        let ((i, request), (j, reply)) = (w[0], w[1]);
        if j != i + 2 || parts[i + 1].trim() != "->" {
            continue;
        }
        paired.extend([i, j]);
        let read = |s: &str| serde_json::from_str::<Map<String, Value>>(s).map(Value::Object);
        match (read(request), read(reply)) {
            (Ok(q), Ok(r)) => {
                out.examples.push(Example {
                    line: n,
                    value: q,
                    role: Role::Request,
                });
                out.examples.push(Example {
                    line: n,
                    value: r,
                    role: Role::Reply,
                });
                out.pairs
                    .push((out.examples.len() - 2, out.examples.len() - 1));
            }
            (q, r) => {
                let e = q.err().or(r.err()).expect("one side failed");
                out.problems.push(format!(
                    "line {n}: a `request` -> `reply` pair is not JSON: {e}"
                ));
            }
        }
    }
    for (i, span) in spans {
        if !paired.contains(&i) {
            loose_objects(span, n, out);
        }
    }
}

/// Every `{...}` in `text` that reads as a JSON object with an `"id"`: a complete message.
fn loose_objects(text: &str, n: usize, out: &mut Extracted) {
    let mut at = 0;
    while let Some(open) = text[at..].find('{') {
        let start = at + open;
        let mut stream = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
        match stream.next() {
            Some(Ok(value)) if value.get("id").is_some() => {
                out.examples.push(Example {
                    line: n,
                    value,
                    role: Role::Either,
                });
                at = start + stream.byte_offset();
            }
            _ => at = start + 1,
        }
    }
}

/// The reply kind that answers `op` (an error reply answers any).
fn reply_for(op: &str) -> &'static str {
    match op {
        "hello" => "hello_reply",
        // A settle's reply has an acquire's decision fields.
        "acquire" | "settle" => "acquire_reply",
        "inspect" => "inspect_reply",
        "would_allow" => "would_allow_reply",
        _ => "ok_reply",
    }
}

/// Validates what `extract` found: the branches the examples cover, and every problem.
fn audit(md: &str, schema: &Schema) -> (BTreeSet<String>, Vec<String>, usize) {
    let Extracted {
        examples,
        pairs,
        mut problems,
    } = extract(md);
    let mut covered = BTreeSet::new();
    let mut kinds = Vec::new();
    for e in &examples {
        match schema.classify(&e.value, e.role) {
            Ok(kind) => {
                covered.insert(kind.to_owned());
                kinds.push(Some(kind));
            }
            Err(why) => {
                problems.push(format!("line {}: {why}: {}", e.line, e.value));
                kinds.push(None);
            }
        }
    }
    for (q, r) in pairs {
        let (request, reply) = (&examples[q], &examples[r]);
        if request.value.get("id") != reply.value.get("id") {
            problems.push(format!(
                "line {}: the reply's id is not its request's",
                reply.line
            ));
        }
        if let (Some(op), Some(kind)) = (request.value["op"].as_str(), kinds[r])
            && kind != reply_for(op)
            && kind != "error_reply"
        {
            problems.push(format!("line {}: a {kind} answers a {op}", reply.line));
        }
    }
    (covered, problems, examples.len())
}

#[test]
fn the_schema_is_a_valid_draft_2020_12_schema() {
    let schema: Value = serde_json::from_str(SCHEMA).expect("the schema file is JSON");
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    if let Err(e) = jsonschema::draft202012::meta::validate(&schema) {
        panic!(
            "not a valid draft 2020-12 schema: {e} at {}",
            e.instance_path()
        );
    }
    assert!(
        schema["description"]
            .as_str()
            .is_some_and(|d| d.contains("#/$defs/request"))
    );
    Schema::load(); // every $ref resolves, every entry point and branch compiles
}

/// "Unknown fields are an error in both directions": every object schema says so itself.
#[test]
fn every_object_in_the_schema_forbids_unknown_fields() {
    fn walk(at: &str, v: &Value, open: &mut Vec<String>) {
        match v {
            Value::Object(o) => {
                if o.contains_key("properties")
                    && o.get("additionalProperties") != Some(&json!(false))
                {
                    open.push(at.to_owned());
                }
                for (k, child) in o {
                    walk(&format!("{at}/{k}"), child, open);
                }
            }
            Value::Array(a) => {
                for (i, child) in a.iter().enumerate() {
                    walk(&format!("{at}/{i}"), child, open);
                }
            }
            _ => {}
        }
    }
    let mut open = Vec::new();
    walk("#", &serde_json::from_str(SCHEMA).unwrap(), &mut open);
    assert!(
        open.is_empty(),
        "objects without additionalProperties false: {open:?}"
    );
}

#[test]
fn every_example_in_the_protocol_doc_validates() {
    let schema = Schema::load();
    let (covered, problems, count) = audit(DOC, &schema);
    assert!(
        problems.is_empty(),
        "{} problem(s) in docs/subject-protocol.md:\n{}",
        problems.len(),
        problems.join("\n")
    );
    // A lower bound, so an extraction that silently finds nothing fails: the doc shows every
    // request and every reply but the error reply (its only form is the template `{"id":N,...}`).
    let mut missing: Vec<String> = schema
        .branches
        .iter()
        .map(|(n, _, _)| n.clone())
        .filter(|n| n != "error_reply" && !covered.contains(n))
        .collect();
    missing.sort();
    assert!(
        missing.is_empty(),
        "the doc has no complete example of {missing:?}"
    );
    eprintln!("{count} examples in docs/subject-protocol.md validate, covering {covered:?}");
}

/// The extraction itself can fail: a doc with a broken example in each place examples are found.
#[test]
fn a_planted_error_in_a_doc_example_is_caught() {
    let schema = Schema::load();
    let good = "```json\n{\"id\":9,\"op\":\"forget\",\"key\":3}\n```\n";
    assert_eq!(audit(good, &schema).1, Vec::<String>::new());
    let planted = [
        // A typo'd field in a multi-line JSON block.
        "```json\n{\"id\":7,\"allowed\":false,\"remaining\":\"1/2\",\"retry_after_ns\":3,\n \"replyed\":false}\n```\n",
        // Not JSON in a JSON block.
        "```json\n{\"id\":9,\"op\":\"forget\",\"key\":3,}\n```\n",
        // The reply side of a one-liner in a JSON block.
        "```json\n{\"id\":11,\"op\":\"inspect\",\"key\":3} -> {\"id\":11,\"state\":{\"tokens\":\"7/0\",\"last_refill_ns\":1,\"capacity\":10}}\n```\n",
        // A reply with no request before its `->`.
        "```json\n-> {\"id\":1,\"ok\":true}\n```\n",
        // A prose pair whose reply has another id, and one whose reply is of another kind.
        "`{\"id\":90,\"op\":\"reset\"}` -> `{\"id\":91,\"ok\":true}`: drop everything.\n",
        "`{\"id\":90,\"op\":\"sweep\",\"now_ns\":1}` -> `{\"id\":90,\"allowed\":true}`\n",
        // A prose pair that does not read.
        "`{\"id\":90,\"op\":\"reset\"` -> `{\"id\":90,\"ok\":true}`\n",
        // A complete message in a sketch block, with a negative time.
        "```\n{\"id\":10,\"op\":\"sweep\",\"now_ns\":-1}  ->\n```\n",
    ];
    for md in planted {
        let (_, problems, _) = audit(md, &schema);
        assert!(!problems.is_empty(), "not caught:\n{md}");
        eprintln!("caught: {}", problems.join("; "));
    }
}

/// Messages the doc does not show, at the edges of the values: all must be accepted.
#[test]
#[rustfmt::skip]
fn edge_messages_are_accepted() {
    let schema = Schema::load();
    let max = u64::MAX;
    let mut cases = vec![
        (Role::Request, json!({"id":max,"op":"acquire","key":max,"now_ns":max,"cost":max,"request_id":max})),
        (Role::Request, json!({"id":0,"op":"acquire","key":0,"now_ns":0,"cost":0})),
        (Role::Request, json!({"id":7,"op":"acquire","key":3,"now_ns":1,"cost":2,"probe_retry":true,"retry_slack_ns":999_999})),
        (Role::Request, json!({"id":1,"op":"setup","config":[{"capacity":1,"rate_per_s":"0/1","rate":"0/s"}],
            "max_keys":0,"policy":"reject_new_keys","sweep_per_op":0,"dedupe_window_ns":0,"dedupe_per_key":0})),
        (Role::Request, json!({"id":1,"op":"setup","config":[
                {"capacity":4,"rate_per_s":"4/1","rate":"4/s","name":"burst"},
                {"capacity":30,"rate_per_s":"1/10","rate":"6/min","name":"*quota.v2"},
                {"capacity":6,"rate_per_s":"1/1","rate":"1/s"}],
            "max_keys":8,"policy":"evict_full","sweep_per_op":2,"dedupe_window_ns":0,"dedupe_per_key":0})),
        (Role::Reply, json!({"id":2,"allowed":false,"remaining":"1/4","retry_after_ns":750_000_000,
            "reset_after_ns":750_000_000,"bandwidths":[
                {"remaining":"1/4","retry_after_ns":750_000_000,"reset_after_ns":750_000_000},
                {"remaining":29,"retry_after_ns":0,"reset_after_ns":10_000_000_000_u64}]})),
        (Role::Request, json!({"id":0,"op":"hello","protocol":[1,2]})),
        (Role::Request, json!({"id":max,"op":"settle","key":max,"now_ns":max,"request_id":max,"actual":0})),
        (Role::Reply, json!({"id":8,"allowed":true,"remaining":"3/1","retry_after_ns":null,"replayed":true})),
        (Role::Reply, json!({"id":0,"protocol":1,"name":"n","version":"v",
            "capabilities":{"reconfigure":true,"forget":true,"sweep":true,"inspect":true,"would_allow":true,
                            "request_ids":true,"evicts":false,"batch":1,"bandwidths":8,"settle":true},
            "profile":{"name":"exact"}})),
        (Role::Reply, json!({"id":2,"allowed":true,"remaining":0.5,"retry_after_ns":null})),
        (Role::Reply, json!({"id":2,"allowed":false,"remaining":3,"retry_after_ns":"never","reset_after_ns":null,
            "created":null,"replayed":null,"retry":{"at":false,"before":null}})),
        (Role::Reply, json!({"id":2,"allowed":false,"remaining":"10/20","retry_after_ns":0,"retry":{"at":true}})),
        (Role::Reply, json!({"id":2,"allowed":true,"remaining":"0/1","retry_after_ns":null,"before":null,
            "after":{"tokens":1e-3,"last_refill_ns":max,"capacity":max}})),
        // Well-formed though wrong: a negative float balance is a verdict of the safety profile,
        // not a broken subject.
        (Role::Reply, json!({"id":2,"allowed":true,"remaining":-0.25,"retry_after_ns":null})),
        // A subject with no balance to show leaves remaining out, or sends null: an acquire's reply
        // still (told from would_allow's by retry_after_ns), with or without the probes.
        (Role::Reply, json!({"id":2,"allowed":false,"retry_after_ns":300})),
        (Role::Reply, json!({"id":2,"allowed":true,"remaining":null,"retry_after_ns":null,"created":true,
            "before":null,"after":{"tokens":"2/1","last_refill_ns":0,"capacity":3}})),
        (Role::Reply, json!({"id":3,"state":null})),
        (Role::Reply, json!({"id":8,"ok":true,"before":null,"after":{"tokens":"1/1","last_refill_ns":0,"capacity":1}})),
        (Role::Reply, json!({"id":7,"error":{"kind":"invalid_cost","message":"cost 0"},"before":null,"after":null})),
        (Role::Reply, json!({"id":0,"protocol":1,"name":"n","version":"v",
            "capabilities":{"reconfigure":false,"forget":false,"sweep":false,"inspect":false,"would_allow":false,
                            "request_ids":false,"evicts":true,"batch":1,"bandwidths":1},
            "profile":{"name":"safety","starts":"empty","time_resolution":"ms","retry_after_rounding":"nearest",
                       "tolerance":"1/1000"}})),
        (Role::Reply, json!({"id":0,"protocol":1,"name":"n","version":"v",
            "capabilities":{"reconfigure":true,"forget":true,"sweep":true,"inspect":true,"would_allow":true,
                            "request_ids":true,"evicts":false,"batch":256,"bandwidths":1},
            "profile":{"name":"safety","tolerance":null}})),
    ];
    for kind in ["invalid_cost", "key_limit", "unknown_request", "not_admitted", "already_settled",
                 "unsupported", "store"] {
        cases.push((Role::Reply, json!({"id":5,"error":{"kind":kind,"message":""}})));
    }
    for (role, message) in cases {
        if let Err(why) = schema.classify(&message, role) {
            panic!("{message} rejected: {why}");
        }
        assert!(schema.root.is_valid(&message));
    }
}

/// Malformed messages: each is rejected by its entry point and (but for one of the other
/// direction) by the root.
#[test]
#[rustfmt::skip]
fn malformed_messages_are_rejected() {
    let schema = Schema::load();
    let acquire = r#"{"id":7,"allowed":false,"remaining":"1/2","retry_after_ns":300}"#;
    let with = |base: &str, field: &str, value: &str| -> String {
        let mut v: Value = serde_json::from_str(base).unwrap();
        v[field] = serde_json::from_str(value).unwrap();
        v.to_string()
    };
    let hello = r#"{"id":0,"protocol":1,"name":"n","version":"v",
        "capabilities":{"reconfigure":true,"forget":true,"sweep":true,"inspect":true,"would_allow":true,
                        "request_ids":true,"evicts":false,"batch":256,"bandwidths":1},
        "profile":{"name":"exact"}}"#;
    let setup = r#"{"id":1,"op":"setup","config":[{"capacity":10,"rate_per_s":"5/1","rate":"5/s"}],
        "max_keys":100000,"policy":"evict_full","sweep_per_op":4,"dedupe_window_ns":0,"dedupe_per_key":4}"#;
    let profile = |p: &str| hello.replace(r#"{"name":"exact"}"#, p);
    let config = |c: &str| with(setup, "config", c);
    let cases: Vec<(&str, Role, String)> = vec![
        ("unknown field in a request", Role::Request, r#"{"id":7,"op":"acquire","key":3,"now_ns":1,"cost":1,"costs":1}"#.into()),
        ("unknown field in a reply", Role::Reply, r#"{"id":1,"ok":true,"extra":1}"#.into()),
        ("unknown field in a nested object", Role::Reply, with(acquire, "retry", r#"{"at":true,"after":true}"#)),
        ("missing id in a request", Role::Request, r#"{"op":"reset"}"#.into()),
        ("missing id in a reply", Role::Reply, r#"{"ok":true}"#.into()),
        ("missing op", Role::Request, r#"{"id":3,"key":3}"#.into()),
        ("unknown op", Role::Request, r#"{"id":3,"op":"acquires","key":3,"now_ns":1,"cost":1}"#.into()),
        ("id as a string", Role::Request, r#"{"id":"1","op":"reset"}"#.into()),
        ("allowed as a string", Role::Reply, with(acquire, "allowed", r#""false""#)),
        ("time with a fraction", Role::Request, r#"{"id":10,"op":"sweep","now_ns":1.5}"#.into()),
        ("negative time", Role::Request, r#"{"id":10,"op":"sweep","now_ns":-1}"#.into()),
        ("time past 2^64 - 1", Role::Request, r#"{"id":10,"op":"sweep","now_ns":18446744073709551616}"#.into()),
        ("negative key", Role::Request, r#"{"id":9,"op":"forget","key":-1}"#.into()),
        ("null in an optional request field", Role::Request, r#"{"id":7,"op":"acquire","key":3,"now_ns":1,"cost":1,"request_id":null}"#.into()),
        ("remaining 1/0", Role::Reply, with(acquire, "remaining", r#""1/0""#)),
        ("remaining with a negative denominator", Role::Reply, with(acquire, "remaining", r#""1/-2""#)),
        ("remaining with a sign", Role::Reply, with(acquire, "remaining", r#""-1/2""#)),
        ("remaining with a leading zero", Role::Reply, with(acquire, "remaining", r#""01/2""#)),
        ("remaining with a decimal point", Role::Reply, with(acquire, "remaining", r#""1.5/2""#)),
        ("remaining with a space", Role::Reply, with(acquire, "remaining", r#"" 1/2""#)),
        ("remaining as a bare integer string", Role::Reply, with(acquire, "remaining", r#""3""#)),
        ("retry_after_ns missing", Role::Reply, r#"{"id":7,"allowed":true,"remaining":"1/1"}"#.into()),
        ("negative wait", Role::Reply, with(acquire, "retry_after_ns", "-5")),
        ("wait Never capitalized", Role::Reply, with(acquire, "reset_after_ns", r#""Never""#)),
        ("retry without at", Role::Reply, with(acquire, "retry", r#"{"before":true}"#)),
        ("state without capacity", Role::Reply, r#"{"id":11,"state":{"tokens":"7/1","last_refill_ns":1}}"#.into()),
        ("tokens 7/0 in a state", Role::Reply, r#"{"id":11,"state":{"tokens":"7/0","last_refill_ns":1,"capacity":10}}"#.into()),
        ("inspect reply without state", Role::Reply, r#"{"id":11}"#.into()),
        ("ok false", Role::Reply, r#"{"id":1,"ok":false}"#.into()),
        ("fields of two replies", Role::Reply, r#"{"id":1,"ok":true,"allowed":true}"#.into()),
        ("an error reply with a field of another reply", Role::Reply, r#"{"id":1,"error":{"kind":"store","message":"m"},"allowed":false}"#.into()),
        ("unknown error kind", Role::Reply, r#"{"id":1,"error":{"kind":"oops","message":"m"}}"#.into()),
        ("error without message", Role::Reply, r#"{"id":1,"error":{"kind":"store"}}"#.into()),
        ("settle without actual", Role::Request, r#"{"id":8,"op":"settle","key":3,"now_ns":1,"request_id":4}"#.into()),
        ("settle without request_id", Role::Request, r#"{"id":8,"op":"settle","key":3,"now_ns":1,"actual":4}"#.into()),
        ("settle with a cost", Role::Request, r#"{"id":8,"op":"settle","key":3,"now_ns":1,"request_id":4,"actual":1,"cost":1}"#.into()),
        ("settle capability as a string", Role::Reply, hello.replace(r#""bandwidths":1"#, r#""bandwidths":1,"settle":"yes""#)),
        ("hello without a capability", Role::Reply, hello.replace(r#","bandwidths":1"#, "")),
        ("batch 0", Role::Reply, hello.replace(r#""batch":256"#, r#""batch":0"#)),
        ("exact profile with a field", Role::Reply, profile(r#"{"name":"exact","starts":"full"}"#)),
        ("unknown profile", Role::Reply, profile(r#"{"name":"fast"}"#)),
        ("time_resolution unknown", Role::Reply, profile(r#"{"name":"safety","time_resolution":"min"}"#)),
        ("tolerance 1/0", Role::Reply, profile(r#"{"name":"safety","tolerance":"1/0"}"#)),
        ("hello with no version offered", Role::Request, r#"{"id":0,"op":"hello","protocol":[]}"#.into()),
        ("protocol version 0 chosen", Role::Reply, hello.replace(r#""protocol":1"#, r#""protocol":0"#)),
        ("empty config", Role::Request, config("[]")),
        ("nine bandwidths", Role::Request, config(r#"[{"capacity":1,"rate_per_s":"1/1","rate":"1/s"},{"capacity":1,"rate_per_s":"1/1","rate":"1/s"},{"capacity":1,"rate_per_s":"1/1","rate":"1/s"},{"capacity":1,"rate_per_s":"1/1","rate":"1/s"},{"capacity":1,"rate_per_s":"1/1","rate":"1/s"},{"capacity":1,"rate_per_s":"1/1","rate":"1/s"},{"capacity":1,"rate_per_s":"1/1","rate":"1/s"},{"capacity":1,"rate_per_s":"1/1","rate":"1/s"},{"capacity":1,"rate_per_s":"1/1","rate":"1/s"}]"#)),
        ("a bandwidth name with a capital", Role::Request,
            config(r#"[{"capacity":1,"rate_per_s":"1/1","rate":"1/s","name":"Burst"}]"#)),
        ("one part of a decision", Role::Reply,
            with(acquire, "bandwidths", r#"[{"remaining":"1/2"}]"#)),
        ("a part without its remaining", Role::Reply,
            with(acquire, "bandwidths", r#"[{"remaining":"1/2"},{"retry_after_ns":3}]"#)),
        ("capacity 0", Role::Request, config(r#"[{"capacity":0,"rate_per_s":"5/1","rate":"5/s"}]"#)),
        ("rate_per_s without a denominator", Role::Request, config(r#"[{"capacity":1,"rate_per_s":"5","rate":"5/s"}]"#)),
        ("negative rate", Role::Request, config(r#"[{"capacity":1,"rate_per_s":"-5/1","rate":"-5/s"}]"#)),
        ("unknown policy", Role::Request, with(setup, "policy", r#""evict_all""#)),
        ("setup without dedupe_per_key", Role::Request, setup.replace(r#","dedupe_per_key":4"#, "")),
        ("a request where a reply belongs", Role::Reply, r#"{"id":90,"op":"reset"}"#.into()),
        ("a reply where a request belongs", Role::Request, r#"{"id":90,"ok":true}"#.into()),
        ("an array", Role::Either, "[]".into()),
    ];
    let mut accepted = Vec::new();
    for (what, role, text) in &cases {
        let message: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{what}: {e}"));
        let of_the_other_direction = what.contains(" belongs");
        if schema.entry(*role).is_valid(&message)
            || (!of_the_other_direction && schema.root.is_valid(&message))
        {
            accepted.push(format!("{what}: {text}"));
        }
    }
    assert!(accepted.is_empty(), "malformed messages accepted:\n{}", accepted.join("\n"));
}

/// Holds a transcript the harness recorded (`> ` request lines, `< ` reply lines, one process after
/// another) to the schema: every line validates in its direction, each reply carries the id of the
/// oldest unanswered request and is of that request's kind (or an error). A `hello` starts a new
/// process, which drops what a killed one left unanswered. Returns the lines checked.
fn audit_transcript(text: &str, schema: &Schema) -> (usize, Vec<String>) {
    let mut problems = Vec::new();
    let mut outstanding: std::collections::VecDeque<(Value, String)> = Default::default();
    let mut checked = 0;
    for (n, line) in text.lines().enumerate() {
        let n = n + 1;
        let (role, body) = match (line.strip_prefix("> "), line.strip_prefix("< ")) {
            (Some(body), _) => (Role::Request, body),
            (_, Some(body)) => (Role::Reply, body),
            _ => {
                problems.push(format!("line {n}: neither a `> ` nor a `< ` line"));
                continue;
            }
        };
        let message: Value = match serde_json::from_str(body) {
            Ok(message) => message,
            Err(e) => {
                problems.push(format!("line {n}: not JSON: {e}"));
                continue;
            }
        };
        checked += 1;
        // An invalid message is still paired, so one bad reply is one problem, not a cascade.
        let kind = match schema.classify(&message, role) {
            Ok(kind) => Some(kind),
            Err(why) => {
                problems.push(format!("line {n}: {why}: {body}"));
                None
            }
        };
        if role == Role::Request {
            if message["op"] == "hello" {
                outstanding.clear();
            }
            let op = message["op"].as_str().unwrap_or_default().to_owned();
            outstanding.push_back((message["id"].clone(), op));
            continue;
        }
        // A reply to a later request: the ones before it are missing (their replies were read
        // but not recorded); say so once, and go on pairing from there.
        match outstanding.iter().position(|(id, _)| *id == message["id"]) {
            None => problems.push(format!(
                "line {n}: a reply to no unanswered request: {body}"
            )),
            Some(skipped) => {
                if skipped > 0 {
                    problems.push(format!(
                        "line {n}: the replies to ids {} to {} are not in the transcript",
                        outstanding[0].0,
                        outstanding[skipped - 1].0
                    ));
                }
                let (_, op) = outstanding
                    .drain(..=skipped)
                    .next_back()
                    .expect("one at least");
                if let Some(kind) = kind
                    && kind != reply_for(&op)
                    && kind != "error_reply"
                {
                    problems.push(format!("line {n}: a {kind} answers a {op}"));
                }
            }
        }
    }
    (checked, problems)
}

/// The transcript check can fail: a small recorded session, good, then with a planted error each.
#[test]
fn a_planted_error_in_a_transcript_is_caught() {
    let schema = Schema::load();
    let good = [
        r#"> {"op":"hello","id":0,"protocol":[1]}"#,
        r#"< {"id":0,"protocol":1,"name":"core","version":"0.1.0","capabilities":{"reconfigure":true,"forget":true,"sweep":true,"inspect":true,"would_allow":true,"request_ids":true,"evicts":true,"batch":1024,"bandwidths":1},"profile":{"name":"exact"}}"#,
        r#"> {"op":"acquire","id":1,"key":2,"now_ns":0,"cost":1}"#,
        r#"> {"op":"inspect","id":2,"key":2}"#,
        r#"< {"id":1,"allowed":true,"remaining":"2/1","retry_after_ns":null}"#,
        r#"< {"id":2,"state":{"tokens":"2/1","last_refill_ns":0,"capacity":3}}"#,
    ];
    let text = |lines: &[&str]| lines.join("\n") + "\n";
    assert_eq!(audit_transcript(&text(&good), &schema), (6, vec![]));
    let plant = |at: usize, line: &str| {
        let mut lines = good.to_vec();
        lines[at] = line;
        text(&lines)
    };
    let planted = [
        plant(
            4,
            r#"< {"id":1,"allowed":true,"remaining":"2/1","retry_after_ns":null,"tokens":2}"#,
        ),
        plant(
            4,
            r#"< {"id":2,"allowed":true,"remaining":"2/1","retry_after_ns":null}"#,
        ),
        plant(5, r#"< {"id":2,"allowed":true}"#),
        plant(3, r#"> {"op":"inspect","id":2,"key":-2}"#),
        plant(3, r#"{"op":"inspect","id":2,"key":2}"#),
        plant(5, r#"< {"id":9,"state":null}"#),
        {
            let mut swapped = good.to_vec();
            swapped.swap(4, 5);
            text(&swapped)
        },
    ];
    for text in planted {
        let (_, problems) = audit_transcript(&text, &schema);
        assert!(!problems.is_empty(), "not caught:\n{text}");
        eprintln!("caught: {}", problems.join("; "));
    }
}

/// A real session: `PROTOCOL_SCHEMA_TRANSCRIPT=FILE` names a transcript the harness recorded with
/// `BUCKETPROOF_PROTOCOL_TRANSCRIPT=FILE bucketproof check --subject ...`, and every line of it must
/// hold. Without the variable there is no session to check, and the test says so.
#[test]
fn a_recorded_session_validates() {
    let Some(path) = std::env::var_os("PROTOCOL_SCHEMA_TRANSCRIPT") else {
        eprintln!("no PROTOCOL_SCHEMA_TRANSCRIPT: no recorded session checked");
        return;
    };
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.to_string_lossy()));
    let (checked, problems) = audit_transcript(&text, &Schema::load());
    assert!(checked > 0, "the transcript holds no message");
    assert!(
        problems.is_empty(),
        "{} problem(s) in the transcript, the first ones:\n{}",
        problems.len(),
        problems[..problems.len().min(20)].join("\n")
    );
    eprintln!("{checked} messages of the recorded session validate");
}
