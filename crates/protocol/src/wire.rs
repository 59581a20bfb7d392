//! The messages of the subject protocol (docs/subject-protocol.md), as serde types, in both
//! directions: the exec subject writes [`Request`]s and reads replies ([`crate::reply`]);
//! [`crate::serve`] does the reverse.
//!
//! Promise: unknown fields are refused both ways, so a misspelt field is an error, never a silent
//! default. This file holds the requests and the values both directions carry.

use serde::{Deserialize, Serialize};

use bucketproof_trace::subject::Amount;

/// The protocol versions this harness speaks.
pub const VERSIONS: [u32; 1] = [1];

/// One bandwidth of a config.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bandwidth {
    /// Whole tokens.
    pub capacity: u64,
    /// Tokens per second, reduced: `"p/q"`.
    pub rate_per_s: String,
    /// The rate as the scenario wrote it.
    pub rate: String,
    /// The bandwidth's name, if it has one (never sent for an unnamed bandwidth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A request, tagged by `op`; every one carries its `id`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// The handshake.
    Hello {
        /// Sequence number.
        id: u64,
        /// Versions the harness speaks.
        protocol: Vec<u32>,
    },
    /// A trace begins.
    Setup {
        /// Sequence number.
        id: u64,
        /// The default config.
        config: Vec<Bandwidth>,
        /// The key bound.
        max_keys: u64,
        /// What happens at it.
        policy: bucketproof_trace::trace::PolicySpec,
        /// The amortized sweep's hint.
        sweep_per_op: u64,
        /// Request-id window.
        dedupe_window_ns: u64,
        /// Records kept per key.
        dedupe_per_key: u64,
    },
    /// An acquire.
    Acquire {
        /// Sequence number.
        id: u64,
        /// The key.
        key: u64,
        /// Time.
        now_ns: u64,
        /// Whole tokens.
        cost: u64,
        /// Idempotency id.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<u64>,
        /// Answer `before` and `after`.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        inspect: bool,
        /// Answer `retry` for a finite denial.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        probe_retry: bool,
        /// `retry.at` is asked at `now + retry_after + retry_slack_ns`.
        #[serde(default, skip_serializing_if = "is_zero")]
        retry_slack_ns: u64,
    },
    /// A settle: reconcile the charge of an admitted request with its actual cost.
    Settle {
        /// Sequence number.
        id: u64,
        /// The key.
        key: u64,
        /// Time.
        now_ns: u64,
        /// The request id its acquire carried.
        request_id: u64,
        /// What the work really cost, in whole tokens (0 gives the whole charge back).
        actual: u64,
        /// Answer `before` and `after`.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        inspect: bool,
    },
    /// A reconfiguration.
    Reconfigure {
        /// Sequence number.
        id: u64,
        /// The key.
        key: u64,
        /// Time.
        now_ns: u64,
        /// The new config.
        config: Vec<Bandwidth>,
        /// Answer `before` and `after`.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        inspect: bool,
    },
    /// Drop a key.
    Forget {
        /// Sequence number.
        id: u64,
        /// The key.
        key: u64,
    },
    /// Drop evictable buckets.
    Sweep {
        /// Sequence number.
        id: u64,
        /// Time.
        now_ns: u64,
    },
    /// Show a key's state.
    Inspect {
        /// Sequence number.
        id: u64,
        /// The key.
        key: u64,
    },
    /// Would this acquire be admitted?
    WouldAllow {
        /// Sequence number.
        id: u64,
        /// The key.
        key: u64,
        /// Time.
        now_ns: u64,
        /// Whole tokens.
        cost: u64,
    },
    /// Drop everything; a setup follows.
    Reset {
        /// Sequence number.
        id: u64,
    },
}

impl Request {
    /// The request's sequence number.
    pub fn id(&self) -> u64 {
        match self {
            Request::Hello { id, .. }
            | Request::Setup { id, .. }
            | Request::Acquire { id, .. }
            | Request::Settle { id, .. }
            | Request::Reconfigure { id, .. }
            | Request::Forget { id, .. }
            | Request::Sweep { id, .. }
            | Request::Inspect { id, .. }
            | Request::WouldAllow { id, .. }
            | Request::Reset { id } => *id,
        }
    }

    /// The `op` name.
    pub fn op(&self) -> &'static str {
        match self {
            Request::Hello { .. } => "hello",
            Request::Setup { .. } => "setup",
            Request::Acquire { .. } => "acquire",
            Request::Settle { .. } => "settle",
            Request::Reconfigure { .. } => "reconfigure",
            Request::Forget { .. } => "forget",
            Request::Sweep { .. } => "sweep",
            Request::Inspect { .. } => "inspect",
            Request::WouldAllow { .. } => "would_allow",
            Request::Reset { .. } => "reset",
        }
    }
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// An amount on the wire: `"a/b"` or a JSON number.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum WireAmount {
    /// `"a/b"`.
    Text(String),
    /// A number.
    Number(serde_json::Number),
}

impl WireAmount {
    /// The amount, or `None` if it is not one.
    pub fn to_amount(&self) -> Option<Amount> {
        match self {
            WireAmount::Text(text) => bucketproof_trace::profile::parse_amount(text),
            WireAmount::Number(number) => match number.as_u64() {
                Some(whole) => Some(Amount::Exact {
                    numer: u128::from(whole),
                    denom: 1,
                }),
                None => number.as_f64().map(Amount::Approx),
            },
        }
    }

    /// An amount as the protocol writes it: exact as `"a/b"`, a float as a number.
    pub fn of(amount: Amount) -> WireAmount {
        match amount {
            Amount::Exact { numer, denom } => WireAmount::Text(format!("{numer}/{denom}")),
            Amount::Approx(value) => serde_json::Number::from_f64(value)
                .map_or_else(|| WireAmount::Text("NaN".into()), WireAmount::Number),
        }
    }
}

/// A wait on the wire: ns, `"never"` or null.
///
/// Read by hand rather than as an untagged enum so that a wait that is no `u64` (negative, a
/// fraction, above `2^64 - 1` ns) is refused saying what to send instead.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum WireWait {
    /// Nanoseconds.
    Ns(u64),
    /// `"never"` (any other string is refused when read).
    Word(String),
}

/// What a wait must be, for every refusal.
const WAIT_EXPECTED: &str = "a whole number of nanoseconds in [0, 2^64 - 1], \"never\" or null";

impl<'de> Deserialize<'de> for WireWait {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = WireWait;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(WAIT_EXPECTED)
            }
            fn visit_u64<E: serde::de::Error>(self, ns: u64) -> Result<WireWait, E> {
                Ok(WireWait::Ns(ns))
            }
            fn visit_i64<E: serde::de::Error>(self, ns: i64) -> Result<WireWait, E> {
                u64::try_from(ns).map(WireWait::Ns).map_err(|_| {
                    E::custom(format!(
                        "a wait of {ns} ns is negative; send {WAIT_EXPECTED}"
                    ))
                })
            }
            // serde_json reads an integer above `u64::MAX` (or any fraction) as a float.
            fn visit_f64<E: serde::de::Error>(self, ns: f64) -> Result<WireWait, E> {
                Err(E::custom(if ns >= 18_446_744_073_709_551_615.0 {
                    format!(
                        "a wait of {ns:e} ns is above 2^64 - 1 ns: it ends past the end of the \
                         clock, so send \"never\""
                    )
                } else {
                    format!("a wait of {ns} ns is not {WAIT_EXPECTED}")
                }))
            }
            fn visit_str<E: serde::de::Error>(self, word: &str) -> Result<WireWait, E> {
                Ok(WireWait::Word(word.to_owned()))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

impl WireWait {
    /// `"never"`.
    pub fn never() -> WireWait {
        WireWait::Word("never".into())
    }
}

/// A key's state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireState {
    /// Balance.
    pub tokens: WireAmount,
    /// Refill cursor.
    pub last_refill_ns: u64,
    /// Capacity in force.
    pub capacity: u64,
}

/// The capabilities of the handshake; every field is required but `settle`, which a subject that
/// predates it leaves out (false).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capabilities {
    /// `reconfigure` requests.
    pub reconfigure: bool,
    /// `forget` requests.
    pub forget: bool,
    /// `sweep` requests.
    pub sweep: bool,
    /// `inspect` requests and the `inspect` probe.
    pub inspect: bool,
    /// `would_allow` requests and the `probe_retry` probe.
    pub would_allow: bool,
    /// Acquires with request ids.
    pub request_ids: bool,
    /// The subject drops buckets on its own.
    pub evicts: bool,
    /// Requests that may be outstanding (>= 1).
    pub batch: u64,
    /// Bandwidths per key (>= 1).
    pub bandwidths: u64,
    /// `settle` requests (reserve, then settle); optional, false when absent, and not written when
    /// false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub settle: bool,
}

/// The answer of a `retry` probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryProbe {
    /// `would_allow` at `now + retry_after`.
    pub at: bool,
    /// At `now + retry_after - 1` (`None` for a wait of 0).
    #[serde(default)]
    pub before: Option<bool>,
}

/// One bandwidth's part of an acquire's reply, for a key of several bandwidths.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WirePart {
    /// The bandwidth's balance after the decision.
    pub remaining: WireAmount,
    /// For a denial, this bandwidth's wait (0 when it covers the cost); `null` when allowed.
    #[serde(default)]
    pub retry_after_ns: Option<WireWait>,
    /// The wait until this bandwidth is full again.
    #[serde(default)]
    pub reset_after_ns: Option<WireWait>,
}

/// A typed error reply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireError {
    /// `invalid_cost`, `key_limit`, `unknown_request`, `not_admitted`, `already_settled`,
    /// `unsupported`, `store`.
    pub kind: String,
    /// For people (required, may be empty).
    pub message: String,
}
