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

use bucketproof_limiter::{Bandwidth, Bandwidths, Config, EvictionPolicy, Rate, defaults};
use bucketproof_model::{ModelBandwidths, ModelConfig};
use std::fmt;

use serde::{Deserialize, Serialize};

/// One bandwidth as written in scenarios and traces: `capacity` whole tokens, `rate` as the limiter
/// parses it (`"100/s"`, `"1/3s"`, `"5/min"`), and an optional name (a structured-field key that labels
/// its RateLimit item and identifies it across a reconfiguration).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BandwidthSpec {
    /// Whole tokens.
    pub capacity: u64,
    /// Tokens per period, e.g. `"3/2s"`.
    pub rate: String,
    /// The bandwidth's name, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl BandwidthSpec {
    /// An unnamed bandwidth.
    pub fn new(capacity: u64, rate: impl Into<String>) -> BandwidthSpec {
        BandwidthSpec {
            capacity,
            rate: rate.into(),
            name: None,
        }
    }

    /// The same bandwidth named `name`.
    pub fn named(mut self, name: impl Into<String>) -> BandwidthSpec {
        self.name = Some(name.into());
        self
    }

    fn to_limiter(&self) -> Result<(Config, Option<&str>), String> {
        let rate: Rate = self.rate.parse().map_err(|e| format!("{e}"))?;
        let config = Config::new(self.capacity, rate).map_err(|e| format!("{e}"))?;
        Ok((config, self.name.as_deref()))
    }
}

/// A key's config as written in scenarios and traces: a set of one or more bandwidths (the limiter
/// checks how many, and their names, when it is built).
///
/// One unnamed bandwidth reads and writes as the bandwidth itself, `{"capacity":4,"rate":"1/s"}`, as
/// every trace did before sets existed; any other set as `{"bandwidths":[...]}`. Its `Debug` form
/// follows the same rule, so a one-bandwidth report prints as it always has.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "ConfigSpecForm", into = "ConfigSpecForm")]
pub struct ConfigSpec {
    bandwidths: Vec<BandwidthSpec>,
}

/// The two written forms of a [`ConfigSpec`].
#[derive(Clone, Serialize, Deserialize)]
#[serde(untagged)]
enum ConfigSpecForm {
    Set { bandwidths: Vec<BandwidthSpec> },
    One(BandwidthSpec),
}

impl From<ConfigSpecForm> for ConfigSpec {
    fn from(form: ConfigSpecForm) -> ConfigSpec {
        match form {
            ConfigSpecForm::Set { bandwidths } => ConfigSpec { bandwidths },
            ConfigSpecForm::One(bandwidth) => ConfigSpec {
                bandwidths: vec![bandwidth],
            },
        }
    }
}

impl From<ConfigSpec> for ConfigSpecForm {
    fn from(spec: ConfigSpec) -> ConfigSpecForm {
        match spec.single() {
            Some(_) => ConfigSpecForm::One(spec.bandwidths.into_iter().next().expect("one")),
            None => ConfigSpecForm::Set {
                bandwidths: spec.bandwidths,
            },
        }
    }
}

impl fmt::Debug for ConfigSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.single() {
            Some(one) => f
                .debug_struct("ConfigSpec")
                .field("capacity", &one.capacity)
                .field("rate", &one.rate)
                .finish(),
            None => f
                .debug_struct("ConfigSpec")
                .field("bandwidths", &self.bandwidths)
                .finish(),
        }
    }
}

/// For reports: `capacity 4 tokens, rate `1/s``, one such part per bandwidth (`; `-separated, a name
/// in parentheses) for a set.
impl fmt::Display for ConfigSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (position, bandwidth) in self.bandwidths.iter().enumerate() {
            if position > 0 {
                write!(f, "; ")?;
            }
            write!(
                f,
                "capacity {} tokens, rate `{}`",
                bandwidth.capacity, bandwidth.rate
            )?;
            if let Some(name) = &bandwidth.name {
                write!(f, " (`{name}`)")?;
            }
        }
        Ok(())
    }
}

/// A [`ConfigSpec`] that does not describe a valid configuration.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid config {spec}: {reason}")]
pub struct InvalidConfigSpec {
    /// The config given, as written (one bandwidth's capacity and rate, or the whole set).
    pub spec: String,
    /// What was wrong, naming the bandwidth where one is at fault.
    pub reason: String,
}

impl ConfigSpec {
    /// A spec of one unnamed bandwidth.
    pub fn new(capacity: u64, rate: impl Into<String>) -> ConfigSpec {
        ConfigSpec {
            bandwidths: vec![BandwidthSpec::new(capacity, rate)],
        }
    }

    /// A spec of `bandwidths`, in order. Whether they make a valid set (how many, their names) is
    /// checked where it is turned into a config ([`ConfigSpec::to_bandwidths`], [`ConfigSpec::to_model`]).
    pub fn set(bandwidths: impl IntoIterator<Item = BandwidthSpec>) -> ConfigSpec {
        ConfigSpec {
            bandwidths: bandwidths.into_iter().collect(),
        }
    }

    /// The spec of an existing limiter config.
    pub fn of(config: &Config) -> ConfigSpec {
        ConfigSpec::new(config.capacity(), config.rate().to_string())
    }

    /// The spec of an existing bandwidth set.
    pub fn of_bandwidths(set: &Bandwidths) -> ConfigSpec {
        ConfigSpec::set(set.as_slice().iter().map(|bandwidth| BandwidthSpec {
            capacity: bandwidth.config().capacity(),
            rate: bandwidth.config().rate().to_string(),
            name: bandwidth.name().map(|name| name.as_str().to_owned()),
        }))
    }

    /// The bandwidths, in order.
    pub fn bandwidths(&self) -> &[BandwidthSpec] {
        &self.bandwidths
    }

    /// The one unnamed bandwidth of a set of one; `None` for any other set.
    pub fn single(&self) -> Option<&BandwidthSpec> {
        match self.bandwidths.as_slice() {
            [one] if one.name.is_none() => Some(one),
            _ => None,
        }
    }

    /// The smallest capacity written (0 for an empty set, which no limiter accepts): the largest valid
    /// cost.
    pub fn smallest_capacity(&self) -> u64 {
        self.bandwidths
            .iter()
            .map(|b| b.capacity)
            .min()
            .unwrap_or(0)
    }

    fn invalid(&self, reason: String) -> InvalidConfigSpec {
        let spec = match self.single() {
            Some(one) => format!("(capacity {}, rate {:?})", one.capacity, one.rate),
            None => format!("{self:?}"),
        };
        InvalidConfigSpec { spec, reason }
    }

    /// The reason naming the bandwidth at fault, when the set has several.
    fn at(&self, position: usize, reason: String) -> String {
        if self.single().is_some() {
            reason
        } else {
            format!("bandwidths[{position}]: {reason}")
        }
    }

    /// The limiter's config of a spec of one unnamed bandwidth; an error for any other set (a
    /// subject that supports one bandwidth per key asks for this, see
    /// [`crate::subject::one_bandwidth`]).
    pub fn to_config(&self) -> Result<Config, InvalidConfigSpec> {
        match self.single() {
            Some(one) => one
                .to_limiter()
                .map(|(config, _)| config)
                .map_err(|reason| self.invalid(reason)),
            None => Err(self.invalid(format!(
                "{} bandwidths (named or several) where one unnamed bandwidth is needed",
                self.bandwidths.len()
            ))),
        }
    }

    /// The limiter's bandwidth set.
    pub fn to_bandwidths(&self) -> Result<Bandwidths, InvalidConfigSpec> {
        let mut parts = Vec::with_capacity(self.bandwidths.len());
        for (position, spec) in self.bandwidths.iter().enumerate() {
            let (config, name) = spec
                .to_limiter()
                .map_err(|reason| self.invalid(self.at(position, reason)))?;
            let bandwidth = match name {
                Some(name) => Bandwidth::named(name, config)
                    .map_err(|e| self.invalid(self.at(position, e.to_string())))?,
                None => Bandwidth::new(config),
            };
            parts.push(bandwidth);
        }
        Bandwidths::new(parts).map_err(|e| self.invalid(e.to_string()))
    }

    /// The reference model's config. It parses each rate with the limiter's parser (a shared *input*
    /// format, not shared arithmetic) and hands the reduced fraction to the model, which validates the
    /// bandwidths and the set by its own rules.
    pub fn to_model(&self) -> Result<ModelBandwidths, InvalidConfigSpec> {
        let mut parts = Vec::with_capacity(self.bandwidths.len());
        for (position, spec) in self.bandwidths.iter().enumerate() {
            let (config, name) = spec
                .to_limiter()
                .map_err(|reason| self.invalid(self.at(position, reason)))?;
            let model = ModelConfig::new(
                config.capacity(),
                config.rate().numer(),
                config.rate().denom(),
            )
            .map_err(|e| self.invalid(self.at(position, format!("model refused it: {e:?}"))))?;
            parts.push((name, model));
        }
        ModelBandwidths::new(parts).map_err(|e| self.invalid(format!("model refused it: {e:?}")))
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
    /// [`EvictionPolicy::EvictKeepingDeficit`].
    EvictKeepingDeficit,
}

impl PolicySpec {
    /// The policy may drop a bucket that is not full to make room (a victim of `EvictLeastRecent` or
    /// `EvictKeepingDeficit`).
    pub fn drops_non_full(self) -> bool {
        matches!(
            self,
            PolicySpec::EvictLeastRecent | PolicySpec::EvictKeepingDeficit
        )
    }

    /// The policy's victims come back full: a declared reset of the arrival curve
    /// (`EvictLeastRecent` only; `EvictKeepingDeficit` brings them back owing).
    pub fn is_lossy(self) -> bool {
        self == PolicySpec::EvictLeastRecent
    }
}

impl From<PolicySpec> for EvictionPolicy {
    fn from(policy: PolicySpec) -> Self {
        match policy {
            PolicySpec::RejectNewKeys => EvictionPolicy::RejectNewKeys,
            PolicySpec::EvictFull => EvictionPolicy::EvictFull,
            PolicySpec::EvictLeastRecent => EvictionPolicy::EvictLeastRecent,
            PolicySpec::EvictKeepingDeficit => EvictionPolicy::EvictKeepingDeficit,
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

impl Acquire {
    /// `cost` on key 0 at `now`, without a request id: the acquire most unit tests step.
    pub fn on_key_0(cost: u64, now: u64) -> Acquire {
        Acquire {
            key: 0,
            cost,
            now,
            request_id: None,
        }
    }
}

/// The first key handed to attackers (fresh ids, by the scenario engine and the state machine): far
/// above any population, so a fresh id is never a real key.
pub const ATTACKER_KEY_BASE: u64 = 1 << 40;

/// One settle: the request `request_id` admitted on `key` really cost `actual` whole tokens,
/// reconciled at `now` (docs/semantics.md, "settle"). One value for the same reason as [`Acquire`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Settle {
    /// The key.
    pub key: u64,
    /// The request id its acquire carried.
    pub request_id: u64,
    /// What the work really cost (0 gives the whole charge back).
    pub actual: u64,
    /// Time of the call, in nanoseconds.
    pub now: u64,
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
    /// Reconcile an admitted request's charge with its actual cost.
    Settle(Settle),
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
            Op::Settle(settle) => settle.fmt(f),
        }
    }
}

impl Op {
    /// The op's time, if it has one.
    pub fn now(&self) -> Option<u64> {
        match self {
            Op::Acquire(Acquire { now, .. })
            | Op::Reconfigure { now, .. }
            | Op::Sweep { now }
            | Op::Settle(Settle { now, .. }) => Some(*now),
            Op::Forget { .. } => None,
        }
    }

    /// The key the op touches, if one.
    pub fn key(&self) -> Option<u64> {
        match self {
            Op::Acquire(Acquire { key, .. })
            | Op::Reconfigure { key, .. }
            | Op::Forget { key }
            | Op::Settle(Settle { key, .. }) => Some(*key),
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
