//! Reading a request line into a [`Request`]: one pass over the JSON into the union of every op's
//! fields, then a check that exactly the fields of the line's `op` are there.
//!
//! Why not serde's internally tagged enum (`#[serde(tag = "op")]`): it buffers every object into a
//! tree of `Content` before it knows the variant, which was half of the adapter's time per request.
//! Promises: the same strictness: a missing, unknown, duplicated or mistyped field, a field of
//! another op, an unknown `op`, or trailing text is an error naming what was wrong. `null` counts
//! as absent (docs/subject-protocol.md, "Transport").

use serde::Deserialize;
use serde::de::Error as _;

use crate::request::{
    Acquire, Forget, Hello, Inspect, Reconfigure, Request, Reset, Settle, Setup, Sweep, WouldAllow,
};
use crate::values::{Bandwidth, Policy};

/// Parses one line (with or without its `\n`).
pub fn request(line: &[u8]) -> serde_json::Result<Request> {
    // A derived struct also reads a JSON array, positionally: refuse it before serde sees it.
    if line.trim_ascii_start().first() != Some(&b'{') {
        return Err(serde_json::Error::custom("a request is a JSON object"));
    }
    let fields: Fields = serde_json::from_slice(line)?;
    fields.into_request().map_err(serde_json::Error::custom)
}

/// The `op`s of version 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Op {
    Hello,
    Setup,
    Acquire,
    Settle,
    Reconfigure,
    Forget,
    Sweep,
    Inspect,
    WouldAllow,
    Reset,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Hello => "hello",
            Op::Setup => "setup",
            Op::Acquire => "acquire",
            Op::Settle => "settle",
            Op::Reconfigure => "reconfigure",
            Op::Forget => "forget",
            Op::Sweep => "sweep",
            Op::Inspect => "inspect",
            Op::WouldAllow => "would_allow",
            Op::Reset => "reset",
        }
    }
}

/// Every field any request may carry.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Fields {
    id: Option<u64>,
    op: Option<Op>,
    protocol: Option<Vec<u64>>,
    key: Option<u64>,
    now_ns: Option<u64>,
    cost: Option<u64>,
    request_id: Option<u64>,
    actual: Option<u64>,
    inspect: Option<bool>,
    probe_retry: Option<bool>,
    config: Option<Vec<Bandwidth>>,
    max_keys: Option<u64>,
    policy: Option<Policy>,
    sweep_per_op: Option<u64>,
    dedupe_window_ns: Option<u64>,
    dedupe_per_key: Option<u64>,
}

/// `Some(value)`, or the error naming the missing field.
fn need<T>(value: Option<T>, name: &str) -> Result<T, String> {
    value.ok_or_else(|| format!("missing field `{name}`"))
}

impl Fields {
    /// The names of the fields present besides `id` and `op`.
    fn present(&self) -> impl Iterator<Item = &'static str> {
        [
            ("protocol", self.protocol.is_some()),
            ("key", self.key.is_some()),
            ("now_ns", self.now_ns.is_some()),
            ("cost", self.cost.is_some()),
            ("request_id", self.request_id.is_some()),
            ("actual", self.actual.is_some()),
            ("inspect", self.inspect.is_some()),
            ("probe_retry", self.probe_retry.is_some()),
            ("config", self.config.is_some()),
            ("max_keys", self.max_keys.is_some()),
            ("policy", self.policy.is_some()),
            ("sweep_per_op", self.sweep_per_op.is_some()),
            ("dedupe_window_ns", self.dedupe_window_ns.is_some()),
            ("dedupe_per_key", self.dedupe_per_key.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, present)| present.then_some(name))
    }

    fn into_request(self) -> Result<Request, String> {
        let id = need(self.id, "id")?;
        let op = need(self.op, "op")?;
        let allowed: &[&str] = match op {
            Op::Hello => &["protocol"],
            Op::Setup => &[
                "config",
                "max_keys",
                "policy",
                "sweep_per_op",
                "dedupe_window_ns",
                "dedupe_per_key",
            ],
            Op::Acquire => &[
                "key",
                "now_ns",
                "cost",
                "request_id",
                "inspect",
                "probe_retry",
            ],
            Op::Settle => &["key", "now_ns", "request_id", "actual", "inspect"],
            Op::Reconfigure => &["key", "now_ns", "config", "inspect"],
            Op::Forget | Op::Inspect => &["key"],
            Op::Sweep => &["now_ns"],
            Op::WouldAllow => &["key", "now_ns", "cost"],
            Op::Reset => &[],
        };
        if let Some(foreign) = self.present().find(|name| !allowed.contains(name)) {
            return Err(format!("field `{foreign}` is not a field of {}", op.name()));
        }
        Ok(match op {
            Op::Hello => Request::Hello(Hello {
                id,
                protocol: need(self.protocol, "protocol")?,
            }),
            Op::Setup => Request::Setup(Setup {
                id,
                config: need(self.config, "config")?,
                max_keys: need(self.max_keys, "max_keys")?,
                policy: need(self.policy, "policy")?,
                sweep_per_op: need(self.sweep_per_op, "sweep_per_op")?,
                dedupe_window_ns: need(self.dedupe_window_ns, "dedupe_window_ns")?,
                dedupe_per_key: need(self.dedupe_per_key, "dedupe_per_key")?,
            }),
            Op::Acquire => Request::Acquire(Acquire {
                id,
                key: need(self.key, "key")?,
                now_ns: need(self.now_ns, "now_ns")?,
                cost: need(self.cost, "cost")?,
                request_id: self.request_id,
                inspect: self.inspect.unwrap_or(false),
                probe_retry: self.probe_retry.unwrap_or(false),
            }),
            Op::Settle => Request::Settle(Settle {
                id,
                key: need(self.key, "key")?,
                now_ns: need(self.now_ns, "now_ns")?,
                request_id: need(self.request_id, "request_id")?,
                actual: need(self.actual, "actual")?,
                inspect: self.inspect.unwrap_or(false),
            }),
            Op::Reconfigure => Request::Reconfigure(Reconfigure {
                id,
                key: need(self.key, "key")?,
                now_ns: need(self.now_ns, "now_ns")?,
                config: need(self.config, "config")?,
                inspect: self.inspect.unwrap_or(false),
            }),
            Op::Forget => Request::Forget(Forget {
                id,
                key: need(self.key, "key")?,
            }),
            Op::Sweep => Request::Sweep(Sweep {
                id,
                now_ns: need(self.now_ns, "now_ns")?,
            }),
            Op::Inspect => Request::Inspect(Inspect {
                id,
                key: need(self.key, "key")?,
            }),
            Op::WouldAllow => Request::WouldAllow(WouldAllow {
                id,
                key: need(self.key, "key")?,
                now_ns: need(self.now_ns, "now_ns")?,
                cost: need(self.cost, "cost")?,
            }),
            Op::Reset => Request::Reset(Reset { id }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_acquire_parses_with_and_without_its_optional_fields() {
        let full = br#"{"id":7,"op":"acquire","key":18446744073709551615,"now_ns":1,"cost":2,"request_id":41,"inspect":true,"probe_retry":true}"#;
        let Request::Acquire(acquire) = request(full).unwrap() else {
            panic!("not an acquire")
        };
        assert_eq!((acquire.key, acquire.request_id), (u64::MAX, Some(41)));
        assert!(acquire.inspect && acquire.probe_retry);
        let bare = br#"{"op":"acquire","id":8,"key":1,"now_ns":1,"cost":2,"request_id":null}"#;
        let Request::Acquire(acquire) = request(bare).unwrap() else {
            panic!("not an acquire")
        };
        assert!(acquire.request_id.is_none() && !acquire.inspect && !acquire.probe_retry);
    }

    #[test]
    fn a_settle_parses_and_needs_its_request_id_and_actual() {
        let line = br#"{"id":9,"op":"settle","key":3,"now_ns":5,"request_id":41,"actual":0,"inspect":true}"#;
        let Request::Settle(settle) = request(line).unwrap() else {
            panic!("not a settle")
        };
        assert_eq!((settle.key, settle.request_id, settle.actual), (3, 41, 0));
        assert!(settle.inspect);
        assert!(request(br#"{"id":9,"op":"settle","key":3,"now_ns":5,"actual":1}"#).is_err());
        assert!(request(br#"{"id":9,"op":"settle","key":3,"now_ns":5,"request_id":1}"#).is_err());
        let foreign =
            br#"{"id":9,"op":"settle","key":3,"now_ns":5,"request_id":1,"actual":1,"cost":1}"#;
        assert!(request(foreign).is_err());
    }

    #[test]
    fn a_setup_parses() {
        let line = br#"{"id":1,"op":"setup","config":[{"capacity":10,"rate_per_s":"5/1","rate":"5/s"}],"max_keys":100000,"policy":"evict_full","sweep_per_op":4,"dedupe_window_ns":60000000000,"dedupe_per_key":4}"#;
        let Request::Setup(setup) = request(line).unwrap() else {
            panic!("not a setup")
        };
        assert_eq!(setup.config[0].rate_per_s.numer, 5);
        assert_eq!(setup.policy, Policy::EvictFull);
    }

    #[test]
    fn every_malformed_request_is_refused() {
        for (bad, why) in [
            (
                r#"{"id":1,"op":"sweep","now_ns":1,"nowns":2}"#,
                "unknown field",
            ),
            (r#"{"id":1,"op":"sweep"}"#, "missing field `now_ns`"),
            (
                r#"{"id":1,"op":"sweep","now_ns":null}"#,
                "missing field `now_ns`",
            ),
            (r#"{"id":1,"op":"sweep","now_ns":-1}"#, "invalid value"),
            (r#"{"id":1,"op":"sweep","now_ns":1.5}"#, "invalid type"),
            (
                r#"{"id":1,"op":"sweep","now_ns":18446744073709551616}"#,
                "invalid type",
            ),
            (
                r#"{"id":1,"op":"sweep","now_ns":1,"now_ns":2}"#,
                "duplicate field",
            ),
            (
                r#"{"id":1,"op":"sweep","now_ns":1,"key":2}"#,
                "not a field of sweep",
            ),
            (
                r#"{"id":1,"op":"sweep","now_ns":1} x"#,
                "trailing characters",
            ),
            (r#"{"id":1,"op":"sleep","now_ns":1}"#, "unknown variant"),
            (r#"{"id":1,"now_ns":1}"#, "missing field `op`"),
            (r#"{"op":"reset"}"#, "missing field `id`"),
            (
                r#"{"id":1,"op":"reset","inspect":false}"#,
                "not a field of reset",
            ),
            (
                r#"{"id":1,"op":"acquire","key":1,"now_ns":1,"cost":1,"inspect":1}"#,
                "invalid type",
            ),
            (
                r#"{"id":1,"op":"reconfigure","key":1,"now_ns":1,"config":[{"capacity":1,"rate_per_s":"1/0","rate":"x"}]}"#,
                "invalid value",
            ),
            (
                r#"{"id":1,"op":"reconfigure","key":1,"now_ns":1,"config":[{"capacity":1,"rate_per_s":"1/1"}]}"#,
                "missing field `rate`",
            ),
            ("[1]", "a request is a JSON object"),
            (r#"[1,"reset"]"#, "a request is a JSON object"),
            ("", "a request is a JSON object"),
            ("\u{feff}{}", "a request is a JSON object"),
            (r#"{"id":1,"op":"reset"}{}"#, "trailing characters"),
        ] {
            let error = request(bad.as_bytes()).unwrap_err().to_string();
            assert!(error.contains(why), "{bad}: {error}");
        }
        assert!(request(b"\xff").is_err());
        assert!(request(b"{\"id\":1,\"op\":\"hello\",\"protocol\":[1],\"\xff\":1}").is_err());
    }
}
