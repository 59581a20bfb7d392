//! Traces: the operations every subject and the model are driven with, as plain serializable data.
//!
//! A trace is a [`Setup`] (default config, key bound, dedupe window) plus a sequence of [`Op`]s. Traces are
//! what scenarios expand into, what the shrinker minimizes and what a counterexample file stores, so the
//! same bytes replay the same run on any machine.
//!
//! Owns the trace vocabulary and its serialized form. Promises: a trace is plain data (no clock, no
//! randomness, no references into a subject), so serializing and reading it back gives the same run.
//!
//! An acquire travels as one [`Acquire`] value (key, cost, time, request id) from the trace through the
//! runner into every subject, never as loose `u64` arguments: two `u64`s passed in the wrong order would
//! type-check and silently decide another request, while named fields cannot be swapped. Every instant is
//! called `now`, in the traces as in the limiter; `at`, the name older counterexample files use, is still
//! read.

use bucketproof_limiter::{Config, EvictionPolicy, Rate, defaults};
use bucketproof_model::ModelConfig;
use std::fmt;

use serde::{Deserialize, Serialize};

/// A bucket configuration as written in scenarios and traces: `capacity` whole tokens, `rate` as the
/// limiter parses it (`"100/s"`, `"1/3s"`, `"5/min"`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ConfigSpec {
    /// Whole tokens.
    pub capacity: u64,
    /// Tokens per period, e.g. `"3/2s"`.
    pub rate: String,
}

/// A [`ConfigSpec`] that does not describe a valid configuration.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid config (capacity {capacity}, rate {rate:?}): {reason}")]
pub struct InvalidConfigSpec {
    /// The capacity given.
    pub capacity: u64,
    /// The rate given.
    pub rate: String,
    /// What was wrong.
    pub reason: String,
}

impl ConfigSpec {
    /// A spec from parts.
    pub fn new(capacity: u64, rate: impl Into<String>) -> ConfigSpec {
        ConfigSpec {
            capacity,
            rate: rate.into(),
        }
    }

    /// The spec of an existing limiter config.
    pub fn of(config: &Config) -> ConfigSpec {
        ConfigSpec::new(config.capacity(), config.rate().to_string())
    }

    /// The limiter's config.
    pub fn to_config(&self) -> Result<Config, InvalidConfigSpec> {
        let invalid = |reason: String| InvalidConfigSpec {
            capacity: self.capacity,
            rate: self.rate.clone(),
            reason,
        };
        let rate: Rate = self.rate.parse().map_err(|e| invalid(format!("{e}")))?;
        Config::new(self.capacity, rate).map_err(|e| invalid(format!("{e}")))
    }

    /// The reference model's config. It parses the rate with the limiter's parser (a shared *input*
    /// format, not shared arithmetic) and hands the reduced fraction to the model, which validates it
    /// by its own rules.
    pub fn to_model(&self) -> Result<ModelConfig, InvalidConfigSpec> {
        let config = self.to_config()?;
        ModelConfig::new(
            config.capacity(),
            config.rate().numer(),
            config.rate().denom(),
        )
        .map_err(|e| InvalidConfigSpec {
            capacity: self.capacity,
            rate: self.rate.clone(),
            reason: format!("model refused it: {e:?}"),
        })
    }
}

/// The key-bound policy as written in traces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum PolicySpec {
    /// [`EvictionPolicy::RejectNewKeys`].
    RejectNewKeys,
    /// [`EvictionPolicy::EvictFull`].
    #[default]
    EvictFull,
    /// [`EvictionPolicy::EvictLeastRecent`].
    EvictLeastRecent,
}

impl From<PolicySpec> for EvictionPolicy {
    fn from(policy: PolicySpec) -> Self {
        match policy {
            PolicySpec::RejectNewKeys => EvictionPolicy::RejectNewKeys,
            PolicySpec::EvictFull => EvictionPolicy::EvictFull,
            PolicySpec::EvictLeastRecent => EvictionPolicy::EvictLeastRecent,
        }
    }
}

fn default_max_keys() -> usize {
    defaults::MAX_KEYS
}
fn default_sweep_per_op() -> usize {
    defaults::SWEEP_PER_OP
}
fn default_dedupe_window_ns() -> u64 {
    defaults::DEDUPE_WINDOW
}
fn default_dedupe_per_key() -> usize {
    defaults::DEDUPE_PER_KEY
}

/// Everything a subject needs to be built for a trace.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Setup {
    /// Config of every key not reconfigured.
    pub config: ConfigSpec,
    /// Live-key bound.
    #[serde(default = "default_max_keys")]
    pub max_keys: usize,
    /// What happens at the bound.
    #[serde(default)]
    pub policy: PolicySpec,
    /// Entries the amortized sweep inspects each time an acquire inserts a new key (see the limiter's
    /// `Builder::sweep_per_op`).
    #[serde(default = "default_sweep_per_op")]
    pub sweep_per_op: usize,
    /// Request-id records live this long.
    #[serde(default = "default_dedupe_window_ns")]
    pub dedupe_window_ns: u64,
    /// At most this many request-id records per key.
    #[serde(default = "default_dedupe_per_key")]
    pub dedupe_per_key: usize,
}

impl Setup {
    /// Defaults around one config.
    pub fn new(config: ConfigSpec) -> Setup {
        Setup {
            config,
            max_keys: default_max_keys(),
            policy: PolicySpec::default(),
            sweep_per_op: default_sweep_per_op(),
            dedupe_window_ns: default_dedupe_window_ns(),
            dedupe_per_key: default_dedupe_per_key(),
        }
    }
}

/// One acquire: `cost` whole tokens for `key` at `now`, optionally carrying a request id.
///
/// The harness passes an acquire as this one value, from a trace's [`Op::Acquire`] through the runner
/// to [`Subject::acquire`](crate::Subject::acquire) and [`Subject::would_allow`](crate::Subject::would_allow),
/// rather than as loose arguments: `key`, `cost` and `now` are all `u64`, and a call that swapped two of
/// them would type-check and run, deciding a different request. Named fields cannot be swapped by position.
/// The field order is the limiter's, `(key, cost, now)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Acquire {
    /// The key.
    pub key: u64,
    /// Whole tokens.
    pub cost: u64,
    /// Time of the call, in nanoseconds. Read as `at` too, the name of older counterexample files.
    #[serde(alias = "at")]
    pub now: u64,
    /// Optional idempotency id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<u64>,
}

#[cfg(test)]
impl Acquire {
    /// For this crate's unit tests: `cost` on key 0 at `now`, without a request id.
    pub(crate) fn on_key_0(cost: u64, now: u64) -> Acquire {
        Acquire {
            key: 0,
            cost,
            now,
            request_id: None,
        }
    }
}

/// One operation of a trace. Times are `u64` nanoseconds, named `now` as in the limiter (older files
/// that name them `at` still read).
///
/// Serialized flat, tagged by `op`: `{"op":"acquire","key":0,"cost":1,"now":5}`.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Take `cost` tokens for `key` at `now`.
    Acquire(Acquire),
    /// Move `key` to a new config at `now`.
    Reconfigure {
        /// The key.
        key: u64,
        /// Time of the call.
        #[serde(alias = "at")]
        now: u64,
        /// The new config.
        config: ConfigSpec,
    },
    /// Drop all state of `key`.
    Forget {
        /// The key.
        key: u64,
    },
    /// Drop every evictable bucket at `now`.
    Sweep {
        /// Time of the sweep.
        #[serde(alias = "at")]
        now: u64,
    },
}

/// Prints an acquire as its fields, like the other ops (`Acquire { key: 0, cost: 1, now: 5, request_id:
/// None }`), rather than as `Acquire(Acquire { .. })`: counterexamples in reports read this way.
impl fmt::Debug for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Acquire(acquire) => acquire.fmt(f),
            Op::Reconfigure { key, now, config } => f
                .debug_struct("Reconfigure")
                .field("key", key)
                .field("now", now)
                .field("config", config)
                .finish(),
            Op::Forget { key } => f.debug_struct("Forget").field("key", key).finish(),
            Op::Sweep { now } => f.debug_struct("Sweep").field("now", now).finish(),
        }
    }
}

impl Op {
    /// The op's time, if it has one.
    pub fn now(&self) -> Option<u64> {
        match self {
            Op::Acquire(Acquire { now, .. }) | Op::Reconfigure { now, .. } | Op::Sweep { now } => {
                Some(*now)
            }
            Op::Forget { .. } => None,
        }
    }

    /// The key the op touches, if one.
    pub fn key(&self) -> Option<u64> {
        match self {
            Op::Acquire(Acquire { key, .. }) | Op::Reconfigure { key, .. } | Op::Forget { key } => {
                Some(*key)
            }
            Op::Sweep { .. } => None,
        }
    }
}

/// A whole trace: setup plus operations.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Trace {
    /// How subjects are built.
    pub setup: Setup,
    /// What they are driven with.
    pub ops: Vec<Op>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_serialize_flat_with_now_in_the_limiters_order() {
        let acquire = Op::Acquire(Acquire {
            key: 3,
            cost: 2,
            now: 5,
            request_id: None,
        });
        assert_eq!(
            serde_json::to_string(&acquire).unwrap(),
            r#"{"op":"acquire","key":3,"cost":2,"now":5}"#
        );
        let sweep = Op::Sweep { now: 7 };
        assert_eq!(
            serde_json::to_string(&sweep).unwrap(),
            r#"{"op":"sweep","now":7}"#
        );
        let reconfigure = Op::Reconfigure {
            key: 1,
            now: 9,
            config: ConfigSpec::new(4, "1/s"),
        };
        let json = serde_json::to_string(&reconfigure).unwrap();
        assert_eq!(
            json,
            r#"{"op":"reconfigure","key":1,"now":9,"config":{"capacity":4,"rate":"1/s"}}"#
        );
        assert_eq!(serde_json::from_str::<Op>(&json).unwrap(), reconfigure);
    }

    #[test]
    fn counterexamples_that_name_the_instant_at_still_read() {
        let old = r#"{"setup":{"config":{"capacity":2,"rate":"1/s"}},"ops":[
            {"op":"acquire","key":0,"at":10,"cost":2,"request_id":4},
            {"op":"reconfigure","key":0,"at":11,"config":{"capacity":3,"rate":"2/s"}},
            {"op":"forget","key":0},
            {"op":"sweep","at":12}
        ]}"#;
        let trace: Trace = serde_json::from_str(old).unwrap();
        assert_eq!(
            trace.ops,
            vec![
                Op::Acquire(Acquire {
                    key: 0,
                    cost: 2,
                    now: 10,
                    request_id: Some(4),
                }),
                Op::Reconfigure {
                    key: 0,
                    now: 11,
                    config: ConfigSpec::new(3, "2/s")
                },
                Op::Forget { key: 0 },
                Op::Sweep { now: 12 },
            ]
        );
        let written = serde_json::to_string(&trace).unwrap();
        assert!(written.contains(r#""now":10"#) && !written.contains(r#""at""#));
    }

    #[test]
    fn an_acquire_debug_prints_like_the_other_ops() {
        let ops = [
            Op::Acquire(Acquire {
                key: 0,
                cost: 1,
                now: 5,
                request_id: Some(2),
            }),
            Op::Sweep { now: 6 },
        ];
        assert_eq!(
            format!("{ops:?}"),
            "[Acquire { key: 0, cost: 1, now: 5, request_id: Some(2) }, Sweep { now: 6 }]"
        );
    }
}
