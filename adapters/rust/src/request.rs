//! Requests of protocol version 1, one typed struct per `op`.
//!
//! Promises: a request parses only if it is exactly one of these shapes. A missing, unknown,
//! duplicated or mistyped field, an unknown `op`, or trailing text on the line is a parse error,
//! so a typo in either party never passes silently (docs/subject-protocol.md, "Transport").

use serde::Deserialize;

use crate::values::{Bandwidth, Policy};

/// One request line.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// The first request: which protocol versions the harness speaks.
    Hello(Hello),
    /// The start of a trace: build a fresh limiter.
    Setup(Setup),
    /// Take tokens.
    Acquire(Acquire),
    /// Give one key its own config.
    Reconfigure(Reconfigure),
    /// Drop everything about one key.
    Forget(Forget),
    /// Drop every evictable bucket.
    Sweep(Sweep),
    /// Show one key's stored state.
    Inspect(Inspect),
    /// Would an acquire be admitted, without recording anything.
    WouldAllow(WouldAllow),
    /// The end of a trace: drop everything.
    Reset(Reset),
}

impl Request {
    /// The request's `id`.
    pub fn id(&self) -> u64 {
        match self {
            Request::Hello(r) => r.id,
            Request::Setup(r) => r.id,
            Request::Acquire(r) => r.id,
            Request::Reconfigure(r) => r.id,
            Request::Forget(r) => r.id,
            Request::Sweep(r) => r.id,
            Request::Inspect(r) => r.id,
            Request::WouldAllow(r) => r.id,
            Request::Reset(r) => r.id,
        }
    }

    /// Parses one line (without or with its `\n`).
    pub fn parse(line: &[u8]) -> serde_json::Result<Request> {
        serde_json::from_slice(line)
    }
}

/// `{"op":"hello","protocol":[1]}`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hello {
    /// Request id.
    pub id: u64,
    /// The versions the harness speaks.
    pub protocol: Vec<u64>,
}

/// The settings of one trace.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Setup {
    /// Request id.
    pub id: u64,
    /// The config of every key not reconfigured (one bandwidth in version 1).
    pub config: Vec<Bandwidth>,
    /// The key bound.
    pub max_keys: u64,
    /// What happens at the key bound.
    pub policy: Policy,
    /// Entries an amortized sweep may inspect per new key (a hint).
    pub sweep_per_op: u64,
    /// The request-id window; 0 turns request ids off.
    pub dedupe_window_ns: u64,
    /// The newest request-id records kept per key.
    pub dedupe_per_key: u64,
}

/// Take `cost` tokens for `key` at `now_ns`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Acquire {
    /// Request id.
    pub id: u64,
    /// The key.
    pub key: u64,
    /// The harness's clock.
    pub now_ns: u64,
    /// Whole tokens.
    pub cost: u64,
    /// Makes a retry idempotent within the dedupe window.
    #[serde(default)]
    pub request_id: Option<u64>,
    /// Report the key's state before and after.
    #[serde(default)]
    pub inspect: bool,
    /// For a denial with a finite wait `w`: would the same acquire pass at `now + w` and `now + w - 1`.
    #[serde(default)]
    pub probe_retry: bool,
}

/// Move `key` to its own `config` at `now_ns`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reconfigure {
    /// Request id.
    pub id: u64,
    /// The key.
    pub key: u64,
    /// The harness's clock.
    pub now_ns: u64,
    /// The key's new config (one bandwidth in version 1).
    pub config: Vec<Bandwidth>,
    /// Report the key's state before and after.
    #[serde(default)]
    pub inspect: bool,
}

/// Drop `key`'s bucket, override and records.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Forget {
    /// Request id.
    pub id: u64,
    /// The key.
    pub key: u64,
}

/// Drop every bucket evictable at `now_ns`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sweep {
    /// Request id.
    pub id: u64,
    /// The harness's clock.
    pub now_ns: u64,
}

/// Show `key`'s stored state.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Inspect {
    /// Request id.
    pub id: u64,
    /// The key.
    pub key: u64,
}

/// Would `cost` for `key` at `now_ns` be admitted.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WouldAllow {
    /// Request id.
    pub id: u64,
    /// The key.
    pub key: u64,
    /// The harness's clock.
    pub now_ns: u64,
    /// Whole tokens.
    pub cost: u64,
}

/// Drop every key, record and override; a `setup` follows.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reset {
    /// Request id.
    pub id: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_acquire_parses_with_and_without_its_optional_fields() {
        let full = br#"{"id":7,"op":"acquire","key":18446744073709551615,"now_ns":1,"cost":2,"request_id":41,"inspect":true,"probe_retry":true}"#;
        let Request::Acquire(acquire) = Request::parse(full).unwrap() else {
            panic!("not an acquire")
        };
        assert_eq!((acquire.key, acquire.request_id), (u64::MAX, Some(41)));
        assert!(acquire.inspect && acquire.probe_retry);
        let bare = br#"{"op":"acquire","id":8,"key":1,"now_ns":1,"cost":2}"#;
        let Request::Acquire(acquire) = Request::parse(bare).unwrap() else {
            panic!("not an acquire")
        };
        assert!(acquire.request_id.is_none() && !acquire.inspect && !acquire.probe_retry);
    }

    #[test]
    fn a_setup_parses() {
        let line = br#"{"id":1,"op":"setup","config":[{"capacity":10,"rate_per_s":"5/1","rate":"5/s"}],"max_keys":100000,"policy":"evict_full","sweep_per_op":4,"dedupe_window_ns":60000000000,"dedupe_per_key":4}"#;
        let Request::Setup(setup) = Request::parse(line).unwrap() else {
            panic!("not a setup")
        };
        assert_eq!(setup.config[0].rate_per_s.numer, 5);
        assert_eq!(setup.policy, Policy::EvictFull);
    }

    #[test]
    fn every_malformed_request_is_refused() {
        for bad in [
            r#"{"id":1,"op":"sweep","now_ns":1,"nowns":2}"#, // unknown field
            r#"{"id":1,"op":"sweep"}"#,                      // missing field
            r#"{"id":1,"op":"sweep","now_ns":-1}"#,          // wrong type
            r#"{"id":1,"op":"sweep","now_ns":1.5}"#,         // a float is not a time
            r#"{"id":1,"op":"sweep","now_ns":18446744073709551616}"#, // past u64
            r#"{"id":1,"op":"sweep","now_ns":1,"now_ns":2}"#, // duplicate field
            r#"{"id":1,"op":"sweep","now_ns":1,"key":2}"#,   // a field of another op
            r#"{"id":1,"op":"sweep","now_ns":1} x"#,         // trailing text
            r#"{"id":1,"op":"sleep","now_ns":1}"#,           // unknown op
            r#"{"id":1,"now_ns":1}"#,                        // no op
            r#"{"op":"reset"}"#,                             // no id
            r#"{"id":1,"op":"reset","inspect":null}"#,
            r#"{"id":1,"op":"acquire","key":1,"now_ns":1,"cost":1,"inspect":1}"#,
            r#"{"id":1,"op":"reconfigure","key":1,"now_ns":1,"config":[{"capacity":1,"rate_per_s":"1/0","rate":"x"}]}"#,
            r#"[1]"#,
            "",
            "\u{feff}{}",
        ] {
            assert!(Request::parse(bad.as_bytes()).is_err(), "{bad}");
        }
        assert!(Request::parse(b"\xff").is_err());
    }
}
