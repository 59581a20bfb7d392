//! Traces: the operations every subject and the model are driven with, as plain serializable data.
//!
//! A trace is a [`Setup`] (default config, key bound, dedupe window) plus a sequence of [`Op`]s. Traces are
//! what scenarios expand into, what the shrinker minimizes and what a counterexample file stores, so the
//! same bytes replay the same run on any machine.
//!
//! Owns the trace vocabulary and its serialized form. Promises: a trace is plain data (no clock, no
//! randomness, no references into a subject), so serializing and reading it back gives the same run.

use bucketproof_limiter::{Config, EvictionPolicy, Rate, defaults};
use bucketproof_model::ModelConfig;
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

/// One operation of a trace. Times are `u64` nanoseconds.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Take `cost` tokens for `key` at `at`.
    Acquire {
        /// The key.
        key: u64,
        /// Time of the call.
        at: u64,
        /// Whole tokens.
        cost: u64,
        /// Optional idempotency id.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<u64>,
    },
    /// Move `key` to a new config at `at`.
    Reconfigure {
        /// The key.
        key: u64,
        /// Time of the call.
        at: u64,
        /// The new config.
        config: ConfigSpec,
    },
    /// Drop all state of `key`.
    Forget {
        /// The key.
        key: u64,
    },
    /// Drop every evictable bucket at `at`.
    Sweep {
        /// Time of the sweep.
        at: u64,
    },
}

impl Op {
    /// The op's time, if it has one.
    pub fn at(&self) -> Option<u64> {
        match self {
            Op::Acquire { at, .. } | Op::Reconfigure { at, .. } | Op::Sweep { at } => Some(*at),
            Op::Forget { .. } => None,
        }
    }

    /// The key the op touches, if one.
    pub fn key(&self) -> Option<u64> {
        match self {
            Op::Acquire { key, .. } | Op::Reconfigure { key, .. } | Op::Forget { key } => {
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
