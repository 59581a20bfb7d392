//! The scenario format's single values that check themselves while they are parsed: probabilities,
//! event names, bucket configs and costs.
//!
//! Owns the rule for each value; promises that a value of these types in a loaded [`super::Scenario`]
//! is valid (a probability in `[0, 1]`, a known event, a config both the limiter and the model
//! accept), and that a bad one is refused at its own place in the file with a message saying what was
//! expected.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

use super::sample;
use bucketproof_trace::duration::whole;
use bucketproof_trace::events::EVENTS;
use bucketproof_trace::trace::{BandwidthSpec, ConfigSpec};

/// A probability in `[0, 1]`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Default)]
pub struct Probability(pub f64);

impl<'de> Deserialize<'de> for Probability {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = f64::deserialize(deserializer)?;
        if (0.0..=1.0).contains(&value) {
            Ok(Probability(value))
        } else {
            Err(serde::de::Error::custom(format!(
                "expected a probability between 0 and 1, found {value}"
            )))
        }
    }
}

impl Probability {
    /// As an integer-threshold chance (see [`sample::Chance`]).
    pub fn chance(self) -> sample::Chance {
        sample::Chance::new(self.0)
    }
}

/// An event name from [`EVENTS`], checked while parsing.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct EventName(pub String);

impl<'de> Deserialize<'de> for EventName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        if EVENTS.contains(&name.as_str()) {
            Ok(EventName(name))
        } else {
            Err(serde::de::Error::custom(format!(
                "unknown event {name:?}; known events: {}",
                EVENTS.join(", ")
            )))
        }
    }
}

/// A validated bucket config: `capacity` whole tokens and a `rate` like `"5/s"`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawConfig")]
pub struct ConfigValue(pub ConfigSpec);

/// A config as written: `capacity` and `rate` (one bandwidth), or `bandwidths = [{ capacity, rate,
/// name }, ...]` (a set). Every table that carries a config (`[setup]`, `[[tiers]]`,
/// `[reconfigure]`'s `configs` and `schedule`) reads these three fields and hands them to
/// [`ConfigValue::from_fields`], the one place that turns them into a config.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    capacity: Option<u64>,
    rate: Option<String>,
    bandwidths: Option<Vec<BandwidthSpec>>,
}

impl ConfigValue {
    /// A config of one bandwidth both the limiter and the reference model accept, or why not.
    pub fn new(capacity: u64, rate: String) -> Result<ConfigValue, String> {
        ConfigValue::checked(ConfigSpec::new(capacity, rate))
    }

    /// A config from a table's fields: `capacity` and `rate`, or `bandwidths`, never both.
    pub fn from_fields(
        capacity: Option<u64>,
        rate: Option<String>,
        bandwidths: Option<Vec<BandwidthSpec>>,
    ) -> Result<ConfigValue, String> {
        match (capacity, rate, bandwidths) {
            (Some(capacity), Some(rate), None) => ConfigValue::new(capacity, rate),
            (None, None, Some(bandwidths)) => ConfigValue::checked(ConfigSpec::set(bandwidths)),
            (_, _, Some(_)) => Err("give capacity and rate, or bandwidths, not both".into()),
            (None, _, None) => Err("missing field `capacity` (or give `bandwidths`)".into()),
            (Some(_), None, None) => Err("missing field `rate`".into()),
        }
    }

    fn checked(spec: ConfigSpec) -> Result<ConfigValue, String> {
        spec.to_model().map_err(|e| e.to_string())?;
        spec.to_bandwidths().map_err(|e| e.to_string())?;
        Ok(ConfigValue(spec))
    }
}

impl TryFrom<RawConfig> for ConfigValue {
    type Error = String;
    fn try_from(raw: RawConfig) -> Result<Self, String> {
        ConfigValue::from_fields(raw.capacity, raw.rate, raw.bandwidths)
    }
}

/// A cost as written: a whole number, `"capacity"` (of the key's config) or `"over_capacity"`
/// (capacity + 1, always invalid).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum CostValue {
    /// Exactly this many tokens (0 is invalid by the spec, and useful).
    Tokens(u64),
    /// The key's capacity.
    Capacity,
    /// The key's capacity plus one.
    OverCapacity,
}

impl<'de> Deserialize<'de> for CostValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = CostValue;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a whole number of tokens, \"capacity\" or \"over_capacity\"")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<CostValue, E> {
                whole(v, "a cost").map(CostValue::Tokens)
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<CostValue, E> {
                Ok(CostValue::Tokens(v))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<CostValue, E> {
                match v {
                    "capacity" => Ok(CostValue::Capacity),
                    "over_capacity" => Ok(CostValue::OverCapacity),
                    other => Err(E::custom(format!(
                        "expected a whole number, \"capacity\" or \"over_capacity\", found {other:?}"
                    ))),
                }
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}
